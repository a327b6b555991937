from __future__ import annotations

import os
from pathlib import Path

import pytest

from photon.logs.writer import GrowingLogWriter

pytestmark = pytest.mark.unit


def test_lines_roll_over_to_a_new_file_at_the_size_limit(tmp_path: Path) -> None:
    with GrowingLogWriter(tmp_path, "srv", max_bytes=30) as writer:
        positions = [writer.append(b"x" * 9) for _ in range(7)]  # 10 bytes a line
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["srv.000000.log", "srv.000001.log", "srv.000002.log"]
    assert [p.stat().st_size for p in sorted(tmp_path.iterdir())] == [30, 30, 10]
    assert [(p.name, off) for p, off in positions[:4]] == [
        ("srv.000000.log", 0),
        ("srv.000000.log", 10),
        ("srv.000000.log", 20),
        ("srv.000001.log", 0),
    ]


def test_a_line_longer_than_the_limit_gets_a_file_of_its_own(tmp_path: Path) -> None:
    with GrowingLogWriter(tmp_path, "srv", max_bytes=10) as writer:
        writer.append(b"a")
        writer.append(b"b" * 50)
        writer.append(b"c")
    sizes = [p.stat().st_size for p in sorted(tmp_path.iterdir())]
    assert sizes == [2, 51, 2]


def test_reopening_continues_the_newest_file(tmp_path: Path) -> None:
    with GrowingLogWriter(tmp_path, "srv", max_bytes=100) as writer:
        writer.append(b"one")
    with GrowingLogWriter(tmp_path, "srv", max_bytes=100) as writer:
        path, offset = writer.append(b"two")
    assert (path.name, offset) == ("srv.000000.log", 4)
    assert path.read_bytes() == b"one\ntwo\n"


def test_a_partial_last_line_is_never_glued_to_a_new_line(tmp_path: Path) -> None:
    (tmp_path / "srv.000000.log").write_bytes(b"whole\npart")  # a writer died mid-line
    with GrowingLogWriter(tmp_path, "srv", max_bytes=100) as writer:
        path, offset = writer.append(b"next")
    assert (path.name, offset) == ("srv.000001.log", 0)
    assert (tmp_path / "srv.000000.log").read_bytes() == b"whole\npart"


@pytest.mark.parametrize(("name", "max_bytes"), [("../up", 10), ("", 10), ("ok", 0)])
def test_bad_arguments_are_refused(tmp_path: Path, name: str, max_bytes: int) -> None:
    with pytest.raises(ValueError):
        GrowingLogWriter(tmp_path, name, max_bytes=max_bytes)


def test_a_line_with_a_newline_is_refused(tmp_path: Path) -> None:
    with GrowingLogWriter(tmp_path, "srv", max_bytes=100) as writer, pytest.raises(ValueError):
        writer.append(b"two\nlines")


def test_lines_appended_at_once_land_as_appended_one_by_one_with_one_write_a_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lines = [b"x" * n for n in (9, 4, 14, 9, 40, 2, 9)]  # a line past the limit among them
    with GrowingLogWriter(tmp_path / "one", "srv", max_bytes=30) as writer:
        one_by_one = [writer.append(line) for line in lines]
    writes: list[int] = []
    real_write = os.write

    def counted(fd: int, data: bytes) -> int:
        writes.append(fd)
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", counted)
    with GrowingLogWriter(tmp_path / "many", "srv", max_bytes=30) as writer:
        at_once = writer.append_many(lines)
    assert [(p.name, off) for p, off in at_once] == [(p.name, off) for p, off in one_by_one]
    files = sorted((tmp_path / "many").iterdir())
    assert [p.read_bytes() for p in files] == [
        p.read_bytes() for p in sorted((tmp_path / "one").iterdir())
    ]
    assert len(writes) == len(files) == 4


def test_lines_appended_at_once_with_a_newline_among_them_write_nothing(tmp_path: Path) -> None:
    with GrowingLogWriter(tmp_path, "srv", max_bytes=100) as writer, pytest.raises(ValueError):
        writer.append_many([b"one", b"two\nlines"])
    assert all(p.stat().st_size == 0 for p in tmp_path.iterdir())
