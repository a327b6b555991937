"""The growing-log source in a real Spark session: resume and replay from the checkpoint.

Every batch is also read as the apps read it, over the range Spark's offset log
gives it (``batch_offsets`` + ``read_batch``): the same rows as Spark's own read.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame, SparkSession

from photon.join.batch_lines import GroupReads, read_group
from photon.logs.ranges import Offsets, file_ranges
from spark_apps import streaming
from spark_apps.growing_log_source import NAME, batch_offsets, read_batch
from spark_apps.session import CHECKPOINT_FILE_MANAGER, CHECKPOINT_FILE_MANAGER_CONF
from spark_apps.streaming import Stop, StreamOptions, batch_key, committed_batch_lines
from tests.logrotate import ROTATIONS, rotate

pytestmark = pytest.mark.integration

Batches = list[tuple[int, list[tuple[str, int, bytes]]]]


def run_until(
    spark: SparkSession,
    directory: Path,
    checkpoint: Path,
    batches: Batches,
    done: Callable[[], bool],
    *,
    fail_batch: int | None = None,
) -> Any:
    def handle(df: DataFrame, batch_id: int) -> None:
        rows = sorted((r.file, r.offset, bytes(r.raw)) for r in df.collect())
        offsets = batch_offsets(checkpoint, batch_id)
        assert offsets is not None
        table = read_batch(directory, *offsets)
        columns = (table.column(name).to_pylist() for name in ("file", "offset", "raw"))
        direct = sorted(zip(*columns, strict=True))
        batches.append((batch_id, rows))
        if direct != rows:  # raised here, it would only fail the query
            mismatches.append((batch_id, rows, direct))
        if (by_groups := read_by_groups(directory, *offsets)) != rows:  # the joiner's tasks
            mismatches.append((batch_id, rows, by_groups))
        if batch_id == fail_batch:
            raise RuntimeError("the batch failed after its side effects")

    query = (
        spark.readStream.format(NAME)
        .option("path", str(directory))
        .option("maxBytesPerTrigger", "4")
        .load()
        .writeStream.foreachBatch(handle)
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime="0.2 seconds")
        .start()
    )
    mismatches: list[Any] = []
    deadline = time.monotonic() + 120
    try:
        while not done() and query.isActive:
            assert time.monotonic() < deadline, f"no progress: {batches}"
            time.sleep(0.1)
        # Stop between triggers, so the last batch seen is committed in the checkpoint.
        while query.isActive and query.status["isTriggerActive"]:
            assert time.monotonic() < deadline
            time.sleep(0.05)
    finally:
        query.stop()
    assert mismatches == [], "the offset log's range read other rows than Spark"
    return query


def read_by_groups(
    directory: Path, start: Offsets, end: Offsets, groups: int = 2
) -> list[tuple[str, int, bytes]]:
    """The rows the joiner's group tasks read of a batch, all groups together: each line
    once (these are no clicks: group 0 quarantines them all), each report once."""
    ranges = tuple(file_ranges(str(directory), start, end))
    shares = [read_group(GroupReads(ranges, n, groups)) for n in range(groups)]
    lines = [(q.file, q.offset, q.raw) for share in shares for q in share.quarantined]
    lines += [(line.file, line.offset, line.raw) for share in shares for _, line in share.clicks]
    reports = {(r.file, r.offset, r.raw) for share in shares for r in share.reports}
    return sorted(lines + list(reports))


def lines_of(batches: Batches) -> list[tuple[str, int, bytes]]:
    return [row for _, rows in batches for row in rows]


def check_committed_batch_read_again(logs: Path, checkpoint: Path, batches: Batches) -> None:
    """What the joiner reads again for an open batch Spark committed (batch 0 here, its
    batch 1 failed), and only for that: the lines Spark's own read gave batch 0."""
    lines_of_committed = committed_batch_lines(logs, checkpoint)
    again = lines_of_committed(batch_key(0))
    assert again is not None
    assert [(line.file, line.offset, line.raw) for line in again[0]] == batches[0][1]
    assert lines_of_committed(batch_key(1)) is None  # failed: Spark replays it itself
    assert lines_of_committed("retry-000000000001") is None


#: Spark's default checkpoint writer, which the apps' checkpoints were written by until
#: the apps' session named another: a checkpoint of either is resumed by the apps'.
SPARKS_DEFAULT_WRITER = (
    "org.apache.spark.sql.execution.streaming.checkpointing.FileContextBasedCheckpointFileManager"
)


