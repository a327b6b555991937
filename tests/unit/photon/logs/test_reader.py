"""The growing-log reader: every complete line exactly once, in order, never a partial one."""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
from pathlib import Path

import pytest
import structlog
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from photon.events.records import QuarantineReason
from photon.join.progress import file_stats
from photon.logs.reader import GrowingLogReader, LogLine, Offsets, is_log_name

pytestmark = pytest.mark.unit

line_bytes = st.binary(max_size=40).map(lambda b: b.replace(b"\n", b"_"))


class GrowingLogMachine(RuleBasedStateMachine):
    """Random appends (whole lines, halves of lines), rollovers, reads and restarts."""

    @initialize()
    def setup(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="photon-reader-"))
        self.file_seq = 0
        self.pending: tuple[bytes, int] | None = None  # a line written up to a cut
        self.written: list[tuple[str, int, bytes]] = []  # complete lines: (file, offset, raw)
        self.sizes: dict[str, int] = {}
        self.read_lines: list[LogLine] = []
        self.saved: Offsets = {}
        self.reader = GrowingLogReader(self.dir)

    def teardown(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)

    @property
    def current(self) -> str:
        return f"log.{self.file_seq:06d}.log"

    def _append(self, data: bytes) -> None:
        with (self.dir / self.current).open("ab") as f:
            f.write(data)

    def _complete(self, raw: bytes) -> None:
        offset = self.sizes.get(self.current, 0)
        self.sizes[self.current] = offset + len(raw) + 1
        self.written.append((self.current, offset, raw))

    @precondition(lambda self: self.pending is None)
    @rule(raw=line_bytes)
    def append_line(self, raw: bytes) -> None:
        self._append(raw + b"\n")
        self._complete(raw)

    @precondition(lambda self: self.pending is None)
    @rule(raw=line_bytes, cut=st.integers(min_value=0, max_value=40))
    def append_half_a_line(self, raw: bytes, cut: int) -> None:
        self.pending = (raw, min(cut, len(raw)))
        self._append(raw[: self.pending[1]])

    @precondition(lambda self: self.pending is not None)
    @rule()
    def finish_the_line(self) -> None:
        assert self.pending is not None
        raw, cut = self.pending
        self._append(raw[cut:] + b"\n")
        self._complete(raw)
        self.pending = None

    @precondition(lambda self: self.pending is None)
    @rule()
    def roll_over(self) -> None:
        self.file_seq += 1

    @rule(
        max_bytes=st.none() | st.integers(min_value=1, max_value=200),
        max_files=st.none() | st.integers(min_value=1, max_value=3),
    )
    def read(self, max_bytes: int | None, max_files: int | None) -> None:
        result = self.reader.read(self.saved, max_bytes=max_bytes, max_files=max_files)
        assert not result.truncations
        self.read_lines.extend(result.lines)
        self.saved = result.offsets

    @rule()
    def restart_from_saved_offsets(self) -> None:
        self.reader = GrowingLogReader(self.dir)  # a new process, same saved offsets

    @invariant()
    def every_line_read_was_written_once_in_order(self) -> None:
        got = [(line.file, line.offset, line.raw) for line in self.read_lines]
        # lines of each file come in order; files in name order
        assert got == sorted(got, key=lambda t: (t[0], t[1]))
        assert got == [w for w in sorted(self.written) if w in set(got)]
        assert len(set(got)) == len(got)
        assert set(got) <= set(self.written)

    def drain(self) -> None:
        while (result := self.reader.read(self.saved)).lines:
            self.read_lines.extend(result.lines)
            self.saved = result.offsets

    @invariant()
    def draining_yields_exactly_the_complete_lines(self) -> None:
        before = (list(self.read_lines), dict(self.saved))
        self.drain()
        got = [(line.file, line.offset, line.raw) for line in self.read_lines]
        assert got == sorted(self.written)
        self.read_lines, self.saved = before


