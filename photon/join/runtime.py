"""Build a DC's query reader or joiner from the settings, with everything it holds open.

The Spark apps call these and nothing else of the join: the wiring of stores,
registry, adapter and local state lives here, testable without Spark.

Local state of an app lives in ``<pipeline.state_root>/<dc>/<app>/``:
``checkpoint/`` (Spark's), ``retry.sqlite`` (the joiner's retry store) and
``attempt`` (the attempt's name, made once). The three belong together:
delete them together or not at all — a new checkpoint with an old attempt
name would reuse batch tokens.

How it fails: a registry that does not answer, or an attempt recovery has
fenced, raises from ``build_*``; what was opened by then is closed first, so a
failed build holds nothing open.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from photon import metrics
from photon.apps import JOINER, QUERY_READER
from photon.faults import FaultInjector
from photon.join.adapter import load_adapter
from photon.join.cache import CacheEventStore, CacheLossWatch
from photon.join.dispatcher import Dispatcher, DispatchPolicy
from photon.join.group import GroupJoiner, GroupParts, JoinPolicy
from photon.join.logmap import LogFileMap, LogFileMapBuilder
from photon.join.logstore import LogsEventStore
from photon.join.output import OutputWriter
from photon.join.pacing import Pacing, paced_wait_ms
from photon.join.progress import (
    ReaderProgress,
    published_mark,
    read_cache_state,
    read_progress,
)
from photon.join.query_reader import QueryReader
from photon.join.retry import RETRY_STORE, RetryStore
from photon.localfiles import write_whole
from photon.registry_access import connect_registry
from photon.settings import PhotonSettings
from photon.storage import ObjectStore
from registry import IdRegistry


def retry_store_path(settings: PhotonSettings, dc: str) -> Path:
    """The DC joiner's retry store (its dispatcher queue and batch journal)."""
    return settings.pipeline_dir(dc, JOINER) / RETRY_STORE


def query_reader_dir(settings: PhotonSettings, dc: str) -> Path:
    """The DC query reader's state: where it publishes its progress for the joiner."""
    return settings.pipeline_dir(dc, QUERY_READER)


def reader_pacing(settings: PhotonSettings, dc: str) -> Pacing | None:
    """How the DC's joiner is paced to its query reader (None: it is not; docs/join.md,
    "Pacing the joiner to its query reader"). The lead is the query files' order bound:
    the reader's progress is the newest query read in its slowest file less that bound."""
    pipeline = settings.pipeline
    if not pipeline.pace_to_reader:
        return None
    return Pacing(
        reader_state_dir=query_reader_dir(settings, dc).resolve(),
        queries_dir=(settings.dc_logs(dc) / "queries").resolve(),
        behind_bytes=pipeline.reader_pacing_bytes,
        lead_us=int(pipeline.query_order_bound_s * 1_000_000),
        max_ahead_us=int(settings.shards.max_clock_skew_s * 1_000_000),
        wait_ms=paced_wait_ms(pipeline.trigger_s),
    )


def current_attempt(settings: PhotonSettings, dc: str) -> str | None:
    """The attempt the DC's joiner runs (None before its first start); creates nothing."""
    path = settings.pipeline_dir(dc, JOINER) / "attempt"
    return (path.read_text().strip() or None) if path.exists() else None


def attempt_name(state_dir: Path, dc: str) -> str:
    """The app's attempt name, made on first start and kept with its checkpoint."""
    path = state_dir / "attempt"
    if path.exists():
        name = path.read_text().strip()
        if name:
            return name
    name = f"{dc}-{secrets.token_hex(4)}"
    write_whole(path, f"{name}\n".encode())  # a crash leaves no name or the whole new one
    return name


@dataclass
class AppParts:
    """What an app built; ``close()`` releases it."""

    dc: str
    state_dir: Path
    attempt: str
    logs_dir: Path
    closers: list[Any] = field(default_factory=list)

    @property
    def checkpoint(self) -> Path:
        return self.state_dir / "checkpoint"

    def close(self) -> None:
        for closer in reversed(self.closers):
            with contextlib.suppress(Exception):
                closer.close()


@dataclass
class JoinerApp(AppParts):
    joiner: Dispatcher | None = None
    retries: RetryStore | None = None


@dataclass
class QueryReaderApp(AppParts):
    reader: QueryReader | None = None


def _group_parts(
    settings: PhotonSettings,
    dc: str,
    attempt: str,
    registry: IdRegistry,
    faults: FaultInjector | None = None,
) -> GroupParts:
    """What the driver's Dispatcher and an executor's GroupJoiner are built with alike."""
    store = ObjectStore.from_settings(settings)
    if faults is not None and faults.active:  # an executor's: its writes may fail too
        store.faults = faults
    faults = faults or FaultInjector(settings.faults)
    return GroupParts(
        dc=dc,
        attempt=attempt,
        registry=registry,
        cache=CacheEventStore(settings.redis_url, dc, prefix=settings.redis.key_prefix),
        logs=LogsEventStore(
            settings.dc_logs(dc) / "queries",
            LogFileMap(store, dc),
            window_us=int(settings.log_file_map.window_s * 1_000_000),
            max_bytes=settings.log_file_map.max_bytes,
        ),
        output=OutputWriter(store, dc, attempt),
        adapter=load_adapter(settings.pipeline.adapter),
        faults=faults,
    )


