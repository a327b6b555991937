"""logrotate under the chaos run: what each rotation leaves, and how its replay is judged."""

from __future__ import annotations

from pathlib import Path

import pytest

from photon.logs.reader import GrowingLogReader
from photon.tooling.chaos.record import FaultRecord
from photon.tooling.chaos.rotation_faults import (
    replayed_batch_written,
    rotate,
    rotate_current,
)

pytestmark = pytest.mark.unit


def test_each_writers_current_file_is_renamed_or_copied_then_truncated_in_turn(
    tmp_path: Path,
) -> None:
    for name, data in {
        "10.0.0.1.000000.log": b"old\n",
        "10.0.0.1.000001.log": b"a" * 70 + b"\n",
        "10.0.0.2.000003.log": b"b" * 70 + b"\n",
        "10.0.0.2.000003.log.1": b"rotated before\n",
        "chaos-torn.000001.log": b"another fault's\n",
        "recovery-20261127T024926-1.log": b"recovery's\n",
    }.items():
        (tmp_path / name).write_bytes(data)
    done = rotate_current(tmp_path)
    assert done == ["10.0.0.1.000001.log -> 10.0.0.1.000001.log.1",
                    "10.0.0.2.000003.log -> 10.0.0.2.000003.log.2"]  # fmt: skip
    assert not (tmp_path / "10.0.0.1.000001.log").exists()  # renamed
    assert (tmp_path / "10.0.0.1.000001.log.1").read_bytes() == b"a" * 70 + b"\n"
    assert (tmp_path / "10.0.0.2.000003.log").read_bytes() == b""  # copied, then truncated
    assert (tmp_path / "10.0.0.2.000003.log.2").read_bytes() == b"b" * 70 + b"\n"
    assert (tmp_path / "10.0.0.1.000000.log").read_bytes() == b"old\n"  # not current
    assert (tmp_path / "chaos-torn.000001.log").exists()  # not an ad server's
    assert (tmp_path / "recovery-20261127T024926-1.log").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    # every rotated name is one the reader reads, and follows by its head
    assert set(GrowingLogReader(tmp_path).files()) == {p.name for p in tmp_path.iterdir()}
    assert rotate(tmp_path, ["gone.log"]) == []


def _record(token: str | None) -> FaultRecord:
    return FaultRecord("log_rotation", "logs", struck=True,
                       detail={"crashed_batch_token": token})  # fmt: skip


def test_the_replay_struck_only_if_it_wrote_every_id_its_crash_left_registered() -> None:
    token = "a/a-1/000000000042"
    tokens = {"x1": token, "x2": token, "y": "a/a-1/000000000041"}
    written = _record(token)
    replayed_batch_written(written, tokens, ["x1", "x2", "z"])
    assert written.struck and written.detail["registered_by_the_batch"] == 2
    lost = _record(token)
    replayed_batch_written(lost, tokens, ["x1"])
    assert not lost.struck and lost.detail["unwritten"] == ["x2"]
    nothing = _record(token)
    replayed_batch_written(nothing, {"y": "a/a-1/000000000041"}, ["y"])
    assert not nothing.struck  # a batch that won no id proves nothing
