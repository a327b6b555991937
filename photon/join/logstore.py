"""The LogsEventStore: find a query in the DC's query logs through the log-file map.

For each id: take the map's entries of the id's process in ``[ts - W, ts]``,
read at most M bytes (plus the rest of the line that straddles M) from each,
and return the complete line whose ``query_id`` is the id. Reads of one batch
are grouped by (file, offset), so ids that share a stretch of log read it once.

How it fails: an id with no candidate entry, or not in any candidate stretch,
is "not found" (the joiner retries it later). A map entry naming a file that
is not a plain name in the query directory is ignored and logged (the map
comes from the object store: never follow it out of the logs). A missing or
shrunken file is "not found", never an error.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path

import structlog

from photon import metrics
from photon.events.ids import EventId
from photon.join.logmap import LogFileMap

log = structlog.get_logger(__name__)


class LogsEventStore:
    def __init__(
        self, query_dir: Path, logmap: LogFileMap, *, window_us: int, max_bytes: int
    ) -> None:
        self.query_dir = query_dir
        self.logmap = logmap
        self.window_us = window_us
        self.max_bytes = max_bytes

    def find_many(self, query_ids: Iterable[EventId]) -> dict[str, bytes]:
        """The raw lines of the queries found, by query id."""
        wanted: dict[tuple[str, int], set[str]] = defaultdict(set)
        asked: set[str] = set()
        for query_id in query_ids:
            key = str(query_id)
            if key in asked:
                continue
            asked.add(key)
            for entry in self.logmap.candidates(query_id, self.window_us):
                wanted[(entry.file, entry.offset)].add(key)
        found: dict[str, bytes] = {}
        for (file, offset), ids in sorted(wanted.items()):
            ids -= found.keys()
            if ids:
                found.update(self._scan(file, offset, ids))
        metrics.LOGMAP_LOOKUPS.labels(self.logmap.dc, "found").inc(len(found))
        metrics.LOGMAP_LOOKUPS.labels(self.logmap.dc, "not_found").inc(len(asked) - len(found))
        return found

    def _scan(self, file: str, offset: int, ids: set[str]) -> dict[str, bytes]:
        if Path(file).name != file or file in ("", ".", ".."):
            log.error("logstore.bad_entry", file=file)
            return {}
        path = self.query_dir / file
        try:
            with path.open("rb") as f:
                f.seek(offset)
                data = f.read(self.max_bytes)
                if data and not data.endswith(b"\n"):
                    data += f.readline()  # the line that straddles M, if it is complete
        except FileNotFoundError:
            return {}
        found: dict[str, bytes] = {}
        for key in ids:
            needle = key.encode("ascii")
            start = 0
            while (hit := data.find(needle, start)) >= 0:
                line_start = data.rfind(b"\n", 0, hit) + 1
                line_end = data.find(b"\n", hit)
                start = hit + len(needle)
                if line_end < 0:
                    break  # a partial last line: not written yet
                line = data[line_start:line_end]
                if _query_id_of(line) == key:
                    found[key] = line
                    break
        return found


def _query_id_of(line: bytes) -> str | None:
    try:
        obj = json.loads(line)
    except ValueError:
        return None
    value = obj.get("query_id") if isinstance(obj, dict) else None
    return value if isinstance(value, str) else None
