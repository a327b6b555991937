"""The join core end to end on the real stack: two DCs, one registry, generated logs.

No Spark here: the micro-batches are cut by the growing-log reader, as the
streaming source will cut them. The generator's manifest is the ground truth.
"""

from __future__ import annotations

import json
import re
import shutil
from collections import Counter
from collections.abc import Callable
from itertools import count
from pathlib import Path
from typing import Any, NoReturn

import pytest
import redis
import structlog.testing

from photon.events.records import ClickEvent, QuarantineRecord, Stream, decode_click, decode_line
from photon.join import dispatcher
from photon.join.dispatcher import BatchReport, GroupRunner
from photon.join.group import GroupOutcome, GroupWork, JoinClick
from photon.join.output import decode
from photon.join.retry import PendingClick
from photon.logs.reader import LogLine
from photon.storage import ObjectStore
from photon.tooling.gen.model import GenConfig, Manifest
from photon.tooling.gen.simulator import load_manifest, simulate, write
from photon.tooling.stack.manager import LocalStack
from photon.tooling.stack.ports import free_ports
from registry import IdRegistry

from .conftest import (
    FEEDS,
    FILE_IDLE_US,
    ClickBatch,
    Clock,
    DcParts,
    MakeDc,
    batches,
    click_batches,
    process_clicks,
)

pytestmark = pytest.mark.integration

START_US = 1_767_225_600_000_000
S = 1_000_000


@pytest.fixture
def logs(tmp_path: Path) -> tuple[Path, Manifest]:
    cfg = GenConfig(
        seed=11,
        start_us=START_US,
        queries=400,
        query_rate=200.0,
        click_delay_tail_max_s=120.0,
        delayed_query_fraction=0.1,
        orphan_click_fraction=0.05,
        duplicate_click_fraction=0.05,
        malformed_fraction=0.01,
        outage_start_s=0.5,
        outage_duration_s=1.0,
        rollover_bytes=16 * 1024,
    )
    root = tmp_path / "logs"
    write(simulate(cfg), root)
    return root, load_manifest(root)


def crashing(why: str) -> Callable[..., None]:
    """A stand-in for a write that dies like a killed process (SystemExit passes through)."""

    def crash(*_: object, **__: object) -> None:
        raise SystemExit(why)

    return crash


def read_every_query(parts: DcParts, root: Path) -> None:
    """The DC's query reader takes every query log line now (cache and log-file map)."""
    for n, lines in enumerate(batches(root / parts.dc / "queries", 1 << 20)):
        parts.reader.process(f"q{n}", lines)


