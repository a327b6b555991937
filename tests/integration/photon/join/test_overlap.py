"""Batches that overlap: a batch's groups run while the next batch is read and planned.

The driver settles a batch when the next one comes, so Spark may commit a batch
whose groups are still running; a crash then leaves it open in the journal with
no replay from Spark. These tests run the join on the real stack (registry,
Redis, object store) with the groups submitted to a thread, as the joiner app
submits them as a Spark job (docs/join.md, "Batches that overlap").
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest

from photon.events.records import QuarantineRecord
from photon.join.group import GroupOutcome, GroupWork
from photon.logs.reader import LogLine
from photon.storage import ObjectStore
from photon.tooling.gen.model import Manifest
from registry import IdRegistry

from .conftest import Clock, DcParts, MakeDc, batches
from .test_join import (
    START_US,
    S,
    _click_id,
    check_exactly_once,
    crashing,
    logs,  # noqa: F401 (a fixture)
    read_every_query,
    run_dc,
)

pytestmark = pytest.mark.integration


@pytest.fixture
def pool() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="groups") as jobs:
        yield jobs


def overlapping(dc: DcParts, pool: ThreadPoolExecutor) -> DcParts:
    """``dc`` with its groups submitted to ``pool``, as the joiner app's Spark job."""
    run = dc.joiner.run_groups
    dc.joiner.submit_groups = lambda works: pool.submit(run, works)
    return dc


def in_flight(dc: DcParts) -> str | None:
    """The batch in flight (a call: each read is a new answer, to the type checker too)."""
    return dc.joiner.in_flight


def stream_to_the_end(
    dc: DcParts, click_batches: list[list[LogLine]], first: int, root: Path, clock: Clock
) -> None:
    """The click batches from number ``first`` on, the stream's end (the batch in flight
    settled), then the DC's logs as a whole and its retries drained."""
    for n, lines in enumerate(click_batches, start=first):
        dc.joiner.process(f"{n:012d}", lines)
    dc.joiner.finish_in_flight()
    run_dc(dc, root, clock, clicks_first=False)


def committed(
    batches_by_name: dict[str, list[LogLine]],
) -> Callable[[str], tuple[Sequence[LogLine], Sequence[QuarantineRecord]] | None]:
    """Spark's offset log as the replay reads it: the lines of the batches it committed."""

    def lines_of(batch: str) -> tuple[Sequence[LogLine], Sequence[QuarantineRecord]] | None:
        lines = batches_by_name.get(batch)
        return None if lines is None else (lines, [])

    return lines_of


def test_overlapping_batches_join_every_click_exactly_once(
    make_dc: MakeDc,
    store: ObjectStore,
    logs: tuple[Path, Manifest],  # noqa: F811
    pool: ThreadPoolExecutor,
) -> None:
    root, manifest = logs
    clock = Clock(START_US)
    a = overlapping(make_dc("a", root, clock), pool)
    read_every_query(a, root)
    first, *rest = batches(root / "a" / "clicks", 4 * 1024)
    a.joiner.process(f"{0:012d}", first)
    assert in_flight(a) == f"{0:012d}"  # handed back with its groups running
    a.joiner.process(f"{1:012d}", rest[0])  # settles batch 0 first
    assert a.retries.unfinished_batches() == [f"{1:012d}"]
    stream_to_the_end(a, rest[1:], 2, root, clock)
    assert in_flight(a) is None and a.retries.unfinished_batches() == []
    check_exactly_once(store, manifest)


def _held_groups(
    dc: DcParts,
) -> list[tuple[Future[list[GroupOutcome]], list[GroupWork]]]:
    """``dc`` with its groups submitted to futures the test ends: the groups held."""
    held: list[tuple[Future[list[GroupOutcome]], list[GroupWork]]] = []

    def submit(works: list[GroupWork]) -> Future[list[GroupOutcome]]:
        future: Future[list[GroupOutcome]] = Future()
        held.append((future, works))
        return future

    dc.joiner.submit_groups = submit
    return held


def test_no_retry_pass_runs_while_a_batch_is_in_flight_and_one_settles_it_once_done(
    make_dc: MakeDc,
    logs: tuple[Path, Manifest],  # noqa: F811
) -> None:
    root, _ = logs
    clock = Clock(START_US)
    a = make_dc("a", root, clock)
    held = _held_groups(a)
    a.joiner.process(f"{0:012d}", batches(root / "a" / "clicks", 4 * 1024)[0])
    clock.now_us += 60 * S  # retries would be due, and the stream quiet long since
    assert a.joiner.process_retries() is None  # its groups still run
    assert in_flight(a) == f"{0:012d}" and a.retries.pending() == 0
    future, works = held.pop()
    future.set_result(a.joiner.run_groups(works))
    a.joiner.process_retries()  # settles it (and may run a pass)
    assert in_flight(a) is None and a.retries.pending() > 0  # no query read: all wait
    assert f"{0:012d}" not in a.retries.unfinished_batches()


