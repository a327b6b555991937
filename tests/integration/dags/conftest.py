"""Airflow for the DAG tests: the metadata database (SQLite, in the test's Airflow home)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture(scope="session")
def airflow_db() -> None:
    """``airflow db migrate`` once per session (the home is set in the root conftest)."""
    airflow = Path(sys.executable).parent / "airflow"
    subprocess.run([str(airflow), "db", "migrate"], check=True, capture_output=True, timeout=300)


RunDag = Callable[..., Any]


@pytest.fixture
def run_dag(airflow_db: None) -> RunDag:
    """``dag.test()`` of one of our DAGs (loaded through a DagBag, as Airflow loads it)."""

    def run(dag_id: str, **conf: Any) -> Any:
        from airflow.models.dagbag import DagBag

        bag = DagBag(include_examples=False)
        assert bag.import_errors == {}
        return bag.get_dag(dag_id).test(run_conf=conf or None)

    return run


def task_states(dag_run: Any) -> dict[str, str]:
    return {ti.task_id: str(ti.state) for ti in dag_run.get_task_instances()}


def xcom(dag_run: Any, task_id: str) -> Any:
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        row = (
            session.query(XComModel)
            .filter_by(
                dag_id=dag_run.dag_id, run_id=dag_run.run_id, task_id=task_id, key="return_value"
            )
            .one_or_none()
        )
        return None if row is None else XComModel.deserialize_value(row)
