"""A streaming batch's byte ranges of the logs, and how each is read.

A batch of the log stream is a range of Spark's offsets (per-file byte
offsets and head fingerprints: :mod:`photon.logs.reader`). :func:`file_ranges`
turns a (start, end) pair into the file ranges the batch reads, as the plan
that made ``end`` decided, and :func:`read_range` reads one of them. Both the
streaming source (``spark_apps.growing_log_source``, in Spark tasks or the
driver) and the joiner's Spark tasks (each reads its batch's ranges itself:
docs/join.md, "The join on executors") read a range through here, so they
read the same lines and report the same losses.

A range is read from the file that had the planned head, under whatever name
it has by then: a log rotated (renamed ``x.log`` to ``x.log.1``, or copied
there and truncated) between a batch's plan or first try and its read or
replay is read where its bytes went, and the lines keep the planned name, so a
replay reads the very lines its first try did.

How it fails: a file deleted or shrunk after planning yields the complete lines
still there and a report of the rest (:class:`RangeRows` with ``lost_bytes``),
never an error, so a replay of the batch reads the same and does not wedge.
Other unreadable files raise ``OSError``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from photon.events.records import QuarantineReason, QuarantineRecord
from photon.logs.reader import GrowingLogReader, replaced, rotated, torn_line, went

#: A position in the logs: ``{"files": {"<name>": <offset>}, "heads": {...}}``.
Offsets = dict[str, Any]


@dataclass
class FileRange:
    """Bytes ``[start, end)`` of one file, or (``end < start``) a truncation report.

    ``report`` (``file_replaced`` / ``file_rotated``) comes first as a row of its
    own at ``report_offset``; ``renamed_from`` is a rotated file's old name.
    """

    directory: str
    file: str
    start: int
    end: int
    report: str = ""
    report_offset: int = 0
    renamed_from: str = ""
    #: The fingerprint of the file's head when the range was planned ("": it had fewer
    #: bytes): the range is read from the file with that head, under whatever name it
    #: has now (rotated between the plan, or a first try, and this read).
    head: str = ""

    @property
    def planned_bytes(self) -> int:
        return max(0, self.end - self.start)


@dataclass(frozen=True, slots=True)
class RangeRows:
    """Rows of a range, as columns: complete lines (``lost_bytes`` 0, ``report`` ""),
    or one report row of what happened to the file under the reader."""

    file: str
    offsets: list[int]
    raws: list[bytes]
    lost_bytes: int = 0
    report: str = ""

    @property
    def reports(self) -> bool:
        """Whether these are report rows, not lines."""
        return bool(self.lost_bytes or self.report)

    def report_records(self) -> list[QuarantineRecord]:
        """The quarantine records of report rows (:func:`report_record`)."""
        return [
            report_record(self.file, offset, raw, self.lost_bytes, self.report)
            for offset, raw in zip(self.offsets, self.raws, strict=True)
        ]


def file_ranges(directory: str, start: Offsets, end: Offsets) -> list[FileRange]:
    """What a batch from ``start`` to ``end`` reads, file by file, as the plan that
    made ``end`` decided (:meth:`photon.logs.reader.GrowingLogReader.plan`): a file
    whose head changed is read from 0, a new name holding a known file's head
    (renamed) from that file's offset."""
    begin: dict[str, int] = start.get("files", {})
    begin_heads: dict[str, str] = start.get("heads", {})
    end_heads: dict[str, str] = end.get("heads", {})
    names_by_head = {head: name for name, head in begin_heads.items()}
    moved_to = {  # old name -> the new name its content went to
        names_by_head[head]: name
        for name, head in end_heads.items()
        if name not in begin
        and head in names_by_head
        and end_heads.get(names_by_head[head]) != head
    }
    renamed = {new: old for old, new in moved_to.items()}
    ranges: list[FileRange] = []
    for name, stop in sorted(end.get("files", {}).items()):
        first = begin.get(name, 0)
        part = FileRange(directory, name, first, stop, head=end_heads.get(name, ""))
        old_head = begin_heads.get(name)
        if name in begin and old_head is not None and end_heads.get(name) != old_head:
            part.start = 0  # a new file under this name
            if name not in moved_to:  # else its old content is read on under its new name
                part.report, part.report_offset = QuarantineReason.FILE_REPLACED.value, first
        elif name in renamed:
            part.start = part.report_offset = begin.get(renamed[name], 0)
            part.report, part.renamed_from = QuarantineReason.FILE_ROTATED.value, renamed[name]
        if part.end == part.start and not part.report:
            continue
        ranges.append(part)
    for name, offset in sorted(begin.items()):
        if name not in end.get("files", {}) and name not in moved_to:  # went: said once
            deleted = QuarantineReason.FILE_DELETED.value
            ranges.append(FileRange(directory, name, offset, offset, deleted, offset))
    return ranges


def read_range(part: FileRange) -> Iterator[RangeRows]:
    """The rows of one planned range: its report first (if any), its lines, then what
    was lost of it (deleted, shrunk) or its torn last line."""
    truncated = QuarantineReason.FILE_TRUNCATED.value
    if part.report:  # replaced, renamed or gone under the reader: said first, then read
        yield RangeRows(
            part.file, [part.report_offset], [part.renamed_from.encode()], 0, part.report
        )
        if part.report == QuarantineReason.FILE_DELETED.value:
            return
    if part.end < part.start:  # the file shrank below its saved offset: report, read nothing
        yield RangeRows(part.file, [part.end], [b""], part.start - part.end, truncated)
        return
    reader = GrowingLogReader(Path(part.directory))
    # The file by its identity, not its name: rotated since the plan (renamed, or copied
    # and truncated), its bytes are where its head went; the rows keep the planned name,
    # so a replay reads the very lines its first try read.
    where = reader.locate(part.file, part.head) if part.head else part.file
    try:
        if where is None:
            raise FileNotFoundError(part.file)
        got = reader.read_range_available(where, part.start, part.end)
    except FileNotFoundError:  # deleted since the plan: its planned bytes are lost
        deleted = QuarantineReason.FILE_DELETED.value
        yield RangeRows(part.file, [part.start], [b""], part.end - part.start, deleted)
        return
    yield RangeRows(part.file, got.offsets, got.raws)
    if got.torn:  # a rolled-over file's torn last line: quarantined with its bytes
        torn = QuarantineReason.TORN_LINE.value
        yield RangeRows(part.file, [got.stop], [got.torn], len(got.torn), torn)
    elif got.stop < part.end:  # shrank since the plan: what is left, then the loss
        yield RangeRows(part.file, [got.stop], [b""], part.end - got.stop, truncated)


def report_record(
    file: str, offset: int, raw: bytes, lost_bytes: int, report: str
) -> QuarantineRecord:
    """The quarantine record of a report row (``lost_bytes`` or ``report`` set): a file
    truncated, shrunk, deleted, replaced or renamed under the reader, or a torn line."""
    reason = QuarantineReason(report or QuarantineReason.FILE_TRUNCATED)
    if reason is QuarantineReason.TORN_LINE:
        return torn_line(file, offset, raw)
    if reason is QuarantineReason.FILE_REPLACED:
        return replaced(file, offset)
    if reason is QuarantineReason.FILE_ROTATED:
        return rotated(file, raw.decode("utf-8", "replace"), offset)
    if reason is QuarantineReason.FILE_DELETED and not lost_bytes:
        return went(file, offset)
    return QuarantineRecord(
        file=file,
        offset=offset,
        reason=reason,
        detail=f"{reason.value.replace('_', ' ')}: {lost_bytes} bytes from "
        f"{offset} were lost before they were read",
    )