def _await(done: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 10
    while not done():
        assert time.monotonic() < deadline, "not settled"
        time.sleep(0.01)


def test_a_batch_is_settled_once_its_groups_are_done_with_nothing_after_it(
    make_dc: MakeDc,
    logs: tuple[Path, Manifest],  # noqa: F811
) -> None:
    """The stream's last batch: no next batch settles it, and it need not wait for the
    idle loop's next look either (docs/join.md, "Batches that overlap")."""
    root, _ = logs
    a = make_dc("a", root, Clock(START_US))
    held = _held_groups(a)
    a.joiner.process(f"{0:012d}", batches(root / "a" / "clicks", 4 * 1024)[0])
    assert in_flight(a) == f"{0:012d}"
    future, works = held.pop()
    future.set_result(a.joiner.run_groups(works))  # and nothing else is called
    _await(lambda: a.retries.unfinished_batches() == [])
    assert in_flight(a) is None and a.retries.pending() > 0  # no query read: all wait


def test_an_error_settling_a_batch_on_its_own_reaches_the_next_call(
    make_dc: MakeDc,
    logs: tuple[Path, Manifest],  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Settled from a thread of its own, a batch whose settling fails stays open in the
    journal (to be replayed), and the error is raised to the next batch or pass, as if
    that had settled it."""
    root, _ = logs
    a = make_dc("a", root, Clock(START_US))
    held = _held_groups(a)
    a.joiner.process(f"{0:012d}", batches(root / "a" / "clicks", 4 * 1024)[0])
    monkeypatch.setattr(a.joiner, "_settle", crashing("the retry store's disk failed"))
    future, works = held.pop()
    future.set_result(a.joiner.run_groups(works))
    _await(lambda: in_flight(a) is None)  # taken to settle; the call below waits for it
    with pytest.raises(SystemExit):
        a.joiner.process_retries()
    assert a.retries.unfinished_batches() == [f"{0:012d}"]
    monkeypatch.undo()
    a.joiner.process_retries()  # raised once; the open batch is Spark's to replay
    assert a.retries.unfinished_batches() == [f"{0:012d}"]


@pytest.mark.parametrize("next_batch", [True, False], ids=["next-batch", "stream-idle"])
def test_a_batch_spark_committed_with_its_groups_running_is_replayed_after_a_crash(
    make_dc: MakeDc,
    store: ObjectStore,
    registry: IdRegistry,
    logs: tuple[Path, Manifest],  # noqa: F811
    pool: ThreadPoolExecutor,
    monkeypatch: pytest.MonkeyPatch,
    next_batch: bool,
) -> None:
    """The process dies with batch 0's groups past their registry commit and before
    their write, after Spark committed batch 0: Spark will not replay it. Its replay
    reads it from the offset log, before Spark's next batch or, with none coming,
    in a retry pass: every click joined once."""
    root, manifest = logs
    clock = Clock(START_US)
    a = overlapping(make_dc("a", root, clock), pool)
    read_every_query(a, root)
    click_batches = batches(root / "a" / "clicks", 16 * 1024)
    monkeypatch.setattr(a.joiner.output, "joined", crashing("killed with its groups running"))
    a.joiner.process(f"{0:012d}", click_batches[0])
    assert in_flight(a) == f"{0:012d}"
    with pytest.raises(SystemExit):
        a.joiner.finish_in_flight()  # its groups died after registering: the batch stays open
    monkeypatch.undo()
    assert a.retries.unfinished_batches() == [f"{0:012d}"]
    ids = {c for c in map(_click_id, click_batches[0]) if c is not None}
    assert any(registry.read_token(c) == "a/run1/000000000000" for c in ids)

    restarted = overlapping(make_dc("a", root, clock), pool)  # same journal, Spark committed 0
    restarted.joiner.committed_batch_lines = committed({f"{0:012d}": click_batches[0]})
    clock.now_us += S
    if next_batch:
        restarted.joiner.process(f"{1:012d}", click_batches[1])
        start = 2
    else:
        restarted.joiner.process_retries()  # no line comes: the idle loop replays it
        assert restarted.retries.unfinished_batches() == []
        start = 1
    stream_to_the_end(restarted, click_batches[start:], start, root, clock)
    check_exactly_once(store, manifest)


def test_an_open_batch_spark_has_no_record_of_is_left_to_recovery(
    make_dc: MakeDc,
    logs: tuple[Path, Manifest],  # noqa: F811
) -> None:
    """Not committed by Spark and not the batch Spark runs: its checkpoint was reset."""
    root, _ = logs
    clock = Clock(START_US)
    a = make_dc("a", root, clock)
    a.joiner.committed_batch_lines = committed({})
    a.retries.begin_batch(f"{3:012d}", clock.now_us, 0)
    a.joiner.process(f"{0:012d}", batches(root / "a" / "clicks", 4 * 1024)[0])
    assert a.retries.unfinished_batches() == []
