"""Which settled hours of output photon_output_hours announces, and the window they make."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from photon.ops.landed import hour_start, hours_to_announce, hours_window

pytestmark = pytest.mark.unit

NOW = datetime(2026, 11, 26, 10, 5, tzinfo=UTC)  # 10:05: hour 09 settled at 10:02
HOURS = ["2026-11-26T06", "2026-11-26T07", "2026-11-26T09", "2026-11-26T10"]


def test_an_hour_is_announced_once_its_end_lies_the_settle_time_in_the_past() -> None:
    assert hours_to_announce(HOURS, NOW, 120, "2026-11-26T07") == ["2026-11-26T09"]
    early = NOW - timedelta(minutes=4)  # 10:01: hour 09 is not settled yet
    assert hours_to_announce(HOURS, early, 120, "2026-11-26T07") == []


def test_every_settled_hour_after_the_last_announced_is_announced_and_none_again() -> None:
    assert hours_to_announce(HOURS, NOW, 120, "2026-11-26T05") == HOURS[:3]
    assert hours_to_announce(HOURS, NOW, 120, "2026-11-26T09") == []


def test_the_first_announcement_names_only_the_newest_settled_hour() -> None:
    assert hours_to_announce(HOURS, NOW, 120, None) == ["2026-11-26T09"]
    assert hours_to_announce([], NOW, 120, None) == []


def test_announced_hours_make_one_window_from_the_first_start_to_the_last_end() -> None:
    window = hours_window(["2026-11-26T09", "2026-11-26T07"])
    assert window.start == datetime(2026, 11, 26, 7, tzinfo=UTC)
    assert window.end == datetime(2026, 11, 26, 10, tzinfo=UTC)
    assert hour_start("2026-11-26T00") == datetime(2026, 11, 26, tzinfo=UTC)
    with pytest.raises(ValueError, match="no hours"):
        hours_window([])
