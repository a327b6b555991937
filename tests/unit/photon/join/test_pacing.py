"""A joiner paced to its query reader: where a click range ends while the reader reads a
backlog, and when pacing holds nothing back (docs/join.md, "Pacing the joiner to its
query reader")."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from photon.events.records import ClickEvent
from photon.join import pacing as pacing_module
from photon.join.pacing import STALE_S, Pacer, Pacing, first_line_after
from photon.logs.reader import GrowingLogReader
from registry.ids import EventId

pytestmark = pytest.mark.unit

T0 = 1_790_000_000_000_000
S = 1_000_000
FAR = T0 + 10**6 * S  # no click is stamped beyond the clock's bound in these tests


def click_line(n: int, ts_us: int) -> bytes:
    event = ClickEvent(EventId("10.2.0.1", 7, ts_us + n), EventId("10.1.0.1", 7, ts_us - S))
    return event.to_json_line() + b"\n"


def write_clicks(path: Path, times: list[int]) -> list[int]:
    """The lines' start offsets."""
    starts, data = [], b""
    for n, ts in enumerate(times):
        starts.append(len(data))
        data += click_line(n, ts)
    path.write_bytes(data)
    return starts


def test_a_range_ends_before_its_first_click_newer_than_the_limit(tmp_path: Path) -> None:
    path = tmp_path / "c.000000.log"
    starts = write_clicks(path, [T0, T0 + S, T0 + 2 * S, T0 + 3 * S, T0 + 4 * S])
    size = path.stat().st_size
    assert first_line_after(path, 0, size, T0 + 2 * S + 10, FAR) == starts[3]
    assert first_line_after(path, 0, size, T0 - S, FAR) == 0  # nothing read yet
    assert first_line_after(path, 0, size, T0 + 5 * S, FAR) is None  # all within it
    assert first_line_after(path, starts[1], starts[3], T0 + 10, FAR) == starts[1]


def test_future_stamped_and_bad_lines_hold_nothing_back(tmp_path: Path) -> None:
    """A click stamped past the clock's bound is the joiner's to hold, and a line with
    no click id its to quarantine: neither may stop the file's lines behind it."""
    path = tmp_path / "c.000000.log"
    good = click_line(0, T0)
    ahead = click_line(1, T0 + 365 * 86_400 * S)
    bad = b'{"click_id": "not an id"}\n' + b"\xff\xfe garbage\n"
    later = click_line(2, T0 + 10 * S)
    path.write_bytes(good + ahead + bad + later)
    bound = T0 + 60 * S  # the clock plus its skew
    assert first_line_after(path, 0, path.stat().st_size, T0 + S, bound) == len(good + ahead + bad)


def test_a_torn_last_line_holds_nothing_back(tmp_path: Path) -> None:
    path = tmp_path / "c.000000.log"
    whole = click_line(0, T0)
    torn = click_line(1, T0 + 10 * S)[:-20]
    path.write_bytes(whole + torn)
    assert first_line_after(path, 0, path.stat().st_size, T0 + S, FAR) is None


def test_lines_across_scan_chunks_are_found_at_their_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pacing_module, "_SCAN_BYTES", 37)  # shorter than a line
    path = tmp_path / "c.000000.log"
    starts = write_clicks(path, [T0 + n * S for n in range(20)])
    for n in (0, 1, 7, 19):
        limit = T0 + n * S - 1
        assert first_line_after(path, 0, path.stat().st_size, limit, FAR) == starts[n]


def test_a_file_gone_holds_nothing_back(tmp_path: Path) -> None:
    assert first_line_after(tmp_path / "gone.log", 0, 100, T0, FAR) is None


def reader_dirs(tmp_path: Path) -> tuple[Path, Path]:
    state, queries = tmp_path / "reader", tmp_path / "queries"
    state.mkdir()
    queries.mkdir()
    return state, queries


def pacing_of(state: Path, queries: Path, behind_bytes: int = 100) -> Pacing:
    return Pacing(state, queries, behind_bytes=behind_bytes, lead_us=5 * S, max_ahead_us=60 * S)


def commit(state: Path, batch: int, files: dict[str, int]) -> None:
    checkpoint = state / "checkpoint"
    (checkpoint / "offsets").mkdir(parents=True, exist_ok=True)
    (checkpoint / "commits").mkdir(parents=True, exist_ok=True)
    position = json.dumps({"files": files})
    (checkpoint / "offsets" / str(batch)).write_text(f'v1\n{{"batchWatermarkMs":0}}\n{position}')
    (checkpoint / "commits" / str(batch)).write_text('v1\n{"nextBatchWatermarkMs":0}')


