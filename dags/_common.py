"""What every Photon DAG shares: owner, retries, timeouts, the failure notifier, start
date, the Param objects of a model.

Wiring only: no I/O, nothing heavy imported.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from functools import cache
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


@cache
def configured_dcs() -> tuple[str, ...] | None:
    """The configured DCs, for the forms' DC choice; None when the settings do not load
    (the form then takes any DC name, and the task refuses an unknown one).

    The settings are the environment and the config file: the one read a DAG file
    makes when it is parsed, cached for the process.
    """
    from photon.settings import load_settings

    try:
        return tuple(load_settings().dcs)
    except Exception:  # a bad config must not break every DAG's parse
        return None


def params_of(model: Any) -> dict[str, Param]:
    """Airflow Params (default + JSON schema, shown as the trigger form) of a params
    model; a DC param is a choice of the configured DCs."""
    return {name: Param(**fields) for name, fields in model.form(configured_dcs()).items()}
