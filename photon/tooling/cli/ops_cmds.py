"""``photon verify`` and ``photon recover``: the operations DAGs on the command line.

Each takes the DAG's params as flags, checked by the same model
(:mod:`photon.ops.params`), and does what the DAG's tasks do: verification runs
the Spark job of ``photon_verify`` (``spark_apps.verify_output``) on
``pipeline.spark_master`` and writes the same report to the object store;
recovery runs ``photon_recover``'s step, a dry run unless ``--no-dry-run``.
For when Airflow is down, or on a laptop (docs/operations.md).
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from typing import Annotated, Any

import typer
from rich.table import Table

from photon.ops.params import InvalidParamsError, RecoverParams, VerifyParams, Window
from photon.tooling.cli.common import JsonOption, err, out, settings_of

WindowStart = Annotated[
    str | None,
    typer.Option(help="Window start, ISO-8601 (naive: UTC). Unset: the end minus --lookback-s."),
]
WindowEnd = Annotated[
    str | None,
    typer.Option(
        help="Window end, ISO-8601 (naive: UTC), not in the future. Unset: --settle-s before "
        "now (clicks that recent may still be on their way)."
    ),
]
LookbackS = Annotated[float, typer.Option(help="Window length when --window-start is unset.")]
SettleS = Annotated[float, typer.Option(help="Seconds an unset window end stays before now.")]


def _checked(model: Any, values: dict[str, Any], settings: Any) -> tuple[Any, Window]:
    """The params, checked by the DAG's model, and their window; a bad one is an error
    naming its flag ("window_end: ..." is --window-end's), one line, exit status 2."""
    try:
        params = model.parse({k: v for k, v in values.items() if v is not None})
        params.check_settings(settings)
        return params, params.window()
    except InvalidParamsError as exc:
        message = str(exc).removeprefix("invalid params: ")
        for name in values:
            flag = f"--{name.replace('_', '-')}"
            message = re.sub(rf"\b{name}\b", flag, message)
        raise InvalidParamsError(message) from None


def _run_name(prefix: str) -> str:
    return f"{prefix}-{datetime.now(UTC):%Y%m%dT%H%M%SZ}"


def verify(
    ctx: typer.Context,
    window_start: WindowStart = None,
    window_end: WindowEnd = None,
    lookback_s: LookbackS = 3600.0,
    settle_s: SettleS = 120.0,
    latency_bound_s: Annotated[
        float, typer.Option(help="Largest click-to-join latency the suite accepts.")
    ] = 4 * 3600.0,
    clear_tokens: Annotated[
        bool, typer.Option(help="Clear the tokens of ids confirmed in the output.")
    ] = True,
    json_out: JsonOption = False,
) -> None:
    """Verify the joined output of a window, as the photon_verify DAG does: a summary of
    what became of its clicks, the verdict and links to the report and Data Docs; exit 1
    when it fails."""
    from photon.ops.verify import report_keys
    from photon.storage import browser_url
    from spark_apps import verify_output

    settings = settings_of(ctx)
    params, window = _checked(
        VerifyParams,
        {
            "window_start": window_start,
            "window_end": window_end,
            "lookback_s": lookback_s,
            "settle_s": settle_s,
            "latency_bound_s": latency_bound_s,
            "clear_tokens": clear_tokens,
        },
        settings,
    )
    run = _run_name("cli-verify")
    window_text = f"[{window.start.isoformat()}, {window.end.isoformat()})"
    err.print(f"verifying {window_text} as run {run}", soft_wrap=True, markup=False)
    report = verify_output.run_verification(
        settings,
        window,
        run=run,
        latency_bound_s=params.latency_bound_s,
        clear_tokens=params.clear_tokens,
    )
    folder = report_keys(run)[1].rsplit("/", 1)[0]
    links = {"report": browser_url(settings, report_keys(run)[1])}
    if report.data_docs:
        links["data_docs"] = browser_url(settings, f"{folder}/{report.data_docs}")
    data = report.to_dict() | {"report_key": report_keys(run)[1], "links": links}
    if json_out:
        out.print_json(json.dumps(data, default=str))
    else:
        _print_verification(data, settings.s3.bucket)
    if not report.passed:
        raise typer.Exit(1)


#: The completeness figures the summary shows, in order, with what each means.
_VERIFY_FIGURES = (
    ("input_clicks", "clicks in the window's input logs"),
    ("joined", "joined (in some DC's output)"),
    ("unjoinable", "given up on: their query never came"),
    ("too_old", "too old for the registry (below a GC boundary)"),
    ("unwritable", "quarantined: a value the output cannot hold"),
    ("pending", "still waiting for their query (not failed)"),
    ("missing", "in no output and not waiting"),
    ("lost", "registered, in no output: photon recover restores them"),
    ("duplicates", "output rows beyond one a click"),
    ("complete_pct", "joined, % of joinable clicks not pending"),
)


def _print_verification(data: dict[str, Any], bucket: str) -> None:
    passed = data["passed"]
    verdict = "[bold green]PASSED[/]" if passed else "[bold red]FAILED[/]"
    table = Table(title=f"verification {data['run']}: {verdict}", title_justify="left")
    table.add_column("clicks")
    table.add_column("count", justify="right")
    table.add_column("")
    table.add_row("window", f"[{data['window_start']}, {data['window_end']})", "")
    completeness = data["completeness"]
    for key, meaning in _VERIFY_FIGURES:
        value = completeness[key]
        bad = key in ("missing", "lost", "duplicates") and value
        table.add_row(key, f"[red]{value}[/]" if bad else str(value), meaning)
    failed = [e for e in data["expectations"] if not e["success"]]
    table.add_row("expectations", f"{len(data['expectations']) - len(failed)} of "
                  f"{len(data['expectations'])} hold", "Great Expectations")  # fmt: skip
    out.print(table)
    for failure in data["failures"]:
        out.print(f"  [red]✗[/] {failure}", soft_wrap=True)
    out.print(f"report: {data['report_key']} in bucket {bucket}", soft_wrap=True, markup=False)
    for name, url in data["links"].items():
        out.print(f"  {name}: {url}", soft_wrap=True, markup=False)


def recover(
    ctx: typer.Context,
    window_start: WindowStart = None,
    window_end: WindowEnd = None,
    lookback_s: LookbackS = 3600.0,
    settle_s: SettleS = 120.0,
    dc: Annotated[
        str | None,
        typer.Option(help="Re-inject every click into this DC. Unset: each to its own."),
    ] = None,
    dry_run: Annotated[
        bool, typer.Option(help="List what would be done; change nothing (the default).")
    ] = True,
    json_out: JsonOption = False,
) -> None:
    """Re-inject clicks registered by a dead attempt but never written, as the
    photon_recover DAG does; a dry run unless --no-dry-run."""
    from photon.ops.recover import recover as run_recovery
    from photon.registry_access import connect_registry
    from photon.storage import ObjectStore

    settings = settings_of(ctx)
    params, window = _checked(
        RecoverParams,
        {
            "window_start": window_start,
            "window_end": window_end,
            "lookback_s": lookback_s,
            "settle_s": settle_s,
            "dc": dc,
            "dry_run": dry_run,
        },
        settings,
    )
    with connect_registry(settings) as registry:
        report = run_recovery(
            settings,
            ObjectStore.from_settings(settings),
            registry,
            window,
            dc=params.dc,
            dry_run=params.dry_run,
            run=_run_name("cli-recover"),
        )
    result = report.to_dict()
    if json_out:
        out.print_json(json.dumps(result, default=str))
        return
    table = Table(title=f"recovery{' (dry run)' if params.dry_run else ''}")
    table.add_column("")
    table.add_column("value")
    for key, value in result.items():
        if key != "actions":
            table.add_row(key, str(value))
    out.print(table)
    for action in result["actions"][:200]:
        out.print(f"  {action}")
