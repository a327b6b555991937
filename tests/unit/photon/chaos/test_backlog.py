"""The backlog of a joiner: bytes past its checkpoint's committed offsets, and their age."""

from __future__ import annotations

from pathlib import Path

import pytest

from photon.chaos.backlog import backlog, committed_offsets
from photon.events.records import ClickEvent
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


def test_the_backlog_is_the_unread_bytes_and_the_age_of_the_oldest_unread_click(
    tmp_path: Path,
) -> None:
    logs = tmp_path / "clicks"
    logs.mkdir()
    first = [click_line(n, T0 + n * S) for n in range(10)]
    second = [click_line(n, T0 + 5 * S + n * S) for n in range(4)]
    (logs / "10.0.0.1.000000.log").write_bytes(b"\n".join(first) + b"\n")
    (logs / "10.0.0.2.000000.log").write_bytes(b"not json\n" + b"\n".join(second) + b"\n")
    read = len(first[0]) + 1 + len(first[1]) + 1  # two lines of the first file committed
    offsets = {"10.0.0.1.000000.log": read}
    now = T0 + 60 * S

    got = backlog(logs, offsets, now)

    total = sum(p.stat().st_size for p in logs.iterdir())
    assert got.bytes == total - read
    assert got.lag_s == pytest.approx(58.0, abs=0.1)  # the third click; the bad line passed over
    everything = {p.name: p.stat().st_size for p in logs.iterdir()}
    assert backlog(logs, everything, now).bytes == 0 and backlog(logs, everything, now).lag_s == 0
