"""The retry store: backoff, limits, idempotent deferral, open batches, on a real SQLite file."""

from __future__ import annotations

import random
import sqlite3
from pathlib import Path

import pytest

from photon.join.retry import PendingClick, RetryStore, pending_click
from photon.settings import RetrySettings

pytestmark = pytest.mark.unit

S = 1_000_000
POLICY = RetrySettings(
    initial_backoff_s=1, max_backoff_s=8, multiplier=2, jitter=0.0, max_attempts=3, max_age_s=60
)


def click(n: int) -> PendingClick:
    return PendingClick(f"10.2.0.1:7:{1_767_225_600_000_000 + n}", b"{}", "c.log", n * 10)


@pytest.fixture
def store(tmp_path: Path) -> RetryStore:
    return RetryStore(tmp_path / "dc" / "retry.sqlite", POLICY)


def test_backoff_grows_to_its_cap(store: RetryStore) -> None:
    assert [store.backoff_us("x", n) // S for n in range(1, 6)] == [1, 2, 4, 8, 8]


def test_jitter_stays_within_bounds_and_is_the_same_on_a_replay(tmp_path: Path) -> None:
    jittery = RetryStore(tmp_path / "j.sqlite", POLICY.model_copy(update={"jitter": 0.5}))
    values = [jittery.backoff_us(f"id{n}", 2) for n in range(200)]
    assert all(1 * S <= v <= 3 * S for v in values)
    assert len(set(values)) > 100
    assert jittery.backoff_us("id7", 2) == values[7]


def test_a_deferred_click_is_due_after_its_backoff(store: RetryStore) -> None:
    deferred, expired = store.defer([click(1)], now_us=100 * S)
    assert [c.attempts for c in deferred] == [1] and expired == []
    assert store.due(100 * S + S - 1, 10) == []
    [due] = store.due(101 * S, 10)
    assert due.click_id == click(1).click_id and due.first_seen_us == 100 * S


def test_deferring_twice_keeps_one_row(store: RetryStore) -> None:
    store.defer([click(1), click(1)], now_us=100 * S)
    assert store.pending() == 1


def test_a_batch_of_deferrals_counts_each_click_from_its_own_row(store: RetryStore) -> None:
    """One read and one write a batch: each click's tries and first sighting still come
    from its own row, a click given twice counts twice, and one past the limits is
    left as it was."""
    store.defer([click(1), click(2)], now_us=100 * S)
    store.defer([click(2)], now_us=110 * S)
    deferred, expired = store.defer([click(1), click(2), click(3), click(3)], now_us=170 * S)
    assert [(c.click_id, c.attempts, c.first_seen_us) for c in deferred] == [
        (click(1).click_id, 2, 100 * S),
        (click(3).click_id, 1, 170 * S),
        (click(3).click_id, 2, 170 * S),
    ]
    assert [(c.click_id, c.attempts) for c in expired] == [(click(2).click_id, 3)]

    def due_at(now_us: int) -> set[str]:
        return {c.click_id for c in store.due(now_us, 10)}

    assert click(1).click_id not in due_at(172 * S - 1)  # its 2nd try: 2 s
    assert click(1).click_id in due_at(172 * S)
    assert store.contains(click(2).click_id)  # expired: the caller writes it, then removes it


def test_holding_many_clicks_keeps_the_tries_of_those_waiting(store: RetryStore) -> None:
    store.defer([click(1)], now_us=100 * S)
    assert store.hold([click(1), click(2)], now_us=100 * S, until_us=103 * S) == 2
    assert store.due(102 * S, 10) == []
    assert [(c.click_id, c.attempts) for c in store.due(103 * S, 10)] == [
        (click(1).click_id, 1),
        (click(2).click_id, 0),
    ]


def test_a_click_expires_only_past_both_attempts_and_age(store: RetryStore) -> None:
    for t in (0, 2, 4, 6, 8):  # attempts 1..5, all within the max age
        _, expired = store.defer([click(1)], now_us=t * S)
        assert expired == []
    _, expired = store.defer([click(1)], now_us=61 * S)
    assert [c.attempts for c in expired] == [6]
    assert store.pending() == 1  # until the caller has written it out and removes it
    store.remove([c.click_id for c in expired])
    assert store.pending() == 0


def test_a_click_past_the_limits_expires_only_when_allowed(store: RetryStore) -> None:
    for t in (0, 2, 4):
        store.defer([click(1)], now_us=t * S)
    deferred, expired = store.defer([click(1)], now_us=61 * S, may_expire=lambda _: False)
    assert expired == [] and [c.attempts for c in deferred] == [4]
    _, expired = store.defer([click(1)], now_us=70 * S, may_expire=lambda _: True)
    assert [c.attempts for c in expired] == [5]


def test_a_store_made_before_batches_kept_their_clock_still_opens(tmp_path: Path) -> None:
    import sqlite3

    path = tmp_path / "old.sqlite"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE open_batches (batch TEXT PRIMARY KEY)")
    db.execute("INSERT INTO open_batches VALUES ('000000000003')")
    db.commit()
    db.close()
    store = RetryStore(path, POLICY)
    start = store.begin_batch("000000000003", 7 * S, 6 * S, 4)
    assert (start.replay, start.now_us, start.reader_progress_us) == (True, 7 * S, 6 * S)
    assert start.groups == 1  # opened before batches had groups: it was one


def test_remove_and_contains(store: RetryStore) -> None:
    store.defer([click(1), click(2)], now_us=0)
    store.remove([click(1).click_id])
    assert not store.contains(click(1).click_id) and store.contains(click(2).click_id)


@pytest.mark.parametrize("absent", [0, 1, 40], ids=["probed", "probed-one-absent", "scanned"])
def test_remove_drops_exactly_the_given_clicks_whether_the_store_is_scanned_or_probed(
    store: RetryStore, absent: int
) -> None:
    # Ten waiting clicks. Two of them and ``absent`` never-seen ids are removed: with
    # few ids the store is probed by id, with many (a batch's joined clicks) it is read.
    store.defer([click(n) for n in range(10)], now_us=0)
    never_here = [click(100 + n).click_id for n in range(absent)]
    store.remove([click(3).click_id, *never_here, click(7).click_id])
    assert sorted(store.click_ids()) == sorted(
        click(n).click_id for n in range(10) if n not in (3, 7)
    )
    store.remove(never_here)  # none of them waits here: no error, nothing dropped
    assert store.pending() == 8


def test_a_batch_closes_with_the_clicks_it_settled_in_one_transaction(
    store: RetryStore,
) -> None:
    store.defer([click(1), click(2)], now_us=0)
    store.begin_batch("000000000003", 5 * S, 3 * S)
    store.finish_batch("000000000003", settled=[click(1).click_id, click(9).click_id])
    assert store.click_ids() == [click(2).click_id] and store.unfinished_batches() == []
    store.begin_batch("000000000004", 6 * S, 3 * S)
    # A close that fails (here a trigger refuses it) drops none of the batch's clicks.
    store._db.execute(
        "CREATE TRIGGER refuse BEFORE DELETE ON open_batches BEGIN SELECT RAISE(ABORT, 'no'); END"
    )
    with pytest.raises(sqlite3.IntegrityError):
        store.finish_batch("000000000004", settled=[click(2).click_id])
    assert store.click_ids() == [click(2).click_id]
    assert store.unfinished_batches() == ["000000000004"]


@pytest.mark.parametrize("seed", range(5))
def test_due_takes_the_first_clicks_due_by_timer_or_woken_by_the_reader(
    tmp_path: Path, seed: int
) -> None:
    """Whatever mix of timers and wakes the store holds: the first ``limit`` by due time
    (then click id) of the clicks due by their timer or woken by the reader's progress,
    each once."""
    store = RetryStore(tmp_path / "r.sqlite", POLICY.model_copy(update={"jitter": 0.5}))
    rng = random.Random(seed)
    for n in range(300):
        woken_at = rng.randrange(200) * S if rng.random() < 0.3 else None
        if n == 1:
            woken_at = 100 * S  # woken by a reader exactly that far
        wake = {click(n).click_id: woken_at} if woken_at is not None else {}
        store.defer([click(n)], now_us=rng.randrange(6) * S, wake_at_progress=wake)
    store.hold([click(n) for n in range(0, 300, 7)], now_us=0, until_us=4 * S)  # ties
    rows = store._db.execute("SELECT click_id, due_us, wake_progress_us FROM retries").fetchall()
    for now, progress, limit in [(0, -1, 10), (2 * S, 100 * S, 60), (4 * S, 150 * S, 1000)]:
        expected = sorted(
            (due, click_id)
            for click_id, due, woken_at in rows
            if due <= now or (woken_at is not None and woken_at <= progress)
        )[:limit]
        got = store.due(now, limit, reader_progress_us=progress)
        assert [c.click_id for c in got] == [click_id for _, click_id in expected]


def test_open_batches_survive_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "r.sqlite"
    first = RetryStore(path, POLICY)
    assert first.begin_batch("000000000007", 5 * S, 3 * S).replay is False
    first.close()
    again = RetryStore(path, POLICY)
    assert again.unfinished_batches() == ["000000000007"]
    # The replay gets its first try's clock and query-reader progress, not its own.
    start = again.begin_batch("000000000007", 9 * S, 8 * S)
    assert (start.replay, start.now_us, start.reader_progress_us) == (True, 5 * S, 3 * S)
    again.finish_batch("000000000007")
    assert again.unfinished_batches() == []
    assert again.next_sequence("pass") == 1 and again.next_sequence("pass") == 2


def test_a_replay_splits_into_its_first_trys_groups(store: RetryStore) -> None:
    assert store.begin_batch("000000000009", 5 * S, 3 * S, 3).groups == 3
    assert store.begin_batch("000000000009", 6 * S, 4 * S, 8).groups == 3  # more cores now
    with pytest.raises(ValueError, match="groups must be at least 1"):
        store.begin_batch("000000000010", 5 * S, 3 * S, 0)


def test_recovery_injects_clicks_due_at_a_time_and_never_delays_a_waiting_one(
    store: RetryStore,
) -> None:
    store.defer([click(1)], now_us=0)  # waiting, due at ~1 s
    assert store.inject([click(1), click(2)], due_us=30 * S) == 2
    assert {c.click_id for c in store.due(2 * S, 10)} == {click(1).click_id}
    assert store.inject([click(2)], due_us=0) == 1  # made due now
    assert {c.click_id for c in store.due(2 * S, 10)} == {click(1).click_id, click(2).click_id}
    [injected] = [c for c in store.due(2 * S, 10) if c.click_id == click(2).click_id]
    assert injected.attempts == 0
    assert sorted(store.click_ids()) == sorted([click(1).click_id, click(2).click_id])


def test_a_click_waiting_for_its_query_reader_is_due_once_the_reader_reads_that_far(
    store: RetryStore,
) -> None:
    store.defer([click(1)], now_us=100 * S, wake_at_progress={click(1).click_id: 50 * S})
    store.defer([click(2)], now_us=100 * S)  # its reader had read its query: the timer only
    assert store.due(100 * S, 10, reader_progress_us=50 * S - 1) == []
    [woken] = store.due(100 * S, 10, reader_progress_us=50 * S)  # long before its backoff
    assert woken.click_id == click(1).click_id and woken.attempts == 1
    assert woken.behind_reader  # its last try came before the reader got this far
    # tried again and not found, with its reader past its query: back on the timer alone
    store.defer([click(1)], now_us=100 * S)
    assert store.due(100 * S, 10, reader_progress_us=90 * S) == []
    due = store.due(102 * S, 10, reader_progress_us=90 * S)
    assert len(due) == 2 and not any(c.behind_reader for c in due)


def test_a_held_click_is_not_woken_by_the_reader_before_its_grace_ends(store: RetryStore) -> None:
    store.defer([click(1)], now_us=100 * S, wake_at_progress={click(1).click_id: 50 * S})
    store.hold([click(1)], now_us=100 * S, until_us=110 * S)
    assert store.due(105 * S, 10, reader_progress_us=60 * S) == []
    assert len(store.due(110 * S, 10, reader_progress_us=60 * S)) == 1


def _old_store(path: Path, columns: str = "") -> RetryStore:
    """A retry store made by an earlier version: the first columns (and ``columns``),
    one click pending (tried once, due at 5)."""
    import sqlite3

    db = sqlite3.connect(path)
    db.execute(
        "CREATE TABLE retries (click_id TEXT PRIMARY KEY, raw BLOB NOT NULL, file TEXT NOT NULL,"
        " offset INTEGER NOT NULL, first_seen_us INTEGER NOT NULL, attempts INTEGER NOT NULL,"
        f" due_us INTEGER NOT NULL{columns})"
    )
    db.execute(
        "INSERT INTO retries (click_id, raw, file, offset, first_seen_us, attempts, due_us)"
        " VALUES (?, x'7b7d', 'c.log', 0, 0, 1, 5)",
        (click(1).click_id,),
    )
    db.commit()
    db.close()
    return RetryStore(path, POLICY)


def test_a_store_made_before_clicks_waited_for_the_reader_still_opens(tmp_path: Path) -> None:
    store = _old_store(tmp_path / "old.sqlite")
    assert [c.click_id for c in store.due(5, 10)] == [click(1).click_id]  # kept, on its timer
    store.defer([click(2)], now_us=0, wake_at_progress={click(2).click_id: 9})
    assert [c.click_id for c in store.due(0, 10, reader_progress_us=9)] == [click(2).click_id]


def test_a_click_held_as_too_new_waits_without_a_try_and_no_run_waits_for_it(
    store: RetryStore,
) -> None:
    store.defer([click(1)], now_us=100 * S)  # an ordinary pending click
    store.hold([click(2)], now_us=100 * S, until_us=3_700 * S, too_new=True)  # an hour ahead
    assert store.pending() == 2 and store.too_new(100 * S) == 1
    assert store.settleable(100 * S) == 1  # a run may end with the held one pending
    assert [c.click_id for c in store.due(200 * S, 10)] == [click(1).click_id]
    [due] = [c for c in store.due(3_700 * S, 10) if c.click_id == click(2).click_id]
    assert due.attempts == 0  # holding counts no try
    assert store.too_new(3_700 * S) == 0 and store.settleable(3_700 * S) == 2  # in range now
    store.hold([click(2)], now_us=3_700 * S, until_us=3_800 * S, too_new=True)
    store.defer([click(2)], now_us=3_800 * S)  # tried once in range: an ordinary click
    assert store.too_new(0) == 0 and store.settleable(0) == 2


def test_tried_clicks_waiting_for_their_query_are_listed_for_a_wake_within_the_window(
    store: RetryStore,
) -> None:
    queries = {click(n).click_id: f"q{n}" for n in (1, 2, 3, 4)}
    store.defer([click(1)], now_us=100 * S, query_ids=queries)  # first seen at 100 s
    store.defer([click(1)], now_us=129 * S)  # tried again: due at 131 s, its query kept
    store.defer([click(2)], now_us=130 * S, query_ids=queries)  # first seen at 130 s
    store.defer([click(3)], now_us=130 * S)  # deferred without its query's id
    store.hold([click(4)], now_us=130 * S, until_us=133 * S)  # affinity: no try yet
    store.hold([click(5)], now_us=130 * S, until_us=900 * S, too_new=True)
    listed = store.waiting_for_queries(130 * S, 90 * S, 130 * S, limit=10)
    assert sorted(listed) == [(click(1).click_id, "q1"), (click(2).click_id, "q2")]
    # the window: first seen from 120 s only; the newest first within the limit
    assert store.waiting_for_queries(130 * S, 120 * S, 130 * S, 10) == [(click(2).click_id, "q2")]
    assert store.waiting_for_queries(130 * S, 90 * S, 130 * S, 1) == [(click(2).click_id, "q2")]
    # a click due already is not waiting: its try comes anyway
    assert store.waiting_for_queries(131 * S, 130 * S, 131 * S, 10) == []


def test_a_woken_click_is_due_at_once_and_keeps_its_tries_and_its_query(store: RetryStore) -> None:
    store.defer([click(1), click(2)], now_us=100 * S, query_ids={click(1).click_id: "q1"})
    assert store.due(100 * S + S // 2, 10) == []  # both on their 1 s timer
    assert store.wake([click(1).click_id, "no-such-click"], now_us=100 * S + S // 2) == 1
    [due] = store.due(100 * S + S // 2, 10)
    assert due.click_id == click(1).click_id and due.attempts == 1
    assert store.wake([click(1).click_id], now_us=100 * S + S // 2) == 0  # due already
    store.defer([click(1)], now_us=101 * S)  # tried again, not found: its query id stays
    assert store.waiting_for_queries(101 * S, 0, 101 * S, 10) == [(click(1).click_id, "q1")]


def test_a_retried_click_keeps_its_row_and_takes_a_query_named_anew(store: RetryStore) -> None:
    """A retry rewrites only the schedule of a click whose query is as stored (or not
    given), and the whole row of one whose query is named anew."""
    store.hold([click(1)], now_us=100 * S, until_us=900 * S, too_new=True)
    store.defer([click(2)], now_us=100 * S, query_ids={click(2).click_id: "q2"})
    store.defer([click(3)], now_us=100 * S, query_ids={click(3).click_id: "q3"})
    queries = {click(1).click_id: "q1", click(2).click_id: "q2", click(3).click_id: "q3-new"}
    wake = {click(2).click_id: 150 * S}
    deferred, _ = store.defer(
        [click(1), click(2), click(3)], now_us=110 * S, query_ids=queries, wake_at_progress=wake
    )
    assert [(c.click_id, c.attempts, c.first_seen_us) for c in deferred] == [
        (click(1).click_id, 1, 100 * S),  # held without a try: this is its first
        (click(2).click_id, 2, 100 * S),
        (click(3).click_id, 2, 100 * S),
    ]
    assert store.too_new(0) == 0  # tried once in range: an ordinary click
    assert sorted(store.waiting_for_queries(110 * S, 0, 110 * S, 10)) == [
        (click(1).click_id, "q1"),
        (click(2).click_id, "q2"),
        (click(3).click_id, "q3-new"),
    ]
    [woken] = store.due(0, 10, reader_progress_us=150 * S)  # its wake was written too
    assert woken.click_id == click(2).click_id and woken.behind_reader


def test_a_spared_click_is_due_at_its_window_until_its_timer_is_given_back(
    store: RetryStore,
) -> None:
    """Sparing makes a click due at its first sighting plus ``spare_us`` (when its backoff
    would end sooner), its backoff's due time kept: a wake ends the spare, a hold keeps it
    (its timer no sooner than the hold's end), and a restore gives back the timer of those
    still spared."""
    queries = {click(n).click_id: f"q{n}" for n in (1, 2, 3, 4)}
    store.defer([click(4)], now_us=90 * S, query_ids=queries)  # first seen at 90 s
    store.defer([click(n) for n in (1, 2, 3)], now_us=100 * S, query_ids=queries)
    clicks = [click(n) for n in (1, 2, 3, 4)]
    spared = {c.click_id for c in clicks}
    deferred, _ = store.defer(clicks, 101 * S, spared=spared, spare_us=12 * S)
    assert [c.attempts for c in deferred] == [2, 2, 2, 2]  # tries are counted as ever
    # each due 2 s on (at 103 s) by its backoff; spared, at 112 s, but click 4 at 102 s:
    # its window ends before its backoff does, so its timer decides
    assert [c.click_id for c in store.due(103 * S, 10)] == [click(4).click_id]
    assert len(store.waiting_for_queries(103 * S, 0, 103 * S, 10)) == 3  # the look covers them
    assert store.wake([click(1).click_id], now_us=105 * S) == 1  # its query came
    store.hold([click(2)], now_us=105 * S, until_us=106 * S)  # its line came again
    assert store.restore_spared() == 2  # clicks 2 and 3: click 1's spare ended
    due = {c.click_id for c in store.due(105 * S, 10)}
    assert due == {click(n).click_id for n in (1, 3, 4)}  # click 3's timer: 103 s
    assert click(2).click_id in {c.click_id for c in store.due(106 * S, 10)}  # the hold's end
    assert store.restore_spared() == 0


def test_a_store_made_before_clicks_kept_their_query_id_still_opens(tmp_path: Path) -> None:
    store = _old_store(
        tmp_path / "old.sqlite", ", wake_progress_us INTEGER, too_new_until_us INTEGER"
    )
    assert store.waiting_for_queries(0, 0, 10, 10) == []  # no query id: its timer wakes it
    assert [c.click_id for c in store.due(5, 10)] == [click(1).click_id]


@pytest.mark.parametrize("query_id", [None, "10.1.0.1:4242:1767225600123456"])
def test_a_pending_click_built_past_init_is_the_one_init_builds(query_id: str | None) -> None:
    import dataclasses
    import pickle

    args = ("10.2.0.1:7:1767225605000000", b'{"x":1}', "c.log", 12, 5, 2, True, query_id)
    fast, slow = pending_click(*args), PendingClick(*args)
    assert fast == slow and hash(fast) == hash(slow) and repr(fast) == repr(slow)
    assert pending_click(*args[:4]) == PendingClick(*args[:4])
    assert pickle.loads(pickle.dumps(fast)) == slow  # noqa: S301 (bytes it just wrote)
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast.attempts = 3  # type: ignore[misc]
