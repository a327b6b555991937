"""The output's layout by event hour: which hour a click's object is under, and
which hours a window's objects are under."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from photon.join.output import by_hour, event_hour, hours_between

pytestmark = pytest.mark.unit

H = 3600 * 1_000_000
T0 = int(datetime(2026, 11, 26, 1, tzinfo=UTC).timestamp()) * 1_000_000  # 01:00 UTC


def click(ts_us: int) -> str:
    return f"10.0.0.1:8080:{ts_us}"


def test_a_click_is_under_the_utc_hour_of_its_own_time() -> None:
    assert event_hour(click(T0)) == "2026-11-26T01"
    assert event_hour(click(T0 + H - 1)) == "2026-11-26T01"
    assert event_hour(click(T0 + H)) == "2026-11-26T02"
    assert event_hour(click(T0 - 1)) == "2026-11-26T00"


def test_a_window_maps_to_the_hours_its_clicks_can_be_in_and_no_more() -> None:
    assert hours_between(T0, T0 + H) == ["2026-11-26T01"]  # the end is exclusive
    assert hours_between(T0 + 1, T0 + H + 1) == ["2026-11-26T01", "2026-11-26T02"]
    assert hours_between(T0 - H // 2, T0 + 5) == ["2026-11-26T00", "2026-11-26T01"]
    day = hours_between(T0 - H, T0 + 23 * H)
    assert len(day) == 24 and day[0] == "2026-11-26T00" and day[-1] == "2026-11-26T23"


def test_every_click_of_a_window_is_under_one_of_its_hours() -> None:
    start, end = T0 - 7_000_000, T0 + 2 * H + 3
    hours = set(hours_between(start, end))
    for ts in (start, T0 - 1, T0, T0 + H, end - 1):
        assert event_hour(click(ts)) in hours


def test_a_batch_s_rows_are_split_by_hour_in_hour_order() -> None:
    rows = [{"click_id": click(ts)} for ts in (T0 + H, T0, T0 + H + 5, T0 - 1)]
    split = by_hour(rows)
    assert list(split) == ["2026-11-26T00", "2026-11-26T01", "2026-11-26T02"]
    assert [r["click_id"] for r in split["2026-11-26T02"]] == [click(T0 + H), click(T0 + H + 5)]
    assert sum(len(v) for v in split.values()) == len(rows)
