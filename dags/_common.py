"""What every Photon DAG shares: owner, retries, start date, the Param objects of a model.

Wiring only: no I/O, nothing heavy imported.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from airflow.sdk import Param

START = datetime(2026, 1, 1)
DEFAULT_ARGS: dict[str, Any] = {
    "owner": "photon-oncall",
    "retries": 2,
    "retry_delay": timedelta(minutes=1),
}


def params_of(model: Any) -> dict[str, Param]:
    """Airflow Params (default + JSON schema, shown as the trigger form) of a params model."""
    return {name: Param(**fields) for name, fields in model.form().items()}
