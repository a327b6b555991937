"""The streaming source's planning and reading, called as Spark calls them (no JVM here)."""

from __future__ import annotations

import json
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxBytes, ReadMaxFiles

from photon.join.pacing import Pacing
from spark_apps.growing_log_source import (
    SCHEMA,
    FileRange,
    FileRanges,
    GrowingLogStreamReader,
    arrow_schema,
    batch_offsets,
    read_batch,
)
from spark_apps.streaming import read_batch_lines, to_lines

pytestmark = pytest.mark.unit

ARROW = arrow_schema()


def test_spark_s_schema_of_the_rows_is_the_arrow_one() -> None:
    from pyspark.sql.pandas.types import from_arrow_schema

    assert from_arrow_schema(ARROW) == SCHEMA


def reader(directory: Path, **options: str) -> GrowingLogStreamReader:
    return GrowingLogStreamReader({"path": str(directory), **options})


Offsets = dict[str, dict[str, int]]


def read_all(
    source: GrowingLogStreamReader, start: Offsets, end: Offsets
) -> list[tuple[str, int, bytes, int, str]]:
    """The rows Spark gets, as tuples, from the Arrow batches the source yields."""
    rows = []
    for part in source.partitions(start, end):
        for batch in source.read(part):
            assert batch.schema == ARROW
            rows += [tuple(r.values()) for r in batch.to_pylist()]
    return rows


def assert_read_straight_into_lines(directory: Path, start: Offsets, end: Offsets) -> None:
    """The query reader's driver reads a batch straight into lines and reports: the
    same ones as through the Arrow table Spark's read and ``read_batch`` give."""
    lines, reports = read_batch_lines(directory, start, end)
    assert (lines, reports) == to_lines(read_batch(directory, start, end))
    assert (lines, reports) == to_lines(pa.Table.from_pylist(
        [dict(zip(ARROW.names, row, strict=True))
         for row in read_all(reader(directory), start, end)],
        schema=ARROW,
    ))  # fmt: skip


def test_complete_lines_only_with_their_offsets(tmp_path: Path) -> None:
    (tmp_path / "a.000000.log").write_bytes(b"one\ntwo\nthr")
    source = reader(tmp_path)
    start = source.initialOffset()
    end = source.latestOffset(start, ReadAllAvailable())
    assert end["files"] == {"a.000000.log": 8}
    assert read_all(source, start, end) == [
        ("a.000000.log", 0, b"one", 0, ""),
        ("a.000000.log", 4, b"two", 0, ""),
    ]
    with (tmp_path / "a.000000.log").open("ab") as f:
        f.write(b"ee\n")
    (tmp_path / "b.000001.log").write_bytes(b"four\n")
    later = source.latestOffset(end, ReadAllAvailable())
    assert read_all(source, end, later) == [
        ("a.000000.log", 8, b"three", 0, ""),
        ("b.000001.log", 0, b"four", 0, ""),
    ]
    assert_read_straight_into_lines(tmp_path, start, later)
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
    assert files["files"] == {"a.000000.log": 33}  # one file, the byte option still holds
    everything = source.latestOffset(start, ReadAllAvailable())
    assert len(read_all(source, start, everything)) == 30


def test_a_truncated_file_yields_one_report_and_a_deleted_one_is_said_once(tmp_path: Path) -> None:
    path = tmp_path / "a.000000.log"
    path.write_bytes(b"first line\nsecond line\n")
    (tmp_path / "b.000000.log").write_bytes(b"x\n")
    source = reader(tmp_path)
    start = source.latestOffset(source.initialOffset(), ReadAllAvailable())
    path.write_bytes(b"new\n")  # replaced by a shorter file
    (tmp_path / "b.000000.log").unlink()
    end = source.latestOffset(start, ReadAllAvailable())
    assert end["files"] == {"a.000000.log": 4}
    rows = read_all(source, start, end)
    assert rows == [
        ("a.000000.log", 4, b"", 19, "file_truncated"),
        ("b.000000.log", 2, b"", 0, "file_deleted"),  # went after 2 bytes were read
    ]
    _, reports = to_lines(pa.Table.from_pylist(
        [dict(zip(ARROW.names, row, strict=True)) for row in rows], schema=ARROW
    ))  # fmt: skip
    assert "went after 2 bytes" in reports[1].detail
    assert_read_straight_into_lines(tmp_path, start, end)
    later = source.latestOffset(end, ReadAllAvailable())
    assert read_all(source, end, later) == []  # once


