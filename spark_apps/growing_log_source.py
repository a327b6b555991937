"""``photon_growing_log``: a PySpark streaming data source over a directory of growing logs.

Offsets are per-file byte offsets and the fingerprints of the files' heads,
``{"files": {"<name>": <offset>}, "heads": {"<name>": <fingerprint>}}``
(:mod:`photon.logs.reader`), kept by Spark in the query's checkpoint; a
restarted query resumes exactly after the last committed batch. Each batch's
end offsets fall just after a ``\\n`` (the planning is
:meth:`photon.logs.reader.GrowingLogReader.plan`), so a partial last line is
never read; new files are picked up as they appear, in
name order; rolled-over files are finished before later ones.

Admission control: ``maxBytesPerTrigger`` and ``maxFilesPerTrigger`` (Spark 4.2
read limits). A joiner's source is also paced to its DC's query reader
(:mod:`photon.join.pacing`): options ``readerStateDir`` and
``readerQueriesDir`` (both, or neither), ``readerBehindBytes``,
``readerLeadUs`` and ``maxAheadUs``. A batch's file ranges are grouped into few
partitions (usually one: each task costs a Python worker round trip). Rows, one
Arrow record batch a file range: ``file``, ``offset``, ``raw`` (the line's
bytes, no ``\\n``), ``lost_bytes`` and ``report`` — 0 and ``""`` for a line; a
row reporting lost bytes has ``raw`` empty, ``offset`` where the loss starts,
``lost_bytes`` and ``report`` its quarantine reason: ``file_truncated`` for a
file that shrank below its saved offset (``offset`` its new size) or below a
planned end, ``file_deleted`` for a file deleted before its planned bytes were
read, ``torn_line`` for the last line of a file whose writer moved on to a
later file, with no ``\\n`` (``raw`` holds its bytes), ``file_replaced`` for a
file whose head changed (read again from 0; ``offset`` where the old one was
read to) and ``file_rotated`` for a known file under a new name (``raw`` its
old name; read on from ``offset``); ``file_deleted`` with 0 bytes for a file
that went after ``offset`` bytes of it were read. The apps quarantine these
(``spark_apps.streaming.to_lines``).

Photon's apps take a batch's rows without a Spark job: :func:`batch_offsets`
finds the batch's range in Spark's offset log; the query reader's driver reads
it (:func:`read_batch`), and the joiner hands its file ranges to the join's
Spark tasks, each of which reads them itself. A Spark read (``read`` on an
executor, collected) carried the same bytes through a Python worker, the JVM
and back, at ~15 times the cost of reading them (docs/join.md, "The apps").

How a batch's ranges are planned and read (rotated files followed by their
head, losses reported, never raised) is :mod:`photon.logs.ranges`, which the
joiner's Spark tasks read through too.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    ReadMaxFiles,
)
from pyspark.sql.types import BinaryType, LongType, StringType, StructField, StructType

from photon.join.pacing import Pacer, Pacing
from photon.logs.offset_log import logged_position
from photon.logs.ranges import FileRange, Offsets, file_ranges, read_range
from photon.logs.reader import GrowingLogReader
from spark_apps.worker_heap import freeze_once

if TYPE_CHECKING:
    import pyarrow as pa

NAME = "photon_growing_log"

__all__ = [
    "NAME",
    "SCHEMA",
    "FileRange",
    "FileRanges",
    "GrowingLogDataSource",
    "GrowingLogStreamReader",
    "Offsets",
    "arrow_schema",
    "batch_offsets",
    "file_ranges",
    "read_batch",
]

#: The rows' schema, as Spark sees it; :func:`arrow_schema` is made from it. Spark's
#: processes that create the source only ask for this, and importing pyarrow (with
#: numpy) for an Arrow schema to convert was a third of what they imported for it.
SCHEMA = StructType(
    [
        StructField("file", StringType(), False),
        StructField("offset", LongType(), False),
        StructField("raw", BinaryType(), False),
        StructField("lost_bytes", LongType(), False),
        StructField("report", StringType(), False),
    ]
)


@cache
def arrow_schema() -> pa.Schema:
    """:data:`SCHEMA` in Arrow, made from it on first use (pyarrow imported then)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(SCHEMA)


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
    """Options: ``path`` (required), ``maxBytesPerTrigger``, ``maxFilesPerTrigger``; a
    joiner's pacing (the module docstring)."""

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
        pacing = Pacing.from_options(options)
        self.pacer = None if pacing is None else Pacer(pacing)

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
        pacer = self.pacer
        mark = pacer.reader_mark() if pacer is not None and pacer.pacing.wait_ms else None
        limit_us = None if pacer is None else pacer.limit_us()
        latest = self._planned(start, max_bytes, max_files, limit_us)
        if pacer is None or mark is None or limit_us is None:  # not paced, or not to wait
            return latest
        # Paced and nothing new (Spark would sleep to its next trigger), or the reader
        # is in the last batch of its backlog (planned now, the batch would leave a
        # tail): within this trigger the reader committed, so plan what it lets
        # through (photon.join.pacing).
        if (_same_position(latest, start) or pacer.reader_finishing()) and pacer.moved(
            mark, pacer.pacing.wait_ms / 1000
        ):
            latest = self._planned(start, max_bytes, max_files, pacer.limit_us())
        return latest

    def _planned(
        self,
        start: dict[str, Any],
        max_bytes: int | None,
        max_files: int | None,
        limit_us: int | None,
    ) -> dict[str, Any]:
        directory = Path(self.directory)
        reader = GrowingLogReader(directory)
        pacer = self.pacer
        plan = reader.plan(
            start.get("files", {}),
            heads=start.get("heads", {}),
            max_bytes=max_bytes,
            max_files=max_files,
            limit_end=None
            if pacer is None or limit_us is None
            else lambda name, offset, end: pacer.cut(directory / name, offset, end, limit_us),
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


def _same_position(latest: dict[str, Any], start: dict[str, Any]) -> bool:
    """Whether a planned end is where the batch before ended: Spark runs no batch."""
    files, heads = start.get("files", {}), start.get("heads", {})
    return bool(latest["files"] == files and latest["heads"] == heads)


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
    import pyarrow as pa

    return pa.Table.from_batches(batches, schema=arrow_schema())


def _read_range(part: FileRange) -> Iterator[pa.RecordBatch]:
    for rows in read_range(part):
        yield _rows(rows.file, rows.offsets, rows.raws, rows.lost_bytes, rows.report)


def _rows(
    file: str, offsets: list[int], raws: list[bytes], lost_bytes: int, report: str
) -> pa.RecordBatch:
    import pyarrow as pa

    count = len(raws)
    return pa.RecordBatch.from_arrays(
        [
            pa.array([file] * count, pa.string()),
            pa.array(offsets, pa.int64()),
            pa.array(raws, pa.binary()),
            pa.array([lost_bytes] * count, pa.int64()),
            pa.array([report] * count, pa.string()),
        ],
        schema=arrow_schema(),
    )
