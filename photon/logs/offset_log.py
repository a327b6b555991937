"""Spark's offset log of a growing-log stream: the byte offsets it logged for a batch.

Spark writes ``<checkpoint>/offsets/<n>`` before it runs batch ``n``: ``v1``,
a line of Spark's metadata, then one line per source with that source's
offsets. Photon's streams have one source, the growing-log source
(``spark_apps.growing_log_source``), whose offsets are
``{"files": {"<name>": <byte offset>}, "heads": {"<name>": <fingerprint>}}``.
The apps read a batch's range from it; the chaos tooling, the backlog gauges
and a joiner pacing itself to its query reader (:mod:`photon.join.pacing`) read
how far an app has committed (:func:`committed_offsets`) and what it has left
(:func:`unread_bytes`), and how far it has planned (:func:`planned_offsets`).
Before a query starts, :func:`remove_unfinished_writes`
clears what a process killed mid-write left in its checkpoint's logs.

How it fails: :func:`logged_offsets` raises ``OSError`` for an entry that is
not there and ``ValueError`` for one that is half written or is not one
source's ``v1`` entry; callers decide what that means for them.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping
from pathlib import Path

from photon.logs.reader import GrowingLogReader


def logged_offsets(checkpoint: Path, batch_id: int) -> dict[str, int]:
    """The end offsets Spark logged for batch ``batch_id``: file name to byte offset."""
    return logged_position(checkpoint, batch_id)[0]


def logged_position(checkpoint: Path, batch_id: int) -> tuple[dict[str, int], dict[str, str]]:
    """The end position Spark logged for batch ``batch_id``: (file name to byte offset,
    file name to the fingerprint of its head; see :mod:`photon.logs.reader`)."""
    lines = (checkpoint / "offsets" / str(batch_id)).read_text().splitlines()
    if len(lines) != 3 or lines[0] != "v1":
        raise ValueError(f"not a one-source v1 offset log entry: {len(lines)} lines")
    try:
        position = json.loads(lines[2])
        files = {str(name): int(offset) for name, offset in position["files"].items()}
        heads = {str(name): str(head) for name, head in position.get("heads", {}).items()}
    except (KeyError, TypeError, AttributeError, ValueError) as exc:
        raise ValueError(f"not the growing-log source's offsets: {exc}") from exc
    return files, heads


def committed_offsets(checkpoint: Path, unsettled: Collection[int] = ()) -> dict[str, int]:
    """The end offsets of the newest committed batch (empty before the first) that is not
    ``unsettled``: a joiner's batch that Spark committed while its groups still ran."""
    done = [b for b in logged_batches(checkpoint / "commits") if b not in unsettled]
    return _newest_readable(checkpoint, done)


def planned_offsets(checkpoint: Path) -> dict[str, int]:
    """The end offsets of the newest batch Spark planned (logged before it runs it,
    committed or not); empty before the first."""
    return _newest_readable(checkpoint, logged_batches(checkpoint / "offsets"))


def logged_batches(log: Path) -> list[int]:
    """The batches an offset or commit log (``<checkpoint>/offsets``, ``/commits``) names,
    newest first: the entries Spark finished writing (a temporary file is not one)."""
    if not log.is_dir():
        return []
    return sorted((int(p.name) for p in log.glob("[0-9]*") if p.name.isdigit()), reverse=True)


def _newest_readable(checkpoint: Path, batches: list[int]) -> dict[str, int]:
    """The logged end offsets of the first of ``batches`` whose entry reads whole."""
    for batch in batches:
        try:
            return logged_offsets(checkpoint, batch)
        except (OSError, ValueError):
            continue  # being written or wiped: the batch before
    return {}


#: The logs of a checkpoint that Spark checks are empty when a query starts afresh.
_CHECKED_LOGS = ("offsets", "commits")


def remove_unfinished_writes(checkpoint: Path) -> list[Path]:
    """Delete the files of checkpoint writes that never finished from its offset and
    commit logs, and return them. Call it only while no query runs on ``checkpoint``.

    Spark writes a log entry as ``.<name>.<uuid>[.TID<n>].tmp`` (and, on a local
    disk, its checksum ``..<name>.<uuid>.tmp.crc``), then renames it. A process
    killed between the two leaves the temporary file behind. Spark's reads skip it,
    but its check that a new query's checkpoint is empty does not: killed during
    its first batch's write, a query would never start again
    (``STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY``; docs/join.md, "replays").
    """
    removed = []
    for log_name in _CHECKED_LOGS:
        directory = checkpoint / log_name
        if not directory.is_dir():
            continue
        for path in directory.iterdir():
            if path.name.startswith(".") and path.name.endswith((".tmp", ".tmp.crc")):
                path.unlink(missing_ok=True)
                removed.append(path)
    return sorted(removed)


def unread_bytes(logs: Path, offsets: Mapping[str, int]) -> int:
    """The bytes of the log files in directory ``logs`` past ``offsets`` (a file with no
    offset from its start): how much an app that got that far has left to read."""
    unread = 0
    for name in GrowingLogReader(logs).files():
        try:
            size = (logs / name).stat().st_size
        except FileNotFoundError:
            continue
        unread += max(0, size - offsets.get(name, 0))
    return unread
