"""Fixtures for the join against the real stack: a bucket, a registry root, a DC's parts."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from photon.join.adapter import Adapter, AdClickAdapter
from photon.join.cache import CacheEventStore, CacheLossWatch
from photon.join.dispatcher import BatchReport, Dispatcher, DispatchPolicy
from photon.join.group import GroupParts, JoinPolicy
from photon.join.logmap import LogFileMap, LogFileMapBuilder
from photon.join.logstore import LogsEventStore
from photon.join.output import OutputWriter
from photon.join.progress import ReaderProgress, published_mark, read_progress
from photon.join.query_reader import QueryReader
from photon.join.retry import RetryStore
from photon.join.runtime import cache_lost_at
from photon.logs.ranges import FileRange, Offsets, file_ranges
from photon.logs.reader import GrowingLogReader, LogLine
from photon.settings import PhotonSettings, RetrySettings
from photon.storage import ObjectStore, arrow_filesystem, s3_client
from photon.tooling.stack.manager import LocalStack
from registry import IdRegistry

W_US = 2_000_000
ORDER_BOUND_US = 5_000_000
FILE_IDLE_US = 30_000_000
MAX_AHEAD_US = 60_000_000  # shards.max_clock_skew_s
M_BYTES = 64 * 1024
RETRY = RetrySettings(
    initial_backoff_s=1, max_backoff_s=4, multiplier=2, jitter=0.1, max_attempts=3, max_age_s=30
)


class Clock:
    """The joiners' clock: event time of the run, moved on by the test."""

    def __init__(self, now_us: int) -> None:
        self.now_us = now_us

    def __call__(self) -> int:
        return self.now_us


def batches(directory: Path, max_bytes: int) -> list[list[LogLine]]:
    """A directory's log lines, read in slices of ``max_bytes`` as micro-batches would be."""
    reader = GrowingLogReader(directory)
    offsets: dict[str, int] = {}
    out = []
    while (read := reader.read(offsets, max_bytes=max_bytes)).lines:
        out.append(read.lines)
        offsets = read.offsets
    return out


def range_batches(directory: Path, max_bytes: int) -> list[list[FileRange]]:
    """The same micro-batches as :func:`batches`, as the file ranges the streaming
    source plans (Spark's offset log), unread: what the joiner app hands its groups."""
    reader = GrowingLogReader(directory)
    start: Offsets = {"files": {}, "heads": {}}
    out = []
    while (plan := reader.plan(start["files"], heads=start["heads"], max_bytes=max_bytes)).ranges:
        end: Offsets = {"files": dict(plan.offsets), "heads": dict(plan.heads)}
        out.append(file_ranges(str(directory), start, end))
        start = end
    return out


#: How a test hands the joiner its click batches: as lines the driver decodes, or as
#: file ranges its groups read (the joiner app's way).
FEEDS = ("lines", "ranges")
ClickBatch = list[LogLine] | list[FileRange]


def click_batches(directory: Path, max_bytes: int, feed: str) -> list[ClickBatch]:
    if feed == "ranges":
        return list(range_batches(directory, max_bytes))
    return list(batches(directory, max_bytes))


def process_clicks(joiner: Dispatcher, batch: str, clicks: ClickBatch) -> BatchReport:
    """One streaming batch, as lines or as ranges (see :data:`FEEDS`)."""
    if clicks and isinstance(clicks[0], FileRange):
        return joiner.process_ranges(batch, [r for r in clicks if isinstance(r, FileRange)])
    return joiner.process(batch, [line for line in clicks if isinstance(line, LogLine)])


@dataclass
class DcParts:
    dc: str
    reader: QueryReader
    joiner: Dispatcher
    retries: RetryStore
    cache_prefix: str = ""


@pytest.fixture
def store(local_stack: LocalStack) -> Iterator[ObjectStore]:
    """An object store on a bucket of this test's own."""
    settings = local_stack.settings
    client = s3_client(settings.s3_endpoint_url, settings.s3)
    bucket = f"photon-t-{uuid.uuid4().hex[:12]}"
    client.create_bucket(Bucket=bucket)
    arrow_fs = arrow_filesystem(settings.s3_endpoint_url, settings.s3)
    yield ObjectStore(client, bucket, arrow_fs=arrow_fs)


