"""``photon_growing_log``: a PySpark streaming data source over a directory of growing logs.

Offsets are per-file byte offsets, ``{"files": {"<name>": <offset>}}``, kept
by Spark in the query's checkpoint; a restarted query resumes exactly after
the last committed batch. Each batch's end offsets fall just after a ``\\n``
(the planning is :meth:`photon.logs.reader.GrowingLogReader.plan`), so a
partial last line is never read; new files are picked up as they appear, in
name order; rolled-over files are finished before later ones.

Admission control: ``maxBytesPerTrigger`` and ``maxFilesPerTrigger`` (Spark
4.2 read limits). Rows: ``file``, ``offset``, ``raw`` (the line's bytes, no
``\\n``) and ``lost_bytes`` — 0 for a line; for a file that shrank below its
saved offset, one row with ``raw`` empty, ``offset`` its new size and the
number of bytes lost (the apps quarantine it as ``file_truncated``).

How it fails: a file deleted after planning reads as empty (its offsets drop
out of the next plan); unreadable files fail the batch, which Spark retries.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    ReadMaxFiles,
)
from pyspark.sql.types import BinaryType, LongType, StringType, StructField, StructType

from photon.logs.reader import GrowingLogReader

NAME = "photon_growing_log"

SCHEMA = StructType(
    [
        StructField("file", StringType(), False),
        StructField("offset", LongType(), False),
        StructField("raw", BinaryType(), False),
        StructField("lost_bytes", LongType(), False),
    ]
)


@dataclass
class FileRange(InputPartition):
    """Bytes ``[start, end)`` of one file, or (``end < start``) a truncation report."""

    directory: str
    file: str
    start: int
    end: int


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
        plan = reader.plan(start.get("files", {}), max_bytes=max_bytes, max_files=max_files)
        present = set(reader.files())
        return {"files": {name: o for name, o in plan.offsets.items() if name in present}}

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[FileRange]:
        begin = start.get("files", {})
        ranges = []
        for name, stop in sorted(end.get("files", {}).items()):
            first = begin.get(name, 0)
            if stop != first:
                ranges.append(FileRange(self.directory, name, first, stop))
        return ranges

    def read(self, partition: InputPartition) -> Iterator[tuple[str, int, bytes, int]]:
        assert isinstance(partition, FileRange)
        if partition.end < partition.start:  # the file shrank: report, read nothing
            yield (partition.file, partition.end, b"", partition.start - partition.end)
            return
        reader = GrowingLogReader(Path(partition.directory))
        try:
            lines = reader.read_range(partition.file, partition.start, partition.end)
        except FileNotFoundError:
            return
        for line in lines:
            yield (line.file, line.offset, line.raw, 0)

    def commit(self, end: dict[str, Any]) -> None:
        pass
