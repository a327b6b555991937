"""The ``photon`` command line.

Every command reads the one settings object (``--config FILE``, ``PHOTON_*``
variables, defaults) and validates its own options; a bad value or a failed
step prints one clear line on stderr and exits non-zero, never a traceback.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from pydantic import ValidationError
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

from photon.errors import PhotonError
from photon.events.records import Stream
from photon.logconfig import FORMAT_ENV, LEVELS, configure_logging
from photon.tooling.cli import chaos_cmds, compose_cmds, ops_cmds, pipeline_cmds, status_cmds
from photon.tooling.cli.airflow_cmds import airflow_app
from photon.tooling.cli.bench_cmds import bench_app
from photon.tooling.cli.cluster_cmds import cluster_app
from photon.tooling.cli.common import JsonOption, err, out, settings_of, working, writable_dir
from photon.tooling.cli.registry_cmds import registry_app
from photon.tooling.stack import compose_env
from registry import RegistryError
from registry.ids import MAX_TS_US, MIN_TS_US

if TYPE_CHECKING:
    from photon.tooling.stack.manager import StackStatus

# A command imports what only it needs (Spark, boto3, redis, the simulator...) in its
# body: every `photon` call, `--help` included, would otherwise pay for all of them
# (docs/ARCHITECTURE.md, "Choices").

app = typer.Typer(
    name="photon",
    help="Photon: exactly-once joining of continuous event streams.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
stack_app = typer.Typer(
    help="The local stack (ZooKeeper ensemble, Redis, S3, optionally a Spark cluster).",
    no_args_is_help=True,
)
logs_app = typer.Typer(help="Inspect the query and click logs.", no_args_is_help=True)
settings_app = typer.Typer(help="Inspect the effective settings.", no_args_is_help=True)
app.add_typer(stack_app, name="stack")
app.add_typer(logs_app, name="logs")
app.add_typer(settings_app, name="settings")
app.add_typer(registry_app, name="registry")
app.add_typer(bench_app, name="bench")
app.add_typer(airflow_app, name="airflow")
app.add_typer(cluster_app, name="cluster")
app.add_typer(compose_cmds.compose_app, name="compose")
app.command("read-queries")(pipeline_cmds.read_queries)
app.command("join")(pipeline_cmds.join)
app.command("run")(pipeline_cmds.run)
app.command("chaos")(chaos_cmds.chaos)
app.command("status")(status_cmds.status)
app.command("verify")(ops_cmds.verify)
app.command("recover")(ops_cmds.recover)

#: Errors a user can act on: printed as one message, exit status 2. Every error Photon
#: or the IdRegistry raises on purpose derives from one of these roots (photon.errors).
USER_ERRORS = (PhotonError, RegistryError)


#: The ``gen`` flag of each field of the generator's config, to name it in an error.
GEN_FLAGS = {
    "seed": "--seed",
    "start_us": "--start",
    "queries": "--queries",
    "query_rate": "--rate",
    "ctr": "--ctr",
    "orphan_click_fraction": "--orphan-fraction",
    "delayed_query_fraction": "--delayed-fraction",
    "duplicate_click_fraction": "--duplicate-fraction",
    "malformed_fraction": "--malformed-fraction",
    "outage_duration_s": "--outage-s",
    "rollover_bytes": "--rollover-bytes",
}


class GenMode(StrEnum):
    BURST = "burst"
    LIVE = "live"


@app.callback()
def _main(
    ctx: typer.Context,
    config: Annotated[
        Path | None,
        typer.Option(
            "--config", "-c", help="TOML config file (else $PHOTON_CONFIG).", dir_okay=False
        ),
    ] = None,
    log_level: Annotated[str, typer.Option(help=f"One of {', '.join(LEVELS)}.")] = "info",
) -> None:
    try:
        configure_logging(log_level)
    except ValueError as exc:
        hint = "--log-level" if "level" in str(exc) else FORMAT_ENV
        raise typer.BadParameter(str(exc), param_hint=hint) from None
    ctx.obj = config


# -- stack ---------------------------------------------------------------------


@app.command()
def up(
    ctx: typer.Context,
    json_out: JsonOption = False,
    spark_cluster: Annotated[
        bool,
        typer.Option(
            "--spark-cluster",
            help="Also start a Spark standalone master and workers on loopback "
            "(then `photon run --master spark://HOST:PORT`).",
        ),
    ] = False,
) -> None:
    """Start the local stack (idempotent) and print its endpoints."""
    from photon.tooling.stack.manager import LocalStack

    settings = settings_of(ctx)
    what = "ZooKeeper ensemble, Redis, S3" + (", Spark cluster" if spark_cluster else "")
    with working(f"starting the local stack ({what})..."):
        status = LocalStack(settings).up(spark_cluster=spark_cluster)
    _print_status(status, json_out)


@app.command()
def down(
    ctx: typer.Context,
    purge: Annotated[bool, typer.Option(help="Also delete the stack's data directories.")] = False,
) -> None:
    """Stop exactly the processes `photon up` started, and nothing else."""
    from photon.tooling.stack.manager import LocalStack

    report = LocalStack(settings_of(ctx)).down(purge=purge)
    if not report.stopped and not report.already_gone:
        out.print("no local stack was running")
    if report.stopped:
        out.print(f"stopped: {', '.join(report.stopped)}")
    if report.already_gone:
        out.print(f"already gone: {', '.join(report.already_gone)}")
    if report.still_listening:
        err.print(f"[yellow]still listening (not ours?): {report.still_listening}[/]")


@stack_app.command("status")
def stack_status(ctx: typer.Context, json_out: JsonOption = False) -> None:
    """Health of every service of the local stack; exit 1 when unhealthy."""
    from photon.tooling.stack.manager import LocalStack

    status = LocalStack(settings_of(ctx)).status()
    _print_status(status, json_out)
    if not status.healthy:
        raise typer.Exit(1)


@stack_app.command("s3-policies")
def stack_s3_policies(
    ctx: typer.Context,
    out_dir: Annotated[
        Path, typer.Option("--out", help="Directory for <service>.json (made if missing).")
    ] = Path("infra/minio/policies"),
) -> None:
    """Write the least-privilege S3 policy of every service (MinIO/IAM JSON), for the
    configured bucket and DCs; compose's MinIO init job applies them."""
    from photon.security.s3_access import write_policy_files

    settings = settings_of(ctx)
    written = write_policy_files(writable_dir(out_dir, "--out"), settings.s3.bucket, settings.dcs)
    for path in written:
        out.print(str(path))


