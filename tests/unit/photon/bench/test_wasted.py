from __future__ import annotations

import pytest

from photon.bench.pipeline import PhaseFigures, _wasted_share

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
