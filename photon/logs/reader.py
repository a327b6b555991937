"""Growing-log reader: complete lines from saved per-file byte offsets.

The reader's position is a mapping ``file name -> byte offset of the next
unread byte`` for the log files of one directory (file names are relative to
it; a file missing from the mapping starts at 0). :meth:`GrowingLogReader.read`
returns every complete line after those offsets, each with the offset where
it starts, plus the new mapping. Save the mapping wherever the caller commits
its progress (the Spark checkpoint, later); a reader started from a saved
mapping returns each complete line exactly once, in file order.

How it fails, and what it does instead:

* a partial last line (no ``\\n`` yet) is not returned and its bytes are not
  consumed: the next read picks the line up once it is complete;
* a file shorter than its saved offset was truncated or replaced: the bytes in
  between are gone, so the reader reports a ``file_truncated`` quarantine
  record and continues from the file's present end (never re-reading lines);
* a file that goes (deleted, or moved out of the directory) is reported once
  (``file_deleted``, at the offset it was read to) and dropped from the offsets;
* a file that shrinks or goes between planning a read and reading it gives
  the complete lines still there, and its lost bytes are reported
  (``file_truncated`` / ``file_deleted``): a read never fails on it, so a
  stream replaying that read does not wedge;
* a file is known by its name and its *head*, a fingerprint of its first
  :data:`HEAD_BYTES` bytes (kept beside the offsets, once it has that many). A
  file whose head changed while it grew again (truncated then regrown past its
  saved offset, or replaced by a new file of the same name) is a new file: it
  is read from its start and reported (``file_replaced``, at the old offset;
  what the old file held past it was never read). A new name whose head is
  that of a known file that was replaced or went (a rotation: renamed, or
  copied then truncated) continues that file from its offset, reported as
  ``file_rotated``, so nothing is read twice or skipped;
* a torn last line (bytes after the last ``\\n``) of a file whose writer has
  moved on — a later file of the same writer (``<name>.<seq>.log``) exists, or,
  for a file logrotate rotated (``x.log.1``), the name it came from (``x.log``,
  written anew) — will never be completed: it is returned as a ``torn_line`` quarantine
  record with its bytes, once;
* files that appear later are picked up, in name order, on the next read;
  the log files are ``*.log`` and their rotated names ``*.log.<n>``
  (logrotate's): a file rotated by rename or by copy-then-truncate is found
  under its new name by its head and read on from its offset;
* a log file whose name is not UTF-8 (a shipper that wrote it in Latin-1)
  is not read: every record of where a line came from (the log-file map,
  quarantine, Spark's offsets) holds its file's name as UTF-8 text, and
  such a name made the first of them to be written fail its batch, on every
  replay alike. It is said once a process (``logs.name_not_utf8``, an
  error, with the directory and the name's bytes) and its lines wait in the
  file, read from its start once it is renamed.

Admission control: ``max_bytes`` and ``max_files`` bound one read; a read
always makes progress (at least one line, if any is complete).
"""

from __future__ import annotations

import hashlib
import itertools
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from photon.events.records import QuarantineReason, QuarantineRecord

Offsets = dict[str, int]
#: File name -> fingerprint of its first HEAD_BYTES bytes (files that have them).
Heads = dict[str, str]

#: How many first bytes of a file its fingerprint covers: less than any log line
#: with an id, so a file's head is known once its first line was read.
HEAD_BYTES = 64

#: How the files recovery writes into a DC's click logs are named (photon.ops.recover):
#: read like any click file, but not an ad server's.
RECOVERY_LOG_PREFIX = "recovery-"

_CHUNK_BYTES = 1 << 20
_WRITER_FILE = re.compile(r"(?P<writer>.+)\.(?P<seq>\d+)\.log")


_ROTATED_FILE = re.compile(r"(?P<name>.+\.log)\.(?P<n>[0-9]+)")


