"""Compaction of the log-file map: delta runs merged into one sorted run.

The query reader writes one small delta run per micro-batch
(:mod:`photon.join.logmap`); joiners load every run. Compaction, per DC:

1. lists the delta and sorted runs and reads them (the *before* map);
2. merges their entries, drops duplicates, entries older than the GC
   boundary (``now - retention``: their queries can no longer be joined) and
   entries of log files that no longer exist, and sorts them
   (:func:`merge` is the plain-Python rule; the Spark job does the same with
   DataFrames);
3. writes the result as one new sorted run, and only then deletes the runs
   it merged, so a joiner listing in between sees both (entries are
   deduplicated on load) and never neither;
4. checks the new run against its *input* runs, read back from the store:
   it must hold exactly the input entries the rule keeps (:func:`merge` of
   the input here, whichever merge made the run: the Spark job's), so an
   entry wrongly dropped or added is seen; and a sample of those input
   entries must look their own query line up the same through the new run
   as through the old runs.

It refuses to judge files it cannot see: when the DC's query log directory
is missing, or none of the files the unexpired entries name is in it (the
logs not mounted where compaction runs), it raises
:class:`LogsNotVisibleError` before writing anything, rather than drop the
whole map as "entries of deleted files".

How it fails: if the check fails, the new run is deleted and the old runs
kept (the run raises :class:`CompactionCheckError`). Runs written by the query
reader while compaction runs are not in its listing and are left alone. A
crash between steps 3 and 4 leaves old and new runs side by side: the same
entries twice, which loading tolerates and the next compaction merges.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import structlog

from photon.errors import PhotonError
from photon.events.ids import EventId
from photon.join.logmap import (
    LogFileMap,
    MapEntry,
    decode_run,
    delta_prefix,
    encode_run,
    sorted_prefix,
)
from photon.join.logstore import LogsEventStore
from photon.storage import ObjectStore

log = structlog.get_logger(__name__)


class CompactionCheckError(PhotonError, RuntimeError):
    """The new run differs from what its input runs say; the old runs were kept."""


class LogsNotVisibleError(CompactionCheckError):
    """The query logs the map points into are not visible here: nothing was changed."""


@dataclass(frozen=True, slots=True)
class Runs:
    """The runs of one DC as listed and read at the start of a compaction."""

    dc: str
    delta_keys: list[str]
    sorted_keys: list[str]
    entries: list[MapEntry]

    @property
    def keys(self) -> list[str]:
        return [*self.sorted_keys, *self.delta_keys]


@dataclass(slots=True)
class CompactionReport:
    dc: str
    delta_runs: int = 0
    sorted_runs: int = 0
    entries_before: int = 0
    entries_after: int = 0
    dropped_expired: int = 0
    dropped_missing_file: int = 0
    duplicates: int = 0
    new_run: str | None = None
    sampled: int = 0
    mismatches: list[str] = field(default_factory=list)
    skipped: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def read_runs(store: ObjectStore, dc: str) -> Runs:
    delta = list(store.keys(delta_prefix(dc)))
    ordered = list(store.keys(sorted_prefix(dc)))
    entries: list[MapEntry] = []
    for key in [*ordered, *delta]:
        data = store.get(key)
        if data is not None:
            entries += decode_run(data)
    return Runs(dc, delta, ordered, entries)


def merge(
    entries: Iterable[MapEntry], boundary_us: int, file_exists: Callable[[str], bool]
) -> tuple[list[MapEntry], CompactionReport]:
    """Deduplicated, sorted entries at or above ``boundary_us`` naming existing files."""
    report = CompactionReport(dc="")
    kept: set[MapEntry] = set()
    exists: dict[str, bool] = {}
    for entry in entries:
        report.entries_before += 1
        if entry.ts_us < boundary_us:
            report.dropped_expired += 1
            continue
        if entry.file not in exists:
            exists[entry.file] = file_exists(entry.file)
        if not exists[entry.file]:
            report.dropped_missing_file += 1
            continue
        if entry in kept:
            report.duplicates += 1
            continue
        kept.add(entry)
    result = sorted(kept)
    report.entries_after = len(result)
    return result, report


def check_logs_visible(
    dc: str, query_dir: Path, entries: Iterable[MapEntry], boundary_us: int
) -> None:
    """Raise :class:`LogsNotVisibleError` when the files the map names cannot be judged."""
    if not query_dir.is_dir():
        raise LogsNotVisibleError(
            f"DC {dc}: its query logs are not at {query_dir}; compaction drops entries of "
            "files that no longer exist, so it runs only where the logs are mounted "
            "(nothing changed)"
        )
    named = {e.file for e in entries if e.ts_us >= boundary_us}
    exists = query_file_exists(query_dir)
    if named and not any(exists(name) for name in named):
        raise LogsNotVisibleError(
            f"DC {dc}: none of the {len(named)} query log files the map names is in "
            f"{query_dir}: are the logs mounted here? (nothing changed)"
        )


def query_file_exists(query_dir: Path) -> Callable[[str], bool]:
    def exists(name: str) -> bool:
        # Map entries come from the object store: only plain names inside the directory.
        return "/" not in name and name not in ("", ".", "..") and (query_dir / name).is_file()

    return exists


def sample_entries(entries: list[MapEntry], count: int) -> list[MapEntry]:
    """``count`` entries spread evenly over the sorted list (deterministic)."""
    if count <= 0 or not entries:
        return []
    step = max(1, len(entries) // count)
    return entries[::step][:count]


def lookups(
    entries: Iterable[MapEntry],
    sample: list[MapEntry],
    query_dir: Path,
    window_us: int,
    max_bytes: int,
) -> dict[str, bytes | None]:
    """Each sampled entry's own query line, as the LogsEventStore finds it through ``entries``."""
    logmap = LogFileMap(None, "")
    logmap.add(entries)
    store = LogsEventStore(query_dir, logmap, window_us=window_us, max_bytes=max_bytes)
    ids = [EventId.parse(f"{e.process}:{e.ts_us}") for e in sample]
    found = store.find_many(ids)
    return {str(i): found.get(str(i)) for i in ids}


