from __future__ import annotations

import pytest

from photon.tooling.bench.pipeline import PhaseFigures, _batch_rate, _wasted_share, click_latencies

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