@stack_app.command("zookeeper-exporter")
def stack_zookeeper_exporter(
    servers: Annotated[
        str, typer.Option(help="The ensemble's client addresses, host:port,host:port.")
    ],
    listen: Annotated[str, typer.Option(help="host:port to serve /metrics on.")] = "127.0.0.1:9141",
) -> None:
    """Serve the ensemble's `mntr` numbers as Prometheus gauges (zookeeper_*), until
    stopped; the stack runs one (docs/metrics.md)."""
    from photon.tooling.observe import zookeeper_exporter

    try:
        ensemble = zookeeper_exporter.parse_servers(servers)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--servers") from None
    try:
        ((host, port),) = zookeeper_exporter.parse_servers(listen)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--listen") from None
    zookeeper_exporter.serve(ensemble, host, port)


@stack_app.command("zookeeper-node")
def stack_zookeeper_node(
    node_id: Annotated[int, typer.Option("--id", min=1, help="This node's id (myid), 1-based.")],
    hosts: Annotated[str, typer.Option(help="Every node's host name, in id order: zk1,zk2,zk3.")],
    directory: Annotated[
        Path, typer.Option("--dir", help="Its configuration and data (a volume).")
    ] = Path("/data/zookeeper"),
    heap_mb: Annotated[int, typer.Option(min=64, max=65_536, help="Java heap, MiB.")] = 1024,
) -> None:
    """Run one ZooKeeper node of an ensemble on ZooKeeper's default ports (2181, 2888,
    3888), configured as `photon up`'s nodes are: compose's zk1..zk3 (docs/deploy.md)."""
    import os

    from photon.tooling.stack import zookeeper

    names = [h.strip() for h in hosts.split(",")]
    if not all(names) or len(set(names)) != len(names):
        raise typer.BadParameter(
            f"{hosts!r} is not a list of distinct host names", param_hint="--hosts"
        )
    try:
        argv = zookeeper.serve_argv(node_id, names, directory, heap_mb)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--id") from None
    os.execvp(argv[0], argv)  # noqa: S606 -- the node is the container's process: signals reach it