def unrotated(name: str) -> tuple[str, int]:
    """A log file's name before logrotate renamed it, and how many times it did
    (``x.log.2`` -> ``("x.log", 2)``; ``x.log`` -> ``("x.log", 0)``)."""
    if match := _ROTATED_FILE.fullmatch(name):
        return match["name"], int(match["n"])
    return name, 0


def _place(name: str) -> tuple[str, tuple[int, int]]:
    """A log file's writer and its place among that writer's files: later files have
    higher sequence numbers (``x.000002.log`` after ``x.000001.log``), and logrotate's
    rotated names hold what came before the unrotated one (``x.log.2``, ``x.log.1``,
    then ``x.log``)."""
    name, rotation = unrotated(name)
    if match := _WRITER_FILE.fullmatch(name):
        return match["writer"], (int(match["seq"]), -rotation)
    return name, (0, -rotation)


def _rolled_over(names: list[str]) -> set[str]:
    """The names of files whose writer has since opened a later file: a higher
    sequence number, or, for a rotated file, the name it was rotated from (written
    anew: its writer reopened it, or it was copied then truncated)."""
    places = {name: _place(name) for name in names}
    newest: dict[str, tuple[int, int]] = {}
    for writer, place in places.values():
        newest[writer] = max(newest.get(writer, place), place)
    return {name for name, (writer, place) in places.items() if place < newest[writer]}


@dataclass(frozen=True, slots=True)
class LogLine:
    """One complete line: ``raw`` without its ``\\n``, starting at ``offset`` in ``file``."""

    file: str
    offset: int
    raw: bytes

    @property
    def end(self) -> int:
        """Offset just after this line's newline: where the next read resumes."""
        return self.offset + len(self.raw) + 1


@dataclass(frozen=True, slots=True)
class ReadRange:
    """Bytes ``[start, end)`` of ``file``: whole lines, the last one ending at ``end``."""

    file: str
    start: int
    end: int


@dataclass(frozen=True, slots=True)
class AvailableLines:
    """What a planned range still holds: its complete lines (``raws`` without their
    ``\\n``, at ``offsets``) and ``stop``, the offset after the last of them —
    the range's end when nothing went, less when the file shrank since the plan
    or the range is a torn last line (then ``torn`` holds those bytes)."""

    raws: list[bytes]
    offsets: list[int]
    stop: int
    torn: bytes


@dataclass(slots=True)
class ReadPlan:
    ranges: list[ReadRange]
    offsets: Offsets
    truncations: list[QuarantineRecord] = field(default_factory=list)
    heads: Heads = field(default_factory=dict)


@dataclass(slots=True)
class ReadResult:
    lines: list[LogLine]
    offsets: Offsets
    truncations: list[QuarantineRecord] = field(default_factory=list)
    heads: Heads = field(default_factory=dict)

    @property
    def bytes_read(self) -> int:
        return sum(len(line.raw) + 1 for line in self.lines)


#: A log file's name: ``<name>.log``, or a rotated one, ``<name>.log.<n>`` (logrotate
#: renames ``x.log`` to ``x.log.1``; the reader follows the file there by its head).
_LOG_NAME = re.compile(r".+\.log(\.[0-9]+)?")


def is_log_name(name: str) -> bool:
    """Whether ``name`` is a log file's: ``*.log``, or rotated, ``*.log.<n>``, in UTF-8."""
    return _LOG_NAME.fullmatch(name) is not None and _is_utf8(name)


def _is_utf8(name: str) -> bool:
    # A name's bytes that are not UTF-8 come from the file system as lone surrogates.
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


#: The names said not to be UTF-8 by this process (each is said once, not every plan).
_SAID_NOT_UTF8: set[tuple[str, str]] = set()


def _say_not_utf8(directory: Path, names: list[str]) -> None:
    # structlog imported only here: Spark's data source planning workers and stream
    # runners import this module, and structlog (with rich) was a third of their start.
    import structlog

    for name in names:
        if (str(directory), name) not in _SAID_NOT_UTF8:
            _SAID_NOT_UTF8.add((str(directory), name))
            structlog.get_logger(__name__).error(
                "logs.name_not_utf8",
                directory=str(directory),
                name=os.fsencode(name),
                action="rename it to a UTF-8 name to read it",
            )


