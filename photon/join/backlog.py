"""An app's backlog: the log bytes it has not committed yet, and how old they are.

An app's progress is its Spark checkpoint: ``commits/<n>`` marks batch ``n``
done and ``offsets/<n>`` holds, on its last line, the source's end offsets
``{"files": {"<name>": <byte offset>}, ...}``. The backlog is every log byte
past those offsets, in the log files the reader reads (logrotate's ``x.log.1``
too: a writer that has not reopened its file writes on there); its *lag* is
how far behind the end of its logs the app is, in the logs' own time: per ad
server's series of files, the event time (by id) of its newest line less that
of its oldest uncommitted one, the largest over the servers — 0 when nothing
is left. Both times come from the same server's clock, so a server's clock
skew cancels out. An app that is
caught up has a lag of about one micro-batch; one back from an outage starts
with a lag as long as the outage and drains it. The joiners' lag (clicks)
and the query readers' (queries) are read alike, except that a joiner's batch
Spark committed while its groups ran counts as done only once its journal
closes it (docs/join.md, "Batches that overlap"); ``photon status``, the
apps' lag gauges (docs/metrics.md) and the chaos run read them.

How it fails: it never raises for a checkpoint being written or wiped
meanwhile (a missing or half-written batch file reads as the batch before,
or as no progress); lines that do not decode are passed over.
"""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from photon.apps import JOINER, QUERY_READER
from photon.events.records import Stream, decode_click, decode_query
from photon.join.retry import RETRY_STORE, open_streaming_batches
from photon.logs.offset_log import committed_offsets, unread_bytes
from photon.logs.reader import GrowingLogReader, unrotated
from photon.settings import PhotonSettings

#: How far past an offset to look for the first line that decodes.
_PROBE_BYTES = 64 * 1024


@dataclass(frozen=True)
class Backlog:
    bytes: int
    lag_s: float  # behind the end of its logs, in the logs' time; 0 when none is left
    files: int = 0  # files with bytes past the committed offsets


def backlog(logs: Path, offsets: dict[str, int], stream: Stream = Stream.CLICKS) -> Backlog:
    """The backlog of the ``stream`` logs in directory ``logs`` past ``offsets``."""
    event_us = _CLICK_US if stream is Stream.CLICKS else _QUERY_US
    series: dict[str, list[Path]] = defaultdict(list)  # one ad server's files, in order
    for name in sorted(GrowingLogReader(logs).files(), key=_writing_order):
        series[unrotated(name)[0].rsplit(".", 2)[0]].append(logs / name)
    lag_us, behind = 0, 0
    for files in series.values():
        oldest_us: int | None = None
        for path in files:
            try:
                size = path.stat().st_size
            except FileNotFoundError:
                continue
            start = offsets.get(path.name, 0)
            if size <= start:
                continue
            behind += 1
            if oldest_us is None:
                oldest_us = _first_event_us(path, start, event_us)
        newest_us = _last_event_us(files[-1], event_us)
        if oldest_us is not None and newest_us is not None:
            lag_us = max(lag_us, newest_us - oldest_us)
    return Backlog(unread_bytes(logs, offsets), round(lag_us / 1_000_000, 1), behind)


def joiner_offsets(state_dir: Path) -> dict[str, int]:
    """How far a joiner (its state directory) has joined its click logs: its newest
    batch that Spark committed and that its journal does not hold open."""
    unsettled = open_streaming_batches(state_dir / RETRY_STORE)
    return committed_offsets(state_dir / "checkpoint", unsettled)


def joiner_backlog(settings: PhotonSettings, dc: str) -> Backlog:
    offsets = joiner_offsets(settings.pipeline_dir(dc, JOINER))
    return backlog(settings.dc_logs(dc) / "clicks", offsets)


def query_reader_backlog(settings: PhotonSettings, dc: str) -> Backlog:
    """The query reader's unread query-log bytes and files, and its lag by query times."""
    checkpoint = settings.pipeline_dir(dc, QUERY_READER) / "checkpoint"
    return backlog(settings.dc_logs(dc) / "queries", committed_offsets(checkpoint), Stream.QUERIES)


def _writing_order(name: str) -> tuple[str, int]:
    """Oldest first: logrotate's ``x.log.2`` holds older lines than ``x.log.1``, and
    that than ``x.log``."""
    base, rotation = unrotated(name)
    return base, -rotation


EventTime = Callable[[bytes], int]
_CLICK_US: EventTime = lambda raw: decode_click(raw).click_id.ts_us  # noqa: E731
_QUERY_US: EventTime = lambda raw: decode_query(raw).query_id.ts_us  # noqa: E731


def _first_event_us(path: Path, offset: int, event_us: EventTime) -> int | None:
    try:
        with path.open("rb") as f:
            f.seek(offset)
            chunk = f.read(_PROBE_BYTES)
    except OSError:
        return None
    return _event_us(chunk.split(b"\n")[:-1], event_us)  # complete lines only


def _last_event_us(path: Path, event_us: EventTime) -> int | None:
    try:
        with path.open("rb") as f:
            size = f.seek(0, os.SEEK_END)
            f.seek(max(0, size - _PROBE_BYTES))
            chunk = f.read()
    except OSError:
        return None
    lines = chunk.split(b"\n")[1:-1] if size > _PROBE_BYTES else chunk.split(b"\n")[:-1]
    return _event_us(reversed(lines), event_us)  # complete lines only, the newest first


def _event_us(lines: Iterable[bytes], event_us: EventTime) -> int | None:
    """The id time of the first line that decodes as an event of the stream."""
    for raw in lines:
        try:
            return event_us(raw)
        except ValueError:
            continue
    return None