@stack_app.command("s3-standin-init")
def stack_s3_standin_init(
    ctx: typer.Context,
    endpoint: Annotated[str, typer.Option(help="The stand-in's URL, http://host:port.")],
) -> None:
    """In compose with the S3 stand-in in MinIO's place: make the bucket and one IAM user
    per service with its policy, as MinIO's init job does (stored, not enforced)."""
    from photon.tooling.stack.s3_standin import provision

    if not endpoint.startswith(("http://", "https://")):
        raise typer.BadParameter(f"{endpoint!r} is not an http(s) URL", param_hint="--endpoint")
    settings = settings_of(ctx)
    users = provision(endpoint, settings)
    out.print(f"s3-standin-init: bucket {settings.s3.bucket}, users {', '.join(users)}")


@stack_app.command("compose-env")
def stack_compose_env(
    example: Annotated[Path, typer.Option(help="The template.")] = Path(".env.example"),
    out_path: Annotated[Path, typer.Option("--out", help="The file to write.")] = Path(".env"),
) -> None:
    """Write the compose stack's .env from .env.example, each secret new and random
    (never overwrites an existing .env)."""
    if not example.is_file():
        raise typer.BadParameter(f"{example} does not exist", param_hint="--example")
    writable_dir(out_path.parent, "--out")
    try:
        made = compose_env.write(example, out_path)
    except FileExistsError as exc:
        err.print(f"[red]error:[/] {exc}")
        raise typer.Exit(2) from None
    out.print(f"wrote {out_path} (owner-only) with {len(made)} new secrets: {', '.join(made)}")


def _print_status(status: StackStatus, json_out: bool) -> None:
    if json_out:
        out.print_json(json.dumps(status.to_dict()))
        return
    table = Table(title="local stack", show_lines=False)
    for column in ("service", "pid", "ports", "healthy", "detail"):
        table.add_column(column)
    for s in status.services:
        ports = ",".join(str(p) for p in s.ports.values())
        mark = "[green]yes[/]" if s.healthy else "[red]no[/]"
        table.add_row(s.name, str(s.pid or "-"), ports, mark, s.detail)
    out.print(table)
    for name, endpoint in status.endpoints.items():
        out.print(f"  {name:<15} {endpoint}")
    for problem in status.problems:
        err.print(f"[red]problem:[/] {problem}")


# -- generator -----------------------------------------------------------------


def parse_start(text: str) -> int:
    """``today`` (00:00 UTC), ``now`` or an ISO-8601 time, as microseconds."""
    now = datetime.now(UTC)
    if text == "now":
        moment = now
    elif text == "today":
        moment = now.replace(hour=0, minute=0, second=0, microsecond=0)
    else:
        try:
            moment = datetime.fromisoformat(text)
        except ValueError:
            raise typer.BadParameter(
                f"{text!r} is not 'today', 'now' or an ISO-8601 time", param_hint="--start"
            ) from None
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
    start_us = int(moment.timestamp()) * 1_000_000 + moment.microsecond
    if not MIN_TS_US <= start_us < MAX_TS_US:  # event ids carry their time in this range
        raise typer.BadParameter(f"{text!r} is not between 2000 and 2200", param_hint="--start")
    return start_us


