"""The streaming source's planning and reading, called as Spark calls them (no JVM here)."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxBytes, ReadMaxFiles

from spark_apps.growing_log_source import (
    ARROW_SCHEMA,
    FileRange,
    FileRanges,
    GrowingLogStreamReader,
)

pytestmark = pytest.mark.unit


def reader(directory: Path, **options: str) -> GrowingLogStreamReader:
    return GrowingLogStreamReader({"path": str(directory), **options})


Offsets = dict[str, dict[str, int]]


def read_all(
    source: GrowingLogStreamReader, start: Offsets, end: Offsets
) -> list[tuple[str, int, bytes, int]]:
    """The rows Spark gets, as tuples, from the Arrow batches the source yields."""
    rows = []
    for part in source.partitions(start, end):
        for batch in source.read(part):
            assert batch.schema == ARROW_SCHEMA
            rows += [tuple(r.values()) for r in batch.to_pylist()]
    return rows


def test_complete_lines_only_with_their_offsets(tmp_path: Path) -> None:
    (tmp_path / "a.000000.log").write_bytes(b"one\ntwo\nthr")
    source = reader(tmp_path)
    start = source.initialOffset()
    end = source.latestOffset(start, ReadAllAvailable())
    assert end == {"files": {"a.000000.log": 8}}
    assert read_all(source, start, end) == [
        ("a.000000.log", 0, b"one", 0),
        ("a.000000.log", 4, b"two", 0),
    ]
    with (tmp_path / "a.000000.log").open("ab") as f:
        f.write(b"ee\n")
    (tmp_path / "b.000001.log").write_bytes(b"four\n")
    later = source.latestOffset(end, ReadAllAvailable())
    assert read_all(source, end, later) == [
        ("a.000000.log", 8, b"three", 0),
        ("b.000001.log", 0, b"four", 0),
    ]
    assert source.latestOffset(later, ReadAllAvailable()) == later  # nothing new
    assert source.partitions(later, later) == []


def test_read_limits_bound_a_batch_and_the_engine_can_lift_them(tmp_path: Path) -> None:
    for name in ("a", "b", "c"):
        (tmp_path / f"{name}.000000.log").write_bytes(b"0123456789\n" * 10)
    source = reader(tmp_path, maxBytesPerTrigger="25", maxFilesPerTrigger="2")
    assert source.getDefaultReadLimit() == ReadMaxBytes(25)
    start = source.initialOffset()
    small = source.latestOffset(start, source.getDefaultReadLimit())
    assert len(read_all(source, start, small)) == 3
    files = source.latestOffset(start, ReadMaxFiles(1))
    assert files == {"files": {"a.000000.log": 33}}  # one file, the byte option still holds
    everything = source.latestOffset(start, ReadAllAvailable())
    assert len(read_all(source, start, everything)) == 30


def test_a_truncated_file_yields_one_report_and_deleted_files_drop_out(tmp_path: Path) -> None:
    path = tmp_path / "a.000000.log"
    path.write_bytes(b"first line\nsecond line\n")
    (tmp_path / "b.000000.log").write_bytes(b"x\n")
    source = reader(tmp_path)
    start = source.latestOffset(source.initialOffset(), ReadAllAvailable())
    path.write_bytes(b"new\n")  # replaced by a shorter file
    (tmp_path / "b.000000.log").unlink()
    end = source.latestOffset(start, ReadAllAvailable())
    assert end == {"files": {"a.000000.log": 4}}
    rows = read_all(source, start, end)
    assert rows == [("a.000000.log", 4, b"", 19)]


@pytest.mark.parametrize("options", [{}, {"path": ""}, {"path": "/x", "maxBytesPerTrigger": "0"}])
def test_bad_options_are_refused(options: dict[str, str]) -> None:
    with pytest.raises(ValueError, match=r"path|positive"):
        GrowingLogStreamReader(options)


def test_partitions_are_picklable_descriptions_of_byte_ranges() -> None:
    import pickle

    part = FileRanges([FileRange("/logs", "a.log", 0, 10), FileRange("/logs", "b.log", 5, 7)])
    assert pickle.loads(pickle.dumps(part)) == part  # noqa: S301 (our own bytes)


def test_a_batch_is_one_task_unless_it_is_large(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("a", "b", "c"):
        (tmp_path / f"{name}.000000.log").write_bytes(b"0123456789\n" * 10)
    source = reader(tmp_path)
    start = source.initialOffset()
    end = source.latestOffset(start, ReadAllAvailable())
    assert [len(p.ranges) for p in source.partitions(start, end)] == [3]
    monkeypatch.setattr("spark_apps.growing_log_source.PARTITION_BYTES", 150)
    assert [len(p.ranges) for p in source.partitions(start, end)] == [1, 1, 1]
    assert len(read_all(source, start, end)) == 30
