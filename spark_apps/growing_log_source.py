"""``photon_growing_log``: a PySpark streaming data source over a directory of growing logs.

Offsets are per-file byte offsets and the fingerprints of the files' heads,
``{"files": {"<name>": <offset>}, "heads": {"<name>": <fingerprint>}}``
(:mod:`photon.logs.reader`), kept by Spark in the query's checkpoint; a
restarted query resumes exactly after the last committed batch. Each batch's
end offsets fall just after a ``\\n`` (the planning is
:meth:`photon.logs.reader.GrowingLogReader.plan`), so a partial last line is
never read; new files are picked up as they appear, in
name order; rolled-over files are finished before later ones.

Admission control: ``maxBytesPerTrigger`` and ``maxFilesPerTrigger`` (Spark
4.2 read limits). A batch's file ranges are grouped into few partitions
(usually one: each task costs a Python worker round trip). Rows, one Arrow
record batch a file range: ``file``, ``offset``, ``raw`` (the line's bytes,
no ``\\n``), ``lost_bytes`` and ``report`` — 0 and ``""`` for a line; a row
reporting lost bytes has ``raw`` empty, ``offset`` where the loss starts,
``lost_bytes`` and ``report`` its quarantine reason: ``file_truncated`` for a
file that shrank below its saved offset (``offset`` its new size) or below a
planned end, ``file_deleted`` for a file deleted before its planned bytes
were read, ``torn_line`` for the last line of a file whose writer moved on to
a later file, with no ``\\n`` (``raw`` holds its bytes), ``file_replaced`` for a
file whose head changed (read again from 0; ``offset`` where the old one was
read to) and ``file_rotated`` for a known file under a new name (``raw`` its old
name; read on from ``offset``); ``file_deleted`` with 0 bytes for a file that
went after ``offset`` bytes of it were read. The apps quarantine these
(``spark_apps.streaming.to_lines``).

Photon's apps take a batch's rows without a Spark job: :func:`batch_offsets`
finds the batch's range in Spark's offset log and :func:`read_batch` reads
the same partitions in the driver, which then hands them to the join's Spark
tasks. A Spark read (``read`` on an executor, collected) carried the same
bytes through a Python worker, the JVM and back, at ~15 times the cost of
reading them (docs/join.md, "The apps").

A range is read from the file that had the planned head, under whatever name it
has by then: a log rotated (renamed ``x.log`` to ``x.log.1``, or copied there
and truncated) between a batch's plan or first try and its read or replay is
read where its bytes went, and the rows keep the planned name, so a replay
hands the joiner the very lines its first try did.

How it fails: a file deleted or shrunk after planning yields the complete
lines still there and a report row for the rest (never an error, so a replay
of the batch reads the same and does not wedge); its offsets drop out of, or
restart at its size in, the next plan. Other unreadable files fail the batch,
which Spark retries.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    ReadMaxFiles,
)
from pyspark.sql.types import StructType

from photon.events.records import QuarantineReason
from photon.logs.offset_log import logged_position
from photon.logs.reader import GrowingLogReader
from spark_apps.worker_heap import freeze_once

NAME = "photon_growing_log"

#: A position in the logs: ``{"files": {"<name>": <byte offset>}}``.
Offsets = dict[str, Any]


ARROW_SCHEMA = pa.schema(
    [
        pa.field("file", pa.string(), False),
        pa.field("offset", pa.int64(), False),
        pa.field("raw", pa.binary(), False),
        pa.field("lost_bytes", pa.int64(), False),
        pa.field("report", pa.string(), False),
    ]
)
SCHEMA = from_arrow_schema(ARROW_SCHEMA)


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


@dataclass
class FileRanges(InputPartition):
    """One task's share of a batch: file ranges, read one after another.

    Ranges are grouped into few partitions (up to :data:`PARTITION_BYTES` each)
    because every Spark task costs a Python worker round trip whatever it
    reads; a batch is a few MiB, so one task usually reads all of it.
    """

    ranges: list[FileRange]


#: The bytes one partition reads at most, unless a single range is larger.
PARTITION_BYTES = 16 << 20


class GrowingLogDataSource(DataSource):
    """Options: ``path`` (required), ``maxBytesPerTrigger``, ``maxFilesPerTrigger``."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> StructType:
        return SCHEMA

    def streamReader(self, schema: StructType) -> GrowingLogStreamReader:
        return GrowingLogStreamReader(self.options)


def _positive(options: Mapping[str, str], key: str) -> int | None:
    value = options.get(key)
    if value is None:
        return None
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number <= 0:
        raise ValueError(f"option {key} must be a positive integer, not {value!r}")
    return number