@app.command()
def gen(
    ctx: typer.Context,
    seed: Annotated[
        int, typer.Option(help="Seed: the same seed and options write identical files.")
    ] = 42,
    queries: Annotated[int, typer.Option(help="How many queries to simulate.")] = 2_000,
    rate: Annotated[float, typer.Option(help="Queries per second of event time.")] = 50.0,
    mode: Annotated[
        GenMode, typer.Option(help="burst: write all now; live: append in real time.")
    ] = GenMode.BURST,
    start: Annotated[
        str,
        typer.Option(help="First query's event time: today, now or ISO-8601 (live mode: now)."),
    ] = "today",
    ctr: Annotated[float, typer.Option(help="Fraction of queries clicked.")] = 0.3,
    orphan_fraction: Annotated[
        float, typer.Option(help="Fraction of clicks whose query never arrives.")
    ] = 0.03,
    delayed_fraction: Annotated[
        float, typer.Option(help="Fraction of clicked queries shipped after their clicks.")
    ] = 0.05,
    duplicate_fraction: Annotated[
        float, typer.Option(help="Fraction of click lines shipped twice.")
    ] = 0.02,
    malformed_fraction: Annotated[float, typer.Option(help="Fraction of malformed lines.")] = 0.005,
    outage_s: Annotated[
        float, typer.Option(help="How long the last DC receives no logs (0: no outage).")
    ] = 20.0,
    rollover_bytes: Annotated[int, typer.Option(help="Log files roll over at this size.")] = 256
    * 1024,
    clean: Annotated[bool, typer.Option(help="Delete the DCs' existing logs first.")] = False,
    json_out: JsonOption = False,
) -> None:
    """Simulate ad servers: write query and click logs for every DC, plus a manifest."""
    from photon.tooling.gen.model import GenConfig
    from photon.tooling.gen.simulator import live_until, simulate, write

    settings = settings_of(ctx)
    try:
        cfg = GenConfig(
            seed=seed,
            dcs=settings.dcs,
            start_us=parse_start("now" if mode is GenMode.LIVE else start),
            queries=queries,
            query_rate=rate,
            ctr=ctr,
            orphan_click_fraction=orphan_fraction,
            delayed_query_fraction=delayed_fraction,
            duplicate_click_fraction=duplicate_fraction,
            malformed_fraction=malformed_fraction,
            outage_duration_s=outage_s,
            rollover_bytes=rollover_bytes,
        )
    except ValidationError as exc:
        error = exc.errors()[0]
        field = str(error["loc"][0]) if error["loc"] else ""
        raise typer.BadParameter(
            str(error["msg"]), param_hint=GEN_FLAGS.get(field, field or None)
        ) from None
    # Live mode writes its late tail at once when its real-time span ends: no click of
    # it is stamped later than that end (docs/join.md, "Time"). Burst mode stays a pure
    # function of its options (the same seed writes the same files): a start close to
    # now can leave late clicks stamped ahead of the clock, which the join holds.
    if mode is GenMode.LIVE:
        cfg = cfg.model_copy(update={"clicks_until_us": live_until(cfg)})
    logs_root = settings.logs_root
    if clean:
        for dc in settings.dcs:
            shutil.rmtree(logs_root / dc, ignore_errors=True)
    sim = simulate(cfg)
    columns = (
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=err, transient=json_out) as progress:
        task = progress.add_task(f"writing logs ({mode})", total=len(sim.deliveries))
        manifest = write(
            sim,
            logs_root,
            live=mode is GenMode.LIVE,
            progress=lambda done, total: progress.update(task, completed=done),
        )
    summary = {
        "logs_root": str(logs_root),
        "queries": manifest.queries,
        "lost_queries": manifest.lost_queries,
        "clicks": manifest.clicks,
        "expected_joins": len(manifest.expected_joins),
        "never_joinable": len(manifest.never_joinable),
        "dcs": {
            dc: {
                "query_lines": m.query_lines,
                "click_lines": m.click_lines,
                "duplicate_click_lines": m.duplicate_click_lines,
                "malformed_lines": len(m.malformed),
                "files": sum(len(files) for files in m.files.values()),
            }
            for dc, m in manifest.dcs.items()
        },
    }
    if json_out:
        out.print_json(json.dumps(summary))
        return
    out.print(
        f"wrote {manifest.queries} queries and {manifest.clicks} clicks to {logs_root} "
        f"({len(manifest.expected_joins)} joinable, {len(manifest.never_joinable)} never joinable)"
    )
    table = Table("dc", "query lines", "click lines", "duplicate clicks", "malformed", "files")
    for dc, row in summary["dcs"].items():  # type: ignore[attr-defined]
        table.add_row(dc, *(str(v) for v in row.values()))
    out.print(table)