@pytest.mark.parametrize("first_writer", [CHECKPOINT_FILE_MANAGER, SPARKS_DEFAULT_WRITER])
def test_a_restarted_query_resumes_after_the_last_committed_batch(
    spark: SparkSession, tmp_path: Path, first_writer: str
) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "a.000000.log").write_bytes(b"l1\nl2\nl3\nl4\npartial")
    batches: Batches = []
    spark.conf.set(CHECKPOINT_FILE_MANAGER_CONF, first_writer)
    try:
        run_until(spark, logs, tmp_path / "ck", batches, lambda: len(lines_of(batches)) >= 4)
    finally:
        spark.conf.set(CHECKPOINT_FILE_MANAGER_CONF, CHECKPOINT_FILE_MANAGER)
    first = lines_of(batches)
    assert [raw for _, _, raw in first] == [b"l1", b"l2", b"l3", b"l4"]
    assert len(batches) >= 2  # the read limit cut it into several batches

    with (logs / "a.000000.log").open("ab") as f:
        f.write(b"-done\n")
    (logs / "b.000001.log").write_bytes(b"l6\n")
    again: Batches = []
    run_until(spark, logs, tmp_path / "ck", again, lambda: len(lines_of(again)) >= 2)
    assert lines_of(again) == [("a.000000.log", 12, b"partial-done"), ("b.000001.log", 0, b"l6")]
    assert again[0][0] == batches[-1][0] + 1  # batch ids go on from the checkpoint


def test_a_failed_batch_is_replayed_with_the_same_id_and_the_same_lines(
    spark: SparkSession, tmp_path: Path
) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "a.000000.log").write_bytes(b"".join(b"line%02d\n" % n for n in range(8)))
    batches: Batches = []
    query = run_until(
        spark, logs, tmp_path / "ck", batches, lambda: len(batches) >= 2, fail_batch=1
    )
    assert query.exception() is not None
    failed = batches[-1]
    assert failed[0] == 1

    check_committed_batch_read_again(logs, tmp_path / "ck", batches)

    replayed: Batches = []
    committed = lines_of(batches[:-1])
    run_until(
        spark, logs, tmp_path / "ck", replayed, lambda: len(committed + lines_of(replayed)) >= 8
    )
    assert replayed[0] == failed  # same id, same lines: the joiner's replay rests on this
    everything = committed + lines_of(replayed)
    assert [raw for _, _, raw in everything] == [b"line%02d" % n for n in range(8)]


def _long(*words: str) -> bytes:
    """Lines long enough that the first covers a file's head."""
    return b"".join(b'{"id": "%s", "pad": "%s"}\n' % (w.encode(), b"x" * 60) for w in words)


def test_a_file_replaced_and_one_rotated_between_runs_are_read_once_each(
    spark: SparkSession, tmp_path: Path
) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "a.log").write_bytes(_long("a1", "a2"))
    (logs / "b.log").write_bytes(_long("b1", "b2"))
    batches: Batches = []
    run_until(spark, logs, tmp_path / "ck", batches, lambda: len(lines_of(batches)) >= 4)
    a_end, b_end = len(_long("a1", "a2")), len(_long("b1", "b2"))

    (logs / "a.log").write_bytes(_long("a3", "a4", "a5"))  # truncated and regrown past it
    with (logs / "b.log").open("ab") as f:
        f.write(_long("b3"))
    (logs / "b.log").rename(logs / "b-1.log")  # rotated; its writer starts a new b.log
    (logs / "b.log").write_bytes(_long("b4"))
    again: Batches = []
    run_until(spark, logs, tmp_path / "ck", again, lambda: len(lines_of(again)) >= 7)

    rows = lines_of(again)
    assert sorted(rows) == sorted(
        [
            ("a.log", a_end, b""),  # file_replaced, where the old file was read to
            *[("a.log", n * len(_long("a3")), raw) for n, raw in
              enumerate(_long("a3", "a4", "a5").splitlines())],
            ("b-1.log", b_end, b"b.log"),  # file_rotated: its old name
            ("b-1.log", b_end, _long("b3").rstrip(b"\n")),
            ("b.log", 0, _long("b4").rstrip(b"\n")),
        ]
    )  # fmt: skip


