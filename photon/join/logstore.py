"""The LogsEventStore: find a query in the DC's query logs through the log-file map.

For each id: take the map's entries of the id's process in ``[ts - W, ts]``,
read at most M bytes (plus the rest of the line that straddles M) from each,
and return the complete line whose ``query_id`` is the id. Reads of one batch
are merged per file, so ids whose stretches overlap read them once.

Files by identity: an entry names the file as the query reader read it. A
query not found there is looked for at the same offsets under that file's
logrotate names (``x.log.1``, ``x.log.2``, …): a file renamed, or copied then
truncated, keeps its bytes at their offsets there, while its old name may hold
another file by now (docs/join.md, "Files by identity"). Only the query id
matching decides, so a look in the wrong file finds nothing, never a wrong line.

How it fails: an id with no candidate entry, or not in any candidate stretch,
is "not found" (the joiner retries it later). A map entry naming a file that
is not a plain name in the query directory is ignored and logged (the map
comes from the object store: never follow it out of the logs). A missing or
shrunken file is "not found", never an error.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import BinaryIO, TypeVar

import structlog

from photon import metrics
from photon.events.ids import EventId
from photon.events.records import query_id_text
from photon.join.logmap import LogFileMap
from photon.logs.reader import unrotated

log = structlog.get_logger(__name__)

_N = TypeVar("_N", int, float)  # a span's ends: byte offsets, or seconds


class LogsEventStore:
    def __init__(
        self, query_dir: Path, logmap: LogFileMap, *, window_us: int, max_bytes: int
    ) -> None:
        self.query_dir = query_dir
        self.logmap = logmap
        self.window_us = window_us
        self.max_bytes = max_bytes

    def find_many(self, query_ids: Iterable[EventId]) -> dict[str, bytes]:
        """The raw lines of the queries found, by query id.

        Each id may be searched from each of its candidate entries; its search
        space is the union of those ``[offset, offset + M)`` stretches (plus the
        line straddling each end). Stretches of one file overlap (entries are
        dense where queries arrive out of order), so the batch reads each
        merged stretch once and searches each id only in its own union.
        """
        regions: dict[str, dict[str, list[tuple[int, int]]]] = defaultdict(dict)
        asked: set[str] = set()
        for query_id in query_ids:
            key = str(query_id)
            if key in asked:
                continue
            asked.add(key)
            by_file: dict[str, list[tuple[int, int]]] = defaultdict(list)
            for entry in self.logmap.candidates(query_id, self.window_us):
                by_file[entry.file].append((entry.offset, entry.offset + self.max_bytes))
            for file, spans in by_file.items():
                regions[file][key] = merged_spans(spans)
        found: dict[str, bytes] = {}
        for file in sorted(regions):
            found.update(self._search_file(file, regions[file]))
            left = {k: v for k, v in regions[file].items() if k not in found}
            for rotated in self._rotated_names(file) if left else []:
                found.update(self._search_file(rotated, left))
                left = {k: v for k, v in left.items() if k not in found}
                if not left:
                    break
        metrics.LOGMAP_LOOKUPS.labels(self.logmap.dc, "found").inc(len(found))
        metrics.LOGMAP_LOOKUPS.labels(self.logmap.dc, "not_found").inc(len(asked) - len(found))
        return found

    def _rotated_names(self, file: str) -> list[str]:
        """The names logrotate gives ``file`` (``x.log.1``, ``x.log.2``, …), newest first:
        renamed, or copied then truncated, its bytes stay at their offsets there."""
        try:
            rotated = [(*unrotated(p.name), p.name) for p in self.query_dir.iterdir()]
        except OSError:
            return []
        return [name for base, n, name in sorted(rotated) if base == file and n > 0]

    def _search_file(
        self, file: str, spans_by_id: dict[str, list[tuple[int, int]]]
    ) -> dict[str, bytes]:
        if Path(file).name != file or file in ("", ".", ".."):
            log.error("logstore.bad_entry", file=file)
            return {}
        reads = merged_spans([span for spans in spans_by_id.values() for span in spans])
        try:
            with (self.query_dir / file).open("rb") as f:
                chunks = [_read_span(f, start, stop) for start, stop in reads]
        except FileNotFoundError:
            return {}
        found: dict[str, bytes] = {}
        for key, spans in spans_by_id.items():
            needle = key.encode("ascii")
            for start, stop in spans:
                # The merged read holding this span (reads are disjoint and sorted).
                at = bisect.bisect_right(reads, (start, float("inf"))) - 1
                line = _find_line(chunks[at], start - reads[at][0], stop - reads[at][0], needle)
                if line is not None:
                    found[key] = line
                    break
        return found


def merged_spans(spans: Iterable[tuple[_N, _N]]) -> list[tuple[_N, _N]]:
    """Overlapping or touching ``[start, stop)`` spans joined; sorted, disjoint."""
    merged: list[tuple[_N, _N]] = []
    for start, stop in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], stop))
        else:
            merged.append((start, stop))
    return merged


def _read_span(f: BinaryIO, start: int, stop: int) -> bytes:
    """Bytes ``[start, stop)``, plus the rest of the line straddling ``stop`` if complete."""
    f.seek(start)
    data = f.read(stop - start)
    if data and not data.endswith(b"\n") and len(data) == stop - start:
        data += f.readline()
    return data


def _find_line(data: bytes, start: int, stop: int, needle: bytes) -> bytes | None:
    """The complete line starting in ``data[start:stop]`` whose query id is ``needle``."""
    if start >= len(data):
        return None
    last = data.find(b"\n", max(start, min(stop, len(data)) - 1))
    if last < 0:
        last = len(data)  # no newline after: the line is partial, skipped below
    at = start
    key = needle.decode("ascii")
    while (hit := data.find(needle, at, last)) >= 0:
        line_start = data.rfind(b"\n", 0, hit) + 1
        line_end = data.find(b"\n", hit)
        at = hit + len(needle)
        if line_end < 0:
            return None  # a partial last line: not written yet
        line = data[line_start:line_end]
        # Decoded as the query reader decodes it: a line it quarantined (not JSON it
        # takes, nested too deep) is no query here either, and the search goes on.
        if query_id_text(line) == key:
            return line
    return None