class Clock:
    def __init__(self) -> None:
        self.now = T0 / S

    def __call__(self) -> float:
        return self.now


def test_a_reader_with_a_backlog_limits_the_clicks_to_its_progress(tmp_path: Path) -> None:
    state, queries = reader_dirs(tmp_path)
    (queries / "q.000000.log").write_bytes(b"x" * 1_000)
    pacer = Pacer(pacing_of(state, queries))
    assert pacer.limit_us() == 5 * S  # nothing read yet: no click may be read
    (state / "progress.json").write_text(json.dumps({"progress_us": T0}))
    assert pacer.limit_us() == T0 + 5 * S
    commit(state, 0, {"q.000000.log": 950})  # 50 bytes left: within behind_bytes
    assert pacer.limit_us() is None


def test_a_reader_that_stopped_paces_nothing(tmp_path: Path) -> None:
    """A reader whose checkpoint has not changed for STALE_S (nor the joiner's source
    started since) is taken for stopped: its clicks are read as planned."""
    state, queries = reader_dirs(tmp_path)
    (queries / "q.000000.log").write_bytes(b"x" * 1_000)
    commit(state, 0, {"q.000000.log": 10})
    clock = Clock()
    old = clock.now - 1.0
    for sub in ("offsets", "commits"):
        os.utime(state / "checkpoint" / sub, (old, old))
    pacer = Pacer(pacing_of(state, queries), clock=clock)
    assert pacer.limit_us() is not None
    clock.now += STALE_S + 1
    assert pacer.limit_us() is None
    (state / "checkpoint" / "commits" / "1").write_text("v1\n{}")  # it committed again
    os.utime(state / "checkpoint" / "commits", (clock.now, clock.now))
    assert pacer.reader_behind()


def test_a_reader_that_caught_up_counts_as_behind_for_a_while(tmp_path: Path) -> None:
    """Until the joiner's source had a trigger to read what the caught-up reader lets
    it, a run until idle must not take the joiner for idle."""
    state, queries = reader_dirs(tmp_path)
    (queries / "q.000000.log").write_bytes(b"x" * 1_000)
    clock = Clock()
    pacer = Pacer(pacing_of(state, queries), clock=clock)
    assert pacer.behind_within(5.0)
    commit(state, 0, {"q.000000.log": 1_000})  # caught up
    for sub in ("offsets", "commits"):
        os.utime(state / "checkpoint" / sub, (clock.now, clock.now))
    clock.now += 4.0
    assert not pacer.reader_behind() and pacer.behind_within(5.0)
    clock.now += 2.0
    assert not pacer.behind_within(5.0)


