"""The long-running loop both apps share: one growing-log stream into a batch handler.

``run`` starts a streaming query over ``directory`` with our source, hands
each micro-batch to ``handle`` as complete log lines (sorted by file and
offset) plus truncation reports, and, between batches, calls ``idle`` (the
joiner's retry passes). It returns when the query fails, on SIGTERM/SIGINT
(a clean stop: the running batch finishes), or — with ``until_idle_s`` — once
no line has arrived for that long and ``settled()`` says nothing is pending.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import repeat
from pathlib import Path
from types import FrameType
from typing import Any

import pyarrow as pa
import structlog
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming.query import StreamingQuery

from photon.events.records import QuarantineRecord
from photon.heap import collector_paused
from photon.join.runtime import AppParts
from photon.logs.offset_log import remove_unfinished_writes
from photon.logs.ranges import FileRange, file_ranges, read_range, report_record
from photon.logs.reader import LogLine
from photon.settings import PhotonSettings
from spark_apps.growing_log_source import NAME, Offsets, batch_offsets

log = structlog.get_logger(__name__)

#: The shortest interval between two calls of a stream's ``watch`` (its lag gauges, read
#: from its checkpoint and journal): at a short trigger (the bench's 0.05 s) calling it
#: every trigger cost the joiner's driver a third as much CPU as its batches, and once a
#: second still about 7% of its CPU (a profile of the bench's steady batches). Half the
#: stack's scrape interval (5 s): every scrape reads a gauge at most this old.
WATCH_EVERY_S = 2.5
#: The shortest interval between two looks at a running query (and calls of its
#: ``idle`` callback): a py4j call each, and one more for its status when the stream
#: stops once idle (``until_idle_s``). Without this floor: 20 looks a second at the
#: bench's 0.05 s trigger. A retry pass waits for a second of quiet anyway (docs/join.md,
#: "Batches that overlap").
STATUS_EVERY_S = 0.25

Handler = Callable[[str, Sequence[LogLine], Sequence[QuarantineRecord]], Any]
#: Takes a batch as its file ranges, unread (the joiner: its Spark tasks read them).
RangesHandler = Callable[[str, list[FileRange]], Any]


@dataclass
class StreamOptions:
    directory: Path
    checkpoint: Path
    trigger_s: float
    max_bytes_per_batch: int
    max_files_per_batch: int
    until_idle_s: float | None = None
    #: More options of the log source (a joiner's pacing: spark_apps.growing_log_source).
    source_options: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_settings(
        cls,
        settings: PhotonSettings,
        app: AppParts,
        until_idle_s: float | None,
        source_options: Mapping[str, str] | None = None,
        *,
        app_name: str,
    ) -> StreamOptions:
        # Absolute: on a cluster, executors read the files from their worker's directory.
        return cls(
            directory=app.logs_dir.resolve(),
            checkpoint=app.checkpoint.resolve(),
            trigger_s=settings.pipeline.trigger_s,
            max_bytes_per_batch=settings.pipeline.batch_bytes(app_name),
            max_files_per_batch=settings.pipeline.max_files_per_batch,
            until_idle_s=until_idle_s,
            source_options=dict(source_options or {}),
        )


@dataclass
class RunSummary:
    batches: int = 0
    lines: int = 0
    stopped_by: str = ""


def batch_key(batch_id: int) -> str:
    return f"{batch_id:012d}"


def to_lines(table: pa.Table) -> tuple[list[LogLine], list[QuarantineRecord]]:
    """A batch's rows (an Arrow table of the source's schema) as lines and the reports of
    what happened to files under the reader (truncated, shrunk, deleted, replaced or
    renamed; a torn last line)."""
    with collector_paused():  # a line a row: thousands of objects, none of them garbage
        return _to_lines(table)


def _to_lines(table: pa.Table) -> tuple[list[LogLine], list[QuarantineRecord]]:
    lines: list[LogLine] = []
    truncations: list[QuarantineRecord] = []
    columns = zip(
        table.column("file").to_pylist(),
        table.column("offset").to_pylist(),
        table.column("raw").to_pylist(),
        table.column("lost_bytes").to_pylist(),
        table.column("report").to_pylist(),
        strict=True,
    )
    for file, offset, raw, lost_bytes, report in columns:
        if lost_bytes or report:
            truncations.append(report_record(file, offset, raw, lost_bytes, report))
        else:
            lines.append(LogLine(file, offset, raw))
    lines.sort(key=lambda line: (line.file, line.offset))
    return lines, truncations


def read_batch_lines(
    directory: Path, start: Offsets, end: Offsets
) -> tuple[list[LogLine], list[QuarantineRecord]]:
    """The lines and reports of the batch (start, end]: ``to_lines(read_batch(...))``,
    read straight into lines. The query reader's driver reads each of its batches so;
    an Arrow table in between cost a conversion of every line there and back (100,000
    lines in its first batch on a backlog)."""
    lines: list[LogLine] = []
    truncations: list[QuarantineRecord] = []
    with collector_paused():  # a line a row: thousands of objects, none of them garbage
        for part in file_ranges(str(directory), start, end):
            for rows in read_range(part):
                if rows.reports:
                    truncations += rows.report_records()
                else:
                    lines += map(LogLine, repeat(rows.file), rows.offsets, rows.raws)
        lines.sort(key=lambda line: (line.file, line.offset))
    return lines, truncations


class Stop:
    """Tells a running stream to stop, and why (a signal, or another app of its process)."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self.reason = "signal"

    def set(self, reason: str = "signal") -> None:
        if not self.event.is_set():
            self.reason = reason
        self.event.set()

    def is_set(self) -> bool:
        return self.event.is_set()

    def wait(self, seconds: float) -> bool:
        return self.event.wait(seconds)