class GrowingLogReader:
    def __init__(self, directory: Path, *, pattern: str | None = None) -> None:
        self.directory = directory
        #: A glob of the names to read (None: every log file's, rotated ones included).
        self.pattern = pattern

    def files(self) -> list[str]:
        """Names of the log files present now, in name (= writing) order."""
        if not self.directory.is_dir():
            return []
        if self.pattern is not None:
            names = [p.name for p in self.directory.glob(self.pattern) if p.is_file()]
        else:
            names = [
                p.name
                for p in self.directory.iterdir()
                if _LOG_NAME.fullmatch(p.name) is not None and p.is_file()
            ]
        unreadable = [name for name in names if not _is_utf8(name)]
        if unreadable:
            _say_not_utf8(self.directory, unreadable)
        return sorted(name for name in names if name not in unreadable)

    def locate(self, file: str, head: str) -> str | None:
        """The name under which the file known as ``file`` with that head is now: its
        own, or the one it was rotated to (renamed, or copied before a truncation);
        None when no log file has that head (it went)."""
        if head_of(self.directory / file) == head:
            return file
        for name in self.files():
            if name != file and head_of(self.directory / name) == head:
                return name
        return None

    def plan(
        self,
        start: Mapping[str, int] | None = None,
        *,
        heads: Mapping[str, str] | None = None,
        max_bytes: int | None = None,
        max_files: int | None = None,
        limit_end: Callable[[str, int, int], int] | None = None,
    ) -> ReadPlan:
        """Where the next read ends, per file, without reading the lines themselves.

        Ends always fall just after a ``\n``, so :meth:`read_range_available` of
        each range gives complete lines only — but for the torn last line of a
        rolled-over file, a range of its own that it reports as ``torn``.
        Within ``max_bytes`` a file's range takes lines
        until the budget is used up (the line crossing it included), so every
        plan makes progress when any complete line is there. ``heads`` are the
        previous plan's (see the module docstring); the plan's own go with it.
        """
        if max_bytes is not None and max_bytes <= 0:
            raise ValueError(f"max_bytes must be positive, got {max_bytes}")
        if max_files is not None and max_files <= 0:
            raise ValueError(f"max_files must be positive, got {max_files}")
        offsets: Offsets = dict(start or {})
        names = self.files()
        known: Heads = {n: h for n, h in (heads or {}).items() if n in offsets}
        plan = ReadPlan(ranges=[], offsets=offsets, heads=dict(known))
        self._follow_renames(names, offsets, plan)
        present = set(names)
        for name in [n for n in offsets if n not in present]:  # went since the last plan
            plan.truncations.append(went(name, offsets.pop(name)))
            plan.heads.pop(name, None)
        consumed = 0
        rolled_over = _rolled_over(names)
        for name in names:
            offset = offsets.get(name, 0)
            if offset < 0:
                raise ValueError(f"saved offset {offset} of {name} is negative")
            size = (self.directory / name).stat().st_size
            if name in plan.heads and size != offset:
                head = head_of(self.directory / name)
                if head != plan.heads[name]:  # a new file under the old name: from its start
                    plan.truncations.append(replaced(name, offset))
                    del plan.heads[name]
                    offset = offsets[name] = 0
            if size < offset:
                plan.truncations.append(
                    QuarantineRecord(
                        file=name,
                        offset=size,
                        reason=QuarantineReason.FILE_TRUNCATED,
                        detail=f"file shrank to {size} bytes below the saved offset {offset}; "
                        f"{offset - size} bytes were lost",
                    )
                )
                offsets[name] = size
                continue
            if size == offset:
                offsets.setdefault(name, offset)
                continue
            if max_files is not None and len(plan.ranges) >= max_files:
                break
            budget = None if max_bytes is None else max_bytes - consumed
            if budget is not None and budget <= 0 and plan.ranges:
                break
            end = _end_of_lines(self.directory / name, offset, size, budget)
            if end == offset and name in rolled_over:
                end = size  # a torn last line its writer will never finish: read as such
            if limit_end is not None and end > offset:
                end = max(offset, min(end, limit_end(name, offset, end)))
            if end > offset:
                plan.ranges.append(ReadRange(name, offset, end))
                offsets[name] = end
                consumed += end - offset
                if name not in plan.heads and end >= HEAD_BYTES:
                    head = head_of(self.directory / name)
                    if head is not None:
                        plan.heads[name] = head
            else:
                offsets.setdefault(name, offset)
        return plan

    def _follow_renames(self, names: list[str], offsets: Offsets, plan: ReadPlan) -> None:
        """A new name holding the head of a known file that went or was replaced is
        that file renamed (rotated): it takes the file's offset and head over."""
        present = set(names)
        fresh = [n for n in names if n not in offsets]
        if not fresh or not plan.heads:
            return
        moved: dict[str, str] = {}  # head -> the name it was known by
        for name, head in plan.heads.items():
            if name not in present or head_of(self.directory / name) != head:
                moved[head] = name
        if not moved:
            return
        for name in fresh:
            fresh_head = head_of(self.directory / name)
            if fresh_head is not None and fresh_head in moved:
                old = moved.pop(fresh_head)
                offsets[name] = offsets[old]
                plan.heads[name] = fresh_head
                plan.truncations.append(rotated(name, old, offsets[old]))
                del plan.heads[old]  # what the old name holds now, if anything, is new
                if old in present:
                    offsets[old] = 0
                else:
                    del offsets[old]  # it went by its new name: no deletion to report

    def read_range_available(self, file: str, start: int, end: int) -> AvailableLines:
        """The complete lines of ``[start, end)`` that the file still holds, as two
        columns (no object a line); see :class:`AvailableLines`. Raises
        ``FileNotFoundError`` when the file is gone."""
        with (self.directory / file).open("rb") as f:
            f.seek(start)
            data = f.read(end - start)
        whole = len(data) == end - start
        # Else up to the last newline there (start: no complete line).
        stop = end if whole and data.endswith(b"\n") else start + data.rfind(b"\n") + 1
        torn = data[stop - start :] if whole else b""
        data = data[: stop - start]
        if not data:
            return AvailableLines([], [], stop, torn)
        raws = data[:-1].split(b"\n")
        offsets = list(itertools.accumulate((len(raw) + 1 for raw in raws[:-1]), initial=start))
        return AvailableLines(raws, offsets, stop, torn)

    def read(
        self,
        start: Mapping[str, int] | None = None,
        *,
        heads: Mapping[str, str] | None = None,
        max_bytes: int | None = None,
        max_files: int | None = None,
    ) -> ReadResult:
        """Read the complete lines after ``start``; see the module docstring."""
        plan = self.plan(start, heads=heads, max_bytes=max_bytes, max_files=max_files)
        result = ReadResult(
            lines=[], offsets=plan.offsets, truncations=plan.truncations, heads=plan.heads
        )
        for part in plan.ranges:
            try:
                got = self.read_range_available(part.file, part.start, part.end)
            except FileNotFoundError:
                result.truncations.append(lost_range(part.file, part.start, part.end, gone=True))
                continue
            result.lines += [
                LogLine(part.file, o, r) for o, r in zip(got.offsets, got.raws, strict=True)
            ]
            if got.torn:
                result.truncations.append(torn_line(part.file, got.stop, got.torn))
            elif got.stop < part.end:
                result.truncations.append(lost_range(part.file, got.stop, part.end, gone=False))
        return result