# -- logs ----------------------------------------------------------------------


@logs_app.command("scan")
def logs_scan(
    ctx: typer.Context,
    dc: Annotated[
        list[str] | None, typer.Option(help="DC to scan (repeatable); default all.")
    ] = None,
    json_out: JsonOption = False,
) -> None:
    """Read every log line as the pipelines will: events, duplicates, quarantined lines."""
    from photon.logs.scan import scan_dc

    settings = settings_of(ctx)
    dcs = dc or settings.dcs
    for name in dcs:
        settings.dc_logs(name)  # validates the name
    rows: dict[str, Any] = {}
    for name in dcs:
        scan = scan_dc(settings.logs_root, name)
        rows[name] = {
            stream.value: {
                "files": s.files,
                "lines": s.lines,
                "events": s.events,
                "duplicates": s.duplicates,
                "quarantined": len(s.quarantined),
                "reasons": dict(s.reasons()),
            }
            for stream, s in scan.streams.items()
        }
    if json_out:
        out.print_json(json.dumps(rows))
        return
    table = Table("dc", "stream", "files", "lines", "events", "duplicates", "quarantined")
    reasons = Table("dc", "stream", "quarantine reason", "lines")
    for name, streams in rows.items():
        for stream in Stream:
            r = streams[stream.value]
            counts = (r["files"], r["lines"], r["events"], r["duplicates"], r["quarantined"])
            table.add_row(name, stream.value, *map(str, counts))
            for reason, count in sorted(r["reasons"].items()):
                reasons.add_row(name, stream.value, reason, str(count))
    out.print(table)
    if reasons.row_count:
        out.print(reasons)


# -- report --------------------------------------------------------------------


@app.command("report")
def report(
    run: Annotated[
        Path,
        typer.Option(
            "--run",
            help="The recorded run: a directory with metrics.jsonl "
            "(`photon run --record DIR`, `photon demo`).",
        ),
    ],
    out_dir: Annotated[
        Path | None, typer.Option("--out", help="Where to write (default: RUN/report).")
    ] = None,
) -> None:
    """Redraw the Photon paper's figures (7-13) for a recorded run: an HTML page, PNG charts
    and the numbers behind each."""
    from photon.tooling.observe.recorder import METRICS_FILE, read_records
    from photon.tooling.observe.report import AUDIT_FILE, ReportError
    from photon.tooling.observe.report import write as report_write

    if not (run / METRICS_FILE).is_file():
        raise typer.BadParameter(f"{run / METRICS_FILE} does not exist", param_hint="--run")
    out_dir = writable_dir(out_dir or run / "report", "--out")
    records = read_records(run)
    dcs = sorted(records[-1]["status"]["dcs"]) if records else []
    audit_path = run / AUDIT_FILE
    audit = json.loads(audit_path.read_text()) if audit_path.is_file() else None
    try:
        page = report_write(records, dcs, out_dir, source=str(run), audit=audit)
    except ReportError as exc:
        err.print(f"[red]error:[/] {exc}")
        raise typer.Exit(2) from None
    out.print(f"wrote {page} and its charts")


# -- settings ------------------------------------------------------------------


@settings_app.command("show")
def settings_show(ctx: typer.Context) -> None:
    """The effective settings (secrets masked), as JSON."""
    out.print_json(json.dumps(settings_of(ctx).redacted(), default=str))


# -- demo ----------------------------------------------------------------------