def rows(store: ObjectStore, prefix: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    for key in store.keys(prefix):
        data = store.get(key)
        assert data is not None
        found += decode(data)
    return found


def run_dc(
    parts: DcParts, root: Path, clock: Clock, *, clicks_first: bool, feed: str = "lines"
) -> None:
    """Feed a DC's logs through its reader and joiner, then drain the retry store."""
    query_batches = batches(root / parts.dc / "queries", 8 * 1024)
    clicks = click_batches(root / parts.dc / "clicks", 4 * 1024, feed)
    order: list[tuple[str, ClickBatch]] = []
    if clicks_first:  # every click arrives before any query: all go through retries
        order = [("c", b) for b in clicks] + [("q", b) for b in query_batches]
    else:  # interleaved, as two streams arrive
        for n in range(max(len(query_batches), len(clicks))):
            order += [("q", b) for b in query_batches[n : n + 1]]
            order += [("c", b) for b in clicks[n : n + 1]]
    for n, (kind, batch) in enumerate(order):
        clock.now_us += S // 10
        if kind == "q":
            parts.reader.process(f"{n:012d}", [line for line in batch if isinstance(line, LogLine)])
        else:
            process_clicks(parts.joiner, f"{n:012d}", batch)
    drain(parts, clock, step_s=5)


def drain(parts: DcParts, clock: Clock, step_s: float = 10, reader: DcParts | None = None) -> None:
    """Retry passes, the reader (its own, or ``reader``'s) looking at its files before
    each (as its app does between batches), until nothing is pending."""
    for _ in range(100):
        clock.now_us += int(step_s * S)
        (reader or parts).reader.publish_progress()
        parts.joiner.process_retries()
        if parts.retries.pending() == 0:
            return
    raise AssertionError(f"{parts.retries.pending()} clicks still pending")


def check_unjoinable_once(store: ObjectStore, manifest: Manifest) -> None:
    """Every never-joinable click written out as unjoinable, once, and no other click."""
    unjoinable = Counter(r["click_id"] for r in rows(store, "unjoinable/"))
    assert set(unjoinable) == set(manifest.never_joinable)
    assert set(unjoinable.values()) == {1}


def check_exactly_once(store: ObjectStore, manifest: Manifest) -> list[dict[str, Any]]:
    joined = rows(store, "joined/")
    counts = Counter(r["click_id"] for r in joined)
    assert [c for c, n in counts.items() if n > 1] == []  # at most once, across DCs
    assert set(counts) == set(manifest.expected_joins)  # every joinable click
    assert all(manifest.expected_joins[r["click_id"]] == r["query_id"] for r in joined)
    return joined


@pytest.mark.parametrize("feed", FEEDS)
def test_two_dcs_join_every_joinable_click_exactly_once(
    make_dc: MakeDc, store: ObjectStore, logs: tuple[Path, Manifest], feed: str
) -> None:
    root, manifest = logs
    clock = Clock(START_US)
    a = make_dc("a", root, clock)
    b = make_dc("b", root, clock)
    run_dc(a, root, clock, clicks_first=False, feed=feed)
    run_dc(b, root, clock, clicks_first=True, feed=feed)

    joined = check_exactly_once(store, manifest)
    assert {r["dc"] for r in joined} == {"a"}  # b found every click already joined
    assert all(r["token"].startswith("a/run1/") for r in joined)
    for dc in ("a", "b"):
        unjoinable = rows(store, f"unjoinable/dc={dc}/")
        assert {r["click_id"] for r in unjoinable} == set(manifest.never_joinable)
        assert all(r["reason"] == "query_not_found" and r["attempts"] >= 3 for r in unjoinable)
        quarantined = rows(store, f"quarantine/dc={dc}/")
        assert len(quarantined) == len(manifest.dcs[dc].malformed)
        expected = Counter((m.stream, m.file, m.offset) for m in manifest.dcs[dc].malformed)
        assert Counter((q["stream"], q["file"], q["offset"]) for q in quarantined) == expected
    assert list(store.keys("logmap/dc=a/delta/"))


def test_with_redis_down_queries_come_from_the_logs(
    make_dc: MakeDc, store: ObjectStore, logs: tuple[Path, Manifest]
) -> None:
    root, manifest = logs
    clock = Clock(START_US)
    closed_port = free_ports(1)[0]
    a = make_dc(
        "a", root, clock, redis_url=f"redis://127.0.0.1:{closed_port}/0", skip_fresh_logs_s=3600
    )
    run_dc(a, root, clock, clicks_first=False)
    check_exactly_once(store, manifest)
    assert a.joiner.totals.counts.get("logs_skipped", 0) == 0  # no cache: every miss searched


def test_a_joiner_ahead_of_its_query_reader_waits_for_it_instead_of_deferring(
    make_dc: MakeDc, store: ObjectStore, logs: tuple[Path, Manifest]
) -> None:
    root, manifest = logs
    clock = Clock(START_US + 10 * S)
    slept: list[float] = []
    parts: list[DcParts] = []

    def sleep(seconds: float) -> None:  # the query reader catches up meanwhile
        slept.append(seconds)
        if len(slept) == 1:
            read_every_query(parts[0], root)

    # One group: the wait is decided per group (at least 50 of its new clicks' queries
    # in neither store), and this workload split three ways gives each fewer.
    parts.append(
        make_dc(
            "a", root, clock, skip_fresh_logs_s=3600, reader_wait_s=2.0, sleep=sleep, join_groups=1
        )
    )
    clicks = [line for lines in batches(root / "a" / "clicks", 1 << 20) for line in lines]
    report = parts[0].joiner.process(f"{0:012d}", clicks)
    assert slept == [0.25] and report.reader_wait_s == 0.25  # one step: then all were cached
    assert report.joined == len(manifest.expected_joins)
    assert report.deferred == len(manifest.never_joinable)  # only clicks whose query never comes
    again = parts[0].joiner.process(f"{1:012d}", [])  # nothing fresh lacking: no wait
    assert again.reader_wait_s == 0.0 and slept == [0.25]


def test_a_fresh_query_the_cache_lacks_is_searched_in_the_logs_on_the_retry(
    make_dc: MakeDc, store: ObjectStore, logs: tuple[Path, Manifest]
) -> None:
    """The cache lost every query (a Redis restart, say); the log-file map has them all."""
    root, manifest = logs
    clock = Clock(START_US + 10 * S)
    closed_port = free_ports(1)[0]
    dead_cache = f"redis://127.0.0.1:{closed_port}/0"
    reader = make_dc("a", root, clock, redis_url=dead_cache, attempt="reader")
    read_every_query(reader, root)
    clock.now_us += FILE_IDLE_US  # its files went idle: it has provably read every query
    reader.reader.publish_progress()
    a = make_dc("a", root, clock, skip_fresh_logs_s=3600, reader_attempt="reader")
    clicks = [line for lines in batches(root / "a" / "clicks", 1 << 20) for line in lines]

    first = a.joiner.process(f"{0:012d}", clicks)
    assert first.cache_misses > 0
    assert (first.logs_skipped, first.from_logs, first.joined) == (first.cache_misses, 0, 0)
    clock.now_us += 5 * S
    retry = a.joiner.process_retries()
    assert retry is not None and retry.from_logs > 0 and retry.logs_skipped == 0
    for _ in range(50):
        clock.now_us += 5 * S
        a.joiner.process_retries()
    check_exactly_once(store, manifest)


def test_the_logs_are_searched_for_a_query_only_once_the_reader_is_past_it(
    make_dc: MakeDc, store: ObjectStore, logs: tuple[Path, Manifest]
) -> None:
    """A query the cache lacks and the reader may not have read yet is not in the
    log-file map either: retries ask the cache alone until the reader's progress
    passes the query, then search the logs (the cache lost what the reader put)."""
    root, manifest = logs
    clock = Clock(START_US + 10 * S)
    dead_cache = f"redis://127.0.0.1:{free_ports(1)[0]}/0"
    reader = make_dc("a", root, clock, redis_url=dead_cache, attempt="reader")
    read_every_query(reader, root)  # its files still grow, as far as it knows: progress waits
    a = make_dc("a", root, clock, reader_attempt="reader")
    clicks = [line for lines in batches(root / "a" / "clicks", 1 << 20) for line in lines]

    first = a.joiner.process(f"{0:012d}", clicks)
    clock.now_us += 5 * S
    retry = a.joiner.process_retries()
    assert retry is not None and retry.reader_progress_us < START_US
    for report in (first, retry):  # every query is past the reader's progress
        assert report.cache_misses > 0 and report.logs_skipped == report.cache_misses
        assert (report.from_logs, report.joined) == (0, 0)

    clock.now_us += FILE_IDLE_US  # the reader's files went idle: it has read every query
    reader.reader.publish_progress()
    after = a.joiner.process_retries()
    assert after is not None and after.reader_progress_us > START_US + 2 * S
    assert after.from_logs > 0 and after.logs_skipped == 0
    drain(a, clock, step_s=5, reader=reader)
    check_exactly_once(store, manifest)
    check_unjoinable_once(store, manifest)


def tries_until_given_up(parts: DcParts, clock: Clock, lost: int) -> list[tuple[int, bool, int]]:
    """Retry passes 5 s apart over ``lost`` never-joinable clicks until they are given
    up on: (tries before, logs searched, given up) of each."""
    tries: list[tuple[int, bool, int]] = []
    for n in range(1, 30):
        clock.now_us += 5 * S
        parts.reader.publish_progress()
        report = parts.joiner.process_retries()
        assert report is not None and report.cache_misses == lost
        assert report.logs_skipped in (0, lost)  # all of them, or none: they share a schedule
        searched = report.logs_skipped == 0
        # A try that searches nothing is the driver's alone: one MGET, no group.
        assert report.kept_back == (0 if searched or report.unjoinable else lost)
        tries.append((n, searched, report.unjoinable))
        if report.unjoinable:
            break
    return tries


def forget_the_readers_look(local_stack: LocalStack, parts: DcParts) -> None:
    """The reader's sentinel goes, as in a flush: no look of the joiner's can match the
    reader's last one, so any query it read may be missing from the cache."""
    admin = redis.Redis.from_url(local_stack.settings.redis_url)
    assert admin.delete(f"{parts.cache_prefix}:{parts.dc}:~intact-reader") == 1
    admin.close()


def test_a_click_waiting_for_a_late_query_searches_the_logs_on_few_of_its_tries(
    make_dc: MakeDc, store: ObjectStore, logs: tuple[Path, Manifest], local_stack: LocalStack
) -> None:
    """Retries of a click whose query is late ask the cache each time, but search the
    logs only after the 1st, 4th, 16th… try and on the try that gives it up, while
    the cache may have lost queries."""
    root, manifest = logs
    clock = Clock(START_US + 10 * S)
    a = make_dc("a", root, clock)
    read_every_query(a, root)
    forget_the_readers_look(local_stack, a)
    clock.now_us += FILE_IDLE_US  # its files went idle: the reader is past every query
    a.reader.publish_progress()
    clicks = [line for lines in batches(root / "a" / "clicks", 1 << 20) for line in lines]
    first = a.joiner.process(f"{0:012d}", clicks)
    lost = len(manifest.never_joinable)
    assert first.joined == len(manifest.expected_joins) and first.deferred == lost
    *waiting, (last, searched_last, given_up) = tries_until_given_up(a, clock, lost)
    assert searched_last and given_up == lost and last not in (1, 4, 16)
    assert [n for n, searched, _ in waiting if searched] == [1, 4]
    check_unjoinable_once(store, manifest)


def only_the_giving_up_try_searches(
    a: DcParts, root: Path, manifest: Manifest, clock: Clock, batch: str
) -> None:
    """DC a joins every click in ``batch``; its never-joinable clicks' queries are not
    searched in the logs until the try that gives them up (not after the 1st, 4th…)."""
    clicks = [line for lines in batches(root / "a" / "clicks", 1 << 20) for line in lines]
    first = a.joiner.process(batch, clicks)
    lost = len(manifest.never_joinable)
    assert first.joined == len(manifest.expected_joins) and first.deferred == lost
    assert (first.cache_misses, first.logs_skipped, first.from_logs) == (lost, lost, 0)
    *waiting, (_, searched_last, given_up) = tries_until_given_up(a, clock, lost)
    assert searched_last and given_up == lost
    assert [n for n, searched, _ in waiting if searched] == []


def test_a_query_the_cache_cannot_have_lost_is_searched_for_only_on_the_last_try(
    make_dc: MakeDc, store: ObjectStore, logs: tuple[Path, Manifest]
) -> None:
    """The joiner looked at the cache before any query happened, and it has lost
    nothing since: a query it lacks is not in the logs the reader read either. So a
    never-joinable click's tries ask the cache alone (the driver keeps them back),
    and only the try that gives it up searches the logs."""
    root, manifest = logs
    clock = Clock(START_US - 10 * S)
    a = make_dc("a", root, clock)
    a.joiner.process(f"{0:012d}", [])  # its first look at the cache, before every query
    clock.now_us = START_US + 10 * S
    read_every_query(a, root)
    clock.now_us += FILE_IDLE_US
    a.reader.publish_progress()
    only_the_giving_up_try_searches(a, root, manifest, clock, f"{1:012d}")
    check_unjoinable_once(store, manifest)


def every_query_read_before_the_joiner(make_dc: MakeDc, root: Path) -> tuple[DcParts, Clock]:
    """DC a, its reader having read (and cached) every query, its files idle since."""
    clock = Clock(START_US + 10 * S)
    a = make_dc("a", root, clock)
    read_every_query(a, root)
    clock.now_us += FILE_IDLE_US
    a.reader.publish_progress()
    return a, clock


def test_a_backlog_the_reader_cached_before_the_joiner_started_is_not_searched_again(
    make_dc: MakeDc, store: ObjectStore, logs: tuple[Path, Manifest]
) -> None:
    """The reader cached every query before the joiner's first look at the cache, and
    the cache lost nothing since the reader's looks: a query the cache lacks is not in
    the logs either, however old. So a never-joinable click's tries ask the cache
    alone, and only the try that gives it up searches the logs."""
    root, manifest = logs
    a, clock = every_query_read_before_the_joiner(make_dc, root)
    only_the_giving_up_try_searches(a, root, manifest, clock, f"{0:012d}")
    check_exactly_once(store, manifest)
    check_unjoinable_once(store, manifest)


#: Far enough for the reader to be past every click by more than the give-up margin
#: (``retry.max_age_s``, 30 s here): an old backlog, as after an outage.
_LONG_AFTER_US = 600 * S


def an_old_backlog(make_dc: MakeDc, root: Path, feed: str) -> tuple[DcParts, Clock, ClickBatch]:
    """DC a, its reader having cached every query and now far past every click, and
    DC a's clicks as one batch."""
    a, clock = every_query_read_before_the_joiner(make_dc, root)
    clock.now_us += _LONG_AFTER_US
    a.reader.publish_progress()
    (clicks,) = click_batches(root / "a" / "clicks", 1 << 20, feed)
    return a, clock, clicks


@pytest.mark.parametrize("feed", FEEDS)
def test_an_old_backlog_the_reader_cached_is_not_searched_in_the_logs_at_first_sight(
    make_dc: MakeDc, store: ObjectStore, logs: tuple[Path, Manifest], feed: str
) -> None:
    """The reader cached every query and is far past every click (the joiner catches up
    on an old backlog): a query the cache lacks is not in the logs either, so a
    never-joinable click's first try asks the cache alone, in the driver or in the
    group that reads its line. Being far past the click does not make that try search:
    it may not give the click up (its first), and the try that may searches."""
    root, manifest = logs
    lost = len(manifest.never_joinable)
    a, clock, clicks = an_old_backlog(make_dc, root, feed)
    first = process_clicks(a.joiner, f"{0:012d}", clicks)
    assert first.joined == len(manifest.expected_joins) and first.deferred == lost
    assert (first.cache_misses, first.logs_skipped, first.from_logs) == (lost, lost, 0)
    *waiting, (_, searched_last, given_up) = tries_until_given_up(a, clock, lost)
    assert searched_last and given_up == lost
    assert [n for n, searched, _ in waiting if searched] == []
    check_exactly_once(store, manifest)
    check_unjoinable_once(store, manifest)


@pytest.mark.parametrize("feed", FEEDS)
def test_a_click_is_given_up_on_only_by_a_try_that_searched_the_logs(
    make_dc: MakeDc, store: ObjectStore, logs: tuple[Path, Manifest], feed: str
) -> None:
    """A never-joinable click whose line is shipped again once it is past both retry
    limits: that try reads it as a new click whose query the cache cannot have lost, so
    it does not search the logs, and then it does not give the click up either. The
    next try searches, and gives it up: once."""
    root, manifest = logs
    lost = len(manifest.never_joinable)
    a, clock, clicks = an_old_backlog(make_dc, root, feed)
    first = process_clicks(a.joiner, f"{0:012d}", clicks)
    assert first.deferred == lost and first.logs_skipped == lost
    clock.now_us += 5 * S
    second = a.joiner.process_retries()  # its 2nd try: the cache alone
    assert second is not None and (second.kept_back, second.unjoinable) == (lost, 0)
    clock.now_us += 31 * S  # past max_age_s, and the next try is the 3rd (max_attempts)
    a.reader.publish_progress()
    again = process_clicks(a.joiner, f"{1:012d}", clicks)  # the shipper sends them again
    assert again.already_joined == len(manifest.expected_joins)
    assert (again.cache_misses, again.logs_skipped, again.from_logs) == (lost, lost, 0)
    assert (again.deferred, again.unjoinable) == (lost, 0)  # not searched: not given up
    clock.now_us += 5 * S
    last = a.joiner.process_retries()
    assert last is not None and last.logs_skipped == 0 and last.unjoinable == lost
    check_exactly_once(store, manifest)
    check_unjoinable_once(store, manifest)


def test_a_backlog_cached_then_flushed_is_searched_in_the_logs_at_once(
    make_dc: MakeDc, store: ObjectStore, logs: tuple[Path, Manifest], local_stack: LocalStack
) -> None:
    """The reader cached every query; then the DC's keys were flushed, its sentinel with
    them. The joiner's look cannot match the reader's last one: new clicks search the
    logs for the queries the cache lacks, and are joined from there."""
    root, manifest = logs
    a, clock = every_query_read_before_the_joiner(make_dc, root)
    admin = redis.Redis.from_url(local_stack.settings.redis_url)
    admin.delete(*admin.keys(f"{a.cache_prefix}:a:*"))  # the cache lost every query
    admin.close()
    clicks = [line for lines in batches(root / "a" / "clicks", 1 << 20) for line in lines]
    first = a.joiner.process(f"{0:012d}", clicks)
    assert first.joined == len(manifest.expected_joins) and first.logs_skipped == 0
    assert first.from_logs == first.cache_misses - len(manifest.never_joinable) > 0
    drain(a, clock, step_s=5)
    check_exactly_once(store, manifest)
    check_unjoinable_once(store, manifest)


def test_queries_the_reader_could_not_cache_are_searched_in_the_logs_at_once(
    make_dc: MakeDc, store: ObjectStore, logs: tuple[Path, Manifest]
) -> None:
    """The joiner looked at the cache before any query, but the reader's puts failed
    (it published when): the cache may lack any query read until then, so new clicks
    search the logs for the queries it lacks, and are joined from there."""
    root, manifest = logs
    clock = Clock(START_US - 10 * S)
    dead_cache = f"redis://127.0.0.1:{free_ports(1)[0]}/0"
    reader = make_dc("a", root, clock, redis_url=dead_cache, attempt="reader")
    a = make_dc("a", root, clock, reader_attempt="reader")
    a.joiner.process(f"{0:012d}", [])  # its first look at the cache, before every query
    clock.now_us = START_US + 10 * S
    read_every_query(reader, root)  # every put dropped
    clock.now_us += FILE_IDLE_US
    reader.reader.publish_progress()
    clicks = [line for lines in batches(root / "a" / "clicks", 1 << 20) for line in lines]
    first = a.joiner.process(f"{1:012d}", clicks)
    assert first.joined == len(manifest.expected_joins) and first.logs_skipped == 0
    assert first.from_logs == first.cache_misses - len(manifest.never_joinable)
    drain(a, clock, step_s=5, reader=reader)
    check_exactly_once(store, manifest)
    check_unjoinable_once(store, manifest)


def test_a_late_query_cached_on_a_try_kept_back_is_joined_on_that_try(
    make_dc: MakeDc,
    store: ObjectStore,
    logs: tuple[Path, Manifest],
    local_stack: LocalStack,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The driver keeps a retried click back only while the cache lacks its query:
    the try on which the query is cached sends it to its group, which joins it. (The
    cache may have lost queries, so some tries search the logs.) The driver decodes
    a click it keeps back on the cache's word never: the retry store holds its query."""
    root, manifest = logs
    clock = Clock(START_US + 10 * S)
    a = make_dc("a", root, clock)
    read_every_query(a, root)
    forget_the_readers_look(local_stack, a)
    late_query, late_clicks = _every_click_tried_once(a, root, manifest, clock)
    lost = len(manifest.never_joinable)
    decoded: Counter[str] = Counter()

    def counted_decode(raw: bytes) -> ClickEvent:
        event = decode_click(raw)
        decoded[str(event.click_id)] += 1
        return event

    monkeypatch.setattr(dispatcher, "decode_click", counted_decode)
    for n in range(1, 5):  # tries 1 and 4 search the logs; tries 2 and 3 are the driver's
        clock.now_us += 5 * S
        a.reader.publish_progress()
        decoded.clear()
        report = a.joiner.process_retries()
        assert report is not None and report.kept_back == (lost if n in (2, 3) else 0)
        assert sum(decoded.values()) == (0 if n in (2, 3) else lost)
    # The late query comes before try 5: the reader caches it (a query line like any other).
    a.joiner.cache.put_many({late_query: _late_query_line(root, late_query)})
    clock.now_us += 5 * S
    a.reader.publish_progress()
    decoded.clear()
    report = a.joiner.process_retries()
    assert report is not None and report.joined == len(late_clicks)
    assert report.kept_back == lost - len(late_clicks)
    assert sorted(decoded) == late_clicks and set(decoded.values()) == {1}
    joined = sorted(r["click_id"] for r in rows(store, "joined/") if r["click_id"] in late_clicks)
    assert joined == late_clicks


def _late_query_line(root: Path, query_id: str) -> bytes:
    """A query line of DC a's logs, made the line of ``query_id`` (a query that comes late)."""
    template = next(
        line
        for line in batches(root / "a" / "queries", 1 << 20)[0]
        if not isinstance(
            decode_line(Stream.QUERIES, line.file, line.offset, line.raw), QuarantineRecord
        )
    )
    return re.sub(rb'"query_id":"[^"]+"', f'"query_id":"{query_id}"'.encode(), template.raw)


def _every_click_tried_once(
    a: DcParts, root: Path, manifest: Manifest, clock: Clock
) -> tuple[str, list[str]]:
    """DC a's reader reads every query, then its joiner tries every click in batch 0:
    the never-joinable clicks wait. One of their queries, to come late, and its clicks."""
    read_every_query(a, root)
    clock.now_us += FILE_IDLE_US
    a.reader.publish_progress()
    clicks = [line for lines in batches(root / "a" / "clicks", 1 << 20) for line in lines]
    a.joiner.process(f"{0:012d}", clicks)
    late_query = sorted(manifest.never_joinable.values())[0]
    return late_query, sorted(c for c, q in manifest.never_joinable.items() if q == late_query)


@pytest.mark.parametrize(("arrival_window_s", "affinity_grace_s"), [(600, 0), (600, 3), (0, 0)])
def test_a_click_is_joined_as_soon_as_its_late_query_is_cached_not_at_its_next_backoff(
    make_dc: MakeDc,
    store: ObjectStore,
    logs: tuple[Path, Manifest],
    arrival_window_s: float,
    affinity_grace_s: float,
) -> None:
    """Join on arrival: the click waits for its backoff, but its query is cached a
    tenth of a second after its try; the next pass wakes and joins it, and only it
    (the other waiting clicks' queries never come), within the affinity grace too (a
    click tried is not one held for another DC). Off (0), its timer decides."""
    root, manifest = logs
    # An hour on with two DCs: the grace counts, but no click (older than 1 s) is held for b.
    clock = Clock(START_US + (3_600 if affinity_grace_s else 10) * S)
    a = make_dc(
        "a",
        root,
        clock,
        arrival_window_s=arrival_window_s,
        dcs=("a", "b") if affinity_grace_s else (),
        affinity_grace_s=affinity_grace_s,
        affinity_max_age_s=1.0,
    )
    late_query, late_clicks = _every_click_tried_once(a, root, manifest, clock)
    waiting = len(manifest.never_joinable)
    assert a.retries.pending() == waiting
    # The reader reads the late query: it caches it (what it does with any query line).
    a.joiner.cache.put_many({late_query: _late_query_line(root, late_query)})
    clock.now_us += S // 10  # within the first backoff (1 s, ± 10%)
    report = a.joiner.process_retries()
    if not arrival_window_s:
        assert report is None  # nothing due: the timer wakes it, a second after its try
        return
    assert report is not None
    assert report.woken == report.retries_due == report.joined == len(late_clicks)
    joined = sorted(r["click_id"] for r in rows(store, "joined/") if r["click_id"] in late_clicks)
    assert joined == late_clicks
    assert a.retries.pending() == waiting - len(late_clicks)
    assert a.joiner.process_retries() is None  # the others still wait for their timers


def test_a_wake_look_waits_for_the_readers_publish_and_loses_no_click(
    make_dc: MakeDc, store: ObjectStore, logs: tuple[Path, Manifest]
) -> None:
    """While the reader has published nothing since the last whole look, a look asks the
    cache only for clicks first seen since: a query put but not yet published is found
    by the look after the reader publishes, and its clicks are joined then."""
    root, manifest = logs
    clock = Clock(START_US + 10 * S)
    a = make_dc("a", root, clock, arrival_window_s=600.0, follow_reader_mark=True)
    late_query, late_clicks = _every_click_tried_once(a, root, manifest, clock)
    waiting = len(manifest.never_joinable)
    asked: list[int] = []
    find_many = a.joiner.cache.find_many

    def counting(query_ids: Any, **kwargs: Any) -> dict[str, bytes]:
        ids = list(query_ids)
        asked.append(len(ids))
        return find_many(ids, **kwargs)

    a.joiner.cache.find_many = counting  # type: ignore[method-assign]
    # The reader's put, its publish still to come: the next look asks for no click (each
    # was tried, its query asked for, after the look before their batch).
    line = _late_query_line(root, late_query)
    a.joiner.cache.put_many({late_query: line})
    clock.now_us += S // 20
    assert a.joiner.process_retries() is None and asked == []
    assert a.retries.pending() == waiting
    # The reader reads the line for real: it caches it and publishes.
    late_log = root / "a" / "queries" / "late.log"
    late_log.write_bytes(line + b"\n")
    a.reader.process("q-late", [LogLine(late_log.name, 0, line)])
    clock.now_us += S // 20  # still within the first backoff (1 s, ± 10%)
    report = a.joiner.process_retries()
    assert asked[0] == waiting  # a whole look again (then the woken clicks' own tries)
    assert report is not None and report.woken == report.joined == len(late_clicks)
    joined = sorted(r["click_id"] for r in rows(store, "joined/") if r["click_id"] in late_clicks)
    assert joined == late_clicks and a.retries.pending() == waiting - len(late_clicks)


@pytest.mark.parametrize("then", ["its query comes", "the cache may have lost it", "a cut look"])
def test_a_click_is_spared_its_tries_while_the_look_at_the_cache_covers_it(
    make_dc: MakeDc,
    store: ObjectStore,
    logs: tuple[Path, Manifest],
    local_stack: LocalStack,
    then: str,
) -> None:
    """The reader cached every query before the joiner, and the cache lost nothing since:
    a click whose query the cache lacks would only ask the cache again at its next
    tries, so they are spared until its window ends (here ``retry.max_age_s``, 30 s,
    the shorter), and the look wakes the ones whose query comes. Once the cache may
    have lost queries, or a look is cut short by its limit, the spared clicks get
    their timers back. Every click once."""
    root, manifest = logs
    clock = Clock(START_US + 10 * S)
    a = make_dc("a", root, clock, arrival_window_s=600.0, follow_reader_mark=True)
    read_every_query(a, root)
    clock.now_us += FILE_IDLE_US
    a.reader.publish_progress()
    clicks = [line for lines in batches(root / "a" / "clicks", 1 << 20) for line in lines]
    first = a.joiner.process(f"{0:012d}", clicks)
    waiting = len(manifest.never_joinable)
    assert first.deferred == first.spared == waiting
    clock.now_us += 20 * S  # their backoffs (1, 2, then 4 s) would have tried each 5 times
    assert a.joiner.process_retries() is None and a.retries.pending() == waiting
    late_query = sorted(manifest.never_joinable.values())[0]
    late_clicks = sorted(c for c, q in manifest.never_joinable.items() if q == late_query)
    if then == "the cache may have lost it":
        forget_the_readers_look(local_stack, a)  # the cache may have lost any query
        clock.now_us += S // 10
        report = a.joiner.process_retries()  # their timers are back, and ran out long ago
        assert report is not None and report.retries_due == waiting
        assert report.spared == 0
    elif then == "a cut look":
        # The reader reads another query (none of theirs) and publishes: the next look
        # is over every waiting click, but reads one only, so it is not whole.
        _read_a_late_query(a, root, _late_query_line(root, f"10.9.9.9:1:{START_US + S}"))
        a.joiner.max_retries_per_batch = 1
        clock.now_us += S // 10
        report = a.joiner.process_retries()
        assert report is not None and report.retries_due == 1 and report.spared == 0
        assert a.retries.restore_spared() == 0  # every one had its timer back
        a.joiner.max_retries_per_batch = 5_000
    else:
        _read_a_late_query(a, root, _late_query_line(root, late_query))
        clock.now_us += S // 10
        report = a.joiner.process_retries()
        assert report is not None and report.woken == report.joined == len(late_clicks)
        assert a.retries.pending() == waiting - len(late_clicks)
    drain(a, clock)
    joined = Counter(r["click_id"] for r in rows(store, "joined/"))
    came = late_clicks if then == "its query comes" else []
    assert set(joined) == set(manifest.expected_joins) | set(came)
    assert set(joined.values()) == {1}
    unjoinable = Counter(r["click_id"] for r in rows(store, "unjoinable/"))
    assert set(unjoinable) == set(manifest.never_joinable) - set(joined)
    assert set(unjoinable.values()) == {1}


def _read_a_late_query(a: DcParts, root: Path, line: bytes) -> None:
    """DC a's reader reads ``line`` from a query file of its own: caches and publishes."""
    late_log = root / "a" / "queries" / "late.log"
    late_log.write_bytes(line + b"\n")
    a.reader.process("q-late", [LogLine(late_log.name, 0, line)])


def test_a_batch_that_woke_clicks_and_crashed_takes_them_again_in_its_replay(
    make_dc: MakeDc,
    store: ObjectStore,
    registry: IdRegistry,
    logs: tuple[Path, Manifest],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The wake is written before the batch takes its due clicks: a replay at the first
    try's clock takes the same clicks, so what the crashed try registered is written."""
    root, manifest = logs
    clock = Clock(START_US + 10 * S)
    a = make_dc("a", root, clock, arrival_window_s=600.0)
    late_query, late_clicks = _every_click_tried_once(a, root, manifest, clock)
    a.joiner.cache.put_many({late_query: _late_query_line(root, late_query)})
    clock.now_us += S // 10
    monkeypatch.setattr(a.joiner.output, "joined", crashing("killed before the write"))
    with pytest.raises(SystemExit):
        a.joiner.process(f"{1:012d}", [])  # a batch of no new line wakes and takes them
    monkeypatch.undo()
    token = "a/run1/000000000001"
    assert {registry.read_token(c) for c in late_clicks} == {token}  # registered, unwritten

    restarted = make_dc("a", root, clock, arrival_window_s=600.0)
    clock.now_us += 5 * S  # later: the replay decides at its first try's clock all the same
    replay = restarted.joiner.process(f"{1:012d}", [])
    assert replay.replay and replay.woken == 0 and replay.joined == len(late_clicks)
    joined = Counter(r["click_id"] for r in rows(store, "joined/") if r["click_id"] in late_clicks)
    assert sorted(joined) == late_clicks and set(joined.values()) == {1}


def test_retry_passes_wait_while_streaming_batches_take_the_due_retries(
    make_dc: MakeDc, logs: tuple[Path, Manifest]
) -> None:
    """No retry pass between streaming batches that bring lines (they take the due
    retries), unless the last batch took as many retries as it may."""
    root, _ = logs
    clock = Clock(START_US + 10 * S)
    a = make_dc("a", root, clock)
    a.joiner.retry_pass_quiet_us = 30 * S
    read_every_query(a, root)
    clock.now_us += FILE_IDLE_US
    a.reader.publish_progress()
    first, second, *_ = batches(root / "a" / "clicks", 8 * 1024)
    a.joiner.process(f"{0:012d}", first)
    waiting = a.retries.pending()
    assert waiting > 1  # clicks whose query never comes
    clock.now_us += 10 * S  # due again, but the stream brought lines 10 s ago
    assert a.joiner.process_retries() is None and a.retries.pending() == waiting
    a.joiner.max_retries_per_batch = 1
    report = a.joiner.process(f"{1:012d}", second)  # takes one due retry: as many as it may
    assert report.retries_due == 1
    a.joiner.max_retries_per_batch = 5_000
    passed = a.joiner.process_retries()  # so a pass takes the rest at once
    assert passed is not None and passed.retries_due == waiting - 1
    a.joiner.process(f"{2:012d}", second[:1])  # a batch that takes every due retry
    clock.now_us += 10 * S
    assert a.joiner.process_retries() is None
    clock.now_us += 30 * S  # the stream is quiet: passes take over
    assert a.joiner.process_retries() is not None
    drain(a, clock)  # and every click is settled


def test_retry_passes_run_back_to_back_while_each_takes_as_many_as_it_may(
    make_dc: MakeDc, logs: tuple[Path, Manifest]
) -> None:
    """A backlog's deferred clicks drain in passes one after another, not one pass a
    look of the app's watch; passes stop once one takes fewer than a batch may."""
    root, _ = logs
    clock = Clock(START_US + 10 * S)
    a = make_dc("a", root, clock)
    read_every_query(a, root)
    clock.now_us += FILE_IDLE_US
    a.reader.publish_progress()
    first, *_ = batches(root / "a" / "clicks", 8 * 1024)
    a.joiner.process(f"{0:012d}", first)
    waiting = a.retries.pending()
    assert waiting >= 3  # clicks whose query never comes
    clock.now_us += 60 * S  # due again, and the stream is quiet
    a.joiner.max_retries_per_batch = 1
    assert a.joiner.process_retry_passes(most=2) == 2  # each took one: as many as it may
    a.joiner.max_retries_per_batch = 5_000
    assert a.joiner.process_retry_passes() == 1  # took the rest: fewer than it may
    with pytest.raises(ValueError, match="most"):
        a.joiner.process_retry_passes(most=0)


def test_a_crash_between_register_and_write_is_repaired_by_the_replay(
    make_dc: MakeDc,
    store: ObjectStore,
    registry: IdRegistry,
    logs: tuple[Path, Manifest],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    root, manifest = logs
    clock = Clock(START_US)
    a = make_dc("a", root, clock)
    read_every_query(a, root)
    [clicks, *rest] = batches(root / "a" / "clicks", 16 * 1024)
    registered = _crash_before_the_write(a, clicks, registry, monkeypatch)
    assert list(store.keys("joined/")) == []  # and wrote nothing

    restarted = make_dc("a", root, clock)  # a new process: same checkpoint, same state dir
    report = restarted.joiner.process("000000000000", clicks)  # Spark replays batch 0
    assert report.replay and report.joined >= len(registered)
    for n, lines in enumerate(rest, start=1):
        restarted.joiner.process(f"{n:012d}", lines)
    run_dc(restarted, root, clock, clicks_first=False)
    check_exactly_once(store, manifest)


def _crash_before_the_write(
    dc: DcParts, clicks: list[LogLine], registry: IdRegistry, monkeypatch: pytest.MonkeyPatch
) -> set[str]:
    """Batch 0 of ``clicks`` killed after its registry commit, before its output write;
    the ids it registered (there are some)."""
    monkeypatch.setattr(
        dc.joiner.output,
        "joined",
        crashing("killed after the registry commit, before the output write"),
    )
    with pytest.raises(SystemExit):
        dc.joiner.process("000000000000", clicks)
    monkeypatch.undo()
    ids = {c for c in map(_click_id, clicks) if c is not None}
    registered = {c for c in ids if registry.read_token(c) == f"{dc.dc}/run1/000000000000"}
    assert registered  # the crashed try did register
    return registered


def _click_id(line: LogLine) -> str | None:
    """The line's click id, or None for a malformed line."""
    decoded = decode_line(Stream.CLICKS, line.file, line.offset, line.raw)
    return str(decoded.click_id) if isinstance(decoded, ClickEvent) else None


def test_a_batch_replayed_after_its_write_writes_nothing_twice(
    make_dc: MakeDc, store: ObjectStore, logs: tuple[Path, Manifest]
) -> None:
    root, _ = logs
    clock = Clock(START_US)
    a = make_dc("a", root, clock)
    read_every_query(a, root)
    clicks = batches(root / "a" / "clicks", 16 * 1024)[0]
    first = a.joiner.process("000000000000", clicks)
    first_write_at = clock.now_us
    # As if it crashed before Spark committed it:
    a.retries.begin_batch("000000000000", clock.now_us, 0)
    clock.now_us += S
    again = a.joiner.process("000000000000", clicks)
    assert first.joined > 0 and again.replay
    joined = rows(store, "joined/")
    assert len(joined) == len({r["click_id"] for r in joined}) == first.joined
    assert {r["joined_at_us"] for r in joined} == {first_write_at}  # the first write stands


def test_a_crashed_retry_pass_is_replayed_before_the_next_streaming_batch(
    make_dc: MakeDc,
    store: ObjectStore,
    logs: tuple[Path, Manifest],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    root, manifest = logs
    clock = Clock(START_US)
    a = make_dc("a", root, clock)
    click_batches = batches(root / "a" / "clicks", 4 * 1024)
    half = len(click_batches) // 2
    for n, lines in enumerate(click_batches[:half]):  # no query read yet: every click waits
        a.joiner.process(f"{n:012d}", lines)
    assert a.retries.pending() > 0
    read_every_query(a, root)
    clock.now_us += 10 * S

    monkeypatch.setattr(
        a.joiner.output, "joined", crashing("killed in a retry pass, after the registry commit")
    )
    with pytest.raises(SystemExit):
        a.joiner.process_retries()
    monkeypatch.undo()

    restarted = make_dc("a", root, clock)
    # Spark's next batch comes before any retry pass: the crashed pass must go first.
    restarted.joiner.process(f"{half:012d}", click_batches[half])
    for n, lines in enumerate(click_batches[half + 1 :], start=half + 1):
        restarted.joiner.process(f"{n:012d}", lines)
    run_dc(restarted, root, clock, clicks_first=False)
    check_exactly_once(store, manifest)


def test_retry_passes_wait_while_a_crashed_streaming_batch_awaits_its_replay(
    make_dc: MakeDc, logs: tuple[Path, Manifest]
) -> None:
    root, _ = logs
    clock = Clock(START_US)
    a = make_dc("a", root, clock)
    a.joiner.process("000000000000", batches(root / "a" / "clicks", 4 * 1024)[0])
    clock.now_us += 10 * S
    a.retries.begin_batch("000000000001", clock.now_us, 0)  # batch 1 crashed mid-way
    assert a.joiner.process_retries() is None
    a.joiner.process("000000000001", [])  # its replay (which takes the due retries too)
    clock.now_us += 10 * S
    assert a.joiner.process_retries() is not None


def test_a_crash_while_writing_unjoinable_clicks_loses_none_of_them(
    make_dc: MakeDc,
    store: ObjectStore,
    logs: tuple[Path, Manifest],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    root, manifest = logs
    clock = Clock(START_US)
    shutil.rmtree(root / "a" / "queries")  # no query ever comes: every click ends unjoinable
    a = make_dc("a", root, clock)
    a.reader.publish_progress()  # its reader has read everything there is
    for n, lines in enumerate(batches(root / "a" / "clicks", 16 * 1024)):
        a.joiner.process(f"{n:012d}", lines)

    monkeypatch.setattr(
        a.joiner.output, "unjoinable", crashing("killed while writing the unjoinable clicks")
    )
    with pytest.raises(SystemExit):
        for _ in range(10):  # retry passes until the clicks are past both limits
            clock.now_us += 20 * S
            a.reader.publish_progress()
            a.joiner.process_retries()
    monkeypatch.undo()
    assert rows(store, "unjoinable/") == []

    restarted = make_dc("a", root, clock)
    restarted.reader.publish_progress()
    replay = restarted.joiner.process_retries()  # the crashed pass, again
    assert replay is not None and replay.replay and replay.unjoinable > 0
    drain(restarted, clock, step_s=20)  # the rest, as their time comes
    unjoinable = Counter(r["click_id"] for r in rows(store, "unjoinable/"))
    assert set(unjoinable) == set(manifest.expected_joins) | set(manifest.never_joinable)
    assert set(unjoinable.values()) == {1}


def test_a_batch_run_again_after_it_finished_drops_no_click_whose_query_came_meanwhile(
    make_dc: MakeDc, store: ObjectStore, logs: tuple[Path, Manifest]
) -> None:
    """Spark runs batch N again when it failed to log N's commit after N returned.

    By then queries N lacked have arrived: the run registers those clicks under N's
    token, finds N's object already written, and must still write them (N's next part).
    """
    root, manifest = logs
    clock = Clock(START_US + 10 * S)
    a = make_dc("a", root, clock)
    query_batches = batches(root / "a" / "queries", 4 * 1024)
    a.reader.process("q0", query_batches[0])
    clicks = batches(root / "a" / "clicks", 1 << 20)[0]
    first = a.joiner.process("000000000000", clicks)
    assert first.joined > 0 and first.deferred > 0
    for n, lines in enumerate(query_batches[1:], start=1):  # the reader reads on meanwhile
        a.reader.process(f"q{n}", lines)
    clock.now_us += S

    again = a.joiner.process("000000000000", clicks)  # the same batch, run again

    assert again.joined > 0  # clicks whose query came in between
    keys = sorted(store.keys("joined/"))  # each shard group's object, and its next parts
    assert all(
        re.fullmatch(r"joined/dc=a/hour=[\dT-]+/run1/000000000000\.g00\d(\.r1)?\.parquet", k)
        for k in keys
    )
    assert any(k.endswith(".r1.parquet") for k in keys), keys
    joined = rows(store, "joined/")
    assert len(joined) == len({r["click_id"] for r in joined}) == first.joined + again.joined
    drain(a, clock)  # the rest: retries, until every click is settled
    check_exactly_once(store, manifest)


def test_a_query_reader_that_is_behind_never_turns_a_joinable_click_unjoinable(
    make_dc: MakeDc, store: ObjectStore, logs: tuple[Path, Manifest]
) -> None:
    root, manifest = logs
    clock = Clock(START_US + 10 * S)
    a = make_dc("a", root, clock)
    query_batches = batches(root / "a" / "queries", 4 * 1024)
    a.reader.process("q-first", query_batches[0])  # the reader read a little, then stopped
    for n, lines in enumerate(batches(root / "a" / "clicks", 16 * 1024)):
        a.joiner.process(f"{n:012d}", lines)
    reports = []
    for _ in range(20):  # far past both retry limits (3 attempts, 30 s)
        clock.now_us += 20 * S
        reports += [r for r in [a.joiner.process_retries()] if r is not None]
    assert {r["click_id"] for r in rows(store, "unjoinable/")} <= set(manifest.never_joinable)
    assert a.retries.pending() > 0
    assert sum(r.behind_reader for r in reports) > 0  # counted, visible

    # The reader comes back and reads on: every joinable click is joined, once, and each
    # click whose query never comes is written out as unjoinable, once.
    for n, lines in enumerate(query_batches[1:], start=1):
        clock.now_us += S // 10
        a.reader.process(f"q{n}", lines)
    drain(a, clock)
    check_exactly_once(store, manifest)
    check_unjoinable_once(store, manifest)


def test_a_query_shipper_that_stalls_while_clicks_are_logged_costs_no_joinable_click(
    make_dc: MakeDc, store: ObjectStore, logs: tuple[Path, Manifest]
) -> None:
    root, manifest = logs
    clock = Clock(START_US + 10 * S)
    a = make_dc("a", root, clock, watch_clicks=True)
    queries, held = root / "a" / "queries", root / "a" / "queries-held"
    held.mkdir()
    first, *later = sorted(queries.glob("*.log"))
    for path in later:  # the shipper delivered the first query file only, then stalled
        path.rename(held / path.name)
    for n, lines in enumerate(batches(queries, 4 * 1024)):
        a.reader.process(f"q{n}", lines)
    for n, lines in enumerate(batches(root / "a" / "clicks", 16 * 1024)):
        a.joiner.process(f"{n:012d}", lines)
    ticker = root / "a" / "clicks" / "still-serving.1.log"
    for _ in range(20):  # far past the retry limits and the query files' idle time
        clock.now_us += 20 * S
        with ticker.open("ab") as f:  # the ad servers still log clicks
            f.write(b"\n")
        a.reader.publish_progress()
        a.joiner.process_retries()
    assert {r["click_id"] for r in rows(store, "unjoinable/")} <= set(manifest.never_joinable)
    assert a.retries.pending() > 0

    # The shipper delivers the rest; the reader reads it: every joinable click joined once.
    for path in later:
        (held / path.name).rename(path)
    lines = [line for batch in batches(queries, 1 << 20) for line in batch]
    a.reader.process("q-rest", [line for line in lines if line.file != first.name])
    ticker.unlink()
    drain(a, clock)
    check_exactly_once(store, manifest)
    check_unjoinable_once(store, manifest)


def run_in_lockstep(
    parts: dict[str, DcParts], root: Path, clock: Clock, feed: str
) -> list[BatchReport]:
    """Every DC's click batches, the same batch reaching every DC at about the same time,
    then retry passes until nothing is pending anywhere; every batch's report."""
    clicks = {dc: click_batches(root / dc / "clicks", 4 * 1024, feed) for dc in parts}
    reports = []
    for n in range(max(len(b) for b in clicks.values())):
        clock.now_us += S // 2
        for dc, part in parts.items():
            if n < len(clicks[dc]):
                reports.append(process_clicks(part.joiner, f"{n:012d}", clicks[dc][n]))
    for _ in range(100):
        clock.now_us += 2 * S
        reports += [r for part in parts.values() if (r := part.joiner.process_retries())]
        if all(part.retries.pending() == 0 for part in parts.values()):
            break
    return reports


def test_with_dc_affinity_two_dcs_in_lockstep_waste_no_join(
    make_dc: MakeDc, store: ObjectStore, logs: tuple[Path, Manifest]
) -> None:
    root, manifest = logs
    clock = Clock(START_US)
    dcs = ("a", "b")
    parts = {dc: make_dc(dc, root, clock, dcs=dcs, affinity_grace_s=3.0) for dc in dcs}
    sent: list[tuple[str, JoinClick]] = []  # (dc, click) that went to a group (a task)
    for dc in dcs:  # both DCs have every query cached already
        read_every_query(parts[dc], root)
        joiner = parts[dc].joiner

        def run_groups(
            works: list[GroupWork], dc: str = dc, here: GroupRunner = joiner.run_groups
        ) -> list[GroupOutcome]:
            sent.extend((dc, click) for work in works for click in work.clicks)
            return here(works)

        joiner.run_groups = run_groups
    reports = run_in_lockstep(parts, root, clock, "lines")
    joined = check_exactly_once(store, manifest)
    assert sum(r.wasted for r in reports) == 0
    assert sum(r.held for r in reports) > 0
    # The driver holds a new click another DC prefers: only its return (after the
    # grace, to be looked up) goes to a group.
    first_sights = [(dc, click) for dc, click in sent if not click.from_retry]
    assert first_sights
    preferred = parts["a"].joiner.preferred_dc
    assert all(preferred(click.line.click_id) == dc for dc, click in first_sights)
    by_dc = Counter(r["dc"] for r in joined)
    assert by_dc["a"] > 0 and by_dc["b"] > 0  # each DC joined the clicks it is preferred for
    assert all(preferred(r["click_id"]) == r["dc"] for r in joined)


def test_with_dc_affinity_groups_that_read_their_lines_hold_what_the_other_dc_prefers(
    make_dc: MakeDc, store: ObjectStore, logs: tuple[Path, Manifest]
) -> None:
    """As above, with each group reading its batch's lines (the joiner app's way): the
    groups hold the new clicks the other DC prefers before any lookup."""
    root, manifest = logs
    clock = Clock(START_US)
    dcs = ("a", "b")
    parts = {dc: make_dc(dc, root, clock, dcs=dcs, affinity_grace_s=3.0) for dc in dcs}
    for dc in dcs:  # both DCs have every query cached already
        read_every_query(parts[dc], root)
    reports = run_in_lockstep(parts, root, clock, "ranges")
    joined = check_exactly_once(store, manifest)
    assert sum(r.wasted for r in reports) == 0
    assert sum(r.held for r in reports) > 0
    assert sum(r.lines for r in reports) == sum(
        len(lines) for dc in dcs for lines in batches(root / dc / "clicks", 4 * 1024)
    )
    preferred = parts["a"].joiner.preferred_dc
    by_dc = Counter(r["dc"] for r in joined)
    assert by_dc["a"] > 0 and by_dc["b"] > 0
    assert all(preferred(r["click_id"]) == r["dc"] for r in joined)


def test_with_the_preferred_dc_down_the_other_joins_after_the_grace(
    make_dc: MakeDc, store: ObjectStore, logs: tuple[Path, Manifest]
) -> None:
    root, manifest = logs
    clock = Clock(START_US)
    a = make_dc("a", root, clock, dcs=("a", "b"), affinity_grace_s=3.0)  # b never runs
    run_dc(a, root, clock, clicks_first=False)
    joined = check_exactly_once(store, manifest)
    assert {r["dc"] for r in joined} == {"a"}


@pytest.mark.parametrize("max_age_s", [0.0, 30.0])
def test_a_dc_back_from_an_outage_holds_none_of_its_old_backlog(
    make_dc: MakeDc, store: ObjectStore, logs: tuple[Path, Manifest], max_age_s: float
) -> None:
    root, manifest = logs
    clock = Clock(START_US)
    a = make_dc("a", root, clock)  # b is down meanwhile: a joins every click
    run_dc(a, root, clock, clicks_first=False)
    check_exactly_once(store, manifest)

    clock.now_us += 600 * S  # b comes back ten minutes on: its whole backlog is old
    b = make_dc("b", root, clock, dcs=("a", "b"), affinity_grace_s=3.0,
                affinity_max_age_s=max_age_s)  # fmt: skip
    read_every_query(b, root)
    reports = [
        b.joiner.process(f"{n:012d}", lines)
        for n, lines in enumerate(batches(root / "b" / "clicks", 64 * 1024))
    ]
    held = sum(r.held for r in reports)
    if max_age_s:  # the lookup settles the backlog at once: a joined it all
        assert held == 0
        assert sum(r.already_joined for r in reports) >= len(manifest.expected_joins)
    else:  # a-preferred clicks wait out their grace in the retry store first
        assert held > 0
    assert sum(r.wasted + r.joined for r in reports) == 0
    check_exactly_once(store, manifest)


class _ThenMeanwhile:
    """The real registry, except that ``meanwhile`` (when set) runs once right after
    a registration: another DC's work between this DC's two registrations."""

    def __init__(self, real: IdRegistry) -> None:
        self.real = real
        self.meanwhile: Callable[[], None] | None = None

    def register(self, items: Any) -> Any:
        results = self.real.register(items)
        if self.meanwhile is not None:
            run, self.meanwhile = self.meanwhile, None
            run()
        return results

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)


def two_dcs_on_an_old_backlog(
    make_dc: MakeDc, root: Path
) -> tuple[Clock, dict[str, DcParts], _ThenMeanwhile]:
    """DCs a and b, an hour after the logs began (no click is held for its DC), each of
    whose readers read every query, and DC a's registry, which runs another DC's work
    between two of a's registrations when told to."""
    clock = Clock(START_US + 3_600 * S)
    one_group = {"affinity_grace_s": 3.0, "affinity_max_age_s": 30.0, "join_groups": 1}
    parts = {dc: make_dc(dc, root, clock, dcs=("a", "b"), **one_group) for dc in ("a", "b")}
    for dc_parts in parts.values():
        read_every_query(dc_parts, root)
    a_registry = _ThenMeanwhile(parts["a"].joiner.registry)
    parts["a"].joiner.registry = a_registry  # type: ignore[assignment]
    return clock, parts, a_registry


def test_two_dcs_meeting_one_old_backlog_at_once_each_register_their_own_half_first(
    make_dc: MakeDc, store: ObjectStore, logs: tuple[Path, Manifest]
) -> None:
    root, manifest = logs
    clock, parts, a_registry = two_dcs_on_an_old_backlog(make_dc, root)
    dcs = tuple(parts)
    click_batches = {dc: batches(root / dc / "clicks", 8 * 1024) for dc in dcs}
    together = min(len(b) for b in click_batches.values())
    assert together > 1
    reports = []
    for n in range(max(len(b) for b in click_batches.values())):
        clock.now_us += S // 2

        def b_batch(n: int = n) -> None:  # both looked every click up as absent
            reports.append(parts["b"].joiner.process(f"{n:012d}", click_batches["b"][n]))

        if n < together:  # DC b's batch runs once a has registered once
            a_registry.meanwhile = b_batch
        elif n < len(click_batches["b"]):
            b_batch()
        if n < len(click_batches["a"]):
            reports.append(parts["a"].joiner.process(f"{n:012d}", click_batches["a"][n]))
        assert a_registry.meanwhile is None
    for dc in dcs:
        drain(parts[dc], clock)
    joined = check_exactly_once(store, manifest)
    # Neither DC lost a registration to the other: a looked b's half up again after
    # registering its own, and found it registered.
    assert sum(r.wasted for r in reports) == 0
    streamed = [r for r in joined if "/retry-" not in r["token"]]
    preferred = parts["a"].joiner.preferred_dc
    assert Counter(r["dc"] for r in streamed).keys() == {"a", "b"}
    assert all(preferred(r["click_id"]) == r["dc"] for r in streamed)


class _Asking:
    """The real cache, noting each query id it is asked for."""

    def __init__(self, real: Any) -> None:
        self.real = real
        self.asked: set[str] = set()

    def find_many(self, query_ids: Any) -> Any:
        query_ids = list(query_ids)
        self.asked.update(str(q) for q in query_ids)
        return self.real.find_many(query_ids)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)


@pytest.mark.parametrize("chunk", [5, 40])
def test_a_group_searches_no_query_for_the_other_dcs_clicks_it_finds_registered_meanwhile(
    make_dc: MakeDc,
    store: ObjectStore,
    logs: tuple[Path, Manifest],
    monkeypatch: pytest.MonkeyPatch,
    chunk: int,
) -> None:
    # the first chunk holds only clicks a is preferred for (its batch has ~60 of them)
    monkeypatch.setattr("photon.join.group._CHUNK", chunk)
    root, manifest = logs
    clock, parts, a_registry = two_dcs_on_an_old_backlog(make_dc, root)
    dcs = tuple(parts)
    a_cache = _Asking(parts["a"].joiner.cache)
    parts["a"].joiner.cache = a_cache  # type: ignore[assignment]
    [a_clicks, *_] = batches(root / "a" / "clicks", 64 * 1024)
    [b_clicks, *_] = batches(root / "b" / "clicks", 64 * 1024)
    b_reports: list[BatchReport] = []

    def b_batch() -> None:  # after a registered its first chunk, before the others
        b_reports.append(parts["b"].joiner.process("000000000000", b_clicks))

    a_registry.meanwhile = b_batch
    a_report = parts["a"].joiner.process("000000000000", a_clicks)
    assert b_reports[0].joined > 0  # b ran, between the chunks of a's group

    joined_by_b = {r["click_id"] for r in rows(store, "joined/dc=b/")}
    preferred = parts["a"].joiner.preferred_dc
    a_events = [
        e
        for line in a_clicks
        if isinstance(e := decode_line(Stream.CLICKS, line.file, line.offset, line.raw), ClickEvent)
    ]
    own = {str(e.query_id) for e in a_events if preferred(str(e.click_id)) == "a"}
    others = [e for e in a_events if preferred(str(e.click_id)) == "b"]
    taken = [e for e in others if str(e.click_id) in joined_by_b]
    still_absent = {str(e.query_id) for e in others if str(e.click_id) not in joined_by_b}
    # a looked each later chunk up just before searching its queries: of the queries
    # only the clicks b took ask for, it asked for none
    only_taken = {str(e.query_id) for e in taken} - own - still_absent
    assert only_taken  # the case at hand: b joined some of a's batch meanwhile
    assert not only_taken & a_cache.asked
    assert a_report.wasted == 0
    assert a_report.already_joined >= len({str(e.click_id) for e in taken})
    for dc in dcs:
        drain(parts[dc], clock)
    check_exactly_once(store, manifest)


def test_an_injected_crash_after_commit_leaves_ids_registered_and_unwritten(
    make_dc: MakeDc, store: ObjectStore, registry: IdRegistry, logs: tuple[Path, Manifest]
) -> None:
    from photon.faults import CRASH_EXIT_CODE, FaultInjector
    from photon.settings import FaultSettings

    def killed(code: int) -> NoReturn:
        raise SystemExit(code)

    root, _ = logs
    clock = Clock(START_US + 600 * S)
    a = make_dc("a", root, clock)
    read_every_query(a, root)
    [clicks, *_] = batches(root / "a" / "clicks", 16 * 1024)
    a.joiner.faults = FaultInjector(FaultSettings(crash_after_commit_p=1.0), exit=killed)

    with pytest.raises(SystemExit) as info:
        a.joiner.process("000000000000", clicks)

    assert info.value.code == CRASH_EXIT_CODE
    ids = {c for c in map(_click_id, clicks) if c is not None}
    assert [c for c in ids if registry.read_token(c) == "a/run1/000000000000"]
    assert list(store.keys("joined/")) == []
    assert a.retries.unfinished_batches() == ["000000000000"]  # Spark's replay writes them


def test_a_replay_finds_in_the_logs_a_query_its_crashed_try_found_in_the_cache(
    make_dc: MakeDc,
    store: ObjectStore,
    registry: IdRegistry,
    logs: tuple[Path, Manifest],
    local_stack: LocalStack,
) -> None:
    """The crashed try joined from the cache alone (new clicks skip the logs while
    their queries are fresh) and registered its clicks; the cache then lost those
    queries. The replay must find them again, in the logs, or the clicks would be
    registered and never written."""
    from photon.faults import FaultInjector
    from photon.settings import FaultSettings

    def killed(code: int) -> NoReturn:
        raise SystemExit(code)

    root, _ = logs
    clock = Clock(START_US + 600 * S)
    a = make_dc("a", root, clock, skip_fresh_logs_s=3600)
    read_every_query(a, root)
    clock.now_us += FILE_IDLE_US
    a.reader.publish_progress()
    [clicks, *_] = batches(root / "a" / "clicks", 16 * 1024)
    a.joiner.faults = FaultInjector(FaultSettings(crash_after_commit_p=1.0), exit=killed)
    with pytest.raises(SystemExit):
        a.joiner.process("000000000000", clicks)
    token = "a/run1/000000000000"
    ids = {c for c in map(_click_id, clicks) if c is not None}
    registered = {c for c in ids if registry.read_token(c) == token}
    assert registered
    admin = redis.Redis.from_url(local_stack.settings.redis_url)
    admin.delete(*admin.keys(f"{a.cache_prefix}:a:*"))  # the cache lost every query
    admin.close()

    restarted = make_dc("a", root, clock, skip_fresh_logs_s=3600)
    replay = restarted.joiner.process("000000000000", clicks)
    assert replay.replay and replay.from_logs > 0
    assert registered <= {r["click_id"] for r in rows(store, "joined/")}


#: Where a streaming batch dies: after each step of :meth:`Dispatcher._process` (the part
#: patched, and the method after whose return the process is killed).
BOUNDARIES = {
    "after_begin": ("retries", "begin_batch"),
    "after_lookup": ("registry", "lookup"),
    "after_register": ("registry", "register"),
    "after_joined_write": ("output", "joined"),
    "after_unjoinable_write": ("output", "unjoinable"),
    "after_defer": ("retries", "defer"),
    # settled clicks leave the store in the transaction that closes the batch
    "after_finish": ("retries", "finish_batch"),  # foreachBatch returned, commit not logged
}


@pytest.mark.parametrize("feed", FEEDS)
@pytest.mark.parametrize("boundary", sorted(BOUNDARIES))
def test_a_batch_killed_at_any_step_and_replayed_later_loses_and_doubles_nothing(
    make_dc: MakeDc,
    store: ObjectStore,
    logs: tuple[Path, Manifest],
    monkeypatch: pytest.MonkeyPatch,
    boundary: str,
    feed: str,
) -> None:
    """Killed at a step boundary, the batch runs again later, when other queries have
    arrived and other retries are due: every joinable click ends joined once, every
    never-joinable one unjoinable once."""
    root, manifest = logs
    clock = Clock(START_US + 10 * S)
    a = make_dc("a", root, clock)
    query_batches = batches(root / "a" / "queries", 4 * 1024)
    # Half the queries arrive before the crash, the rest after it; to see the unjoinable
    # write die, every query is read first (so only never-joinable clicks expire).
    read_first = len(query_batches) if boundary == "after_unjoinable_write" else 3
    for n, lines in enumerate(query_batches[:read_first]):
        a.reader.process(f"q{n}", lines)
    *before, last = click_batches(root / "a" / "clicks", 8 * 1024, feed)
    for n, clicks in enumerate(before):
        process_clicks(a.joiner, f"{n:012d}", clicks)
    for _ in range(3):  # earlier clicks come back, some until past their limits
        clock.now_us += 15 * S
        a.reader.publish_progress()
        a.joiner.process_retries()
    clock.now_us += 15 * S
    a.reader.publish_progress()
    crashed = f"{len(before):012d}"

    part, method = BOUNDARIES[boundary]
    owner = getattr(a.joiner, part)
    real = getattr(owner, method)

    def killed(*args: object, **kwargs: object) -> NoReturn:
        real(*args, **kwargs)
        raise SystemExit(f"killed {boundary}")

    monkeypatch.setattr(owner, method, killed)
    with pytest.raises(SystemExit):
        process_clicks(a.joiner, crashed, last)
    monkeypatch.undo()

    restarted = make_dc("a", root, clock)  # a new process on the same state
    for n, lines in enumerate(query_batches[read_first:], start=read_first):  # came meanwhile
        clock.now_us += S // 10
        restarted.reader.process(f"q{n}", lines)
    clock.now_us += 7 * S  # and other retries are due now
    replay = process_clicks(restarted.joiner, crashed, last)  # Spark runs the batch again
    assert replay.replay == (boundary != "after_finish")
    drain(restarted, clock)
    check_exactly_once(store, manifest)
    check_unjoinable_once(store, manifest)


def test_a_batch_replayed_after_the_gc_retention_lists_its_collected_clicks_and_says_so(
    make_dc: MakeDc,
    store: ObjectStore,
    registry: IdRegistry,
    logs: tuple[Path, Manifest],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A DC down longer than the GC retention with a batch open: what its crashed try
    registered is collected meanwhile. The replay cannot join those clicks (too old for
    anyone now), and it says so: each is written under too_old/ with its line, and the
    joiner logs a warning naming the batch, never dropping them silently."""
    root, _ = logs
    clock = Clock(START_US)
    a = make_dc("a", root, clock)
    read_every_query(a, root)
    [clicks, *_] = batches(root / "a" / "clicks", 16 * 1024)
    registered = _crash_before_the_write(a, clicks, registry, monkeypatch)
    for shard in range(registry.sharding().max_shards):  # the retention passes them all
        registry.advance_gc_boundary(shard, START_US + 3_600 * S)
        registry.gc(shard)

    restarted = make_dc("a", root, clock)
    with structlog.testing.capture_logs() as logged:
        report = restarted.joiner.process("000000000000", clicks)

    assert report.replay and report.joined == 0 and report.too_old >= len(registered)
    assert registered <= {r["click_id"] for r in rows(store, "too_old/")}
    [warning] = [e for e in logged if e["event"] == "joiner.replay_past_gc"]
    assert warning["batch"] == "000000000000" and warning["too_old"] == report.too_old


def test_a_later_chunk_searches_the_logs_for_a_query_an_earlier_chunk_did_not(
    make_dc: MakeDc,
    store: ObjectStore,
    logs: tuple[Path, Manifest],
    local_stack: LocalStack,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One query, two clicks on it: DC a's own, new, which is not due a log search, and
    one DC b is preferred for, retried and due a search. The cache lost the query. The
    group (in chunks of one click) asks the cache once, for its first chunk, and does
    not search the logs then; its second chunk still searches them for the retried
    click, which is joined."""
    monkeypatch.setattr("photon.join.group._CHUNK", 1)
    root, manifest = logs
    clock = Clock(START_US + 3_600 * S)  # an hour on: no click is held for its DC
    a = make_dc("a", root, clock, dcs=("a", "b"), affinity_grace_s=3.0, join_groups=1)
    read_every_query(a, root)
    query_id = next(iter(manifest.expected_joins.values()))
    query_us = int(query_id.rsplit(":", 1)[1])
    admin = redis.Redis.from_url(local_stack.settings.redis_url)
    assert admin.delete(f"{a.cache_prefix}:a:{query_id}") == 1  # the cache lost it
    admin.close()
    by_dc: dict[str, JoinClick] = {}
    for n in count(1):
        click_id = f"10.9.0.1:1:{query_us + n}"
        dc = a.joiner.preferred_dc(click_id)
        if dc in by_dc:
            continue
        raw = json.dumps({"click_id": click_id, "query_id": query_id, "cost_micros": 1}).encode()
        retried = dc == "b"
        line = PendingClick(click_id, raw, "c.extra.log", 100 * n, query_us, 3 if retried else 0)
        by_dc[dc] = JoinClick(decode_click(raw), line, from_retry=retried, search_logs=retried)
        if len(by_dc) == 2:
            break
    work = GroupWork("000000000000", "000000000000", clock.now_us, False, [by_dc["a"], by_dc["b"]])
    out = a.joiner.join(work)
    assert out.counts["from_logs"] == 1 and out.counts["joined"] == 1, out
    joined = {r["click_id"] for r in rows(store, "joined/dc=a/")}
    assert joined == {by_dc["b"].line.click_id}
    # the new click, decided in the first chunk, waits for its next try, as it would have
    assert [w.line.click_id for w in out.not_found] == [by_dc["a"].line.click_id]
