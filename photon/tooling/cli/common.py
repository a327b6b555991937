"""What every ``photon`` command shares: consoles, the --json option, the settings."""

from __future__ import annotations

import contextlib
import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from photon.settings import PhotonSettings, load_settings

out = Console()
err = Console(stderr=True)

JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]


def exit_on_sigterm() -> None:
    """SIGTERM ends the command as Ctrl-C would, through its ``finally`` blocks: what it
    started (a Docker daemon, a chaos run's apps) stops with it, not left to init."""

    def stop(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, stop)


def settings_of(ctx: typer.Context) -> PhotonSettings:
    """The settings, from the root command's --config (else $PHOTON_CONFIG)."""
    config_file: Path | None = ctx.find_root().obj
    return load_settings(config_file)


def writable_dir(path: Path, flag: str) -> Path:
    """``path``, made if missing; a bad value of ``flag`` when it cannot be made or
    written (checked before the command starts anything that would write there)."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise typer.BadParameter(
            f"cannot make {path}: {exc.strerror or exc}", param_hint=flag
        ) from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise typer.BadParameter(f"{path} is not writable", param_hint=flag)
    return path


def print_json(data: Any) -> None:
    out.print_json(json.dumps(data, default=str))


class _Plain:
    """What a spinner says, said once a line where there is no terminal to redraw."""

    def update(self, text: str) -> None:
        err.print(text, markup=False, highlight=False, soft_wrap=True)


@contextlib.contextmanager
def working(text: str) -> Iterator[Any]:
    """A spinner with ``text`` on a terminal (``.update(text)`` changes it); elsewhere
    (CI, a pipe, a log file) the text once, and each update a line: a spinner there
    repeats its line before every other line written meanwhile."""
    if err.is_terminal:
        with err.status(text) as status:
            yield status
    else:
        plain = _Plain()
        plain.update(text)
        yield plain
