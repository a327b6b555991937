"""``photon read-queries``, ``photon join`` and ``photon run``: the DC pipelines."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from pydantic import ValidationError

from photon.apps import JOINER, QUERY_READER
from photon.settings import PipelineSettings
from photon.tooling.cli.common import err, print_json, settings_of, writable_dir

if TYPE_CHECKING:
    from photon.tooling.pipeline import Child

DcOption = Annotated[str, typer.Option("--dc", help="The datacenter to run.")]
UntilIdle = Annotated[
    float | None,
    typer.Option(
        "--until-idle",
        min=0.1,
        metavar="SECONDS",
        help="Stop once no line has arrived for this long and no retry is pending "
        "(photon run: the joiners; the query readers stop after them).",
    ),
]


def _exec_app(ctx: typer.Context, app: str, dc: str, until_idle: float | None) -> None:
    from photon.tooling.pipeline import app_argv

    settings = settings_of(ctx)  # validates the settings before Spark starts
    settings.dc_logs(dc)
    config: Path | None = ctx.find_root().obj
    argv = app_argv(app, dc, until_idle_s=until_idle, config=config)
    sys.stdout.flush()
    # The app becomes this process (argv is ours, no shell): signals reach it directly.
    os.execv(argv[0], argv)  # noqa: S606


def read_queries(ctx: typer.Context, dc: DcOption, until_idle: UntilIdle = None) -> None:
    """Stream a DC's query logs into the Redis cache and the log-file map (a Spark app)."""
    _exec_app(ctx, QUERY_READER, dc, until_idle)


def join(ctx: typer.Context, dc: DcOption, until_idle: UntilIdle = None) -> None:
    """Stream a DC's click logs through the joiner, at most once across DCs (a Spark app)."""
    _exec_app(ctx, JOINER, dc, until_idle)


def _listed_dcs(dcs: str | None) -> list[str]:
    """The DCs ``--dcs`` names. An empty list or item (``--dcs "$UNSET"``, ``a,,b``) is
    refused: read as "every DC", it would run, or with ``--fresh`` reset, them all."""
    if dcs is None:
        return []
    names = [name.strip() for name in dcs.split(",")]
    if not all(names):
        raise typer.BadParameter(
            f"{dcs!r} lists an empty DC name; list DCs comma separated (a,b), or leave "
            "--dcs out for every DC",
            param_hint="--dcs",
        )
    return names


def run(
    ctx: typer.Context,
    dc: Annotated[list[str] | None, typer.Option("--dc", help="Run this DC (repeatable).")] = None,
    dcs: Annotated[
        str | None, typer.Option("--dcs", help="Run these DCs, comma separated: a,b.")
    ] = None,
    until_idle: UntilIdle = None,
    master: Annotated[
        str | None,
        typer.Option(help="Spark master for every app, e.g. spark://127.0.0.1:7077."),
    ] = None,
    fresh: Annotated[
        bool,
        typer.Option(help="First delete the apps' checkpoints and retry stores (new logs)."),
    ] = False,
    record: Annotated[
        Path | None,
        typer.Option(
            metavar="DIR",
            help="Record the apps' metrics and status every --record-interval seconds into "
            "DIR/metrics.jsonl, for `photon report --run DIR`.",
        ),
    ] = None,
    record_interval: Annotated[
        float, typer.Option(min=0.5, max=3600, help="Seconds between recorded snapshots.")
    ] = 2.0,
) -> dict[str, Any]:
    """Run the query reader and joiner of each DC (default: every DC) until they stop.

    Ctrl-C (or SIGTERM) stops every app cleanly. At the end, prints a JSON
    summary of what each app did.
    """
    from photon.tooling.observe.recorder import MetricsRecorder
    from photon.tooling.pipeline import APPS, app_summaries, reset_state, run_pipelines

    settings = settings_of(ctx)
    names = list(dict.fromkeys([*(dc or []), *_listed_dcs(dcs)])) or settings.dcs
    for name in names:
        settings.dc_logs(name)  # validates the name
    env: dict[str, str] = {}
    if master is not None:
        try:
            PipelineSettings.model_validate(
                settings.pipeline.model_dump() | {"spark_master": master}
            )
        except ValidationError as exc:
            raise typer.BadParameter(exc.errors()[0]["msg"], param_hint="--master") from None
        env["PHOTON_PIPELINE__SPARK_MASTER"] = master
    if record is not None and settings.pipeline.metrics_base_port == 0:
        raise typer.BadParameter(
            "the apps serve no metrics (pipeline.metrics_base_port is 0): nothing to record",
            param_hint="--record",
        )
    if record is not None:
        writable_dir(record, "--record")
    if fresh:  # after every check: a refused run removes nothing
        for path in reset_state(settings, names):
            err.print(f"removed {path}")
    one_app = settings.pipeline.one_app_per_dc
    err.print(
        f"running the {' and '.join(APPS)} of DC {', '.join(names)}, "
        + ("both in one Spark application a DC" if one_app else "each its own Spark application")
        + f"; logs in {settings.pipeline_root}/<dc>/{'joiner' if one_app else '<app>'}/app.log",
        markup=False,
    )

    def on_exit(child: Child, code: int) -> None:
        seconds = time.monotonic() - child.started
        err.print(f"{child.name} exited with status {code} after {seconds:.0f} s", markup=False)

    def on_restart(child: Child, delay_s: float) -> None:
        err.print(
            f"{child.name}: restart {child.restarts} in {delay_s:g} s; the other DCs run on",
            markup=False,
        )

    started = time.monotonic()
    recorder = MetricsRecorder(settings, record, record_interval) if record else None
    if recorder is not None:
        recorder.start()
        err.print(f"recording metrics into {recorder.path}")
    try:
        children = run_pipelines(
            settings,
            names,
            until_idle_s=until_idle,
            config=ctx.find_root().obj,
            env=env,
            on_exit=on_exit,
            on_restart=on_restart,
        )
    finally:
        if recorder is not None:
            recorder.stop()
    summary = {
        "seconds": round(time.monotonic() - started, 1),
        "apps": [summary for c in children for summary in app_summaries(c)],
    }
    print_json(summary)
    return summary
