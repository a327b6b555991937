"""``photon status``: the live dashboard on-call opens first (or one JSON snapshot)."""

from __future__ import annotations

import os
import signal
import sys
import time
from types import FrameType
from typing import Annotated

import typer
from rich.live import Live

from photon.tooling.cli.common import JsonOption, out, print_json, settings_of


def status(
    ctx: typer.Context,
    json_out: JsonOption = False,
    interval: Annotated[
        float,
        typer.Option(
            min=0.5,
            max=3600,
            help="Seconds between refreshes (with --json: between the two snapshots "
            "the rates come from).",
        ),
    ] = 2.0,
    once: Annotated[bool, typer.Option("--once", help="Draw the dashboard once and exit.")] = False,
) -> None:
    """Every DC's pipelines, the registry and the cache, live (Ctrl-C to leave); exit 1 with
    --json or --once when something needs attention. Piped (no terminal) it draws once."""
    from photon.tooling.observe.dashboard import render
    from photon.tooling.observe.status import RegistryProbe, collect

    settings = settings_of(ctx)
    probe = RegistryProbe(settings)  # one registry session for every snapshot
    first = collect(settings, probe=probe)
    # A live view into a pipe or a log shows nothing until it ends, which it never
    # does: `photon status | less` or a cron job would hang silently.
    if json_out or once or not out.is_terminal:
        time.sleep(interval)  # a rate needs two snapshots
        snapshot = collect(settings, first, probe=probe)
        probe.close()
        if json_out:
            print_json(snapshot.to_dict())
        else:
            out.print(render(snapshot))
        if not snapshot.healthy:
            raise typer.Exit(1)
        return
    snapshot = first
    with Live(render(snapshot), console=out, refresh_per_second=4, screen=False) as live:

        def leave(_signum: int, _frame: FrameType | None) -> None:
            # Ctrl-C leaves at once, even mid-collection: unwinding a registry
            # connection on a loaded machine kept the dashboard on screen for over
            # 30 s. It holds nothing to save.
            live.stop()
            sys.stdout.flush()
            os._exit(0)

        signal.signal(signal.SIGINT, leave)
        while True:
            time.sleep(interval)
            snapshot = collect(settings, snapshot, probe=probe)
            live.update(render(snapshot))