def join_policy(settings: PhotonSettings) -> JoinPolicy:
    return JoinPolicy(
        dcs=settings.dcs,
        affinity_grace_s=settings.pipeline.affinity_grace_s,
        affinity_max_age_s=settings.pipeline.affinity_max_age_s,
        skip_fresh_logs_s=settings.log_file_map.skip_fresh_s,
        reader_wait_s=settings.pipeline.reader_wait_s,
        max_future_s=settings.shards.max_future_s,
    )


def build_group_joiner(
    settings: PhotonSettings, dc: str, attempt: str, faults: FaultInjector | None = None
) -> tuple[GroupJoiner, list[Any]]:
    """A joiner of shard groups (an executor's), and what to close when done."""
    registry = connect_registry(settings)
    closers: list[Any] = [registry]
    try:
        registry.hold_attempt(attempt)  # its commits fail once recovery fenced it
        parts = _group_parts(settings, dc, attempt, registry, faults)
    except BaseException:
        registry.close()
        raise
    closers.append(parts.cache)
    return GroupJoiner(parts, join_policy(settings)), closers


def cache_lost_at(watch: CacheLossWatch, reader_state_dir: Path) -> Callable[[int], int]:
    """The time after which every query a DC's reader read is still cached, given a
    batch's ``now``: queries are skipped in the logs only when newer.

    Where the joiner's look at Redis finds what the reader's last look found, the
    reader's published bound (the newest query time it had read at its last look
    that found a loss: a backlog read before the joiner started counts as cached).
    Else the last time a loss may have happened, by what Redis shows (``watch``) and
    the puts the reader dropped, whichever is later: a query stamped after a loss
    was put after it."""

    def lost_at(now_us: int) -> int:
        dropped, intact = read_cache_state(reader_state_dir)  # before the look: never newer
        seen = watch.lost_at(now_us)
        if intact is not None and watch.reader_signs == intact.signs:
            return intact.after_us
        return now_us if dropped is None else max(dropped, seen)

    return lost_at


def build_joiner(settings: PhotonSettings, dc: str) -> JoinerApp:
    state_dir = settings.pipeline_dir(dc, JOINER)
    attempt = attempt_name(state_dir, dc)
    app = JoinerApp(dc, state_dir, attempt, settings.dc_logs(dc) / "clicks")
    try:
        registry = connect_registry(settings)
        app.closers.append(registry)
        # A fenced attempt (recovery took its ids over) stops here, with what to do.
        registry.hold_attempt(attempt)
        # Operators (the resharding rollout) see which config version this joiner uses.
        registry.announce(
            f"{JOINER}-{attempt}",
            {
                "dc": dc,
                "app": JOINER,
                "attempt": attempt,
                "host": socket.gethostname(),
                "pid": os.getpid(),
            },
        )
        retries = RetryStore(retry_store_path(settings, dc), settings.retry)
        app.closers.append(retries)
        app.retries = retries
        parts = _group_parts(settings, dc, attempt, registry)
        app.closers.append(parts.cache)
        dispatch = DispatchPolicy(
            max_retries_per_batch=settings.pipeline.max_retries_per_batch,
            query_window_us=int(settings.log_file_map.window_s * 1_000_000),
            join_groups=max(1, settings.pipeline.join_groups),
            # Two triggers without lines (and at least a second: Spark's own time between
            # batches at a short trigger): the stream is quiet, retry passes take over.
            retry_pass_quiet_s=max(2 * settings.pipeline.trigger_s, 1.0),
            arrival_window_s=settings.pipeline.arrival_window_s,
        )
        app.joiner = Dispatcher(
            parts,
            retries,
            join_policy(settings),
            dispatch,
            reader_progress=lambda: read_progress(query_reader_dir(settings, dc)),
            reader_mark=lambda: published_mark(query_reader_dir(settings, dc)),
            cache_lost_at=cache_lost_at(
                CacheLossWatch(parts.cache), query_reader_dir(settings, dc)
            ),
        )
        metrics.REGISTRY_CLIENTS.track(dc, app.joiner.register_counters)
    except BaseException:
        app.close()
        raise
    return app


def build_query_reader(settings: PhotonSettings, dc: str) -> QueryReaderApp:
    state_dir = settings.pipeline_dir(dc, QUERY_READER)
    attempt = attempt_name(state_dir, dc)
    app = QueryReaderApp(dc, state_dir, attempt, settings.dc_logs(dc) / "queries")
    try:
        store = ObjectStore.from_settings(settings)
        cache = CacheEventStore(settings.redis_url, dc, prefix=settings.redis.key_prefix)
        app.closers.append(cache)
        app.reader = QueryReader(
            dc=dc,
            attempt=attempt,
            cache=cache,
            store=store,
            output=OutputWriter(store, dc, attempt),
            builder=LogFileMapBuilder(
                int(settings.log_file_map.window_s * 1_000_000), settings.log_file_map.max_bytes
            ),
            progress=ReaderProgress(
                state_dir,
                order_bound_us=int(settings.pipeline.query_order_bound_s * 1_000_000),
                idle_us=int(settings.pipeline.query_file_idle_s * 1_000_000),
                max_ahead_us=int(settings.shards.max_clock_skew_s * 1_000_000),
            ),
            queries_dir=settings.dc_logs(dc) / "queries",
            clicks_dir=settings.dc_logs(dc) / "clicks",
        )
    except BaseException:
        app.close()
        raise
    return app