def head_of(path: Path) -> str | None:
    """The fingerprint of a file's first :data:`HEAD_BYTES` bytes; None while it has
    fewer, or when it is gone."""
    try:
        with path.open("rb") as f:
            head = f.read(HEAD_BYTES)
    except FileNotFoundError:
        return None
    if len(head) < HEAD_BYTES:
        return None
    return hashlib.blake2b(head, digest_size=8).hexdigest()


def replaced(file: str, offset: int) -> QuarantineRecord:
    """The report of a file whose head changed under the reader, read to ``offset``:
    what the old file held past it was never read; the new one is read from 0."""
    return QuarantineRecord(
        file=file,
        offset=offset,
        reason=QuarantineReason.FILE_REPLACED,
        detail=f"the file's first {HEAD_BYTES} bytes changed after {offset} bytes of it were "
        "read (truncated and written again, or replaced): anything the old file held past "
        f"{offset} was not read; the new file is read from its start",
    )


def rotated(file: str, old: str, offset: int) -> QuarantineRecord:
    """The report of ``old`` found again as ``file`` (renamed): read on from ``offset``.
    Its ``raw`` is the old name (what whoever follows files by name moves on)."""
    return QuarantineRecord(
        file=file,
        offset=offset,
        reason=QuarantineReason.FILE_ROTATED,
        detail=f"{old} was renamed {file} (same first {HEAD_BYTES} bytes): read on from "
        f"{offset}, nothing lost",
        raw=old.encode("utf-8", "surrogateescape"),
    )