def test_the_cut_is_remembered_while_the_limit_only_grows(tmp_path: Path) -> None:
    path = tmp_path / "c.000000.log"
    starts = write_clicks(path, [T0 + n * S for n in range(10)])
    size = path.stat().st_size
    pacer = Pacer(pacing_of(*reader_dirs(tmp_path)), clock=lambda: T0 / S)
    assert pacer.cut(path, 0, size, T0 + 3 * S + S // 2) == starts[4]
    assert pacer.cut(path, 0, size, T0 + 6 * S + S // 2) == starts[7]
    assert pacer.cut(path, 0, size, T0 + S // 2) == starts[1]  # went back (wiped): afresh
    assert pacer.cut(path, 0, size, T0 + 20 * S) == size
    # a range planned from a later start (the batch before committed) is scanned from it
    assert pacer.cut(path, starts[2], size, T0 + 20 * S) == size
    assert pacer.cut(path, starts[5], size, T0 + 20 * S) == size


def test_the_plan_gives_what_a_cut_range_leaves_of_the_budget_to_the_next_file(
    tmp_path: Path,
) -> None:
    first = tmp_path / "c1.000000.log"
    second = tmp_path / "c2.000000.log"
    starts = write_clicks(first, [T0 + n * S for n in range(10)])
    write_clicks(second, [T0 + n * S for n in range(10)])
    budget = first.stat().st_size  # the whole first file, unpaced
    reader = GrowingLogReader(tmp_path)
    unpaced = reader.plan(max_bytes=budget)
    assert [(r.file, r.end) for r in unpaced.ranges] == [(first.name, budget)]
    paced = reader.plan(
        max_bytes=budget,
        limit_end=lambda name, offset, end: starts[3] if name == first.name else end,
    )
    assert [(r.file, r.end) for r in paced.ranges] == [
        (first.name, starts[3]),
        (second.name, budget - starts[3]),
    ]
    assert paced.offsets[first.name] == starts[3]


def test_pacing_goes_to_the_source_as_options_and_back(tmp_path: Path) -> None:
    pacing = pacing_of(*reader_dirs(tmp_path))
    assert Pacing.from_options(pacing.to_options()) == pacing
    assert Pacing.from_options({"path": "x"}) is None
    with pytest.raises(ValueError, match="go together"):
        Pacing.from_options({"readerStateDir": "x"})
    with pytest.raises(ValueError, match="readerBehindBytes"):
        Pacing.from_options(pacing.to_options() | {"readerBehindBytes": "-1"})
    with pytest.raises(ValueError, match="readerLeadUs"):
        Pacing.from_options(pacing.to_options() | {"readerLeadUs": "soon"})
    with pytest.raises(ValueError, match="must not be negative"):
        Pacing(tmp_path, tmp_path, behind_bytes=-1, lead_us=0, max_ahead_us=0)
    waiting = Pacing(tmp_path, tmp_path, behind_bytes=1, lead_us=0, max_ahead_us=0, wait_ms=800)
    assert Pacing.from_options(waiting.to_options()) == waiting
    without_wait = {k: v for k, v in waiting.to_options().items() if k != "readerWaitMs"}
    assert Pacing.from_options(without_wait).wait_ms == 0  # type: ignore[union-attr]
    with pytest.raises(ValueError, match="readerWaitMs"):
        Pacing.from_options(waiting.to_options() | {"readerWaitMs": "-5"})


def test_the_readers_mark_moves_when_it_commits_a_batch(tmp_path: Path) -> None:
    state, queries = reader_dirs(tmp_path)
    pacer = Pacer(pacing_of(state, queries))
    before = pacer.reader_mark()
    assert not pacer.moved(before, timeout_s=0.05)
    (state / "progress.json").write_text(json.dumps({"progress_us": T0}))
    assert pacer.reader_mark() == before  # published, not committed: paced as before
    commits = state / "checkpoint" / "commits"
    commits.mkdir(parents=True)
    (commits / ".0.5f1c.tmp").write_text("v1\n{}")  # Spark's write, before its rename
    (commits / "..0.5f1c.tmp.crc").write_bytes(b"crc")
    assert not pacer.moved(before, timeout_s=0.05)  # the reader still reads as behind
    commit(state, 0, {"q.000000.log": 10})
    assert pacer.moved(before, timeout_s=0.0)
    committed = pacer.reader_mark()
    commit(state, 1, {"q.000000.log": 20})
    assert pacer.moved(committed, timeout_s=0.0)


def test_a_reader_is_finishing_while_it_runs_the_last_batch_of_its_backlog(
    tmp_path: Path,
) -> None:
    state, queries = reader_dirs(tmp_path)
    (queries / "q.000000.log").write_bytes(b"x" * 1_000)
    pacer = Pacer(pacing_of(state, queries))
    assert not pacer.reader_finishing()  # nothing planned yet
    commit(state, 0, {"q.000000.log": 500})
    assert not pacer.reader_finishing()  # committed, 500 bytes behind: not its last
    offsets = state / "checkpoint" / "offsets"
    (offsets / "1").write_text('v1\n{}\n{"files": {"q.000000.log": 800}}')
    assert not pacer.reader_finishing()  # in flight, but 200 left after it
    (offsets / "2").write_text("v1\n{}\n{half writ")  # being written: the one before
    assert not pacer.reader_finishing()
    (offsets / "2").write_text('v1\n{}\n{"files": {"q.000000.log": 950}}')
    assert pacer.reader_finishing() and pacer.limit_us() is not None  # still paced


def test_a_paced_source_waits_within_its_trigger_and_never_long() -> None:
    assert pacing_module.paced_wait_ms(1.0) == 800
    assert pacing_module.paced_wait_ms(0.05) == 40
    assert pacing_module.paced_wait_ms(600.0) == pacing_module.MAX_WAIT_S * 1000
