"""``photon chaos``: the live two-DC stream joined while faults strike (issue 6)."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from photon.cli.common import JsonOption, err, out, print_json, settings_of

_FIGURES = (
    "clicks_in",
    "expected_joins",
    "joined",
    "unjoinable",
    "duplicates_seen",
    "missing_before_recovery",
    "recovered",
    "missing_after_recovery",
    "seconds",
)


def chaos(
    ctx: typer.Context,
    queries: Annotated[
        int, typer.Option(min=1_000, max=10_000_000, help="Queries written.")
    ] = 350_000,
    rate: Annotated[float, typer.Option(min=10, max=100_000, help="Queries per second.")] = 2_000.0,
    outage_s: Annotated[float, typer.Option(min=1, max=3600, help="The DC outage.")] = 120.0,
    outage_dc: Annotated[str, typer.Option(help="The DC taken down.")] = "b",
    seed: Annotated[int, typer.Option(help="The generator's seed.")] = 2026,
    keep: Annotated[bool, typer.Option(help="Keep the run's registry root, bucket, keys.")] = False,
    json_out: JsonOption = False,
) -> None:
    """Join a live two-DC stream while joiners, a DC, ZooKeeper, Redis and S3 fail; report."""
    from photon.chaos.harness import ChaosConfig, run_chaos

    settings = settings_of(ctx)
    if outage_dc not in settings.dcs:
        raise typer.BadParameter(
            f"{outage_dc!r} is not one of {settings.dcs}", param_hint="--outage-dc"
        )
    config = ChaosConfig(
        queries=queries,
        query_rate=rate,
        outage_dc=outage_dc,
        outage_s=outage_s,
        seed=seed,
        keep=keep,
    )
    with tempfile.TemporaryDirectory(prefix="photon-chaos-") as workdir:
        report = run_chaos(
            settings, config, workdir=Path(workdir), step=lambda s: err.print(f"[dim]chaos:[/] {s}")
        )
    data = report.to_dict()
    ok = report.duplicates_seen == 0 and report.missing_after_recovery == 0
    data["passed"] = ok
    if json_out:
        print_json({k: v for k, v in data.items() if k != "joined_per_dc_over_time"})
    else:
        table = Table("figure", "value")
        for key in _FIGURES:
            table.add_row(key, str(data[key]))
        out.print(table)
        faults = Table("fault", "target", "at (s)", "ended (s)", "output again after (s)")
        for f in report.faults:
            faults.add_row(f.kind, f.target, str(f.at_s), str(f.ended_s), str(f.recovered_s))
        out.print(faults)
    if not ok:
        raise typer.Exit(1)