def went(file: str, offset: int) -> QuarantineRecord:
    """The report of a file that went (deleted, or moved away) after ``offset`` bytes of
    it were read: whatever it held past that was not read."""
    return QuarantineRecord(
        file=file,
        offset=offset,
        reason=QuarantineReason.FILE_DELETED,
        detail=f"the file went after {offset} bytes of it were read: anything it held "
        "past that was not read",
    )


def torn_line(file: str, offset: int, raw: bytes) -> QuarantineRecord:
    """The report of a rolled-over file's last line, which has no ``\\n`` and never will."""
    return QuarantineRecord(
        file=file,
        offset=offset,
        reason=QuarantineReason.TORN_LINE,
        detail=f"the file's last {len(raw)} bytes end without a newline and its writer "
        "has moved on to a later file",
        raw=raw,
    )


def lost_range(file: str, start: int, end: int, *, gone: bool) -> QuarantineRecord:
    """The report of planned bytes ``[start, end)`` of ``file`` that went before they
    were read: the file deleted (``gone``), or shrunk below ``end``."""
    if gone:
        return QuarantineRecord(
            file=file,
            offset=start,
            reason=QuarantineReason.FILE_DELETED,
            detail=f"file deleted before {end - start} planned bytes from {start} were read",
        )
    return QuarantineRecord(
        file=file,
        offset=start,
        reason=QuarantineReason.FILE_TRUNCATED,
        detail=f"file shrank to below {end} bytes after its read was planned; "
        f"{end - start} bytes from {start} were lost",
    )


def _end_of_lines(path: Path, offset: int, size: int, budget: int | None) -> int:
    """The offset just after the last line to take from ``offset``; ``offset`` if none."""
    with path.open("rb") as f:
        if budget is not None and offset + budget < size:
            # The line that crosses the budget is the last one taken.
            newline = _find_forward(f, max(offset, offset + budget - 1), size)
            if newline >= 0:
                return newline + 1
        newline = _find_backward(f, offset, size)
        return newline + 1 if newline >= 0 else offset


def _find_forward(f: BinaryIO, start: int, stop: int) -> int:
    f.seek(start)
    position = start
    while position < stop:
        chunk = f.read(min(_CHUNK_BYTES, stop - position))
        if not chunk:
            return -1
        found = chunk.find(b"\n")
        if found >= 0:
            return position + found
        position += len(chunk)
    return -1


def _find_backward(f: BinaryIO, start: int, stop: int) -> int:
    position = stop
    while position > start:
        begin = max(start, position - _CHUNK_BYTES)
        f.seek(begin)
        chunk = f.read(position - begin)
        found = chunk.rfind(b"\n")
        if found >= 0:
            return begin + found
        position = begin
    return -1
