from __future__ import annotations

from pathlib import Path

import pytest

from photon.logs.offset_log import (
    committed_offsets,
    planned_offsets,
    remove_unfinished_writes,
    unread_bytes,
)

pytestmark = pytest.mark.unit


def test_unread_bytes_count_every_file_past_its_offset(tmp_path: Path) -> None:
    (tmp_path / "q.000000.log").write_bytes(b"x" * 100)
    (tmp_path / "q.000001.log").write_bytes(b"x" * 50)
    (tmp_path / "notes.txt").write_bytes(b"x" * 999)  # not a log
    assert unread_bytes(tmp_path, {}) == 150
    assert unread_bytes(tmp_path, {"q.000000.log": 100, "q.000001.log": 20}) == 30
    assert unread_bytes(tmp_path / "none", {}) == 0


def test_unfinished_writes_are_removed_from_the_offset_and_commit_logs_only(
    tmp_path: Path,
) -> None:
    """What Spark leaves of a write killed before its rename goes; every entry it finished,
    with its checksum, and anything else in the checkpoint stays."""
    kept = [
        "offsets/0", "offsets/.0.crc", "offsets/1", "commits/0", "commits/.0.crc",
        "metadata", "sources/0/0", "state/.0.5a1c.tmp",
    ]  # fmt: skip
    unfinished = [
        "offsets/.2.0b6e7a52-9c1d-4c55-8f2e-3d1b1f0a6c11.tmp",
        "offsets/..2.0b6e7a52-9c1d-4c55-8f2e-3d1b1f0a6c11.tmp.crc",
        "commits/.1.7f3e2c1a-2222-4b4b-9a9a-1234567890ab.TID7.tmp",
    ]
    for name in kept + unfinished:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(b"v1\n")
    assert remove_unfinished_writes(tmp_path) == sorted(tmp_path / name for name in unfinished)
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file()) == (
        sorted(kept)
    )
    assert remove_unfinished_writes(tmp_path) == []
    assert remove_unfinished_writes(tmp_path / "never-started") == []


def test_the_newest_planned_and_committed_batches_that_read_whole(tmp_path: Path) -> None:
    offsets, commits = tmp_path / "offsets", tmp_path / "commits"
    assert planned_offsets(tmp_path) == committed_offsets(tmp_path) == {}
    offsets.mkdir()
    commits.mkdir()
    for batch, offset in ((0, 10), (1, 20)):
        (offsets / str(batch)).write_text(f'v1\n{{}}\n{{"files": {{"q.log": {offset}}}}}')
    (offsets / "2").write_text("v1\n{}\n{half")  # being written
    (offsets / ".3.5f1c.tmp").write_text("v1")
    (commits / "0").write_text("v1\n{}")
    assert planned_offsets(tmp_path) == {"q.log": 20}
    assert committed_offsets(tmp_path) == {"q.log": 10}
    (commits / "1").write_text("v1\n{}")
    assert committed_offsets(tmp_path) == {"q.log": 20}
    assert committed_offsets(tmp_path, unsettled={1}) == {"q.log": 10}
