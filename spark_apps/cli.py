"""What both apps take on the command line (a typer app each); checked before Spark starts."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from photon.logconfig import LEVELS, configure_logging
from photon.settings import PhotonSettings, SettingsError, load_settings

DcOption = Annotated[str, typer.Option("--dc", help="The datacenter whose logs to read.")]
ConfigOption = Annotated[Path | None, typer.Option("--config", help="A TOML settings file.")]
MasterOption = Annotated[
    str | None, typer.Option("--master", help="Spark master; default: pipeline.spark_master.")
]
UntilIdleOption = Annotated[
    float | None,
    typer.Option(
        "--until-idle",
        min=0.1,
        metavar="SECONDS",
        help="Stop once no line has arrived for this long and nothing is pending.",
    ),
]
LogLevelOption = Annotated[str, typer.Option("--log-level", help=f"One of {', '.join(LEVELS)}.")]


def settings_for(
    dc: str, config: Path | None, master: str | None, log_level: str
) -> PhotonSettings:
    """The settings, with ``--master`` applied; a bad value exits 2 with the reason."""
    if log_level not in LEVELS:
        raise typer.BadParameter(f"{log_level!r} is not one of {', '.join(LEVELS)}")
    try:
        configure_logging(log_level)
    except ValueError as exc:  # a bad PHOTON_LOG_FORMAT
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    try:
        settings = load_settings(config)
        configure_logging(log_level, settings.log_format)  # the config file may set it
        settings.dc_logs(dc)
        if master is not None:
            settings = load_settings(
                config, pipeline=settings.pipeline.model_dump() | {"spark_master": master}
            )
    except SettingsError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    return settings