@pytest.fixture
def registry(local_stack: LocalStack) -> Iterator[IdRegistry]:
    root = f"/photon-join-{uuid.uuid4().hex[:12]}"
    reg = IdRegistry.connect(local_stack.settings.zk_hosts, root, default_shards=4)
    yield reg
    reg.close()


MakeDc = Callable[..., DcParts]


@pytest.fixture
def make_dc(
    local_stack: LocalStack, store: ObjectStore, registry: IdRegistry, tmp_path: Path
) -> Iterator[MakeDc]:
    settings: PhotonSettings = local_stack.settings
    caches: list[CacheEventStore] = []
    stores: list[RetryStore] = []
    prefix = f"photon-t-{uuid.uuid4().hex[:8]}"

    def make(
        dc: str,
        logs_root: Path,
        clock: Clock,
        *,
        redis_url: str | None = None,
        reg: IdRegistry | None = None,
        attempt: str = "run1",
        dcs: tuple[str, ...] = (),
        affinity_grace_s: float = 0.0,
        affinity_max_age_s: float = 0.0,
        skip_fresh_logs_s: float = 0.0,
        reader_wait_s: float = 0.0,
        sleep: Callable[[float], None] = lambda _: None,
        join_groups: int = 3,
        reader_attempt: str | None = None,
        watch_clicks: bool = False,
        adapter: Adapter | None = None,
        arrival_window_s: float = 0.0,
        follow_reader_mark: bool = False,
    ) -> DcParts:
        cache = CacheEventStore(redis_url or settings.redis_url, dc, prefix=prefix)
        caches.append(cache)
        retries = RetryStore(tmp_path / "state" / dc / attempt / "retry.sqlite", RETRY)
        stores.append(retries)
        output = OutputWriter(store, dc, attempt)
        reader_state = tmp_path / "state" / dc / attempt / "query-reader"
        # The joiner follows its own query reader, or another attempt's (that one read them).
        progress_dir = tmp_path / "state" / dc / (reader_attempt or attempt) / "query-reader"
        reader = QueryReader(
            dc=dc,
            attempt=attempt,
            cache=cache,
            store=store,
            output=output,
            builder=LogFileMapBuilder(W_US, M_BYTES),
            progress=ReaderProgress(
                reader_state,
                order_bound_us=ORDER_BOUND_US,
                idle_us=FILE_IDLE_US,
                max_ahead_us=MAX_AHEAD_US,
            ),
            queries_dir=logs_root / dc / "queries",
            clicks_dir=logs_root / dc / "clicks" if watch_clicks else None,
            clock=clock,
        )
        logs = LogsEventStore(
            logs_root / dc / "queries",
            LogFileMap(store, dc),
            window_us=W_US,
            max_bytes=M_BYTES,
        )
        joiner = Dispatcher(
            GroupParts(
                dc=dc,
                attempt=attempt,
                registry=reg or registry,
                cache=cache,
                logs=logs,
                output=output,
                adapter=adapter or AdClickAdapter(),
            ),
            retries,
            JoinPolicy(
                dcs=dcs,
                affinity_grace_s=affinity_grace_s,
                affinity_max_age_s=affinity_max_age_s,
                skip_fresh_logs_s=skip_fresh_logs_s,
                reader_wait_s=reader_wait_s,
                logmap_refresh_s=0.0,
            ),
            # the registry has 4 shards: groups of 2, 1 and 1
            DispatchPolicy(
                query_window_us=W_US, join_groups=join_groups, arrival_window_s=arrival_window_s
            ),
            reader_progress=lambda: read_progress(progress_dir),
            # as the apps do (photon.join.runtime); off, every wake look is whole
            reader_mark=(lambda: published_mark(progress_dir)) if follow_reader_mark else None,
            cache_lost_at=cache_lost_at(CacheLossWatch(cache), progress_dir),
            clock=clock,
            sleep=sleep,
        )
        return DcParts(dc, reader, joiner, retries, prefix)

    yield make
    for cache in caches:
        cache.close()
    for retries in stores:
        retries.close()
