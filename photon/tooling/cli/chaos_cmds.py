"""``photon chaos``: the live two-DC stream joined while faults strike."""

from __future__ import annotations

import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from photon.tooling.cli.common import (
    JsonOption,
    err,
    exit_on_sigterm,
    out,
    print_json,
    settings_of,
    writable_dir,
)

_FIGURES = (
    "clicks_in",
    "expected_joins",
    "joined",
    "unjoinable",
    "duplicates_seen",
    "missing_before_recovery",
    "lost_to_crash",
    "recovered",
    "missing_after_recovery",
    "seconds",
)


def chaos(
    ctx: typer.Context,
    queries: Annotated[
        int, typer.Option(min=1_000, max=10_000_000, help="Queries written.")
    ] = 800_000,
    rate: Annotated[float, typer.Option(min=10, max=100_000, help="Queries per second.")] = 1_000.0,
    outage_s: Annotated[
        float, typer.Option(min=1, max=3600, help="The DC outage; ends by 50% of the stream.")
    ] = 180.0,
    outage_dc: Annotated[str, typer.Option(help="The DC taken down.")] = "b",
    restart_after_s: Annotated[
        float, typer.Option(min=1, max=600, help="How long a ZooKeeper node and Redis stay down.")
    ] = 20.0,
    settle_s: Annotated[
        float,
        typer.Option(
            min=1,
            max=3600,
            help="After the stream: how long the output must not grow (every joiner caught "
            "up) before verification and recovery run.",
        ),
    ] = 30.0,
    joiner_kills: Annotated[
        int,
        typer.Option(
            min=1,
            max=4,
            help="How many joiner kills strike, at 20, 40, 60, 80% of the stream (the first N).",
        ),
    ] = 4,
    seed: Annotated[int, typer.Option(help="The generator's seed.")] = 2026,
    report_dir: Annotated[
        Path | None,
        typer.Option(
            file_okay=False,
            help="Where report.json and the charts go; default reports/chaos/<UTC time>/.",
        ),
    ] = None,
    keep: Annotated[bool, typer.Option(help="Keep the run's registry root, bucket, keys.")] = False,
    spark_cluster: Annotated[
        bool,
        typer.Option(
            "--spark-cluster",
            help="Run the apps on the stack's standalone Spark master (`photon up "
            "--spark-cluster`); default local[*,4], which also tries a failed task again.",
        ),
    ] = False,
    json_out: JsonOption = False,
) -> None:
    """Join a live two-DC stream while joiners, a DC, ZooKeeper, Redis, S3 and log files
    fail, a batch crashes at every step, a zombie joiner wakes after recovery and GC
    passes a replay; report.

    Exits 1 unless every check holds (no duplicate, nothing missing after
    recovery, every fault struck, the crash's and the zombie's loss confined and
    restored, the returning DC's catch-up >= 5x real time with <= 10% wasted
    joins, joining on with a ZooKeeper node down and the node back in the
    ensemble, every click accounted for once, unjoinable = never joinable).
    """
    from photon.tooling.chaos.config import ChaosConfig
    from photon.tooling.chaos.harness import run_chaos

    settings = settings_of(ctx)
    if outage_dc not in settings.dcs:
        raise typer.BadParameter(
            f"{outage_dc!r} is not one of {settings.dcs}", param_hint="--outage-dc"
        )
    if report_dir is None:
        report_dir = Path("reports/chaos") / datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    try:
        config = ChaosConfig(
            queries=queries,
            query_rate=rate,
            outage_dc=outage_dc,
            outage_s=outage_s,
            restart_after_s=restart_after_s,
            idle_s=settle_s,
            joiner_kills=joiner_kills,
            seed=seed,
            keep=keep,
            report_dir=report_dir,
        )
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--outage-s") from None
    from photon.tooling.stack.manager import LocalStack, StackError

    status = LocalStack(settings).status()
    if not status.healthy:  # before anything is created: the run needs every service
        raise StackError(
            "the local stack is not up and healthy: start it with `photon up` "
            f"({'; '.join(status.problems) or 'no services'})"
        )
    master = None
    if spark_cluster:
        master = status.endpoints.get("spark_master")
        if master is None:
            raise typer.BadParameter(
                "no standalone Spark master runs in this stack: `photon up --spark-cluster` first",
                param_hint="--spark-cluster",
            )
    writable_dir(report_dir, "--report-dir")
    exit_on_sigterm()  # through the harness's finally: the DC apps it started stop too
    with tempfile.TemporaryDirectory(prefix="photon-chaos-") as workdir:
        report = run_chaos(
            settings,
            config,
            workdir=Path(workdir),
            config_file=ctx.find_root().obj,  # --config: the run and its apps read it
            spark_master=master,
            step=lambda s: err.print(f"[dim]chaos:[/] {s}"),
        )
    data = report.to_dict()
    if json_out:
        print_json(data)
    else:
        table = Table("figure", "value")
        for key in _FIGURES:
            table.add_row(key, str(data[key]))
        if report.catch_up is not None:
            c = report.catch_up
            table.add_row("catch-up of the returning DC", f"{c.catch_up_s} s, {c.speed_x}x")
            table.add_row("wasted joins during catch-up", str(c.wasted_share))
        out.print(table)
        faults = Table("fault", "target", "at (s)", "ended (s)", "output again after (s)")
        for f in report.faults:
            faults.add_row(f.kind, f.target, str(f.at_s), str(f.ended_s), str(f.recovered_s))
        out.print(faults)
        checks = Table("check", "holds")
        for name, holds in data["checks"].items():
            checks.add_row(name, "[green]yes[/]" if holds else "[red]no[/]")
        out.print(checks)
        out.print(f"report and charts in {report_dir}/")
    if not data["passed"]:
        raise typer.Exit(1)