@pytest.mark.parametrize("rotation", ROTATIONS)
def test_a_log_rotated_between_a_batchs_try_and_its_replay_is_read_where_its_bytes_went(
    spark: SparkSession, tmp_path: Path, rotation: str
) -> None:
    """logrotate moves ``x.log`` to ``x.log.1`` (by rename, or by copy then truncate)
    while a failed batch waits for its replay: the replay reads the very lines its first
    try read (from ``x.log.1``, under their planned name and offsets), the batches after
    it read the rest of the old file and the new ``x.log``, and every line is read once."""
    logs = tmp_path / "logs"
    logs.mkdir()
    old = [f"x{n}" for n in range(6)]
    (logs / "x.log").write_bytes(_long(*old))
    batches: Batches = []
    query = run_until(
        spark, logs, tmp_path / "ck", batches, lambda: len(batches) >= 2, fail_batch=1
    )
    assert query.exception() is not None
    failed = batches[-1]

    rotate(logs / "x.log", rotation)
    with (logs / "x.log").open("ab") as f:  # the writer goes on in a new x.log
        f.write(_long("y0", "y1"))
    check_committed_batch_read_again(logs, tmp_path / "ck", batches)  # where its bytes went

    replayed: Batches = []
    committed = lines_of(batches[:-1])

    def read() -> list[bytes]:  # the lines, not the reports of the rotation
        return [raw for _, _, raw in committed + lines_of(replayed) if raw.startswith(b"{")]

    run_until(spark, logs, tmp_path / "ck", replayed, lambda: len(read()) >= 8)
    assert replayed[0] == failed  # same id, same lines, where they went
    assert sorted(read()) == sorted(_long(*old, "y0", "y1").splitlines())


def test_the_apps_checkpoints_are_written_by_a_class_this_spark_has(
    spark: SparkSession,
) -> None:
    """The apps' session names Spark's FileSystem-based checkpoint writer (fewer child
    processes a batch: docs/join.md, "Between two batches"); a Spark upgrade that
    moves the class fails here, not at every app's first batch."""
    assert spark.conf.get(CHECKPOINT_FILE_MANAGER_CONF) == CHECKPOINT_FILE_MANAGER
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    for writer in (CHECKPOINT_FILE_MANAGER, SPARKS_DEFAULT_WRITER):
        jvm.java.lang.Class.forName(writer)  # raises if this Spark has no such class


def _leave_unfinished_write(log: Path, entry: int) -> list[Path]:
    """What a process killed between Spark's write of log entry ``entry`` and its rename
    leaves: the temporary file and, on a local disk, its checksum."""
    log.mkdir(parents=True, exist_ok=True)
    name = f".{entry}.{uuid.uuid4()}.tmp"
    files = [log / name, log / f".{name}.crc"]
    files[0].write_bytes(b"v1\n{")  # half written
    files[1].write_bytes(b"crc")
    return files


def test_a_stream_killed_while_writing_its_first_offsets_starts_again(
    spark: SparkSession, tmp_path: Path
) -> None:
    """An app killed during its first batch's offset write: Spark refuses such a
    checkpoint on every start (its offset log has no entry but is not empty), the
    apps' stream clears the unfinished write and reads every line once."""
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "a.000000.log").write_bytes(b"l1\nl2\nl3\n")
    refused, checkpoint = tmp_path / "refused", tmp_path / "ck"
    _leave_unfinished_write(refused / "offsets", 0)
    unfinished = _leave_unfinished_write(checkpoint / "offsets", 0)

    query = (
        spark.readStream.format(NAME).option("path", str(logs)).load()
        .writeStream.foreachBatch(lambda df, batch_id: None)
        .option("checkpointLocation", str(refused)).start()
    )  # fmt: skip
    with pytest.raises(StreamingQueryException, match="CHECKPOINT_LOCATION_NOT_EMPTY"):
        query.awaitTermination(60)

    read: list[bytes] = []
    options = StreamOptions(
        directory=logs,
        checkpoint=checkpoint,
        trigger_s=0.2,
        max_bytes_per_batch=4,
        max_files_per_batch=10,
        until_idle_s=2.0,
    )
    summary = streaming.run(
        spark, options, lambda key, lines, reports: read.extend(x.raw for x in lines), Stop()
    )
    assert summary.stopped_by == "idle for 2.0 s"
    assert read == [b"l1", b"l2", b"l3"]
    assert not any(path.exists() for path in unfinished)
    assert (checkpoint / "commits" / "0").exists()