def test_a_file_deleted_after_planning_is_reported_and_its_batch_replays_the_same(
    tmp_path: Path,
) -> None:
    (tmp_path / "a.000000.log").write_bytes(b"one\ntwo\n")
    (tmp_path / "b.000000.log").write_bytes(b"three\n")
    source = reader(tmp_path)
    start = source.initialOffset()
    end = source.latestOffset(start, ReadAllAvailable())
    (tmp_path / "a.000000.log").unlink()  # between Spark's plan and its read
    rows = read_all(source, start, end)
    assert rows == [
        ("a.000000.log", 0, b"", 8, "file_deleted"),
        ("b.000000.log", 0, b"three", 0, ""),
    ]
    assert read_all(source, start, end) == rows  # a replay: the same, no error
    assert source.latestOffset(end, ReadAllAvailable())["files"] == {"b.000000.log": 6}
    lines, reports = to_lines(pa.Table.from_pylist(
        [dict(zip(ARROW.names, row, strict=True)) for row in rows], schema=ARROW
    ))  # fmt: skip
    assert [line.raw for line in lines] == [b"three"]
    [report] = reports
    assert (report.file, report.offset, report.reason) == ("a.000000.log", 0, "file_deleted")
    assert "8 bytes" in report.detail
    assert_read_straight_into_lines(tmp_path, start, end)


def test_a_file_that_shrinks_after_planning_gives_what_is_left_and_reports_the_rest(
    tmp_path: Path,
) -> None:
    path = tmp_path / "a.000000.log"
    path.write_bytes(b"one\ntwo\nthree\n")
    source = reader(tmp_path)
    start = source.initialOffset()
    end = source.latestOffset(start, ReadAllAvailable())
    path.write_bytes(b"one\ntw")  # cut mid-line between the plan and the read
    rows = read_all(source, start, end)
    assert rows == [
        ("a.000000.log", 0, b"one", 0, ""),
        ("a.000000.log", 4, b"", 10, "file_truncated"),
    ]
    assert read_all(source, start, end) == rows  # a replay does not wedge on it
    assert_read_straight_into_lines(tmp_path, start, end)
    path.write_bytes(b"")
    assert read_all(source, start, end) == [("a.000000.log", 0, b"", 14, "file_truncated")]


def test_a_torn_last_line_of_a_rolled_over_file_is_a_row_of_its_own(tmp_path: Path) -> None:
    (tmp_path / "w.000000.log").write_bytes(b"one\ntw")
    source = reader(tmp_path)
    start = source.latestOffset(source.initialOffset(), ReadAllAvailable())
    assert start["files"] == {"w.000000.log": 4}  # its writer may still finish it
    (tmp_path / "w.000001.log").write_bytes(b"three\n")
    end = source.latestOffset(start, ReadAllAvailable())
    assert end["files"] == {"w.000000.log": 6, "w.000001.log": 6}
    rows = read_all(source, start, end)
    assert rows == [
        ("w.000000.log", 4, b"tw", 2, "torn_line"),
        ("w.000001.log", 0, b"three", 0, ""),
    ]
    lines, [torn] = to_lines(pa.Table.from_pylist(
        [dict(zip(ARROW.names, row, strict=True)) for row in rows], schema=ARROW
    ))  # fmt: skip
    assert [line.raw for line in lines] == [b"three"]
    assert (torn.reason, torn.raw, torn.offset) == ("torn_line", b"tw", 4)
    assert_read_straight_into_lines(tmp_path, start, end)


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


def log_offsets(
    checkpoint: Path,
    batch_id: int,
    files: dict[str, int],
    sources: int = 1,
    heads: dict[str, str] | None = None,
) -> None:
    """An entry of Spark's offset log, as Spark 4 writes it before it runs the batch."""
    (checkpoint / "offsets").mkdir(parents=True, exist_ok=True)
    meta = '{"batchWatermarkMs":0,"batchTimestampMs":1795594296501,"conf":{}}'
    source = json.dumps({"files": files} if heads is None else {"files": files, "heads": heads})
    text = "\n".join(["v1", meta, *[source] * sources])
    (checkpoint / "offsets" / str(batch_id)).write_text(text)