TestGrowingLog = GrowingLogMachine.TestCase
TestGrowingLog.settings = settings(
    max_examples=60,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


def test_a_concurrent_writer_is_read_completely_and_exactly_once(tmp_path: Path) -> None:
    lines = [f'{{"n": {i}, "pad": "{"x" * (i % 97)}"}}'.encode() for i in range(20_000)]
    done = threading.Event()

    def write() -> None:
        # Two writes per line, so readers do see partial lines; a new file every 2,000 lines.
        for i, raw in enumerate(lines):
            with (tmp_path / f"srv.{i // 2000:06d}.log").open("ab") as f:
                f.write(raw[: len(raw) // 2])
                f.flush()
                f.write(raw[len(raw) // 2 :] + b"\n")
        done.set()

    thread = threading.Thread(target=write)
    thread.start()
    reader = GrowingLogReader(tmp_path)
    offsets: Offsets = {}
    got: list[LogLine] = []
    while True:
        finished = done.is_set()
        result = reader.read(offsets, max_bytes=10_000)
        got.extend(result.lines)
        offsets = result.offsets
        if finished and not result.lines:
            break
    thread.join()
    # Order is per file (a poll may see the next file before the rest of this one).
    assert len({(line.file, line.offset) for line in got}) == len(got) == len(lines)
    assert [line.raw for line in sorted(got, key=lambda x: (x.file, x.offset))] == lines
    for line in got:  # offsets point at the line in its file
        with (tmp_path / line.file).open("rb") as f:
            f.seek(line.offset)
            assert f.read(len(line.raw) + 1) == line.raw + b"\n"


def test_a_partial_last_line_is_left_for_later(tmp_path: Path) -> None:
    path = tmp_path / "a.000000.log"
    path.write_bytes(b"one\ntw")
    reader = GrowingLogReader(tmp_path)
    first = reader.read()
    assert [line.raw for line in first.lines] == [b"one"]
    assert first.offsets == {"a.000000.log": 4}
    with path.open("ab") as f:
        f.write(b"o\n")
    second = reader.read(first.offsets)
    assert [(line.offset, line.raw) for line in second.lines] == [(4, b"two")]


def test_new_files_are_picked_up(tmp_path: Path) -> None:
    (tmp_path / "a.000000.log").write_bytes(b"1\n")
    reader = GrowingLogReader(tmp_path)
    first = reader.read()
    (tmp_path / "b.000000.log").write_bytes(b"2\n")
    second = reader.read(first.offsets)
    assert [(line.file, line.raw) for line in second.lines] == [("b.000000.log", b"2")]


def test_admission_control_bounds_bytes_and_files_but_always_progresses(tmp_path: Path) -> None:
    for name in ("a", "b", "c"):
        (tmp_path / f"{name}.000000.log").write_bytes(b"0123456789\n" * 5)
    reader = GrowingLogReader(tmp_path)
    one = reader.read(max_bytes=1)
    assert len(one.lines) == 1
    some = reader.read(max_bytes=25)
    assert [line.raw for line in some.lines] == [b"0123456789"] * 3
    files = reader.read(max_files=2)
    assert {line.file for line in files.lines} == {"a.000000.log", "b.000000.log"}
    rest = reader.read(files.offsets)
    assert {line.file for line in rest.lines} == {"c.000000.log"}


def test_a_truncated_file_is_reported_and_nothing_is_read_twice(tmp_path: Path) -> None:
    path = tmp_path / "a.000000.log"
    path.write_bytes(b"first line\nsecond line\n")
    reader = GrowingLogReader(tmp_path)
    offsets = reader.read().offsets
    os.truncate(path, 11)
    result = reader.read(offsets)
    assert result.lines == []
    [record] = result.truncations
    assert (record.file, record.offset, record.reason) == (
        "a.000000.log",
        11,
        QuarantineReason.FILE_TRUNCATED,
    )
    assert "12 bytes were lost" in record.detail
    with path.open("ab") as f:
        f.write(b"third line\n")
    after = reader.read(result.offsets)
    assert [line.raw for line in after.lines] == [b"third line"]
    assert not after.truncations


def test_bad_limits_are_refused(tmp_path: Path) -> None:
    reader = GrowingLogReader(tmp_path)
    with pytest.raises(ValueError, match="max_bytes"):
        reader.read(max_bytes=0)
    with pytest.raises(ValueError, match="negative"):
        (tmp_path / "a.log").write_bytes(b"x\n")
        reader.read({"a.log": -1})


def test_a_read_planned_before_its_file_shrank_or_went_reports_the_lost_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "a.log").write_bytes(b"one\ntwo\nthree\n")
    (tmp_path / "b.log").write_bytes(b"four\n")
    reader = GrowingLogReader(tmp_path)
    plan = reader.plan

    def plan_then_change(*args: object, **kwargs: object) -> object:
        planned = plan(*args, **kwargs)  # type: ignore[arg-type]
        (tmp_path / "a.log").write_bytes(b"one\ntw")  # shrank between plan and read
        (tmp_path / "b.log").unlink()  # and went
        return planned

    monkeypatch.setattr(reader, "plan", plan_then_change)
    result = reader.read({})
    assert [line.raw for line in result.lines] == [b"one"]
    assert [(t.file, t.offset, t.reason) for t in result.truncations] == [
        ("a.log", 4, QuarantineReason.FILE_TRUNCATED),
        ("b.log", 0, QuarantineReason.FILE_DELETED),
    ]
    assert "10 bytes from 4" in result.truncations[0].detail


def test_a_torn_last_line_is_quarantined_once_its_writer_has_moved_to_a_later_file(
    tmp_path: Path,
) -> None:
    (tmp_path / "w.000000.log").write_bytes(b"one\ntw")  # the writer died mid-line
    (tmp_path / "x.000001.log").write_bytes(b"other writer\n")
    reader = GrowingLogReader(tmp_path)
    first = reader.read({})
    assert [line.raw for line in first.lines] == [b"one", b"other writer"]
    assert first.truncations == []  # its writer may still finish the line
    (tmp_path / "w.000001.log").write_bytes(b"three\n")  # restarted, in a new file
    second = reader.read(first.offsets)
    assert [line.raw for line in second.lines] == [b"three"]
    [torn] = second.truncations
    assert (torn.file, torn.offset, torn.reason, torn.raw) == (
        "w.000000.log",
        4,
        QuarantineReason.TORN_LINE,
        b"tw",
    )
    assert second.offsets["w.000000.log"] == 6
    assert reader.read(second.offsets).truncations == []  # once


def _lines(*words: str) -> bytes:
    """Log lines long enough that one covers a file's head (HEAD_BYTES)."""
    return b"".join(
        f'{{"query_id": "10.0.0.1:1:{w}", "pad": "{"x" * 60}"}}\n'.encode() for w in words
    )


def test_a_file_truncated_then_regrown_past_its_offset_is_read_again_from_its_start(
    tmp_path: Path,
) -> None:
    path = tmp_path / "a.000000.log"
    path.write_bytes(_lines("1", "2"))
    reader = GrowingLogReader(tmp_path)
    first = reader.read({})
    assert len(first.lines) == 2 and set(first.heads) == {"a.000000.log"}
    old_offset = first.offsets["a.000000.log"]
    path.write_bytes(_lines("3", "4", "5"))  # truncated and written again, past the offset
    assert path.stat().st_size > old_offset

    second = reader.read(first.offsets, heads=first.heads)

    assert [line.raw for line in second.lines] == _lines("3", "4", "5").splitlines()
    assert second.lines[0].offset == 0
    [report] = second.truncations
    assert (report.file, report.offset, report.reason) == (
        "a.000000.log",
        old_offset,
        QuarantineReason.FILE_REPLACED,
    )
    third = reader.read(second.offsets, heads=second.heads)
    assert third.lines == [] and third.truncations == []


@pytest.mark.parametrize("how", ["rename", "copy_truncate"])
def test_a_rotated_file_is_read_on_under_its_new_name_nothing_twice_nothing_lost(
    tmp_path: Path, how: str
) -> None:
    path = tmp_path / "a.log"
    path.write_bytes(_lines("1", "2"))
    reader = GrowingLogReader(tmp_path)
    first = reader.read({})
    with path.open("ab") as f:
        f.write(_lines("3"))  # written before the rotation, not read yet
    if how == "rename":
        path.rename(tmp_path / "a-1.log")
    else:
        shutil.copy(path, tmp_path / "a-1.log")
        os.truncate(path, 0)
    with path.open("ab") as f:
        f.write(_lines("4"))  # the writer goes on in a new a.log

    second = reader.read(first.offsets, heads=first.heads)

    assert sorted(line.raw for line in second.lines) == sorted(_lines("3", "4").splitlines())
    [report] = second.truncations
    assert (report.file, report.offset, report.reason) == (
        "a-1.log",
        first.offsets["a.log"],
        QuarantineReason.FILE_ROTATED,
    )
    assert "a.log was renamed a-1.log" in report.detail
    third = reader.read(second.offsets, heads=second.heads)
    assert third.lines == [] and third.truncations == []


def test_a_file_that_went_is_reported_once_at_the_offset_it_was_read_to(tmp_path: Path) -> None:
    (tmp_path / "a.log").write_bytes(b"one\ntwo\n")
    reader = GrowingLogReader(tmp_path)
    first = reader.read({})
    (tmp_path / "a.log").unlink()
    second = reader.read(first.offsets, heads=first.heads)
    [report] = second.truncations
    assert (report.file, report.offset, report.reason) == (
        "a.log",
        8,
        QuarantineReason.FILE_DELETED,
    )
    assert "a.log" not in second.offsets
    assert reader.read(second.offsets, heads=second.heads).truncations == []


def test_a_file_cut_below_its_head_is_read_again_as_a_replaced_one(tmp_path: Path) -> None:
    # Under HEAD_BYTES there is no head to tell a truncation from a new short file:
    # the reader reads it again (a duplicate the registry settles), never skips it.
    path = tmp_path / "a.000000.log"
    first = b"short\n"
    path.write_bytes(first + b"x" * 80 + b"\n")
    reader = GrowingLogReader(tmp_path)
    before = reader.read()
    os.truncate(path, len(first))
    after = reader.read(before.offsets, heads=before.heads)
    assert [(t.reason, t.offset) for t in after.truncations] == [
        (QuarantineReason.FILE_REPLACED, len(first) + 81)
    ]
    assert [line.raw for line in after.lines] == [b"short"]


@pytest.mark.parametrize(
    ("names", "final"),
    [
        # a later sequence number, whatever logrotate named either file
        (["w.000000.log", "w.000001.log"], {"w.000000.log"}),
        (["w.000000.log", "w.000001.log.1"], {"w.000000.log"}),
        (["w.000000.log.1", "w.000001.log"], {"w.000000.log.1"}),
        # copied then truncated, or renamed and reopened: the rotated copy is final
        (["w.000003.log.1", "w.000003.log"], {"w.000003.log.1"}),
        (["app.log.2", "app.log.1", "app.log"], {"app.log.2", "app.log.1"}),
        # renamed, its writer not reopened yet: it may still finish its line
        (["w.000003.log.1"], set()),
        (["w.000000.log", "v.000001.log"], set()),
    ],
)
def test_a_torn_line_is_final_once_its_writer_has_a_later_file(
    tmp_path: Path, names: list[str], final: set[str]
) -> None:
    for name in names:
        (tmp_path / name).write_bytes(b"whole\ntor")
    reader = GrowingLogReader(tmp_path)
    first = reader.read()  # the whole lines; a torn tail is taken once nothing else is left
    result = reader.read(first.offsets, heads=first.heads)
    torn = {t.file for t in result.truncations if t.reason is QuarantineReason.TORN_LINE}
    assert torn == final


def test_a_log_file_whose_name_is_not_utf8_is_said_once_and_read_once_renamed(
    tmp_path: Path,
) -> None:
    """No record of where a line came from can hold such a name (they are UTF-8 text):
    it failed the first batch to write one, on every replay. Its lines wait in it."""
    (tmp_path / "good.000000.log").write_bytes(b'{"n": 1}\n')
    latin1 = os.fsdecode(b"caf\xe9.000000.log")
    (tmp_path / latin1).write_bytes(b'{"n": 2}\n')
    reader = GrowingLogReader(tmp_path)
    with structlog.testing.capture_logs() as logged:
        first = reader.read()
        assert reader.files() == ["good.000000.log"]
    assert [line.raw for line in first.lines] == [b'{"n": 1}']
    said = [entry for entry in logged if entry["event"] == "logs.name_not_utf8"]
    assert [entry["name"] for entry in said] == [b"caf\xe9.000000.log"]
    assert not is_log_name(latin1) and set(file_stats(tmp_path)) == {"good.000000.log"}

    (tmp_path / latin1).rename(tmp_path / "cafe.000000.log")
    again = reader.read(first.offsets, heads=first.heads)
    assert [line.raw for line in again.lines] == [b'{"n": 2}']