#: What the demo's pipelines (and the stack it starts) run with unless the environment
#: says otherwise: clicks whose query never comes are given up on after seconds, not
#: hours, so the demo ends.
#: The age runs on the query stream's clock (docs/join.md, "When a click is
#: unjoinable") and exceeds the simulated delayed queries (at most ~31 s after their
#: last click); query files idle for 10 s stop holding the reader's progress back.
DEMO_ENV = {
    "PHOTON_RETRY__INITIAL_BACKOFF_S": "0.5",
    "PHOTON_RETRY__MAX_BACKOFF_S": "2",
    "PHOTON_RETRY__MAX_ATTEMPTS": "4",
    "PHOTON_RETRY__MAX_AGE_S": "35",
    "PHOTON_PIPELINE__QUERY_FILE_IDLE_S": "10",
    # A stack that lives for the run: ZooKeeper's quick compiler (StackSettings.zk_jit).
    "PHOTON_STACK__ZK_JIT": "quick",
}


@app.command()
def demo(
    ctx: typer.Context,
    keep: Annotated[bool, typer.Option(help="Leave the stack running afterwards.")] = False,
    queries: Annotated[int, typer.Option(help="Queries to simulate.", min=100)] = 3_000,
    rate: Annotated[float, typer.Option(help="Queries per second, live.", min=1.0)] = 50.0,
) -> None:
    """The main job on embedded defaults: live logs through both DCs' pipelines, then an audit."""
    from photon.tooling.runs import environment, namespace

    # A registry root, a bucket and cache keys of the run's own: a stack left running
    # by an earlier run (or by `photon up`) cannot answer for this run's clicks. The
    # demo's defaults give way to the caller's environment; both last as long as the run.
    stamp = time.strftime("%Y%m%d-%H%M%S")
    run_env = {key: os.environ.get(key, value) for key, value in DEMO_ENV.items()}
    with environment(run_env | namespace(f"demo-{stamp}")):
        _demo(ctx, stamp, keep=keep, queries=queries, rate=rate)


def _demo(ctx: typer.Context, stamp: str, *, keep: bool, queries: int, rate: float) -> None:
    from photon.storage import ObjectStore
    from photon.tooling.audit import audit, first_joined_at_us
    from photon.tooling.cli.audit_view import print_audit
    from photon.tooling.gen.simulator import load_manifest
    from photon.tooling.observe.recorder import read_records
    from photon.tooling.observe.report import AUDIT_FILE
    from photon.tooling.observe.report import write as report_write
    from photon.tooling.pipeline import reset_state
    from photon.tooling.stack.manager import LocalStack, StackError

    settings = settings_of(ctx)
    stack = LocalStack(settings)
    outage_s = 20.0
    try:
        out.rule("1. local stack up")
        up(ctx, json_out=False, spark_cluster=False)
        out.rule("2. ad servers write two DCs of logs live; both DCs' pipelines join them")
        out.print(
            f"{queries} queries at {rate}/s; DC {settings.dcs[-1]} receives nothing for "
            f"{outage_s:.0f} s, then its backlog. Joiners stop 30 s after their last click."
        )
        reset_state(settings, settings.dcs)
        gen_argv = [sys.executable, "-m", "photon.tooling.cli.main", "gen", "--mode", "live"]
        gen_argv += ["--clean", "--queries", str(queries), "--rate", str(rate)]
        gen_argv += ["--outage-s", str(outage_s), "--rollover-bytes", str(256 * 1024)]
        writer = subprocess.Popen(gen_argv)  # the ad servers, in a process of their own
        # The run's metrics, for its report (when the apps serve metrics: they do by default).
        record_dir = (
            Path("reports") / "demo" / stamp if settings.pipeline.metrics_base_port else None
        )
        launched_us = time.time_ns() // 1000  # the pipelines' launch: their start-up from here
        try:
            summary = pipeline_cmds.run(
                ctx,
                dc=None,
                dcs=None,
                until_idle=30.0,
                master=None,
                fresh=False,
                record=record_dir,
                record_interval=2.0,
            )
        except BaseException:
            writer.terminate()  # the pipelines failed: stop writing, keep the first error
            writer.wait()
            raise
        if writer.wait(timeout=600) != 0:
            raise StackError(f"the log generator failed with status {writer.returncode}")
        out.rule("3. audit the output against the generator's manifest")
        store = ObjectStore.from_settings(settings)
        result = audit(store, load_manifest(settings.logs_root))
        print_audit(result, summary, settings.s3.bucket)
        first_us = first_joined_at_us(store)
        if first_us is not None:  # start-up, as a user sees it (docs/deploy.md, "Start-up")
            out.print(f"first joined click: {(first_us - launched_us) / 1e6:.1f} s after launch")
        if record_dir is not None:
            out.rule("4. the run's report (the paper's figures, redrawn)")
            # kept beside the metrics: `photon report --run` shows the verdict again
            (record_dir / AUDIT_FILE).write_text(json.dumps(result.to_dict(), indent=2) + "\n")
            page = report_write(
                read_records(record_dir),
                settings.dcs,
                record_dir / "report",
                source="photon demo",
                audit=result.to_dict(),
            )
            out.print(f"report: {page}  (open it in a browser)")
        out.rule("5. stack status")
        stack_status(ctx, json_out=False)
        if not result.exactly_once:
            raise typer.Exit(1)
    finally:
        if not keep:
            out.rule("6. local stack down")
            report = stack.down(purge=True)
            out.print(f"stopped: {', '.join(report.stopped) or 'nothing'}")


