"""The query reader: one micro-batch of query log lines into the two EventStores.

Per batch it decodes the lines (bad ones are quarantined), puts every query
into the CacheEventStore (best-effort: Redis may be down), and writes the
batch's log-file-map entries as one delta run under
``logmap/dc=<dc>/delta/<attempt>-<batch>.parquet``. The map builder's state
moves on only after that run is stored, so a replayed batch emits every entry
its lines need again.

After the batch's queries are stored, it publishes its progress
(:mod:`photon.join.progress`): the event time up to which it has provably
read every query file, which the DC's joiner waits for before it declares a
click unjoinable.

How it fails: object-store errors fail the batch (Spark replays it); a
replayed batch rewrites its run under the same key (entries are an index:
a rewrite with more or other valid entries is harmless).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import structlog

from photon import metrics
from photon.events.records import BadLineError, QuarantineRecord, Stream, decode_query_id
from photon.heap import collector_paused
from photon.join.cache import CacheEventStore
from photon.join.logmap import LogFileMapBuilder, QueryLine, delta_prefix, encode_run
from photon.join.output import OutputWriter
from photon.join.progress import FileStat, ReaderProgress, ReadLine, file_stats
from photon.logs.reader import RECOVERY_LOG_PREFIX, LogLine
from photon.storage import ObjectStore

log = structlog.get_logger(__name__)


@dataclass(slots=True)
class QueryReaderTotals:
    batches: int = 0
    lines: int = 0
    queries: int = 0
    quarantined: int = 0
    cached: int = 0
    map_entries: int = 0

    def to_dict(self) -> dict[str, int]:
        return {k: getattr(self, k) for k in self.__slots__}


@dataclass(slots=True)
class QueryBatchReport:
    batch: str
    lines: int = 0
    queries: int = 0
    quarantined: int = 0
    cached: int = 0
    map_entries: int = 0
    map_run: str | None = None
    progress_us: int | None = None


def delta_run_key(dc: str, attempt: str, batch: str) -> str:
    return f"{delta_prefix(dc)}{attempt}-{batch}.parquet"


class QueryReader:
    def __init__(
        self,
        *,
        dc: str,
        attempt: str,
        cache: CacheEventStore,
        store: ObjectStore,
        output: OutputWriter,
        builder: LogFileMapBuilder,
        progress: ReaderProgress | None = None,
        queries_dir: Path | None = None,
        clicks_dir: Path | None = None,
        clock: Callable[[], int] = lambda: time.time_ns() // 1000,
    ) -> None:
        self.dc = dc
        self.attempt = attempt
        self.cache = cache
        self.store = store
        self.output = output
        self.builder = builder
        if (progress is None) != (queries_dir is None):
            raise ValueError("progress and queries_dir go together")
        self.progress = progress
        self.queries_dir = queries_dir
        #: The DC's click logs: while they grow, silent query files hold the progress
        #: (photon.join.progress). None: not looked at.
        self.clicks_dir = clicks_dir
        self.clock = clock
        self._lock = threading.Lock()
        self.totals = QueryReaderTotals()

    def publish_progress(self, batch: str | None = None) -> int | None:
        """Look at the query files again and publish the progress; None without a tracker.
        ``batch``: the batch whose queries were just cached (None: a look between them).

        Also run between batches (Spark runs no batch while no line arrives): files
        that went idle stop holding the progress back only when someone looks.
        """
        if self.progress is None or self.queries_dir is None:
            return None
        return self._publish(batch, file_stats(self.queries_dir, heads=True))

    def _publish(self, batch: str | None, files: Mapping[str, FileStat]) -> int:
        assert self.progress is not None
        clicks = (
            None
            if self.clicks_dir is None
            else file_stats(self.clicks_dir, skip_prefix=RECOVERY_LOG_PREFIX)
        )
        with self._lock:
            progress_us = self.progress.advance(files, self.clock(), clicks)
            self.progress.save(batch)
        metrics.READER_PROGRESS.labels(self.dc).set(progress_us / 1_000_000)
        return progress_us

    def settled(self) -> bool:
        """Whether the reader may stop (``--until-idle``): every query file read to its end
        and idle, so the progress it published is final. Without a tracker: always."""
        if self.progress is None or self.queries_dir is None:
            return True
        files = file_stats(self.queries_dir, heads=True)
        self._publish(None, files)
        with self._lock:
            return self.progress.settled(files, self.clock())

    def process(
        self,
        batch: str,
        lines: Sequence[LogLine],
        truncations: Sequence[QuarantineRecord] = (),
    ) -> QueryBatchReport:
        """One micro-batch; ``truncations`` (files that shrank) are quarantined too."""
        started = time.perf_counter()
        report = QueryBatchReport(batch=batch, lines=len(lines))
        raw_by_id: dict[str, bytes] = {}
        positions: list[QueryLine] = []
        quarantined: list[QuarantineRecord] = list(truncations)
        # What the progress needs of the lines, a file at a time: where its last line
        # read ends, and its newest valid query's time (ReaderProgress.observe takes a
        # file's lines as it takes their summary: both are maxima).
        ends: dict[str, int] = {}
        newest_by_file: dict[str, int] = {}
        with collector_paused():  # a batch's objects, two a line: none of them garbage
            for line in lines:
                file, raw, end = line.file, line.raw, line.end
                if end > ends.get(file, 0):
                    ends[file] = end
                try:
                    query_id = decode_query_id(raw)
                except BadLineError as exc:
                    quarantined.append(
                        QuarantineRecord(file, line.offset, exc.reason, exc.detail, raw)
                    )
                    continue
                raw_by_id[str(query_id)] = raw
                positions.append(QueryLine(query_id, file, line.offset))
                if query_id.ts_us > newest_by_file.get(file, 0):
                    newest_by_file[file] = query_id.ts_us
        read = [ReadLine(file, end, newest_by_file.get(file)) for file, end in ends.items()]
        report.queries = len(positions)
        report.quarantined = len(quarantined)
        if quarantined:
            self.output.quarantine(batch, Stream.QUERIES.value, quarantined)
            for record in quarantined:
                metrics.QUARANTINED_LINES.labels(
                    self.dc, Stream.QUERIES.value, str(record.reason)
                ).inc()

        if self.progress is not None and raw_by_id:
            # Before the puts: this batch's queries are cached after any loss it finds.
            signs = self.cache.reader_look()
            with self._lock:
                self.progress.looked_at_cache(signs)
        report.cached = self.cache.put_many(raw_by_id)
        if report.cached < len(raw_by_id) and self.progress is not None:
            newest = max(newest_by_file.values())
            with self._lock:  # published with the progress below: joiners search the logs
                self.progress.cache_lost(self.clock(), newest)
        entries, state = self.builder.plan(positions)
        if entries:
            report.map_run = delta_run_key(self.dc, self.attempt, batch)
            self.store.put(report.map_run, encode_run(entries))
            metrics.OUTPUT_OBJECTS.labels(self.dc, "logmap").inc()
        self.builder.commit(state)
        report.map_entries = len(entries)
        if self.progress is not None:
            # Only after the batch's queries are in both stores: a joiner trusting the
            # progress must be able to find every query before it.
            with self._lock:
                self.progress.follow(truncations)  # renamed, replaced, shrunk files first
                self.progress.observe(read, self.clock())
            report.progress_us = self.publish_progress(batch)
        metrics.QUERIES_CACHED.labels(self.dc).inc(report.cached)
        metrics.LOGMAP_ENTRIES.labels(self.dc).inc(len(entries))
        metrics.LINES_READ.labels(self.dc, Stream.QUERIES.value).inc(len(lines))
        totals = self.totals
        totals.batches += 1
        totals.lines += report.lines
        totals.queries += report.queries
        totals.quarantined += report.quarantined
        totals.cached += report.cached
        totals.map_entries += report.map_entries
        seconds = round(time.perf_counter() - started, 3)
        metrics.BATCH_SECONDS.labels(self.dc, "query_reader").observe(seconds)
        log.info(
            "query_reader.batch",
            dc=self.dc,
            batch=batch,
            seconds=seconds,
            lines=report.lines,
            cached=report.cached,
            map_entries=report.map_entries,
            quarantined=report.quarantined,
            progress_us=report.progress_us,
        )
        return report
