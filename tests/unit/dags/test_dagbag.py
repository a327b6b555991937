"""Every DAG file loads, with no import error and no network connection opened at import."""

from __future__ import annotations

import copy
import socket
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.unit

DAGS = Path(__file__).resolve().parents[3] / "dags"
EXPECTED = {
    "photon_gc_boundary": None,
    "photon_logmap_compaction": None,
    "photon_reshard": None,
    "photon_recover": None,
    "photon_verify": None,
    "photon_output_hours": None,
}


@pytest.fixture
def dagbag(monkeypatch: pytest.MonkeyPatch) -> tuple[Any, list[object]]:
    """The DagBag of ``dags/``, loaded while every outgoing connection is recorded and refused."""
    attempts: list[object] = []

    def refuse(self: socket.socket, address: object) -> None:
        attempts.append(address)
        raise OSError(f"a DAG file connected to {address} at import")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    from airflow.models.dagbag import DagBag

    return DagBag(str(DAGS), include_examples=False, safe_mode=False), attempts


def test_every_dag_file_loads_without_errors_or_network(dagbag: tuple[Any, list[object]]) -> None:
    bag, attempts = dagbag
    assert bag.import_errors == {}
    assert attempts == []
    assert set(bag.dag_ids) == set(EXPECTED)


def test_each_dag_has_its_description_tags_owner_retries_and_docs(
    dagbag: tuple[Any, list[object]],
) -> None:
    bag, _ = dagbag
    for dag_id in EXPECTED:
        dag = bag.dags[dag_id]
        assert dag.description and dag.doc_md and "photon" in dag.tags
        for task in dag.tasks:
            assert task.owner == "photon-oncall"
            assert task.retries is not None
    assert bag.dags["photon_reshard"].schedule is None  # manual
    assert bag.dags["photon_recover"].schedule is None
    for scheduled in (
        "photon_gc_boundary",
        "photon_logmap_compaction",
        "photon_verify",
        "photon_output_hours",
    ):
        assert bag.dags[scheduled].timetable.periodic


def test_verification_and_compaction_runs_have_a_data_interval_to_be_about(
    dagbag: tuple[Any, list[object]],
) -> None:
    """A scheduled run's window is its data interval (photon.ops.params.run_interval): an
    empty one (what a bare timedelta schedule gives in Airflow 3) would mean "now"."""
    from datetime import timedelta

    import pendulum
    from airflow.timetables.base import TimeRestriction

    bag, _ = dagbag
    restriction = TimeRestriction(earliest=pendulum.datetime(2026, 1, 1), latest=None,
                                  catchup=True)  # fmt: skip
    for dag_id, length in (
        ("photon_verify", timedelta(hours=1)),
        ("photon_logmap_compaction", timedelta(minutes=30)),
    ):
        info = bag.dags[dag_id].timetable.next_dagrun_info(
            last_automated_data_interval=None, restriction=restriction
        )
        assert info is not None
        assert info.data_interval.end - info.data_interval.start == length, dag_id


def test_verification_runs_when_settled_hours_of_output_are_announced(
    dagbag: tuple[Any, list[object]],
) -> None:
    from plugins.assets import JOINED_OUTPUT, VERIFY_REPORTS

    bag, _ = dagbag
    verify, hours = bag.dags["photon_verify"], bag.dags["photon_output_hours"]
    assets = [asset for _, asset in verify.timetable.asset_condition.iter_assets()]
    assert [a.name for a in assets] == [JOINED_OUTPUT.name]
    [announce] = hours.tasks
    assert announce.outlets == [JOINED_OUTPUT] and announce.inlets == [JOINED_OUTPUT]
    assert verify.get_task("report").outlets == [VERIFY_REPORTS]
    assert verify.get_task("verify").inlets == [JOINED_OUTPUT]


def test_each_dag_tells_of_a_failed_run_and_bounds_its_runs_and_tasks(
    dagbag: tuple[Any, list[object]],
) -> None:
    from plugins.notifications.failure import FailureNotifier

    bag, _ = dagbag
    for dag_id in EXPECTED:
        dag = bag.dags[dag_id]
        callbacks = dag.on_failure_callback
        assert any(isinstance(c, FailureNotifier) for c in callbacks), dag_id
        assert dag.dagrun_timeout is not None and dag.dagrun_timeout.total_seconds() > 0
        for task in dag.tasks:
            assert task.execution_timeout is not None, (dag_id, task.task_id)
            assert task.execution_timeout <= dag.dagrun_timeout


def test_the_reshard_form_validates_its_params_by_json_schema(
    dagbag: tuple[Any, list[object]],
) -> None:
    from airflow.exceptions import ParamValidationError

    bag, _ = dagbag

    def checked(dag_id: str, **values: object) -> dict[str, Any]:
        params = copy.deepcopy(bag.dags[dag_id].params)
        params.update(values)
        result: dict[str, Any] = params.validate()
        return result

    assert checked("photon_reshard") == {"shards": 8, "skew_s": None, "dry_run": False}
    for bad in ({"shards": 0}, {"shards": 5000}, {"skew_s": 0}, {"dry_run": "yes"}):
        with pytest.raises(ParamValidationError):
            checked("photon_reshard", **bad)
    with pytest.raises(ParamValidationError):
        checked("photon_recover", window_start="yesterday")
    with pytest.raises(ParamValidationError):
        checked("photon_recover", dc="Bad DC")
    assert checked("photon_recover", window_start="2026-01-01T00:00:00+00:00")


@pytest.mark.parametrize("dag_id", sorted(EXPECTED))
def test_every_trigger_form_is_valid_as_it_opens(
    dagbag: tuple[Any, list[object]], dag_id: str
) -> None:
    """Airflow's form requires every typed field whose type does not allow null."""
    bag, _ = dagbag
    params = copy.deepcopy(bag.dags[dag_id].params)
    params.validate()  # the defaults, as the form opens
    for name in params:
        schema = params.get_param(name).schema
        assert schema.get("title"), f"{dag_id}.{name} has no label"
        assert "empty" in schema["title"].lower() or params[name] is not None, (
            f"{dag_id}.{name}: an optional field's label says what leaving it empty does"
        )
        if params[name] is None:
            assert "null" in schema["type"], f"{dag_id}.{name} would be required and empty"
            assert "anyOf" not in schema  # the form cannot render a union
    # An emptied field is sent as null: still valid.
    emptied = copy.deepcopy(params)
    emptied.update(
        {name: None for name in params if "null" in params.get_param(name).schema.get("type", [])}
    )
    emptied.validate()


def test_recover_opens_as_a_dry_run_sending_each_click_to_its_own_dc(
    dagbag: tuple[Any, list[object]],
) -> None:
    bag, _ = dagbag
    assert bag.dags["photon_recover"].params.validate() == {
        "window_start": None,
        "window_end": None,
        "lookback_s": 3600.0,
        "settle_s": 120.0,
        "dc": None,
        "dry_run": True,
    }
