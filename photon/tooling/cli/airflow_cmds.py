"""``photon airflow up|down|status``: Airflow 3 on the local stack, PostgreSQL from Debian."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from photon.tooling.cli.common import JsonOption, err, out, print_json, settings_of, working
from photon.tooling.stack.airflow import (
    AirflowStack,
    AirflowStackError,
    AirflowStatus,
    write_passwords_file,
)
from photon.tooling.stack.postgres import PostgresError

airflow_app = typer.Typer(
    help="Airflow 3 with Photon's DAGs, against the local stack.", no_args_is_help=True
)


def _stack(ctx: typer.Context) -> AirflowStack:
    config: Path | None = ctx.find_root().obj
    return AirflowStack(settings_of(ctx), config_file=config)


@airflow_app.command("up")
def airflow_up(ctx: typer.Context, json_out: JsonOption = False) -> None:
    """Start PostgreSQL and Airflow (idempotent); print the UI address and login."""
    stack = _stack(ctx)
    try:
        with working("starting PostgreSQL and Airflow (api-server, scheduler, ...)"):
            status = stack.up()
    except (AirflowStackError, PostgresError) as exc:
        err.print(f"[red]error:[/] {exc}")
        raise typer.Exit(1) from None
    _print(status, json_out)
    if not json_out:
        af = stack.settings.airflow
        out.print(
            f"\nAirflow UI: [bold]{status.api_url}[/]  login: [bold]{af.admin_user}[/] "
            "with airflow.admin_password (PHOTON_AIRFLOW__ADMIN_PASSWORD; default photon-admin)"
        )


@airflow_app.command("down")
def airflow_down(
    ctx: typer.Context,
    purge: Annotated[bool, typer.Option(help="Also delete Airflow's database and home.")] = False,
) -> None:
    """Stop exactly the Airflow and PostgreSQL processes `photon airflow up` started."""
    stopped = _stack(ctx).down(purge=purge)
    out.print(f"stopped: {', '.join(stopped)}" if stopped else "no local Airflow was running")


@airflow_app.command("status")
def airflow_status(ctx: typer.Context, json_out: JsonOption = False) -> None:
    """Whether each Airflow service runs and Airflow's own health; exit 1 when unhealthy."""
    status = _stack(ctx).status()
    _print(status, json_out)
    if not status.healthy:
        raise typer.Exit(1)


def _print(status: AirflowStatus, json_out: bool) -> None:
    if json_out:
        print_json(status.to_dict())
        return
    table = Table("service", "process", "health (Airflow's own report)", "listening")
    # The API server reports the metadata database's health; the others report their own.
    reported_as = {"postgres": "metadatabase", "api-server": "metadatabase"}
    for name, running in status.services.items():
        key = reported_as.get(name, name.replace("-", "_"))
        listening = ", ".join(status.listening.get(name, [])) or "-"
        table.add_row(name, running, status.health.get(key, "-"), listening)
    out.print(table)
    for exposed in status.exposed:
        err.print(f"[red]problem:[/] listens beyond loopback: {exposed}")


@airflow_app.command("passwords-file")
def airflow_passwords_file(
    ctx: typer.Context,
    path: Annotated[Path, typer.Argument(help="Where Airflow's simple auth manager reads it.")],
) -> None:
    """Write the UI admin's login (airflow.admin_user/admin_password) for Airflow's simple
    auth manager, readable by its owner only (compose's airflow-init runs this)."""
    settings = settings_of(ctx)
    write_passwords_file(path, settings.airflow)
    out.print(f"wrote {path} (user {settings.airflow.admin_user})")
