"""The query reader's progress: what it has provably read, from per-file views."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from photon.join.cache_signs import CacheSigns
from photon.join.progress import (
    NOTHING_READ,
    CacheIntact,
    FileStat,
    ReaderProgress,
    ReadLine,
    file_stats,
    published_mark,
    read_cache_intact,
    read_cache_lost_at,
    read_progress,
)

pytestmark = pytest.mark.unit

S = 1_000_000
T0 = 1_767_225_600 * S
BOUND = 5 * S
IDLE = 30 * S


def at(now_us: int, sizes: dict[str, int]) -> dict[str, FileStat]:
    """The files as a look at ``now_us`` sees them, each last written then."""
    return {name: FileStat(size, now_us) for name, size in sizes.items()}


@pytest.fixture
def progress(tmp_path: Path) -> ReaderProgress:
    return ReaderProgress(tmp_path, order_bound_us=BOUND, idle_us=IDLE)


def test_nothing_is_proven_before_anything_is_read(progress: ReaderProgress) -> None:
    assert progress.advance(at(T0, {"q.1.log": 500}), T0) == NOTHING_READ  # unread, time unknown


def test_with_no_query_file_at_all_everything_written_was_read(progress: ReaderProgress) -> None:
    assert progress.advance(at(T0, {}), T0) == T0 - IDLE


def test_a_file_read_part_way_proves_its_newest_time_less_the_order_bound(
    progress: ReaderProgress,
) -> None:
    progress.observe([ReadLine("q.1.log", 100, T0), ReadLine("q.1.log", 200, T0 + 10 * S)])
    assert progress.advance(at(T0 + 20 * S, {"q.1.log": 900}), T0 + 20 * S) == T0 + 10 * S - BOUND


def test_the_slowest_live_file_holds_the_progress_back(progress: ReaderProgress) -> None:
    progress.observe([ReadLine("a.log", 100, T0 + 50 * S), ReadLine("b.log", 100, T0 + 20 * S)])
    # Both read to their end, both grew just now: either may still append.
    assert (
        progress.advance(at(T0 + 60 * S, {"a.log": 100, "b.log": 100}), T0 + 60 * S) == T0 + 15 * S
    )


def test_an_idle_file_read_to_its_end_no_longer_holds_it_back(progress: ReaderProgress) -> None:
    progress.observe([ReadLine("old.log", 100, T0), ReadLine("new.log", 100, T0 + 40 * S)])
    assert (
        progress.advance(at(T0 + 41 * S, {"old.log": 100, "new.log": 100}), T0 + 41 * S)
        == T0 - BOUND
    )
    progress.observe([ReadLine("new.log", 200, T0 + 80 * S)])
    # old.log has not grown for longer than IDLE: its writer moved on.
    assert (
        progress.advance(at(T0 + 81 * S, {"old.log": 100, "new.log": 200}), T0 + 81 * S)
        == T0 + 75 * S
    )


def test_with_every_file_read_and_idle_everything_written_was_read(
    progress: ReaderProgress,
) -> None:
    progress.observe([ReadLine("a.log", 100, T0)])
    progress.advance(at(T0 + S, {"a.log": 100}), T0 + S)
    assert (
        progress.advance(at(T0 + S + IDLE, {"a.log": 100}), T0 + S + IDLE) == T0 + S
    )  # the clock less IDLE
    assert progress.advance(at(T0 + 100 * S, {"a.log": 100}), T0 + 100 * S) == T0 + 100 * S - IDLE


def test_silent_query_files_hold_the_progress_while_clicks_are_logged(
    progress: ReaderProgress,
) -> None:
    progress.observe([ReadLine("q.log", 100, T0)])
    progress.advance(at(T0 + S, {"q.log": 100}), T0 + S, at(T0 + S, {"c.log": 10}))
    # The query shipper stalls; the ad servers go on logging clicks: no clock.
    for n in range(2, 200, 20):
        now = T0 + n * S
        clicks = at(now, {"c.log": 10 + n})
        held = T0 - BOUND if n < 31 else T0  # q.log live, then idle: its newest time
        assert progress.advance(at(T0 + S, {"q.log": 100}), now, clicks) == held
        assert not progress.settled(at(T0 + S, {"q.log": 100}), now)
    # The clicks stop too: the writers stopped, and the clock runs once both are idle.
    last = T0 + 182 * S
    idle = at(last, {"c.log": 192})
    assert progress.advance(at(T0 + S, {"q.log": 100}), last + IDLE - S, idle) == T0
    assert progress.advance(at(T0 + S, {"q.log": 100}), last + IDLE + S, idle) == last + S
    assert progress.settled(at(T0 + S, {"q.log": 100}), last + IDLE + S)


def test_click_files_are_remembered_across_a_restart(tmp_path: Path) -> None:
    first = ReaderProgress(tmp_path, order_bound_us=BOUND, idle_us=IDLE)
    first.observe([ReadLine("q.log", 100, T0)])
    clicks = at(T0 + IDLE, {"c.log": 10})
    first.advance(at(T0, {"q.log": 100}), T0 + IDLE + S, clicks)
    first.save("000000000001")
    again = ReaderProgress(tmp_path, order_bound_us=BOUND, idle_us=IDLE)
    # c.log grew at T0 + IDLE, as the first reader saw: still live two seconds later.
    assert not again.settled(at(T0, {"q.log": 100}), T0 + IDLE + 2 * S)
    assert again.advance(at(T0, {"q.log": 100}), T0 + IDLE + 2 * S, clicks) == T0
    # A click file gone is forgotten: nothing is live any more.
    assert again.advance(at(T0, {"q.log": 100}), T0 + IDLE + 3 * S, {}) == T0 + 3 * S


def test_recovery_logs_are_not_the_ad_servers_clicks(tmp_path: Path) -> None:
    (tmp_path / "server.1.log").write_bytes(b"x\n")
    (tmp_path / "recovery-run-1.log").write_bytes(b"y\n")
    (tmp_path / "recovery-run-1.pending").write_bytes(b"z\n")
    assert set(file_stats(tmp_path, skip_prefix="recovery-")) == {"server.1.log"}
    assert set(file_stats(tmp_path)) == {"server.1.log", "recovery-run-1.log"}


def test_a_new_file_not_read_yet_stops_the_progress_where_it_was(
    progress: ReaderProgress,
) -> None:
    progress.observe([ReadLine("a.log", 100, T0 + 50 * S)])
    before = progress.advance(at(T0 + 60 * S, {"a.log": 200}), T0 + 60 * S)
    assert before == T0 + 45 * S
    # A reader behind on a file it has not read a line of: it may hold any time.
    assert progress.advance(at(T0 + 61 * S, {"a.log": 200, "late.log": 900}), T0 + 61 * S) == before


def test_the_progress_never_goes_back(progress: ReaderProgress) -> None:
    progress.observe([ReadLine("a.log", 100, T0 + 50 * S)])
    assert progress.advance(at(T0 + 51 * S, {"a.log": 100}), T0 + 51 * S) == T0 + 45 * S
    progress.observe([ReadLine("b.log", 100, T0 + 10 * S)])  # an older file shows up
    assert (
        progress.advance(at(T0 + 52 * S, {"a.log": 100, "b.log": 100}), T0 + 52 * S) == T0 + 45 * S
    )


def test_malformed_lines_move_the_read_end_but_prove_no_time(progress: ReaderProgress) -> None:
    progress.observe([ReadLine("good.log", 100, T0), ReadLine("bad.log", 100, None)])
    assert progress.advance(at(T0 + S, {"good.log": 100, "bad.log": 100}), T0 + S) == T0 - BOUND
    # More unread lines of a file whose lines had no valid time: no time is proven.
    assert (
        progress.advance(at(T0 + 2 * S, {"good.log": 100, "bad.log": 300}), T0 + 2 * S)
        == T0 - BOUND
    )


def test_a_replayed_batch_changes_nothing(progress: ReaderProgress) -> None:
    batch = [ReadLine("a.log", 100, T0), ReadLine("a.log", 250, T0 + 3 * S)]
    progress.observe(batch)
    first = progress.advance(at(T0 + 10 * S, {"a.log": 400}), T0 + 10 * S)
    progress.observe(batch)
    assert progress.advance(at(T0 + 10 * S, {"a.log": 400}), T0 + 10 * S) == first


def test_it_survives_a_restart_and_publishes_for_the_joiner(tmp_path: Path) -> None:
    assert read_progress(tmp_path) == NOTHING_READ
    first = ReaderProgress(tmp_path, order_bound_us=BOUND, idle_us=IDLE)
    first.observe([ReadLine("a.log", 100, T0 + 50 * S)])
    published = first.advance(at(T0 + 51 * S, {"a.log": 100}), T0 + 51 * S)
    first.save("000000000004")
    assert read_progress(tmp_path) == published
    again = ReaderProgress(tmp_path, order_bound_us=BOUND, idle_us=IDLE)
    assert again.progress_us == published
    assert (
        again.advance(at(T0 + 52 * S, {"a.log": 100}), T0 + 52 * S) == published
    )  # a.log is known read
    (tmp_path / "progress.json").write_text("{not json")
    assert read_progress(tmp_path) == NOTHING_READ


def test_a_look_between_batches_never_publishes_bytes_it_published_before_a_batch(
    tmp_path: Path,
) -> None:
    """The joiner's wake look takes the same bytes twice for "nothing cached since": a
    publish between batches names the last batch cached, so the bytes after batch 2 and a
    look differ from those after batch 1 and a look, the progress the same in both."""
    progress = ReaderProgress(tmp_path, order_bound_us=BOUND, idle_us=IDLE)
    # A live file the reader is behind on holds the progress where it is.
    progress.observe([ReadLine("a.log", 100, T0), ReadLine("held.log", 100, T0)])
    progress.advance(at(T0 + S, {"a.log": 100, "held.log": 900}), T0 + S)
    progress.save("000000000001")
    progress.advance(at(T0 + 2 * S, {"a.log": 150, "held.log": 900}), T0 + 2 * S)
    progress.save()  # a look between batches: a.log grew
    after_first = published_mark(tmp_path)
    progress.observe([ReadLine("a.log", 150, T0 + S)])  # batch 2's query, cached
    assert progress.advance(at(T0 + 3 * S, {"a.log": 150, "held.log": 900}), T0 + 3 * S) == (
        T0 - BOUND
    )
    progress.save("000000000002")
    progress.advance(at(T0 + 4 * S, {"a.log": 200, "held.log": 900}), T0 + 4 * S)
    progress.save()
    assert published_mark(tmp_path) != after_first
    assert json.loads(published_mark(tmp_path) or b"{}")["batch"] == "000000000002"
    again = ReaderProgress(tmp_path, order_bound_us=BOUND, idle_us=IDLE)
    assert again.last_batch == "000000000002"  # a restart names it too


def test_the_last_dropped_put_is_kept_and_published_with_the_progress(tmp_path: Path) -> None:
    assert read_cache_lost_at(tmp_path) is None  # nothing published: anything may be lost
    first = ReaderProgress(tmp_path, order_bound_us=BOUND, idle_us=IDLE)
    first.save("000000000001")
    assert read_cache_lost_at(tmp_path) == 0  # published, nothing dropped
    first.cache_lost(T0 + 9 * S)
    first.cache_lost(T0 + 7 * S)  # never goes back
    first.save("000000000002")
    assert read_cache_lost_at(tmp_path) == T0 + 9 * S
    again = ReaderProgress(tmp_path, order_bound_us=BOUND, idle_us=IDLE)
    assert again.cache_lost_at_us == T0 + 9 * S
    (tmp_path / "progress.json").write_text('{"progress_us": 5, "batch": "b"}')  # an older reader
    assert read_cache_lost_at(tmp_path) is None


def test_the_cache_is_intact_after_the_newest_query_read_at_the_last_look_that_found_a_loss(
    tmp_path: Path,
) -> None:
    signs = CacheSigns("run1", 0, "token1")
    first = ReaderProgress(tmp_path, order_bound_us=BOUND, idle_us=IDLE, max_ahead_us=60 * S)
    first.save("000000000000")
    assert read_cache_intact(tmp_path) is None  # no look yet: anything may be missing
    first.looked_at_cache(signs)  # the first look: what went before (nothing) may be lost
    first.save("000000000001")
    assert read_cache_intact(tmp_path) == CacheIntact(NOTHING_READ, signs)

    first.observe([ReadLine("q.log", 100, T0), ReadLine("q.log", 200, T0 + 86_400 * S)], T0)
    assert first.max_read_us == T0 + 86_400 * S  # as stamped: the progress's cap is not this
    first.looked_at_cache(signs)  # the same signs: what was read since is still cached
    assert first.cache_intact_after_us == NOTHING_READ
    evicted = signs._replace(evicted_keys=3)
    first.looked_at_cache(evicted)  # keys went: any query read so far may be among them
    assert first.cache_intact_after_us == T0 + 86_400 * S
    first.save("000000000002")
    assert read_cache_intact(tmp_path) == CacheIntact(T0 + 86_400 * S, evicted)

    first.cache_lost(T0 + 9 * S, T0 + 90_000 * S)  # the batch's puts failed
    assert first.cache_intact_after_us == T0 + 90_000 * S
    first.looked_at_cache(None)  # no answer: no look to match
    first.save("000000000003")
    assert read_cache_intact(tmp_path) is None
    again = ReaderProgress(tmp_path, order_bound_us=BOUND, idle_us=IDLE)
    assert (again.max_read_us, again.cache_intact_after_us) == (
        T0 + 86_400 * S,
        T0 + 90_000 * S,
    )
    again.looked_at_cache(signs)
    assert again.cache_intact_after_us == T0 + 90_000 * S  # never goes back

    # A state saved before the reader looked at the cache: its views' newest time.
    (tmp_path / "progress-state.json").write_text(
        '{"progress_us": 5, "cache_lost_at_us": 0, "click_files": {},'
        f' "files": {{"q.log": {{"read_end": 9, "max_ts_us": {T0}}}}}}}'
    )
    older = ReaderProgress(tmp_path, order_bound_us=BOUND, idle_us=IDLE)
    assert (older.max_read_us, older.cache_signs, older.cache_intact_after_us) == (T0, None, None)
    older.looked_at_cache(signs)
    assert older.cache_intact_after_us == T0
    (tmp_path / "progress.json").write_text('{"progress_us": 5, "batch": "b"}')  # an older reader
    assert read_cache_intact(tmp_path) is None


def test_file_stats_lists_log_files_only(tmp_path: Path) -> None:
    assert file_stats(tmp_path / "missing") == {}
    (tmp_path / "a.log").write_bytes(b"x" * 7)
    (tmp_path / "a.tmp").write_bytes(b"x")
    [(name, stat)] = file_stats(tmp_path).items()
    assert name == "a.log" and stat.size == 7
    assert abs(stat.mtime_us - (tmp_path / "a.log").stat().st_mtime_ns // 1000) <= 1


def test_a_file_last_written_long_ago_is_idle_at_first_sight(progress: ReaderProgress) -> None:
    progress.observe([ReadLine("old.log", 100, T0), ReadLine("live.log", 100, T0 + 50 * S)])
    now = T0 + 100 * S
    files = {"old.log": FileStat(100, now - 2 * IDLE), "live.log": FileStat(100, now - S)}
    assert progress.advance(files, now) == T0 + 45 * S  # only live.log holds it back
    assert not progress.settled(files, now)
    assert progress.settled(files, now + IDLE)


def test_bad_bounds_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="idle_us"):
        ReaderProgress(tmp_path, order_bound_us=-1, idle_us=IDLE)
    with pytest.raises(ValueError, match="idle_us"):
        ReaderProgress(tmp_path, order_bound_us=0, idle_us=0)


def test_it_is_settled_once_every_file_is_read_and_idle(progress: ReaderProgress) -> None:
    progress.observe([ReadLine("a.log", 100, T0)])
    assert not progress.settled(at(T0, {"a.log": 100}), T0)  # never looked at: may still grow
    progress.advance(at(T0, {"a.log": 100}), T0)
    assert not progress.settled(at(T0 + S, {"a.log": 100}), T0 + S)  # read, but grew just now
    assert not progress.settled(at(T0 + IDLE, {"a.log": 150}), T0 + IDLE)  # more to read
    assert progress.settled(at(T0 + IDLE, {"a.log": 100}), T0 + IDLE)
    assert not progress.settled(at(T0 + IDLE, {"a.log": 100, "b.log": 10}), T0 + IDLE)  # a new file


def test_a_query_stamped_a_day_ahead_moves_the_progress_no_further_than_the_skew(
    tmp_path: Path,
) -> None:
    skew = 60 * S
    progress = ReaderProgress(tmp_path, order_bound_us=BOUND, idle_us=IDLE, max_ahead_us=skew)
    day = 86_400 * S
    progress.observe([ReadLine("q.1.log", 100, T0), ReadLine("q.1.log", 200, T0 + day)], T0)
    progress.observe([ReadLine("q.2.log", 100, T0 + S)], T0)
    # q.1 read to its end and idle, q.2 too: everything written so far was read
    later = T0 + 10 * IDLE
    assert progress.advance(at(T0, {"q.1.log": 200, "q.2.log": 100}), later) == later - IDLE
    # the reader stopped: its progress is where its clock left it, not tomorrow
    assert progress.progress_us < T0 + day
    # a file it is behind on proves only what it read, as of its clock then
    progress.observe([ReadLine("q.3.log", 100, T0 + day)], later)
    behind = progress.advance(at(later, {"q.1.log": 200, "q.2.log": 100, "q.3.log": 900}), later)
    assert progress.files["q.3.log"].max_ts_us == later + skew
    assert behind == later + skew - BOUND


def test_without_a_bound_a_future_query_moves_the_progress_with_it(tmp_path: Path) -> None:
    """What the bound prevents (the reader as it was before it had one)."""
    progress = ReaderProgress(tmp_path, order_bound_us=BOUND, idle_us=IDLE)
    progress.observe([ReadLine("q.1.log", 100, T0 + 86_400 * S)], T0)
    assert progress.advance(at(T0 - IDLE, {"q.1.log": 100}), T0 + 2 * IDLE) == T0 + 86_400 * S


def test_views_follow_files_by_head_and_two_files_sharing_a_head_keep_their_own(
    progress: ReaderProgress,
) -> None:
    head, other = "h" * 16, "o" * 16
    progress.observe([ReadLine("q.log", 500, T0)], T0)
    progress.observe([ReadLine("dup.log", 500, T0 + S)], T0)
    both = {"q.log": FileStat(500, T0, head), "dup.log": FileStat(500, T0, head)}
    progress.advance(both, T0)
    assert progress.files["q.log"].head == progress.files["dup.log"].head == head
    progress.advance(both, T0 + S)  # a shipped copy under another name: nothing moves
    assert progress.files["q.log"].read_end == progress.files["dup.log"].read_end == 500
    # q.log rotated to q.log.1, a new q.log begun: the view follows the head
    rotated = {"q.log.1": FileStat(500, T0, head), "q.log": FileStat(80, T0 + S, other),
               "dup.log": FileStat(500, T0, head)}  # fmt: skip
    progress.advance(rotated, T0 + 2 * S)
    assert progress.files["q.log.1"].read_end == 500
    assert "q.log" not in progress.files or progress.files["q.log"].read_end == 0