def new_run_key(dc: str, now_us: int | None = None) -> str:
    now = time.time_ns() // 1000 if now_us is None else now_us
    return f"{sorted_prefix(dc)}{now:020d}-{secrets.token_hex(4)}.parquet"


def install(
    store: ObjectStore,
    runs: Runs,
    merged: list[MapEntry],
    report: CompactionReport,
    *,
    before: dict[str, bytes | None],
    look_up: Callable[[list[MapEntry]], dict[str, bytes | None]],
    expected: set[MapEntry],
) -> CompactionReport:
    """Write the merged run, check it against ``expected`` (what the input runs say it
    must hold) and the sampled lookups through it, then delete the old runs.

    ``look_up(entries)`` answers the sampled lookups through ``entries``; it is
    given the run as read back from the store, so the check covers the write.
    """
    report.dc = runs.dc
    report.delta_runs = len(runs.delta_keys)
    report.sorted_runs = len(runs.sorted_keys)
    report.sampled = len(before)
    key = new_run_key(runs.dc)
    store.put(key, encode_run(merged), if_absent=True)
    written = store.get(key)
    entries = decode_run(written) if written is not None else []
    got = set(entries)
    missing, extra = len(expected - got), len(got - expected)
    if missing or extra or len(entries) != len(got):
        store.delete([key])
        raise CompactionCheckError(
            f"DC {runs.dc}: the new run lacks {missing} of the input runs' {len(expected)} "
            f"entries to keep, holds {extra} they do not and {len(entries) - len(got)} "
            "twice; the old runs were kept"
        )
    found = look_up(entries)
    report.mismatches = sorted(q for q, line in before.items() if found.get(q) != line)
    if report.mismatches:
        store.delete([key])
        raise CompactionCheckError(
            f"DC {runs.dc}: {len(report.mismatches)} of {report.sampled} sampled lookups differ "
            f"after compaction (first: {report.mismatches[0]}); the old runs were kept"
        )
    store.delete(runs.keys)
    report.new_run = key
    log.info("ops.compaction.done", **report.to_dict())
    return report


def compact_dc(
    store: ObjectStore,
    dc: str,
    query_dir: Path,
    *,
    boundary_us: int,
    window_us: int,
    max_bytes: int,
    sample: int,
    merge_entries: Callable[
        [list[MapEntry], int, Callable[[str], bool]], tuple[list[MapEntry], CompactionReport]
    ] = merge,
) -> CompactionReport:
    """Compact one DC's map; ``merge_entries`` is :func:`merge` or the Spark job's equivalent."""
    runs = read_runs(store, dc)
    if len(runs.keys) <= 1 and not runs.delta_keys:
        return CompactionReport(
            dc=dc, sorted_runs=len(runs.sorted_keys), skipped="nothing to merge"
        )
    check_logs_visible(dc, query_dir, runs.entries, boundary_us)
    exists = query_file_exists(query_dir)
    # What the rule keeps of the input, by the plain merge here: the check of the
    # new run, whichever merge (the Spark job's) made it.
    by_rule, rule_report = merge(runs.entries, boundary_us, exists)
    if merge_entries is merge:
        merged, report = by_rule, rule_report
    else:
        merged, report = merge_entries(runs.entries, boundary_us, exists)
    expected = set(by_rule)
    chosen = sample_entries(by_rule, sample)  # from the input, not the output
    before = lookups(runs.entries, chosen, query_dir, window_us, max_bytes)
    return install(
        store,
        runs,
        merged,
        report,
        before=before,
        look_up=lambda entries: lookups(entries, chosen, query_dir, window_us, max_bytes),
        expected=expected,
    )