@contextlib.contextmanager
def stop_on_signals(*stops: Stop) -> Iterator[None]:
    """SIGTERM/SIGINT set every ``stops`` (a clean stop: running batches finish).

    Only the main thread may install signal handlers: the apps' streams run in threads
    of their own and watch their :class:`Stop`.
    """

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        log.info("stream.signal", signal=signal.Signals(signum).name)
        for stop in stops:
            stop.set("signal")

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _batch_lines(
    options: StreamOptions, df: DataFrame, offsets: tuple[Offsets, Offsets] | None, batch_id: int
) -> tuple[list[LogLine], list[QuarantineRecord]]:
    """The batch's lines and reports: read here over the range Spark logged for it, or
    (an offset log that does not read as expected) collected from the batch's DataFrame."""
    if offsets is None:
        log.warning("stream.offset_log_unreadable", checkpoint=str(options.checkpoint),
                    batch=batch_id)  # fmt: skip
        return to_lines(df.toArrow())
    return read_batch_lines(options.directory, *offsets)


def committed_batch_lines(
    directory: Path, checkpoint: Path
) -> Callable[[str], tuple[list[LogLine], list[QuarantineRecord]] | None]:
    """A committed batch's lines, read again over the range Spark's offset log gives it:
    for the replay of a batch Spark committed while its groups still ran, and that a
    crash left open (docs/join.md, "Batches that overlap"). None for a batch Spark has
    not committed (Spark replays it itself) or whose range its logs no longer hold."""

    def lines_of(batch: str) -> tuple[list[LogLine], list[QuarantineRecord]] | None:
        if not batch.isdigit():
            return None
        batch_id = int(batch)
        if not (checkpoint / "commits" / str(batch_id)).is_file():
            return None
        offsets = batch_offsets(checkpoint, batch_id)
        if offsets is None:
            return None
        return read_batch_lines(directory, *offsets)

    return lines_of


