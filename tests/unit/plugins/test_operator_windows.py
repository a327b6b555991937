"""The window a verification run takes: the hours its triggering asset events announced,
else the form's, else its data interval (the operators' decision, no Airflow run needed)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pytest

from photon.ops.params import VerifyParams
from plugins.operators.photon import _window, announced_hours

pytestmark = pytest.mark.unit


@dataclass
class Event:  # what Airflow hands a run in triggering_asset_events: the extra is what counts
    extra: dict[str, Any] = field(default_factory=dict)


def context(*extras: dict[str, Any], run_type: str = "asset_triggered") -> Any:
    return {
        "triggering_asset_events": {"photon_joined_output": [Event(e) for e in extras]},
        "dag_run": type("Run", (), {"run_type": run_type})(),
        "data_interval_start": None,
        "data_interval_end": None,
    }


def test_a_run_triggered_by_announcements_verifies_exactly_the_hours_they_name() -> None:
    ctx = context({"hours": ["2026-11-26T07"]}, {"hours": ["2026-11-26T09", "2026-11-26T08"]})
    assert announced_hours(ctx) == ["2026-11-26T07", "2026-11-26T08", "2026-11-26T09"]
    window = _window(VerifyParams.parse({}), ctx)
    assert (window.start, window.end) == (
        datetime(2026, 11, 26, 7, tzinfo=UTC),
        datetime(2026, 11, 26, 10, tzinfo=UTC),
    )


def test_a_window_set_in_the_form_wins_over_announced_hours() -> None:
    params = VerifyParams.parse(
        {"window_start": "2026-11-25T01:00:00+00:00", "window_end": "2026-11-25T02:00:00+00:00"}
    )
    window = _window(params, context({"hours": ["2026-11-26T07"]}))
    assert window.start == datetime(2026, 11, 25, 1, tzinfo=UTC)


def test_events_without_hours_leave_the_usual_window() -> None:
    ctx = context({}, {"other": 1})
    assert announced_hours(ctx) == []
    window = _window(VerifyParams.parse({"lookback_s": 600, "settle_s": 0}), ctx)
    assert (window.end - window.start).total_seconds() == 600


def test_an_event_naming_something_else_than_hours_fails_the_run_clearly() -> None:
    from airflow.exceptions import AirflowFailException

    with pytest.raises(AirflowFailException, match="not event hours like 2026-11-26T01"):
        _window(VerifyParams.parse({}), context({"hours": ["yesterday"]}))