class GrowingLogStreamReader(DataSourceStreamReader):
    def __init__(self, options: Mapping[str, str]) -> None:
        path = options.get("path")
        if not path:
            raise ValueError(f"{NAME} needs a path option: the log directory")
        self.directory = str(path)
        self.max_bytes = _positive(options, "maxBytesPerTrigger")
        self.max_files = _positive(options, "maxFilesPerTrigger")

    def initialOffset(self) -> dict[str, Any]:
        return {"files": {}}

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.max_bytes is not None:
            return ReadMaxBytes(self.max_bytes)
        if self.max_files is not None:
            return ReadMaxFiles(self.max_files)
        return ReadAllAvailable()

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        max_bytes, max_files = self.max_bytes, self.max_files
        if isinstance(limit, ReadAllAvailable):
            max_bytes = max_files = None
        elif isinstance(limit, ReadMaxBytes):
            max_bytes = limit.max_bytes
        elif isinstance(limit, ReadMaxFiles):
            max_files = limit.max_files
        reader = GrowingLogReader(Path(self.directory))
        plan = reader.plan(
            start.get("files", {}),
            heads=start.get("heads", {}),
            max_bytes=max_bytes,
            max_files=max_files,
        )
        present = set(reader.files())
        return {
            "files": {name: o for name, o in plan.offsets.items() if name in present},
            "heads": {name: h for name, h in plan.heads.items() if name in present},
        }

    def reportLatestOffset(self) -> dict[str, Any]:
        """The end of every log file now: Spark shows it as the source's latest offset in
        the query's progress, beside the offsets it has read to (its lag, to Spark)."""
        directory = Path(self.directory)
        files: dict[str, int] = {}
        for name in GrowingLogReader(directory).files():
            try:
                files[name] = (directory / name).stat().st_size
            except FileNotFoundError:
                continue
        return {"files": files}

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[FileRanges]:
        groups: list[FileRanges] = []
        size = 0
        for part in file_ranges(self.directory, start, end):
            length = max(0, part.end - part.start)
            if not groups or size + length > PARTITION_BYTES:
                groups.append(FileRanges([]))
                size = 0
            groups[-1].ranges.append(part)
            size += length
        return groups

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        # One Arrow batch a range: Spark takes it whole, with no Python object a row.
        assert isinstance(partition, FileRanges)
        freeze_once("log reader")  # the worker's imports: out of each task's collection
        for part in partition.ranges:
            yield from _read_range(part)

    def commit(self, end: dict[str, Any]) -> None:
        pass


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


def batch_offsets(checkpoint: Path, batch_id: int) -> tuple[Offsets, Offsets] | None:
    """Batch ``batch_id``'s (start, end) offsets, from Spark's offset log in ``checkpoint``.

    Spark writes ``offsets/<n>`` before it runs batch ``n`` and runs a batch over
    the range from the previous batch's end offsets to its own (``offsets/<n-1>``;
    nothing before batch 0), on its first try and on a replay alike. Each file
    is read by :func:`photon.logs.offset_log.logged_position`. None when the log
    cannot be read so (another layout): read the batch through Spark.
    """
    try:
        end, end_heads = logged_position(checkpoint, batch_id)
        start, start_heads = logged_position(checkpoint, batch_id - 1) if batch_id > 0 else ({}, {})
    except (OSError, ValueError):
        return None
    return {"files": start, "heads": start_heads}, {"files": end, "heads": end_heads}


def read_batch(directory: Path, start: Offsets, end: Offsets) -> pa.Table:
    """The rows the source's partitions of (start, end] hold, read here rather than in
    Spark tasks: the same ranges and rows, without a Spark job to carry them."""
    reader = GrowingLogStreamReader({"path": str(directory)})
    batches = [
        batch
        for partition in reader.partitions(start, end)
        for part in partition.ranges
        for batch in _read_range(part)
    ]
    return pa.Table.from_batches(batches, schema=ARROW_SCHEMA)


def _read_range(part: FileRange) -> Iterator[pa.RecordBatch]:
    truncated = QuarantineReason.FILE_TRUNCATED.value
    if part.report:  # replaced, renamed or gone under the reader: said first, then read
        yield _rows(part.file, [part.report_offset], [part.renamed_from.encode()], 0, part.report)
        if part.report == QuarantineReason.FILE_DELETED.value:
            return
    if part.end < part.start:  # the file shrank below its saved offset: report, read nothing
        yield _rows(part.file, [part.end], [b""], part.start - part.end, truncated)
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
        yield _rows(part.file, [part.start], [b""], part.end - part.start, deleted)
        return
    yield _rows(part.file, got.offsets, got.raws, 0, "")
    if got.torn:  # a rolled-over file's torn last line: quarantined with its bytes
        torn = QuarantineReason.TORN_LINE.value
        yield _rows(part.file, [got.stop], [got.torn], len(got.torn), torn)
    elif got.stop < part.end:  # shrank since the plan: what is left, then the loss
        yield _rows(part.file, [got.stop], [b""], part.end - got.stop, truncated)


def _rows(
    file: str, offsets: list[int], raws: list[bytes], lost_bytes: int, report: str
) -> pa.RecordBatch:
    count = len(raws)
    return pa.RecordBatch.from_arrays(
        [
            pa.array([file] * count, pa.string()),
            pa.array(offsets, pa.int64()),
            pa.array(raws, pa.binary()),
            pa.array([lost_bytes] * count, pa.int64()),
            pa.array([report] * count, pa.string()),
        ],
        schema=ARROW_SCHEMA,
    )
