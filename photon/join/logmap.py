"""The log-file map: where in the query logs the queries of each server process are.

An entry says "the queries of process ``ip:pid`` from time ``ts_us`` on are in
``file`` from byte ``offset``". The query reader emits entries as it reads
(:class:`LogFileMapBuilder`) and writes each micro-batch's entries as one
*delta run* (a Parquet object) under ``logmap/dc=<dc>/delta/``; compaction
later merges runs into ``logmap/dc=<dc>/sorted/``. A joiner loads every run
(:class:`LogFileMap`) and asks for the entries that may lead to a query.

The builder keeps one invariant, per file and process: for every query line
``L``, the last entry emitted at or before ``L`` has ``ts <= L.ts``,
``L.ts - ts < W`` and ``L.offset - offset < M``. So a lookup of ``L``'s id
finds ``L`` by scanning at most M bytes (plus one line) from one of the
entries in ``[L.ts - W, L.ts]`` (:meth:`LogFileMap.candidates`). To keep it,
an entry is emitted at a process's first line in a file, after W seconds of
event time or M bytes, and at every line older than the last entry (queries
are only approximately sorted; a delayed query gets an entry of its own).

How it fails: entries are an index, not data. A lost delta run (a crash
before it was written) is re-emitted by the replayed batch, whose builder
state is only committed after its run is written. A run that does not decode
is logged and skipped; lookups it would have served fall back to the retry
store and, at worst, to recovery.
"""

from __future__ import annotations

import bisect
import io
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet as pq
import structlog

from photon.events.ids import EventId
from photon.storage import ObjectStore

log = structlog.get_logger(__name__)

SCHEMA = pa.schema(
    [("process", pa.string()), ("ts_us", pa.int64()), ("file", pa.string()), ("offset", pa.int64())]
)


@dataclass(frozen=True, slots=True, order=True)
class MapEntry:
    process: str
    ts_us: int
    file: str
    offset: int


@dataclass(frozen=True, slots=True)
class QueryLine:
    """A decoded query line's position: what the builder needs to know of it."""

    query_id: EventId
    file: str
    offset: int


_Last = dict[tuple[str, str], tuple[int, int]]  # (file, process) -> (ts_us, offset)


class LogFileMapBuilder:
    """Emits entries for query lines read in file order; see the module docstring."""

    def __init__(self, window_us: int, max_bytes: int) -> None:
        if window_us <= 0 or max_bytes <= 0:
            raise ValueError("the log-file map's W and M must be positive")
        self.window_us = window_us
        self.max_bytes = max_bytes
        self._last: _Last = {}

    def plan(self, lines: Iterable[QueryLine]) -> tuple[list[MapEntry], _Last]:
        """The entries for ``lines`` and the state after them; :meth:`commit` it once stored."""
        last = dict(self._last)
        entries: list[MapEntry] = []
        for line in lines:
            process = line.query_id.process
            ts = line.query_id.ts_us
            key = (line.file, process)
            previous = last.get(key)
            if (
                previous is None
                or ts < previous[0]
                or ts - previous[0] >= self.window_us
                or line.offset - previous[1] >= self.max_bytes
            ):
                entries.append(MapEntry(process, ts, line.file, line.offset))
                last[key] = (ts, line.offset)
        return entries, last

    def commit(self, state: _Last) -> None:
        self._last = state


def encode_run(entries: Sequence[MapEntry]) -> bytes:
    ordered = sorted(entries)
    table = pa.table(
        {
            "process": [e.process for e in ordered],
            "ts_us": [e.ts_us for e in ordered],
            "file": [e.file for e in ordered],
            "offset": [e.offset for e in ordered],
        },
        schema=SCHEMA,
    )
    sink = io.BytesIO()
    pq.write_table(table, sink, compression="zstd")
    return sink.getvalue()


def decode_run(data: bytes) -> list[MapEntry]:
    table = pq.read_table(io.BytesIO(data), schema=SCHEMA, use_threads=False)
    columns = table.to_pydict()
    return [
        MapEntry(p, t, f, o)
        for p, t, f, o in zip(
            columns["process"], columns["ts_us"], columns["file"], columns["offset"], strict=True
        )
    ]


def delta_prefix(dc: str) -> str:
    return f"logmap/dc={dc}/delta/"


def sorted_prefix(dc: str) -> str:
    return f"logmap/dc={dc}/sorted/"


class LogFileMap:
    """Every run of a DC's map, loaded and searchable by process and time."""

    def __init__(self, store: ObjectStore | None, dc: str) -> None:
        self.store = store  # None: entries come only through add()
        self.dc = dc
        self._loaded: set[str] = set()
        self._by_process: dict[str, list[tuple[int, str, int]]] = defaultdict(list)

    def __len__(self) -> int:
        return sum(len(v) for v in self._by_process.values())

    def refresh(self) -> int:
        """Load runs written since the last refresh; returns how many entries were added."""
        if self.store is None:
            return 0
        # Deltas first: compaction writes the sorted run that merges deltas before
        # it deletes them, so a delta gone by the second listing is in a sorted run
        # that listing shows (sorted first, one refresh could miss both).
        deltas = list(self.store.keys(delta_prefix(self.dc)))
        keys = [*self.store.keys(sorted_prefix(self.dc)), *deltas]
        added = 0
        present = set(keys)
        for key in keys:
            if key in self._loaded:
                continue
            data = self.store.get(key)
            if data is None:  # compacted away between the listing and the read
                continue
            try:
                entries = decode_run(data)
            except (pa.ArrowException, KeyError, ValueError) as exc:
                log.error("logmap.bad_run", key=key, error=str(exc))
                self._loaded.add(key)
                continue
            self.add(entries)
            self._loaded.add(key)
            added += len(entries)
        self._loaded &= present
        return added

    def add(self, entries: Iterable[MapEntry]) -> None:
        touched: set[str] = set()
        for e in entries:
            self._by_process[e.process].append((e.ts_us, e.file, e.offset))
            touched.add(e.process)
        for process in touched:
            rows = self._by_process[process]
            rows.sort()
            # Runs overlap after a replay or compaction: keep each entry once.
            self._by_process[process] = [
                r for i, r in enumerate(rows) if i == 0 or r != rows[i - 1]
            ]

    def candidates(self, query_id: EventId, window_us: int, limit: int = 64) -> list[MapEntry]:
        """Entries of the id's process with ``ts`` in ``[ts - W, ts]``, newest first."""
        rows = self._by_process.get(query_id.process)
        if not rows:
            return []
        ts = query_id.ts_us
        high = bisect.bisect_right(rows, (ts, "\uffff", 2**63))
        low = bisect.bisect_left(rows, (ts - window_us,))
        found = rows[max(low, high - limit) : high]
        return [MapEntry(query_id.process, t, f, o) for t, f, o in reversed(found)]
