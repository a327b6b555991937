"""What every ``photon`` command shares: consoles, the --json option, the settings."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from photon.settings import PhotonSettings, load_settings

out = Console()
err = Console(stderr=True)

JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]


def settings_of(ctx: typer.Context) -> PhotonSettings:
    """The settings, from the root command's --config (else $PHOTON_CONFIG)."""
    config_file: Path | None = ctx.find_root().obj
    return load_settings(config_file)


def print_json(data: Any) -> None:
    out.print_json(json.dumps(data, default=str))
