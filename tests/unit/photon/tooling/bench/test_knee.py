from __future__ import annotations

import pytest

from photon.tooling.bench.pipeline import knee_of

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("p90_by_rate", "knee"),
    [
        ({1000.0: 2.0, 2000.0: 4.9, 4000.0: 9.0}, 2000.0),
        ({1000.0: 2.0, 2000.0: 3.0, 4000.0: 5.0}, 4000.0),  # the bound itself holds
        ({1000.0: 6.0}, None),
        ({1000.0: 2.0, 2000.0: None}, 1000.0),  # nothing joined at 2,000/s: past the knee
        ({2000.0: 7.0, 1000.0: 2.0, 4000.0: 4.0}, 1000.0),  # 4,000 within by chance: no knee
    ],
)
def test_the_knee_is_the_highest_rate_below_the_first_one_past_the_bound(
    p90_by_rate: dict[float, float | None], knee: float | None
) -> None:
    assert knee_of(p90_by_rate) == knee
