"""A shard group's decisions, on in-memory services (tests/fakes.py): what it joins,
writes, skips, leaves to retry and refuses. The same decisions against real ZooKeeper,
Redis and S3: tests/integration/photon/join/."""

from __future__ import annotations

import json

import pytest

from photon.events.records import decode_click
from photon.join.group import GroupJoiner, GroupWork, JoinClick, JoinPolicy
from photon.join.output import decode
from photon.join.retry import PendingClick
from registry import AttemptFencedError
from tests.fakes import FakeServices

pytestmark = pytest.mark.unit

T0 = 1_795_516_000_000_000  # an event time (us), late 2026
NOW = T0 + 5_000_000


def click_id(n: int) -> str:
    return f"10.0.0.1:42:{T0 + n}"


def query_id(n: int) -> str:
    return f"10.1.0.2:7:{T0 + n - 1_000_000}"


def click(n: int, *, ours: bool = False) -> JoinClick:
    raw = json.dumps(
        {"click_id": click_id(n), "query_id": query_id(n), "ad_id": f"ad{n}", "cost_micros": n}
    ).encode()
    line = PendingClick(click_id(n), raw, "clicks-1.log", 100 * n, NOW)
    return JoinClick(decode_click(raw), line, from_retry=False, ours=ours)


def query_line(n: int) -> bytes:
    return json.dumps({"query_id": query_id(n), "text": f"query {n}"}).encode()


def work(
    clicks: list[JoinClick], *, batch: str = "000000000007", replay: bool = False
) -> GroupWork:
    return GroupWork(batch, batch, NOW, replay, clicks)


def joined_ids(services: FakeServices) -> list[str]:
    return sorted(
        row["click_id"]
        for key, data in services.store.objects.items()
        if key.startswith("joined/")
        for row in decode(data)
    )


@pytest.fixture
def services() -> FakeServices:
    found = FakeServices()
    found.cache.queries = {query_id(n): query_line(n) for n in range(1, 4)}
    return found


def test_a_click_whose_query_is_cached_is_registered_with_the_batch_token_and_written(
    services: FakeServices,
) -> None:
    outcome = GroupJoiner(services.parts()).join(work([click(1), click(2)]))
    assert outcome.counts["joined"] == 2 and outcome.not_found == []
    assert services.registry.tokens == {
        click_id(1): "a/attempt1/000000000007",
        click_id(2): "a/attempt1/000000000007",
    }
    assert joined_ids(services) == [click_id(1), click_id(2)]
    assert services.logs.asked == []  # the cache had them: no log search


def test_a_click_joined_elsewhere_is_skipped_before_its_query_is_looked_for(
    services: FakeServices,
) -> None:
    services.registry.tokens[click_id(1)] = "b/attempt9/000000000003"
    outcome = GroupJoiner(services.parts()).join(work([click(1)]))
    assert outcome.counts["joined"] == 0 and outcome.registered == 0
    assert services.cache.asked == [] and joined_ids(services) == []


def test_a_click_whose_query_is_in_neither_store_comes_back_to_retry_unregistered(
    services: FakeServices,
) -> None:
    outcome = GroupJoiner(services.parts()).join(work([click(9)]))
    assert [c.line.click_id for c in outcome.not_found] == [click_id(9)]
    assert services.logs.asked == [query_id(9)]  # the logs were searched after the cache
    assert services.registry.tokens == {} and joined_ids(services) == []


def test_a_query_found_in_the_logs_joins_like_a_cached_one(services: FakeServices) -> None:
    services.logs.queries[query_id(9)] = query_line(9)
    outcome = GroupJoiner(services.parts()).join(work([click(9)]))
    assert outcome.counts["from_logs"] == 1 and joined_ids(services) == [click_id(9)]


def test_a_registration_lost_to_another_dc_is_wasted_and_not_written(
    services: FakeServices,
) -> None:
    services.registry.steal = {click_id(2)}  # the other DC registers it after our lookup
    outcome = GroupJoiner(services.parts()).join(work([click(1), click(2)]))
    assert outcome.counts["wasted"] == 1 and outcome.counts["joined"] == 1
    assert joined_ids(services) == [click_id(1)]


def test_a_replay_after_a_crash_between_commit_and_write_writes_what_the_crash_lost(
    services: FakeServices,
) -> None:
    batch = [click(1), click(2)]
    for c in batch:  # the crashed try registered both, then died before writing
        services.registry.tokens[c.line.click_id] = "a/attempt1/000000000007"
    outcome = GroupJoiner(services.parts()).join(work(batch, replay=True))
    assert outcome.counts["joined"] == 2
    assert joined_ids(services) == [click_id(1), click_id(2)]


def test_a_replay_after_the_write_writes_nothing_twice(services: FakeServices) -> None:
    joiner = GroupJoiner(services.parts())
    joiner.join(work([click(1), click(2)]))
    again = joiner.join(work([click(1), click(2), click(3)], replay=True))
    assert joined_ids(services) == [click_id(1), click_id(2), click_id(3)]  # each once
    assert again.counts["joined"] == 1


def test_a_fenced_attempt_registers_but_writes_nothing(services: FakeServices) -> None:
    services.registry.fenced = True
    with pytest.raises(AttemptFencedError):
        GroupJoiner(services.parts()).join(work([click(1)]))
    assert joined_ids(services) == []


def test_a_click_below_the_gc_boundary_is_written_as_too_old_not_joined(
    services: FakeServices,
) -> None:
    services.registry.gc_boundary_us = T0 + 2
    outcome = GroupJoiner(services.parts()).join(work([click(1), click(3)]))
    assert joined_ids(services) == [click_id(3)]
    too_old = [
        row["click_id"]
        for key, data in services.store.objects.items()
        if key.startswith("too_old/")
        for row in decode(data)
    ]
    assert too_old == [click_id(1)] and outcome.counts["joined"] == 1


def test_a_new_click_another_dc_prefers_is_held_in_a_replay_within_the_grace(
    services: FakeServices,
) -> None:
    policy = JoinPolicy(dcs=("a", "b"), affinity_grace_s=60.0)
    outcome = GroupJoiner(services.parts(), policy).join(
        work([click(n) for n in range(1, 4)], replay=True)
    )
    held = {c.click_id for c in outcome.held}
    assert held  # some of three clicks hash to DC b
    assert set(joined_ids(services)) == {click_id(n) for n in range(1, 4)} - held