#: The root command's options, which every command takes (``photon status --config f``).
GLOBAL_OPTIONS = {"--config": True, "-c": True, "--log-level": True}


def hoist_global_options(args: list[str]) -> list[str]:
    """``args`` with the root command's options moved before the first command name, so
    that they may be given after it too (click takes a group's options only before)."""
    hoisted: list[str] = []
    rest: list[str] = []
    seen_command = False
    index = 0
    while index < len(args):
        arg = args[index]
        name = arg.split("=", 1)[0]
        if arg == "--":
            rest += args[index:]
            break
        if seen_command and name in GLOBAL_OPTIONS:
            if "=" in arg or index + 1 >= len(args):
                hoisted.append(arg)
            else:
                hoisted += [arg, args[index + 1]]
                index += 1
        else:
            if not arg.startswith("-") and not seen_command:
                previous = args[index - 1] if index else ""
                seen_command = previous not in GLOBAL_OPTIONS  # not the value of --config
            rest.append(arg)
        index += 1
    return hoisted + rest


def main() -> None:
    """Console-script entry point: user errors — bad settings, a bad flag or argument, a
    service that does not answer — become one line, ``error: …``, and exit status 2."""
    try:
        # Not standalone: errors come here, to be said in one line. A command that ends
        # with typer.Exit(n) (a failed verification: 1) returns n instead of exiting.
        result = app(
            args=hoist_global_options(sys.argv[1:]), prog_name="photon", standalone_mode=False
        )
    except USER_ERRORS as exc:
        _fail(str(exc))
    except OSError as exc:  # a file or device a step could not use: said, not a traceback
        _fail(str(exc), 1)
    except typer.Exit as exc:  # --help, typer.Exit: their own status
        sys.exit(exc.exit_code)
    except typer.Abort:
        err.print("aborted", markup=False)
        sys.exit(1)
    except typer.TyperException as exc:  # a bad flag or value (typer.BadParameter), usage
        context = getattr(exc, "ctx", None)
        hint = f" (see `{context.command_path} --help`)" if context is not None else ""
        _fail(exc.format_message() + hint, getattr(exc, "exit_code", 2))
    # No command returns a bare int but through typer.Exit (a JSON summary is a dict).
    sys.exit(result if isinstance(result, int) and not isinstance(result, bool) else 0)


def _fail(message: str, status: int = 2) -> None:
    # One line whatever the terminal's width: no panel, no wrapping (scripts read it).
    err.print(f"[bold red]error:[/] {escape(message)}", soft_wrap=True, highlight=False)
    sys.exit(status)


if __name__ == "__main__":
    main()
