from __future__ import annotations

import json

import pytest

from photon.events.records import Stream
from photon.tooling.bench.pipeline import (
    PhaseFigures,
    _batch_rate,
    _wasted_share,
    available_at,
    click_latencies,
    dc_of_key,
)
from photon.tooling.gen.model import GenConfig
from photon.tooling.gen.simulator import simulate

pytestmark = pytest.mark.unit


def test_wasted_is_the_share_of_register_attempts_another_dc_had_won() -> None:
    phase = PhaseFigures(
        apps=[
            {"app": "joiner", "dc": "a", "joined": 900, "wasted": 20},
            {"app": "joiner", "dc": "b", "joined": 1_000, "wasted": 80},
            {"app": "query-reader", "dc": "a", "wasted": 5_000},  # not a joiner's figure
        ]
    )
    assert _wasted_share(phase) == pytest.approx(100 / 2_000)
    assert _wasted_share(PhaseFigures()) == 0.0  # nothing registered: nothing wasted


def test_the_batch_rate_is_the_output_over_the_busiest_joiner_s_batch_time() -> None:
    phase = PhaseFigures(
        joined=48_000,
        apps=[
            {"app": "joiner", "dc": "a", "batch_seconds": 6.0},
            {"app": "joiner", "dc": "b", "batch_seconds": 8.0},  # side by side: the longer
            {"app": "query-reader", "dc": "a", "batch_seconds": 60.0},  # not the join's
        ],
    )
    assert _batch_rate(phase) == pytest.approx(6_000.0)
    assert _batch_rate(PhaseFigures(joined=5)) == 0.0  # no joiner ran a batch


def test_a_click_s_latency_runs_from_when_it_happened_in_the_stream_the_apps_saw() -> None:
    rows = [{"click_ts_us": 10_000_000}, {"click_ts_us": 11_500_000}]
    assert click_latencies(rows, seen_us=16_000_000) == [(10_000_000, 6.0), (11_500_000, 4.5)]
    # The stream started 3 s after the times its lines carry: each click came 3 s later.
    shifted = click_latencies(rows, seen_us=16_000_000, start_shift_us=3_000_000)
    assert shifted == [(10_000_000, 3.0), (11_500_000, 1.5)]


def test_a_click_is_available_once_both_its_line_and_its_query_s_are_in_the_dc_s_logs() -> None:
    cfg = GenConfig(
        seed=3,
        dcs=["a", "b"],
        start_us=1_800_000_000_000_000,
        queries=400,
        query_rate=100.0,
        delayed_query_fraction=0.3,
        outage_duration_s=0.0,
    )
    available = available_at(cfg)
    shipped: dict[tuple[str, str], int] = {}
    for d in simulate(cfg).deliveries:
        if d.malformed is None and not d.duplicate:
            record = json.loads(d.line)
            key = "query_id" if d.stream is Stream.QUERIES else "click_id"
            shipped.setdefault((d.dc, record[key]), d.ship_us)
    sim = simulate(cfg)
    late = 0
    for click_id, query_id in sim.expected_joins.items():
        for dc in ("a", "b"):
            click_us, query_us = shipped[(dc, click_id)], shipped[(dc, query_id)]
            assert available[(dc, click_id)] == max(click_us, query_us)
            late += query_us > click_us
    assert late > 0  # delayed queries: the query's arrival is what makes the click joinable
    assert not any(click_id in sim.never_joinable for _, click_id in available)


def test_an_output_key_names_its_dc() -> None:
    assert dc_of_key("joined/dc=b/hour=2026-11-27T09/a-1/000000000004.g001.parquet") == "b"
    with pytest.raises(ValueError, match="no dc="):
        dc_of_key("joined/hour=2026-11-27T09/x.parquet")
