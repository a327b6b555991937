"""Clicks stamped ahead of the registry's clock, with a reshard meanwhile, on the real
stack: such a click is held (never registered) until it is in range, so no epoch
appended meanwhile can move it to another shard and a second DC can never register
it again there (docs/join.md, "Time")."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from photon.logs.reader import LogLine
from photon.ops.params import ReshardParams
from photon.ops.reshard import apply, plan
from photon.storage import ObjectStore
from photon.tooling.stack.manager import LocalStack
from registry import EventId, IdRegistry, LookupResult

from .conftest import Clock, MakeDc
from .test_join import rows

pytestmark = pytest.mark.integration

S = 1_000_000
SKEW_S = 2


def line(name: str, record: dict[str, Any]) -> list[LogLine]:
    return [LogLine(name, 0, json.dumps(record).encode())]


def test_a_click_stamped_ahead_is_held_across_a_reshard_and_joined_once_when_in_range(
    make_dc: MakeDc, store: ObjectStore, local_stack: LocalStack, tmp_path: Path
) -> None:
    registry = IdRegistry.connect(
        local_stack.settings.zk_hosts,
        f"/photon-future-{time.time_ns()}",
        default_shards=4,
        max_clock_skew_s=SKEW_S,
    )
    other = IdRegistry.connect(
        local_stack.settings.zk_hosts, registry.root, max_clock_skew_s=SKEW_S
    )
    try:
        zk_now = registry.zk_now_us()
        ahead_us = zk_now + 6 * S  # an ad server whose clock runs 6 s ahead
        # a click whose shard under 4 shards differs from its shard under 8
        x = next(
            EventId("10.0.0.1", pid, ahead_us)
            for pid in range(1, 1000)
            if registry.sharding().appended(zk_now, 8).shard_of(EventId("10.0.0.1", pid, ahead_us))
            != registry.shard_of(EventId("10.0.0.1", pid, ahead_us))
        )
        query_id = str(EventId("10.0.0.2", 7, ahead_us - 100_000))
        click = {"click_id": str(x), "query_id": query_id, "cost_micros": 10}
        clock = Clock(time.time_ns() // 1000)
        a = make_dc("a", tmp_path / "logs", clock, reg=registry, join_groups=1)
        b = make_dc("b", tmp_path / "logs", clock, reg=other, join_groups=1)
        for dc in (a, b):
            dc.reader.process("q0", line("q.0.log", {"query_id": query_id}))

        first = a.joiner.process("000000000000", line("c.0.log", click))
        registered_first = registry.lookup([x])[str(x)]
        held_first = a.retries.contains(str(x))  # held, not given up on

        # The operator reshards with the checked skew: the epoch starts before x's time.
        applied = apply(
            registry, plan(registry, ReshardParams(shards=8, skew_s=SKEW_S, dry_run=False), SKEW_S)
        )
        assert applied.start_us < x.ts_us

        # DC b catching up meets x before it is in range, then after.
        early = b.joiner.process("000000000000", line("c.0.log", click))
        while registry.zk_now_us() + SKEW_S * S < x.ts_us:  # ZooKeeper's clock catches up
            time.sleep(0.2)
        clock.now_us = time.time_ns() // 1000 + 10 * S
        b.joiner.process("000000000001", line("c.0.log", click))
        a.joiner.process_retries()

        joined = [r["click_id"] for r in rows(store, "joined/")]
        assert joined == [str(x)]  # once, by either DC
        assert (first.too_new, first.joined, early.too_new) == (1, 0, 1)
        assert registered_first is LookupResult.ABSENT and held_first
        assert a.retries.pending() == 0 and b.retries.pending() == 0
    finally:
        registry.drop()
        registry.close()
        other.close()


def test_a_click_stamped_beyond_any_sane_clock_is_quarantined_with_its_reason(
    make_dc: MakeDc, store: ObjectStore, local_stack: LocalStack, tmp_path: Path
) -> None:
    registry = IdRegistry.connect(
        local_stack.settings.zk_hosts, f"/photon-future-{time.time_ns()}", max_clock_skew_s=60
    )
    try:
        far = EventId("10.0.0.1", 9, registry.zk_now_us() + 3 * 86_400 * S)  # 3 days ahead
        query_id = str(EventId("10.0.0.2", 7, far.ts_us - 100_000))
        a = make_dc("a", tmp_path / "logs", Clock(time.time_ns() // 1000), reg=registry)
        a.reader.process("q0", line("q.0.log", {"query_id": query_id}))
        report = a.joiner.process(
            "000000000000", line("c.0.log", {"click_id": str(far), "query_id": query_id})
        )
        assert (report.future_stamped, report.too_new, report.joined) == (1, 0, 0)
        [record] = rows(store, "quarantine/")
        assert record["reason"] == "future_stamped" and "max_future_s" in record["detail"]
        assert registry.lookup([far]) == {str(far): LookupResult.ABSENT}
        assert a.retries.pending() == 0
    finally:
        registry.drop()
        registry.close()


def test_a_query_stamped_a_day_ahead_never_lets_a_stopped_readers_clicks_expire(
    make_dc: MakeDc, store: ObjectStore, registry: IdRegistry, tmp_path: Path
) -> None:
    """One query from an ad server whose clock runs a day ahead, read while every query
    file goes idle, then the reader stops: its progress must stay near its own clock
    (plus the skew), so a click whose query it has not read waits for it instead of
    expiring as unjoinable when its retry limits pass."""
    root = tmp_path / "logs"
    queries, clicks = root / "a" / "queries", root / "a" / "clicks"
    queries.mkdir(parents=True)
    clicks.mkdir(parents=True)
    start = 1_767_225_600 * S
    clock = Clock(start)
    a = make_dc("a", root, clock, join_groups=1)

    def append(path: Path, record: dict[str, Any]) -> list[LogLine]:
        offset = path.stat().st_size if path.exists() else 0
        raw = json.dumps(record).encode()
        with path.open("ab") as f:
            f.write(raw + b"\n")
        return [LogLine(path.name, offset, raw)]

    early = str(EventId("10.0.0.2", 7, start - 5 * S))
    tomorrow = str(EventId("10.0.0.2", 8, start + 86_400 * S))
    read = append(queries / "q.0.log", {"query_id": early})
    read += append(queries / "q.0.log", {"query_id": tomorrow})
    a.reader.process("q0", read)
    clock.now_us += 40 * S  # past the files' idle time: everything written was read
    a.reader.publish_progress()
    # the reader stops; a query is written that it never reads, and its click arrives
    late_query = str(EventId("10.0.0.2", 7, start + 200 * S))
    late = append(queries / "q.1.log", {"query_id": late_query})
    click = str(EventId("10.0.0.1", 9, start + 201 * S))
    clock.now_us = start + 202 * S
    a.joiner.process(
        "000000000000", append(clicks / "c.0.log", {"click_id": click, "query_id": late_query})
    )
    for _ in range(30):  # far past both retry limits (3 attempts, 30 s)
        clock.now_us += 20 * S
        a.joiner.process_retries()

    assert rows(store, "unjoinable/") == []  # waiting for the reader, not given up on
    assert a.retries.contains(click)
    # the reader comes back and reads on: the click is joined, once
    a.reader.process("q1", late)
    clock.now_us += 60 * S
    a.joiner.process_retries()
    assert [r["click_id"] for r in rows(store, "joined/")] == [click]
    assert a.retries.pending() == 0


def test_a_click_stamped_ahead_is_held_even_when_its_query_is_nowhere_yet(
    make_dc: MakeDc, local_stack: LocalStack, tmp_path: Path
) -> None:
    """The query of a click an hour ahead is an hour ahead too, and no cache or log has
    it yet: the click is held as stamped ahead before any query search (a search would
    wait on the reader's progress for that hour), so a run may end without it."""
    registry = IdRegistry.connect(
        local_stack.settings.zk_hosts, f"/photon-future-{time.time_ns()}", max_clock_skew_s=60
    )
    try:
        ahead = EventId("10.0.0.1", 9, registry.zk_now_us() + 3_600 * S)
        query_id = str(EventId("10.0.0.2", 7, ahead.ts_us - 100_000))
        clock = Clock(time.time_ns() // 1000)
        a = make_dc("a", tmp_path / "logs", clock, reg=registry)
        report = a.joiner.process(
            "000000000000", line("c.0.log", {"click_id": str(ahead), "query_id": query_id})
        )
        assert (report.too_new, report.deferred, report.cache_misses) == (1, 0, 0)
        assert a.retries.contains(str(ahead)) and a.retries.settleable(clock.now_us) == 0
    finally:
        registry.drop()
        registry.close()