def test_a_batch_is_read_over_the_range_spark_logged_for_it(tmp_path: Path) -> None:
    logs, checkpoint = tmp_path / "logs", tmp_path / "checkpoint"
    logs.mkdir()
    (logs / "a.000000.log").write_bytes(b"one\ntwo\nthree\n")
    (logs / "b.000000.log").write_bytes(b"four\n")
    log_offsets(checkpoint, 0, {"a.000000.log": 4})
    log_offsets(checkpoint, 1, {"a.000000.log": 14, "b.000000.log": 5})
    first = batch_offsets(checkpoint, 0)
    assert first == ({"files": {}, "heads": {}}, {"files": {"a.000000.log": 4}, "heads": {}})
    second = batch_offsets(checkpoint, 1)
    assert second is not None
    rows = read_batch(logs, *second).to_pylist()
    assert [(r["file"], r["offset"], r["raw"]) for r in rows] == [
        ("a.000000.log", 4, b"two"),
        ("a.000000.log", 8, b"three"),
        ("b.000000.log", 0, b"four"),
    ]
    assert rows == [  # what Spark's own read of the same range gives
        dict(zip(("file", "offset", "raw", "lost_bytes", "report"), row, strict=True))
        for row in read_all(reader(logs), *second)
    ]


def test_an_offset_log_that_does_not_read_as_one_source_reads_as_none(tmp_path: Path) -> None:
    assert batch_offsets(tmp_path, 0) is None  # not written
    log_offsets(tmp_path, 0, {"a.000000.log": 4})
    log_offsets(tmp_path, 1, {"a.000000.log": 8}, sources=2)
    assert batch_offsets(tmp_path, 1) is None
    (tmp_path / "offsets" / "2").write_text("v2\n{}\n{}")
    assert batch_offsets(tmp_path, 2) is None
    log_offsets(tmp_path, 3, {"a.000000.log": 12})
    assert batch_offsets(tmp_path, 3) is None  # its start, batch 2's end, does not read


def _lines(*words: str) -> bytes:
    """Log lines long enough that one covers a file's head."""
    return b"".join(f'{{"click_id": "{w}", "pad": "{"x" * 60}"}}\n'.encode() for w in words)


def _batch_through_offset_log(
    tmp_path: Path, logs: Path, start: dict[str, Any], end: dict[str, Any]
) -> list[tuple[str, int, bytes, int, str]]:
    """The driver's read of the batch (start, end] from an offset log Spark would write."""
    checkpoint = tmp_path / "checkpoint"
    shutil.rmtree(checkpoint, ignore_errors=True)
    log_offsets(checkpoint, 0, start["files"], heads=start["heads"])
    log_offsets(checkpoint, 1, end["files"], heads=end["heads"])
    offsets = batch_offsets(checkpoint, 1)
    assert offsets is not None
    return [tuple(r.values()) for r in read_batch(logs, *offsets).to_pylist()]


def test_a_file_replaced_past_its_offset_is_read_from_its_start_after_a_report_row(
    tmp_path: Path,
) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    path = logs / "a.000000.log"
    path.write_bytes(_lines("1", "2"))
    source = reader(logs)
    start = source.latestOffset(source.initialOffset(), ReadAllAvailable())
    assert set(start["heads"]) == {"a.000000.log"}
    old = start["files"]["a.000000.log"]
    path.write_bytes(_lines("3", "4", "5"))  # truncated, then regrown past the offset

    end = source.latestOffset(start, ReadAllAvailable())
    rows = read_all(source, start, end)

    assert rows[0] == ("a.000000.log", old, b"", 0, "file_replaced")
    assert [r[2] for r in rows[1:]] == _lines("3", "4", "5").splitlines() and rows[1][1] == 0
    assert _batch_through_offset_log(tmp_path, logs, start, end) == rows
    assert_read_straight_into_lines(logs, start, end)
    lines, [report] = to_lines(pa.Table.from_pylist(
        [dict(zip(ARROW.names, row, strict=True)) for row in rows], schema=ARROW
    ))  # fmt: skip
    assert len(lines) == 3 and (report.reason, report.offset) == ("file_replaced", old)
    assert read_all(source, end, source.latestOffset(end, ReadAllAvailable())) == []


