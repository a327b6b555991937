"""What every Photon DAG shares: owner, retries, timeouts, the failure notifier, start
date, the Param objects of a model.

Wiring only: no I/O, nothing heavy imported.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from airflow.sdk import Param

from plugins.notifications.failure import FailureNotifier

START = datetime(2026, 1, 1)
DEFAULT_ARGS: dict[str, Any] = {
    "owner": "photon-oncall",
    "retries": 2,
    "retry_delay": timedelta(minutes=1),
    # A task that hangs (a Spark job stuck, a registry that never answers) fails instead.
    "execution_timeout": timedelta(hours=1),
}
#: What every DAG takes besides: a run fails past two hours, and a failed run is told
#: (a log line; one mail when alerts are set up: docs/operations.md, "Alerts").
DAG_ARGS: dict[str, Any] = {
    "dagrun_timeout": timedelta(hours=2),
    "on_failure_callback": [FailureNotifier()],
}


def params_of(model: Any) -> dict[str, Param]:
    """Airflow Params (default + JSON schema, shown as the trigger form) of a params model."""
    return {name: Param(**fields) for name, fields in model.form().items()}
