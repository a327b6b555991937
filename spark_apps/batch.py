"""What the Spark batch jobs share: their session and their command-line options.

Batch jobs are submitted with ``spark-submit`` (Airflow's ``SparkSubmitOperator``)
or run as ``python -m spark_apps.<job>``. Under spark-submit the master comes
from its ``--master``; run directly, from ``pipeline.spark_master``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from pyspark.sql import SparkSession

from photon.logconfig import configure_logging
from photon.settings import PhotonSettings, SettingsError, load_settings
from spark_apps.session import submitted_session

ConfigOption = Annotated[Path | None, typer.Option("--config", help="A TOML settings file.")]
RunOption = Annotated[
    str,
    typer.Option(
        "--run",
        help="Names this run's report (letters, digits, '.', '_', '-').",
        callback=lambda v: _check_run(v),
    ),
]


def _check_run(run: str) -> str:
    if not run or len(run) > 200 or not all(c.isalnum() or c in "._-+:" for c in run):
        raise typer.BadParameter(f"{run!r} is not a run name (letters, digits, '._-+:')")
    return run


def batch_settings(config: Path | None) -> PhotonSettings:
    configure_logging("info")
    try:
        return load_settings(config)
    except SettingsError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None


def batch_session(app_name: str, settings: PhotonSettings) -> SparkSession:
    return submitted_session(
        app_name,
        settings.pipeline,
        ui_port=settings.spark_ui_port(None),
        event_log_dir=settings.spark_event_log_dir,
    )
