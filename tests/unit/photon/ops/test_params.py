"""The DAG params: their JSON schema (the trigger form) and the task's own checks."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from photon.ops.params import (
    CompactionParams,
    InvalidParamsError,
    RecoverParams,
    ReshardParams,
    VerifyParams,
    resolve_window,
    run_interval,
)
from photon.settings import load_settings

pytestmark = pytest.mark.unit

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)


def test_reshard_params_are_checked_against_the_configured_clock_skew() -> None:
    assert ReshardParams.parse({"shards": 4, "skew_s": 90}).check(60).shards == 4
    with pytest.raises(InvalidParamsError, match="below the configured maximum clock skew"):
        ReshardParams.parse({"shards": 4, "skew_s": 30}).check(60)


def test_an_empty_skew_is_the_configured_clock_skew_bound() -> None:
    for unset in ({}, {"skew_s": None}, {"skew_s": ""}, {"skew_s": "  "}):
        params = ReshardParams.parse({"shards": 4, **unset}).check(45)
        assert params.skew_s is None and params.skew_for(45) == 45
    assert ReshardParams.parse({"shards": 4, "skew_s": 90}).skew_for(45) == 90
    form = ReshardParams.form()["skew_s"]
    assert form["default"] is None and form["type"] == ["null", "number"]


@pytest.mark.parametrize(
    "values",
    [{"shards": 0}, {"shards": -1}, {"shards": 4097}, {"skew_s": 0}, {"extra": 1}, {"shards": "x"}],
)
def test_invalid_reshard_params_are_rejected_with_the_field_named(
    values: dict[str, object],
) -> None:
    with pytest.raises(InvalidParamsError, match="invalid params"):
        ReshardParams.parse(values)


def test_the_form_schema_carries_defaults_bounds_and_descriptions() -> None:
    form = ReshardParams.form()
    assert form["shards"]["default"] == 8
    assert form["shards"]["minimum"] == 1 and form["shards"]["maximum"] == 4096
    # bounds the trigger form enforces (it disables Trigger): minimum, never exclusiveMinimum
    assert form["skew_s"]["minimum"] == 1
    for model in (ReshardParams, VerifyParams, RecoverParams, CompactionParams):
        assert not any("exclusiveMinimum" in field for field in model.form().values()), model
    assert all(field.get("description") for field in form.values())
    assert CompactionParams.form()["dc"]["pattern"]


def test_with_the_configured_dcs_a_dc_param_is_a_choice_of_them() -> None:
    dc = RecoverParams.form(["a", "b"])["dc"]
    assert dc["enum"] == [None, "a", "b"] and "pattern" not in dc
    assert dc["values_display"] == {
        "null": "(empty: the one that registered each click)", "a": "DC a", "b": "DC b"
    }  # fmt: skip
    assert CompactionParams.form(["x"])["dc"]["values_display"]["null"] == "(empty: every DC)"
    assert "enum" not in VerifyParams.form(["a"]).get("dc", {})


@pytest.mark.parametrize("model", [CompactionParams, RecoverParams, VerifyParams])
def test_optional_values_are_null_in_the_form_and_empty_means_unset(
    model: type[CompactionParams | RecoverParams | VerifyParams],
) -> None:
    for name, field in model.form().items():
        assert field.get("title"), name
        if field["default"] is None:
            assert field["type"][0] == "null" and "anyOf" not in field, (name, field)
            assert "empty" in field["title"].lower() and "empty" in field["description"].lower()
    # The form sends an emptied field as null; an API caller may send ''.
    optional = [k for k, f in model.form().items() if f["default"] is None]
    assert model.parse({}) == model.parse(dict.fromkeys(optional))
    assert model.parse({}) == model.parse(dict.fromkeys(optional, ""))


def test_a_window_field_keeps_its_date_time_format_and_a_dc_its_name_pattern() -> None:
    form = RecoverParams.form()
    assert form["window_start"]["format"] == form["window_end"]["format"] == "date-time"
    assert form["dc"]["pattern"] == "^[a-z][a-z0-9-]{0,31}$"
    assert form["lookback_s"]["title"] == "Lookback (seconds)"
    assert form["dc"]["title"] == "Datacenter (empty: the one that registered each click)"


def test_a_window_defaults_to_the_lookback_before_now_minus_settle() -> None:
    window = VerifyParams.parse({"lookback_s": 600, "settle_s": 60}).window(NOW)
    assert window.end == NOW - timedelta(seconds=60)
    assert window.start == window.end - timedelta(seconds=600)
    assert window.end_us - window.start_us == 600_000_000


HOUR = timedelta(hours=1)


@pytest.mark.parametrize(
    ("run_type", "about"),
    [("scheduled", True), ("backfill", True), ("manual", False), ("asset_triggered", False)],
)
def test_only_a_scheduled_run_is_about_its_data_interval(run_type: str, about: bool) -> None:
    interval = (NOW - HOUR, NOW)
    assert (run_interval(run_type, *interval) == interval) is about
    assert run_interval(run_type, NOW, NOW) is None  # an empty interval says nothing


def test_a_scheduled_run_verifies_its_data_interval_however_late_it_runs() -> None:
    params = VerifyParams.parse({"settle_s": 60})
    interval = (NOW - 3 * HOUR, NOW - 2 * HOUR)  # cleared and run again two hours later
    window = params.window(NOW, interval)
    assert (window.start, window.end) == (interval[0] - timedelta(seconds=60),
                                          interval[1] - timedelta(seconds=60))  # fmt: skip
    # The next hour's run starts where this one ended: no gap, no overlap.
    following = params.window(NOW, (interval[1], interval[1] + HOUR))
    assert following.start == window.end
    # A window set in the form wins over the interval.
    chosen = VerifyParams.parse({"window_end": (NOW - HOUR).isoformat()}).window(NOW, interval)
    assert chosen.end == NOW - HOUR


def test_a_window_in_the_future_or_backwards_is_rejected() -> None:
    with pytest.raises(InvalidParamsError, match=r"^window_end: .* is in the future"):
        resolve_window(None, "2026-11-22T13:00:00+00:00", 60, NOW)
    with pytest.raises(InvalidParamsError, match=r"^window_start: .* is not before"):
        resolve_window("2026-11-22T11:00:00", "2026-11-22T10:00:00", 60, NOW)
    with pytest.raises(InvalidParamsError, match="ISO-8601"):
        RecoverParams.parse({"window_start": "yesterday"})


def test_naive_times_are_utc() -> None:
    window = resolve_window("2026-11-22T10:00:00", "2026-11-22T11:00:00", 60, NOW)
    assert window.start == datetime(2026, 11, 22, 10, tzinfo=UTC)


def test_recover_checks_its_dc_and_is_a_dry_run_unless_told() -> None:
    settings = load_settings(dcs=["a", "b"])
    params = RecoverParams.parse({"dc": "b"})
    assert params.dry_run is True
    assert params.check_settings(settings).dc == "b"
    assert RecoverParams.parse({}).check_settings(settings).dc is None
    with pytest.raises(InvalidParamsError, match=r"^dc: 'z' is not a configured DC"):
        RecoverParams.parse({"dc": "z"}).check_settings(settings)
    with pytest.raises(InvalidParamsError, match="not a configured DC"):
        CompactionParams.parse({"dc": "z"}).check_settings(settings)
    with pytest.raises(InvalidParamsError):
        RecoverParams.parse({"dc": "Bad DC"})
