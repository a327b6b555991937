"""The backlog of a joiner: bytes past its checkpoint's committed offsets, and their age."""

from __future__ import annotations

from pathlib import Path

import pytest

from photon.events.records import ClickEvent
from photon.join.backlog import Backlog, backlog, joiner_offsets
from photon.join.retry import RETRY_STORE, RetryStore, open_streaming_batches
from photon.logs.offset_log import committed_offsets
from photon.settings import RetrySettings
from registry.ids import EventId

pytestmark = pytest.mark.unit

T0 = 1_790_000_000_000_000
S = 1_000_000


def click_line(n: int, ts_us: int) -> bytes:
    event = ClickEvent(EventId("10.0.0.1", 7, ts_us + n), EventId("10.0.0.1", 7, ts_us - S))
    return event.to_json_line()


def write_batch(checkpoint: Path, batch: int, files: dict[str, int], *, committed: bool) -> None:
    (checkpoint / "offsets").mkdir(parents=True, exist_ok=True)
    (checkpoint / "commits").mkdir(parents=True, exist_ok=True)
    offsets = '{"files": {' + ", ".join(f'"{k}": {v}' for k, v in files.items()) + "}}"
    (checkpoint / "offsets" / str(batch)).write_text(f'v1\n{{"batchWatermarkMs":0}}\n{offsets}')
    if committed:
        (checkpoint / "commits" / str(batch)).write_text('v1\n{"nextBatchWatermarkMs":0}')


def test_the_newest_committed_batch_counts_not_one_still_running(tmp_path: Path) -> None:
    checkpoint = tmp_path / "checkpoint"
    assert committed_offsets(checkpoint) == {}  # before the first batch
    write_batch(checkpoint, 0, {"x.000000.log": 10}, committed=True)
    write_batch(checkpoint, 1, {"x.000000.log": 20}, committed=True)
    write_batch(checkpoint, 2, {"x.000000.log": 30}, committed=False)
    assert committed_offsets(checkpoint) == {"x.000000.log": 20}
    (checkpoint / "offsets" / "1").write_text("v1\n{")  # half written: the batch before
    assert committed_offsets(checkpoint) == {"x.000000.log": 10}


def test_a_joiners_batch_committed_with_its_groups_running_is_not_done_yet(
    tmp_path: Path,
) -> None:
    """Spark commits a batch when the driver hands it back; the joiner's journal holds
    it open until its groups are done and it is settled (docs/join.md)."""
    state = tmp_path / "joiner"
    checkpoint = state / "checkpoint"
    write_batch(checkpoint, 0, {"x.000000.log": 10}, committed=True)
    write_batch(checkpoint, 1, {"x.000000.log": 20}, committed=True)
    assert joiner_offsets(state) == {"x.000000.log": 20}  # no journal yet: as committed
    journal = RetryStore(state / RETRY_STORE, RetrySettings())
    try:
        journal.begin_batch(f"{1:012d}", 0, 0)  # Spark's batch 1, as the joiner names it
        journal.begin_batch("retry-000000000007", 0, 0)  # a retry pass reads no log
        assert open_streaming_batches(state / RETRY_STORE) == {1}
        assert joiner_offsets(state) == {"x.000000.log": 10}
        journal.finish_batch(f"{1:012d}")
        assert joiner_offsets(state) == {"x.000000.log": 20}
    finally:
        journal.close()
    (state / RETRY_STORE).write_bytes(b"not a database")
    assert open_streaming_batches(state / RETRY_STORE) == set()


def test_the_backlog_is_the_unread_bytes_and_how_far_behind_each_servers_log_end(
    tmp_path: Path,
) -> None:
    logs = tmp_path / "clicks"
    logs.mkdir()
    first = [click_line(n, T0 + n * S) for n in range(10)]  # server 1: 0..9 s
    second = [click_line(n, T0 - 30 * S + n * S) for n in range(4)]  # server 2: 30 s behind
    (logs / "10.0.0.1.000000.log").write_bytes(b"\n".join(first[:6]) + b"\n")
    (logs / "10.0.0.1.000001.log").write_bytes(b"\n".join(first[6:]) + b"\n")  # rolled over
    (logs / "10.0.0.2.000000.log").write_bytes(b"not json\n" + b"\n".join(second) + b"\n")
    read = len(first[0]) + 1 + len(first[1]) + 1  # two lines of server 1 committed
    offsets = {"10.0.0.1.000000.log": read}

    got = backlog(logs, offsets)

    total = sum(p.stat().st_size for p in logs.iterdir())
    assert got.bytes == total - read
    # server 1 is 7 s behind its newest click (9 s - 2 s); server 2, whose clock is
    # 30 s behind, 3 s (its bad line passed over): the skew does not count
    assert got.lag_s == pytest.approx(7.0, abs=0.01)
    everything = {p.name: p.stat().st_size for p in logs.iterdir()}
    assert backlog(logs, everything) == Backlog(0, 0.0)
    assert backlog(tmp_path / "none", {}) == Backlog(0, 0.0)


def test_a_log_longer_than_the_probe_is_read_from_its_end(tmp_path: Path) -> None:
    logs = tmp_path / "clicks"
    logs.mkdir()
    lines = [click_line(n, T0 + n * S) for n in range(2_000)]
    (logs / "10.0.0.1.000000.log").write_bytes(b"\n".join(lines) + b"\n")
    assert (logs / "10.0.0.1.000000.log").stat().st_size > 128 * 1024
    read = sum(len(line) + 1 for line in lines[:500])
    assert backlog(logs, {"10.0.0.1.000000.log": read}).lag_s == pytest.approx(1_499.0, abs=0.01)


def test_a_rotated_file_counts_in_its_servers_backlog_before_the_file_after_it(
    tmp_path: Path,
) -> None:
    # logrotate renamed x.log to x.log.1 while its writer, not reopened yet, writes on there
    logs = tmp_path / "clicks"
    logs.mkdir()
    lines = [click_line(n, T0 + n * S) for n in range(6)]
    (logs / "10.0.0.1.000000.log.1").write_bytes(b"\n".join(lines[:4]) + b"\n")
    (logs / "10.0.0.1.000000.log").write_bytes(b"\n".join(lines[4:]) + b"\n")
    read = len(lines[0]) + 1
    got = backlog(logs, {"10.0.0.1.000000.log.1": read})
    assert got.bytes == sum(p.stat().st_size for p in logs.iterdir()) - read
    assert got.files == 2
    assert got.lag_s == pytest.approx(4.0, abs=0.01)  # 1 s (oldest unread) to 5 s (newest)