def test_a_rotated_file_is_read_on_from_its_offset_under_its_new_name(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    path = logs / "a.log"
    path.write_bytes(_lines("1", "2"))
    source = reader(logs)
    start = source.latestOffset(source.initialOffset(), ReadAllAvailable())
    old = start["files"]["a.log"]
    with path.open("ab") as f:
        f.write(_lines("3"))
    path.rename(logs / "a-1.log")
    path.write_bytes(_lines("4"))  # the writer's new file, under the old name

    end = source.latestOffset(start, ReadAllAvailable())
    rows = read_all(source, start, end)

    assert rows == [
        ("a-1.log", old, b"a.log", 0, "file_rotated"),
        ("a-1.log", old, _lines("3").rstrip(b"\n"), 0, ""),
        ("a.log", 0, _lines("4").rstrip(b"\n"), 0, ""),
    ]
    assert _batch_through_offset_log(tmp_path, logs, start, end) == rows
    assert_read_straight_into_lines(logs, start, end)
    _, [report] = to_lines(pa.Table.from_pylist(
        [dict(zip(ARROW.names, row, strict=True)) for row in rows], schema=ARROW
    ))  # fmt: skip
    assert report.reason == "file_rotated" and "a.log was renamed a-1.log" in report.detail
    assert read_all(source, end, source.latestOffset(end, ReadAllAvailable())) == []


def test_the_latest_offset_reported_to_spark_is_every_file_to_its_end(tmp_path: Path) -> None:
    (tmp_path / "a.000000.log").write_bytes(b"one\ntwo\npart")
    (tmp_path / "b.000000.log").write_bytes(b"three\n")
    (tmp_path / "notes.txt").write_bytes(b"not a log\n")
    assert reader(tmp_path).reportLatestOffset() == {
        "files": {"a.000000.log": 12, "b.000000.log": 6}
    }


T0_US, SECOND_US = 1_790_000_000_000_000, 1_000_000


def paced_clicks(
    tmp_path: Path, click_s: list[int], progress_s: int, wait_ms: int = 0
) -> tuple[GrowingLogStreamReader, Path, list[bytes]]:
    """A joiner's source paced to a reader with a backlog (10,000 bytes of queries, none
    committed; ``behind_bytes`` 1,000, a 5 s lead): clicks ``click_s`` seconds after T0,
    the reader's progress ``progress_s``. The source, the reader's state and the lines."""
    clicks, state, queries = tmp_path / "clicks", tmp_path / "reader", tmp_path / "queries"
    for directory in (clicks, state, queries):
        directory.mkdir()
    lines = [
        b'{"click_id":"10.2.0.1:7:%d","query_id":"10.1.0.1:7:%d"}\n' % (t, t - SECOND_US)
        for t in (T0_US + n * SECOND_US for n in click_s)
    ]
    (clicks / "10.2.0.1.000000.log").write_bytes(b"".join(lines))
    (queries / "10.1.0.1.000000.log").write_bytes(b"q" * 10_000)
    progress_us = T0_US + progress_s * SECOND_US
    (state / "progress.json").write_text(json.dumps({"progress_us": progress_us}))
    pacing = Pacing(state, queries, behind_bytes=1_000, lead_us=5 * SECOND_US, max_ahead_us=0,
                    wait_ms=wait_ms)  # fmt: skip
    return reader(clicks, **pacing.to_options()), state, lines


def test_a_joiners_source_leaves_clicks_ahead_of_a_busy_query_reader_unread(
    tmp_path: Path,
) -> None:
    """Paced (photon.join.pacing): while the DC's query reader has a backlog, a batch
    ends before the first click newer than the reader's progress plus the lead; once
    the reader has committed all but ``behind_bytes``, the clicks are read as planned."""
    source, state, lines = paced_clicks(tmp_path, [0, 1, 20, 21], progress_s=2)
    # The lead passes the first two; the clock's bound (max_ahead 0: now) is far ahead.
    assert source.latestOffset({"files": {}}, ReadAllAvailable())["files"] == {
        "10.2.0.1.000000.log": len(lines[0] + lines[1])
    }
    checkpoint = state / "checkpoint"
    (checkpoint / "offsets").mkdir(parents=True)
    (checkpoint / "commits").mkdir()
    (checkpoint / "offsets" / "0").write_text('v1\n{}\n{"files": {"10.1.0.1.000000.log": 9500}}')
    (checkpoint / "commits" / "0").write_text("v1\n{}")
    assert source.latestOffset({"files": {}}, ReadAllAvailable())["files"] == {
        "10.2.0.1.000000.log": len(b"".join(lines))
    }


def reader_commits(state: Path, progress_us: int) -> None:
    """The reader's batch as the joiner sees it: its progress published, then the
    batch committed (to 8,000 of its 10,000 bytes: still behind, so still pacing)."""
    (state / "progress.tmp").write_text(json.dumps({"progress_us": progress_us}))
    (state / "progress.tmp").rename(state / "progress.json")  # as the reader: whole
    checkpoint = state / "checkpoint"
    (checkpoint / "offsets").mkdir(parents=True, exist_ok=True)
    (checkpoint / "commits").mkdir(exist_ok=True)
    (checkpoint / "offsets" / "0").write_text('v1\n{}\n{"files": {"10.1.0.1.000000.log": 8000}}')
    (checkpoint / "commits" / "0").write_text("v1\n{}")


def planned_as_the_reader_commits(
    source: GrowingLogStreamReader, commit: Callable[[], None]
) -> tuple[dict[str, Any], float]:
    """The source's plan from the click file's start, the reader committing (``commit``)
    0.3 s into it; and how long the plan took."""
    start: dict[str, Any] = {"files": {"10.2.0.1.000000.log": 0}, "heads": {}}
    committer = threading.Timer(0.3, commit)
    began = time.monotonic()
    committer.start()
    try:
        latest = source.latestOffset(start, ReadAllAvailable())
    finally:
        committer.join()
    return latest, time.monotonic() - began


def test_a_paced_source_with_nothing_to_read_waits_for_the_reader_to_move_on(
    tmp_path: Path,
) -> None:
    """Where Spark would sleep to its next trigger, the source waits (up to its
    ``wait_ms``) for the reader to commit a batch, and plans what that lets through at
    once. Its progress alone (published before the commit) does not end the wait."""
    source, state, lines = paced_clicks(tmp_path, [0, 20], progress_s=-10, wait_ms=5_000)
    latest, waited = planned_as_the_reader_commits(source, lambda: reader_commits(state, T0_US))
    assert latest["files"] == {"10.2.0.1.000000.log": len(lines[0])}
    assert 0.3 <= waited < 2.0


def test_a_paced_source_waits_no_longer_than_its_bound_nor_when_it_has_lines(
    tmp_path: Path,
) -> None:
    source, state, lines = paced_clicks(tmp_path, [0, 20], progress_s=-10, wait_ms=200)
    start: dict[str, Any] = {"files": {"10.2.0.1.000000.log": 0}, "heads": {}}
    began = time.monotonic()
    assert source.latestOffset(start, ReadAllAvailable()) == start  # nothing moved
    assert 0.2 <= time.monotonic() - began < 1.5
    reader_commits(state, T0_US)
    began = time.monotonic()
    assert source.latestOffset(start, ReadAllAvailable())["files"] == {
        "10.2.0.1.000000.log": len(lines[0])
    }
    assert time.monotonic() - began < 0.2  # a line to read: no wait


def test_a_paced_source_waits_for_the_last_batch_of_its_readers_backlog(
    tmp_path: Path,
) -> None:
    """Lines to read, but the reader's batch in flight is the last of its backlog: the
    source waits for its commit and plans every click, not a batch cut at the progress
    the reader published just before (which would leave the rest to a tail batch)."""
    source, state, lines = paced_clicks(tmp_path, [0, 20], progress_s=0, wait_ms=5_000)
    checkpoint = state / "checkpoint"
    (checkpoint / "offsets").mkdir(parents=True)
    (checkpoint / "offsets" / "0").write_text('v1\n{}\n{"files": {"10.1.0.1.000000.log": 9500}}')

    def commits() -> None:
        (checkpoint / "commits").mkdir()
        (checkpoint / "commits" / "0").write_text("v1\n{}")

    latest, waited = planned_as_the_reader_commits(source, commits)
    assert latest["files"] == {"10.2.0.1.000000.log": len(b"".join(lines))}
    assert 0.3 <= waited < 2.0


def test_a_paced_source_whose_reader_does_not_commit_plans_the_paced_batch(
    tmp_path: Path,
) -> None:
    source, state, lines = paced_clicks(tmp_path, [0, 20], progress_s=0, wait_ms=200)
    (state / "checkpoint" / "offsets").mkdir(parents=True)
    (state / "checkpoint" / "offsets" / "0").write_text(
        'v1\n{}\n{"files": {"10.1.0.1.000000.log": 9500}}'
    )
    start: dict[str, Any] = {"files": {"10.2.0.1.000000.log": 0}, "heads": {}}
    began = time.monotonic()
    assert source.latestOffset(start, ReadAllAvailable())["files"] == {
        "10.2.0.1.000000.log": len(lines[0])
    }
    assert 0.2 <= time.monotonic() - began < 1.5


def test_a_source_not_told_to_wait_plans_at_once(tmp_path: Path) -> None:
    source, _, _ = paced_clicks(tmp_path, [0, 20], progress_s=-10)
    start: dict[str, Any] = {"files": {"10.2.0.1.000000.log": 0}, "heads": {}}
    began = time.monotonic()
    assert source.latestOffset(start, ReadAllAvailable()) == start
    assert time.monotonic() - began < 0.2
