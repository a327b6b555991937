"""Observing many values of a histogram at once gives what observing each gives."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Histogram

from photon.metrics import observe_many

pytestmark = pytest.mark.unit

BUCKETS = (0.25, 0.5, 1, 2, 3, 5, 10, 30, 60, 300)


def samples(registry: CollectorRegistry) -> dict[str, float]:
    return {
        f"{s.name}{sorted(s.labels.items())}": s.value
        for family in registry.collect()
        for s in family.samples
        if not s.name.endswith("_created")
    }


@given(
    st.lists(st.floats(0, 400, allow_nan=False), max_size=200),
    st.lists(st.sampled_from([*BUCKETS, 0.0, 1e-9]), max_size=20),
)
def test_observe_many_counts_every_bucket_and_the_sum_as_observe_does(
    values: list[float], on_bounds: list[float]
) -> None:
    every = values + on_bounds  # a value on a bound counts in that bucket
    one_by_one, at_once = CollectorRegistry(), CollectorRegistry()
    for registry, observe in ((one_by_one, False), (at_once, True)):
        histogram = Histogram("lat", "latency", ["dc"], buckets=BUCKETS, registry=registry)
        child = histogram.labels("a")
        child.observe(1.5)  # what came before stays
        if observe:
            observe_many(child, every)
        else:
            for value in every:
                child.observe(value)
    expected, got = samples(one_by_one), samples(at_once)
    assert expected.keys() == got.keys()
    for name, value in expected.items():
        assert got[name] == pytest.approx(value, rel=1e-9, abs=1e-9), name


@given(
    st.lists(st.integers(0, 400_000_000), max_size=200),
    st.lists(st.sampled_from([round(b * 1_000_000) for b in BUCKETS] + [0, 1]), max_size=20),
)
def test_observe_many_of_microseconds_counts_as_observe_of_seconds(
    values: list[int], on_bounds: list[int]
) -> None:
    """Latencies in microseconds (the joiner's), observed in seconds: each divided as
    ``observe(us / 1_000_000)`` would be, so one on a bound counts in that bucket."""
    every = values + on_bounds
    one_by_one, at_once = CollectorRegistry(), CollectorRegistry()
    for registry, observe in ((one_by_one, False), (at_once, True)):
        child = Histogram("lat", "latency", ["dc"], buckets=BUCKETS, registry=registry).labels("a")
        if observe:
            observe_many(child, every, per_unit=1_000_000)
        else:
            for us in every:
                child.observe(us / 1_000_000)
    expected, got = samples(one_by_one), samples(at_once)
    assert expected.keys() == got.keys()
    for name, value in expected.items():
        assert got[name] == pytest.approx(value, rel=1e-9, abs=1e-9), name


def test_observe_many_of_nothing_changes_nothing() -> None:
    registry = CollectorRegistry()
    child = Histogram("lat", "latency", ["dc"], buckets=BUCKETS, registry=registry).labels("a")
    before = samples(registry)
    observe_many(child, [])
    assert samples(registry) == before
