from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from registry.ids import MIN_TS_US, EventId
from registry.sharding import (
    MAX_SHARDS,
    Epoch,
    InvalidShardingError,
    ShardingConfig,
    stable_hash,
)

pytestmark = pytest.mark.unit

HOUR_US = 3_600_000_000
ids = st.builds(
    EventId,
    st.ip_addresses(v=4).map(str),
    st.integers(min_value=1, max_value=2**32 - 1),
    st.integers(min_value=MIN_TS_US, max_value=MIN_TS_US + 1000 * HOUR_US),
)
counts = st.integers(min_value=1, max_value=MAX_SHARDS)


def test_the_hash_is_stable_across_processes_and_versions() -> None:
    # Pinned values: if these change, every existing id would move shard.
    assert stable_hash("10.1.2.3:4242:1767225600123456") == 0x3FAC26CBA704620D
    assert stable_hash("") == 0xE4A6A0577479B2B4


@given(ids, counts, st.lists(st.tuples(st.integers(1, 500 * HOUR_US), counts), max_size=6))
def test_an_id_keeps_its_shard_whatever_epochs_come_later(
    event_id: EventId, first: int, later: list[tuple[int, int]]
) -> None:
    config = ShardingConfig.initial(first)
    shard = config.shard_of(event_id)
    start = event_id.ts_us  # every later epoch starts after the id's time: "now + skew"
    for gap, shards in later:
        start += gap
        config = config.appended(start, shards)
        assert config.shard_of(event_id) == shard


@given(st.lists(st.tuples(st.integers(1, 50 * HOUR_US), counts), min_size=1, max_size=6), ids)
def test_ids_at_or_after_an_epoch_start_use_its_count(
    epochs: list[tuple[int, int]], event_id: EventId
) -> None:
    config = ShardingConfig.initial(7)
    start = MIN_TS_US
    for gap, shards in epochs:
        start += gap
        config = config.appended(start, shards)
    epoch = config.epoch_at(event_id.ts_us)
    assert epoch.start_us <= event_id.ts_us
    later = [e for e in config.epochs if e.start_us > epoch.start_us]
    assert all(e.start_us > event_id.ts_us for e in later)
    assert config.shard_of(event_id) == stable_hash(str(event_id)) % epoch.shards


def test_an_epoch_at_its_exact_start_uses_the_new_count() -> None:
    config = ShardingConfig.initial(1).appended(MIN_TS_US + 10, 1000)
    at_start = EventId("10.0.0.1", 1, MIN_TS_US + 10)
    before = EventId("10.0.0.1", 1, MIN_TS_US + 9)
    assert config.epoch_at(at_start.ts_us).shards == 1000
    assert config.shard_of(before) == 0


def test_round_trip_through_json() -> None:
    config = ShardingConfig.initial(8).appended(MIN_TS_US, 16)
    assert ShardingConfig.from_json(config.to_json(), version=3) == ShardingConfig(config.epochs, 3)
    odd = ShardingConfig.initial(2, bucket_us=1_000_000)
    assert ShardingConfig.from_json(odd.to_json()).bucket_us == 1_000_000


@pytest.mark.parametrize(
    "build",
    [
        lambda: ShardingConfig.initial(4).appended(0, 8),
        lambda: ShardingConfig.initial(0),
        lambda: ShardingConfig.initial(MAX_SHARDS + 1),
        lambda: ShardingConfig((Epoch(5, 4),)),
        lambda: ShardingConfig((Epoch(0, 4), Epoch(10, 4), Epoch(10, 8))),
        lambda: ShardingConfig.from_json(b'{"epochs": [{"start": 0}]}'),
        lambda: ShardingConfig.from_json(b"not json"),
        lambda: ShardingConfig.initial(4, bucket_us=7_000_000),  # does not divide an hour
        lambda: ShardingConfig.initial(4, bucket_us=10),
    ],
)
def test_invalid_configs_are_refused(build: object) -> None:
    with pytest.raises(InvalidShardingError):
        build()  # type: ignore[operator]