def await_directory(directory: Path, stop: Stop, poll_s: float = 1.0) -> bool:
    """The logs directory, made if this app may make it; on a read-only mount (compose's
    apps read their DC's logs so) waited for until its writer makes it. False if
    stopped first."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        return True
    except OSError as exc:  # read-only, or not ours to make: the ad servers make it
        log.info("stream.waiting_for_logs", directory=str(directory), reason=exc.strerror)
    while not directory.is_dir():
        if stop.wait(poll_s):
            return False
    return True


def run(
    spark: SparkSession,
    options: StreamOptions,
    handle: Handler,
    stop: Stop,
    *,
    idle: Callable[[], Any] | None = None,
    settled: Callable[[], bool] = lambda: True,
    query_name: str = "photon",
    watch: Callable[[], Any] | None = None,
    handle_ranges: RangesHandler | None = None,
) -> RunSummary:
    """Stream until ``stop`` is set, the query ends or fails, or (``until_idle_s``) idleness.

    With ``handle_ranges`` each batch goes to it as the file ranges Spark's offset log
    gives it, unread; ``handle`` then gets only a batch whose log cannot be read so
    (collected through Spark instead).

    ``watch`` is called every trigger interval, and no more often than every
    :data:`WATCH_EVERY_S`, from a thread of its own, between batches and during
    them, however long one hangs (the app's lag gauges: a hung joiner must still
    show its lag growing); its errors are logged, never the stream's.
    """
    summary = RunSummary()
    last_data = [time.monotonic()]  # when a batch last brought lines (set by batches)

    def on_batch(df: DataFrame, batch_id: int) -> None:
        reading = time.perf_counter()
        offsets = batch_offsets(options.checkpoint, batch_id)
        if handle_ranges is not None and offsets is not None:
            ranges = file_ranges(str(options.directory), *offsets)
            log.info("stream.batch_planned", query=query_name, batch=batch_id,
                     ranges=len(ranges), bytes=sum(r.planned_bytes for r in ranges),
                     read_s=round(time.perf_counter() - reading, 3))  # fmt: skip
            if ranges:
                last_data[0] = time.monotonic()
            report = handle_ranges(batch_key(batch_id), ranges)
            summary.batches += 1
            summary.lines += int(getattr(report, "lines", 0))
            return
        # The collector paused until the batch's lines (and what the handler made of
        # them) are dropped: resumed while they live, its next collections would walk
        # them all, a tenth of the query reader's batch on a backlog (docs/join.md,
        # "The apps").
        with collector_paused():
            lines, truncations = _batch_lines(options, df, offsets, batch_id)
            count = len(lines)
            # Before the handler's own line: the bench tells the driver's reading apart
            # from Spark's time between batches and the handler's (docs/join.md,
            # "Performance").
            log.info("stream.batch_read", query=query_name, batch=batch_id, lines=count,
                     read_s=round(time.perf_counter() - reading, 3))  # fmt: skip
            if lines or truncations:
                last_data[0] = time.monotonic()
            handle(batch_key(batch_id), lines, truncations)
            del lines, truncations
        summary.batches += 1
        summary.lines += count

    if not await_directory(options.directory, stop):
        return summary
    ended = threading.Event()
    if watch is not None:
        threading.Thread(
            target=_keep_calling,
            args=(watch, max(options.trigger_s, WATCH_EVERY_S), ended),
            name=f"watch-{query_name}",
            daemon=True,
        ).start()
    try:
        return _run_query(
            spark, options, on_batch, query_name, stop, idle, settled, last_data, summary
        )
    finally:
        ended.set()


def _keep_calling(watch: Callable[[], Any], every_s: float, ended: threading.Event) -> None:
    while not ended.wait(every_s):
        try:
            watch()
        except Exception as exc:  # a gauge not updated is not worth the stream
            log.warning("stream.watch_failed", error=str(exc)[:300])


def _run_query(
    spark: SparkSession,
    options: StreamOptions,
    on_batch: Callable[[DataFrame, int], None],
    query_name: str,
    stop: Stop,
    idle: Callable[[], Any] | None,
    settled: Callable[[], bool],
    last_data: list[float],
    summary: RunSummary,
) -> RunSummary:
    restarts = 0
    while True:
        if unfinished := remove_unfinished_writes(options.checkpoint):
            log.warning("stream.unfinished_writes_removed", query=query_name,
                        files=[str(path) for path in unfinished])  # fmt: skip
        query = _start(spark, options, on_batch, query_name)
        log.info("stream.started", query=query_name)  # the chaos harness waits for this line
        try:
            summary.stopped_by = _watch(query, options, stop, idle, settled, last_data)
        finally:
            if query.isActive:
                query.stop()
        exception = query.exception()
        if exception is None:
            return summary
        if restarts < MAX_RESTARTS and not stop.is_set() and _transient(exception):
            # Spark starts a Python worker and gives it 10 s to connect back: on a
            # loaded machine that can fail. Started again from its checkpoint, the
            # query replays what it had not committed (docs/join.md, "replays").
            # Not at once: the load that starved the worker passes (Spark's start-up,
            # other apps starting beside it).
            delay_s = RESTART_BACKOFF_S * 2**restarts
            restarts += 1
            log.warning("stream.restarted", query=query_name, after_s=delay_s,
                        error=str(exception)[:300])  # fmt: skip
            if stop.wait(delay_s):
                summary.stopped_by = stop.reason
                return summary
            last_data[0] = time.monotonic()
            continue
        raise RuntimeError(f"the streaming query {query_name} failed: {exception}")


#: How many times a query that failed to start its Python workers is started again,
#: after RESTART_BACKOFF_S, then twice as long each time (5, 10, 20, 40, 80 s).
MAX_RESTARTS = 5
RESTART_BACKOFF_S = 5.0
_TRANSIENT_ERRORS = (
    "Python worker failed to connect back",
    "Timed out while waiting for the Python worker to connect back",
)


def _transient(exception: object) -> bool:
    return any(text in str(exception) for text in _TRANSIENT_ERRORS)


def _start(
    spark: SparkSession,
    options: StreamOptions,
    on_batch: Callable[[DataFrame, int], None],
    query_name: str,
) -> StreamingQuery:
    return (
        spark.readStream.format(NAME)
        .option("path", str(options.directory))
        .option("maxBytesPerTrigger", str(options.max_bytes_per_batch))
        .option("maxFilesPerTrigger", str(options.max_files_per_batch))
        .options(**options.source_options)
        .load()
        .writeStream.queryName(query_name)
        .foreachBatch(on_batch)
        .option("checkpointLocation", str(options.checkpoint))
        .trigger(processingTime=f"{options.trigger_s} seconds")
        .start()
    )


def _watch(
    query: StreamingQuery,
    options: StreamOptions,
    stop: Stop,
    idle: Callable[[], Any] | None,
    settled: Callable[[], bool],
    last_data: list[float],
) -> str:
    """Until a signal, the query's end, or (``until_idle_s``) idleness; says which."""
    busy_at = time.monotonic()
    while True:
        stop.wait(max(options.trigger_s, STATUS_EVERY_S))
        if stop.is_set():
            return stop.reason
        if not query.isActive:
            return "query ended"
        if idle is not None:
            idle()
        if options.until_idle_s is None:
            continue  # the status (a py4j call and its JSON) only tells idleness
        # At every look, not only once the quiet is long enough: a trigger seen running
        # in the quiet is activity (a joiner's source holding its clicks back until its
        # query reader catches up brings no lines for a while, its triggers run on).
        status = query.status
        if status.get("isTriggerActive") or status.get("message") == "Initializing sources":
            busy_at = time.monotonic()  # starting or busy: not idle
        quiet_since = max(busy_at, last_data[0])
        if (
            time.monotonic() - quiet_since >= options.until_idle_s
            and not status.get("isDataAvailable", False)
            and settled()
        ):
            return f"idle for {options.until_idle_s} s"
