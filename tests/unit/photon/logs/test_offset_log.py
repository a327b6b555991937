from __future__ import annotations

from pathlib import Path

import pytest

from photon.logs.offset_log import unread_bytes

pytestmark = pytest.mark.unit


def test_unread_bytes_count_every_file_past_its_offset(tmp_path: Path) -> None:
    (tmp_path / "q.000000.log").write_bytes(b"x" * 100)
    (tmp_path / "q.000001.log").write_bytes(b"x" * 50)
    (tmp_path / "notes.txt").write_bytes(b"x" * 999)  # not a log
    assert unread_bytes(tmp_path, {}) == 150
    assert unread_bytes(tmp_path, {"q.000000.log": 100, "q.000001.log": 20}) == 30
    assert unread_bytes(tmp_path / "none", {}) == 0
