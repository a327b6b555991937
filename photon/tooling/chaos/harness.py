"""The chaos run (``photon chaos``): a live two-DC stream joined while faults strike.

On the running local stack, with a registry root, bucket, cache keys, logs
and pipeline state of its own:

1. ad servers write a live stream for every DC (a process of its own) while
   each DC's query reader and joiner run under a :class:`ServiceManager`, which
   restarts whatever dies;
2. faults strike on a schedule of the stream's progress
   (:data:`~photon.tooling.chaos.config.SCHEDULE`):
   kill -9 of a joiner at every 20% (alternating DCs; the first ``joiner_kills``);
   the outage DC's whole pipeline down for ``outage_s``, then back (it catches
   up); kill -9 of the
   ZooKeeper leader (restarted after ``restart_after_s``, as a service
   manager would); Redis killed and restarted; the S3 endpoint frozen
   (SIGSTOP) and resumed; a sharding epoch appended; the logs rotated under
   the apps, and between a crashed batch and its replay
   (:mod:`~photon.tooling.chaos.rotation_faults`); poison, future-stamped and
   torn lines (:mod:`~photon.tooling.chaos.field_faults`). All run long, a join
   task's first try fails after its registry commit now and then
   (``faults.fail_task_after_commit_p``), on a master that tries it again
   (``local[*,4]``, or the standalone cluster). Before those, from the
   stream's start, the outage DC's joiner runs with
   ``faults.crash_after_commit_p`` = 1: it crashes between its first registry
   commit and that batch's output write, and its local state is lost, so
   that batch is never replayed. Its crash comes first so that it has a
   stream to commit from however slowly the pipelines restart later, and
   the other DCs' joiners start only once it came, so that nothing else wins
   the stream's first clicks;
3. a sampler, every ``sample_s``, lists the joined output (checking the union
   of every DC's output for a ``click_id`` seen twice) and reads each
   joiner's backlog (:mod:`photon.join.backlog`);
4. when the stream has ended, the output stops growing and every joiner has
   caught up with its click logs, verification (:mod:`photon.ops.verify`) and
   recovery (:mod:`photon.ops.recover`) run while the pipelines go on; they
   join the re-injected clicks (recovery logs in the DC's click logs, their
   input), then stop, and the output is compared with the generator's
   manifest;
5. the report (:class:`ChaosReport`) gets each fault's recovery time, the
   returning DC's catch-up (:mod:`photon.tooling.chaos.analysis`), the acceptance
   checks and the charts (:mod:`photon.tooling.chaos.charts`).

The S3 endpoint is frozen rather than restarted: the native stack's S3
stand-in (moto) keeps objects in memory, so a restart would lose the output
itself, which no pipeline could be blamed for. MinIO (compose) keeps them.

How it fails: a bad config raises ``ValueError`` before anything starts; a
stack service that does not come back raises; the run always stops its apps
and thaws the S3 endpoint; the registry root, bucket and cache keys are
dropped at the end unless ``keep`` is set; the apps' logs are kept, gzipped, in
the report's directory (``app-logs/``).
"""

from __future__ import annotations

import gzip
import json
import multiprocessing
import os
import shutil
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import structlog

from photon.apps import JOINER, QUERY_READER
from photon.faults import STEPS
from photon.join.accounting import count_joins
from photon.join.backlog import joiner_backlog
from photon.join.output import output_prefix, rows_under
from photon.ops.params import Window
from photon.ops.recover import recover
from photon.ops.verify import pending_retries, verify
from photon.registry_access import connect_registry
from photon.settings import CONFIG_ENV_VAR, PhotonSettings, env_names_in_file, load_settings
from photon.storage import ObjectStore, s3_client
from photon.tooling.chaos import (
    analysis,
    charts,
    field_faults,
    protocol_faults,
    rotation_faults,
)
from photon.tooling.chaos.config import (
    CHAOS_ENV,
    CRASH_AFTER_COMMIT,
    FAULTY_RUN_TIMEOUT_S,
    ChaosConfig,
    ChaosReport,
    scheduled,
)
from photon.tooling.chaos.record import FaultRecord
from photon.tooling.chaos.sampler import Sampler
from photon.tooling.chaos.service_manager import ServiceManager
from photon.tooling.chaos.stack_faults import (
    append_epoch,
    crash_after_commit,
    dc_outage,
    freeze_s3,
    kill_zk_leader,
    killer,
    restart,
    thaw_s3,
    wait_crashed,
)
from photon.tooling.gen.model import GenConfig, Manifest
from photon.tooling.gen.simulator import live_until, load_manifest
from photon.tooling.runs import StreamClock, clean_up, environment, namespace, write_live
from photon.tooling.stack.manager import LocalStack

log = structlog.get_logger(__name__)

_US = 1_000_000
MASTER_ENV = "PHOTON_PIPELINE__SPARK_MASTER"


def chaos_environment(
    stamp: str,
    workdir: Path,
    config_file: Path | None,
    environ: Mapping[str, str],
    spark_master: str | None = None,
) -> dict[str, str]:
    """The variables a chaos run sets for itself and every process it starts: roots,
    bucket and cache prefix of its own; the config file the user gave (``--config``),
    so the apps read it too; the Spark master asked for (``--spark-cluster``); and the
    chaos run's defaults (:data:`CHAOS_ENV`) for what none of those sets."""
    own = namespace(stamp, workdir)
    if spark_master is not None:
        own[MASTER_ENV] = spark_master
    in_file: set[str] = set()
    if config_file is not None:
        own[CONFIG_ENV_VAR] = str(config_file.resolve())
        in_file = env_names_in_file(config_file)
    defaults = {k: v for k, v in CHAOS_ENV.items() if k not in environ and k not in in_file}
    return defaults | own


def run_chaos(
    settings: PhotonSettings,
    config: ChaosConfig,
    *,
    workdir: Path,
    config_file: Path | None = None,
    spark_master: str | None = None,
    step: Callable[[str], None] = lambda _: None,
) -> ChaosReport:
    stamp = f"chaos-{uuid.uuid4().hex[:8]}"
    own = chaos_environment(stamp, workdir, config_file, os.environ, spark_master)
    with environment(own):
        run_settings = load_settings()
        if len(run_settings.dcs) < 2:
            raise ValueError("a chaos run needs at least two DCs")
        if config.outage_dc not in run_settings.dcs:
            raise ValueError(f"outage DC {config.outage_dc!r} is not one of {run_settings.dcs}")
        s3 = s3_client(run_settings.s3_endpoint_url, run_settings.s3)
        s3.create_bucket(Bucket=run_settings.s3.bucket)
        store = ObjectStore.from_settings(run_settings)
        try:
            report = _run(run_settings, store, config, step, workdir / "app-logs")
        finally:
            if config.report_dir is not None:  # a run that raised is diagnosed by them too
                keep_app_logs(workdir / "app-logs", config.report_dir / "app-logs")
            if not config.keep:
                clean_up(run_settings, store)
    if config.report_dir is not None:
        _write_report(report, config, run_settings.dcs)
    return report


def keep_app_logs(log_dir: Path, into: Path) -> list[Path]:
    """Every DC app's log of the run (each start appended), gzipped into ``into``.

    The apps' state goes with the run (:func:`~photon.tooling.runs.clean_up`), and
    with it what a failed check needs to be explained: why a joiner did not start
    again, which batch a fault struck. The short run's are ~50 KiB gzipped."""
    kept = {path: into / f"{path.name}.gz" for path in sorted(log_dir.glob("*.log"))}
    if kept:
        into.mkdir(parents=True, exist_ok=True)
    for path, target in kept.items():
        with path.open("rb") as source, gzip.open(target, "wb") as sink:
            shutil.copyfileobj(source, sink)
    return list(kept.values())


def _run(
    settings: PhotonSettings,
    store: ObjectStore,
    config: ChaosConfig,
    step: Callable[[str], None],
    log_dir: Path,
) -> ChaosReport:
    report = ChaosReport()
    stack = LocalStack(settings)
    services = ServiceManager(settings, log_dir=log_dir)
    started = time.monotonic()
    step(f"pipelines of {', '.join(settings.dcs)} starting under the service manager")
    # The other DCs' joiners start once the armed one crashed: the stream's first clicks
    # are its to win, however far behind its query reader runs on a loaded machine.
    # The first other DC's joiner then starts armed to crash at a batch's first step
    # boundary, and at each of the next ones in turn (protocol_faults.replay_at_every_step).
    other = next(dc for dc in settings.dcs if dc != config.outage_dc)
    services.start(
        faulty={
            (config.outage_dc, JOINER): CRASH_AFTER_COMMIT,
            (other, JOINER): protocol_faults.step_env(STEPS[0]),
        },
        after_crash=[(dc, JOINER) for dc in settings.dcs if dc != config.outage_dc],
    )
    try:
        # The stream, and its faults, start then (the joiner armed to crash streams too).
        if not _wait_streaming(services, settings.dcs):
            raise RuntimeError("the pipelines did not start streaming within 300 s")
        lead_s = 5.0
        start_us = time.time_ns() // 1000 + int(lead_s * _US)
        cfg = GenConfig(
            seed=config.seed,
            dcs=settings.dcs,
            start_us=start_us,
            queries=config.queries,
            query_rate=config.query_rate,
            # The generator flushes clicks due after its live span at once: no hour-late
            # tail here, and no straggler stamped after that span (it would be ahead of
            # its time when written: held by the join, docs/join.md, "Time").
            click_delay_tail_fraction=0.0,
            outage_duration_s=0.0,  # the outage here is the pipeline's, not the logs'
            rollover_bytes=16 << 20,
        )
        cfg = cfg.model_copy(update={"clicks_until_us": live_until(cfg)})
        clock = StreamClock()  # held while faults wait for the pipelines (_inject)
        writer = multiprocessing.get_context("spawn").Process(
            target=write_live,
            args=(cfg.model_dump_json(), str(settings.logs_root), clock),
            daemon=True,
        )
        writer.start()
        stream_started = time.monotonic() + lead_s
        stream_started_wall = time.time() + lead_s
        sampler = Sampler(
            settings, store, config.sample_s, stream_started, int(stream_started_wall * _US)
        )
        sampler.start()
        step(f"stream of {config.queries} queries over {config.duration_s:.0f} s; faults strike")
        _inject(settings, stack, services, config, report, sampler, clock)
        writer.join()
        report.stream_held_s = round(clock.held_s, 1)
        step("stream written; waiting for the output to settle")
        _wait_idle(sampler, config.idle_s, caught_up=lambda: _caught_up(settings))
        sampler.stop()  # the pipelines run on: recovery's clicks are their input
        report.duplicates_seen = sampler.duplicates_seen
        report.samples = len(sampler.samples)
        report.timeline = sampler.samples
        report.joined_per_second = {
            dc: dict(sorted(seconds.items())) for dc, seconds in sampler.joins.items()
        }
        report.app_starts = dict(services.events.starts)
        report.app_exits = services.events.exit_codes()
        _recovery_times(report, config, services, sampler.joins, stream_started_wall)

        manifest = load_manifest(settings.logs_root)
        report.clicks_in = manifest.clicks
        report.expected_joins = len(manifest.expected_joins)
        missing = set(manifest.expected_joins) - set(sampler.counts)
        report.missing_before_recovery = len(missing)
        window = Window(
            start=datetime.fromtimestamp(start_us / _US - 3600, tz=UTC), end=datetime.now(UTC)
        )
        step("verification, then recovery of lost clicks")
        with connect_registry(settings) as registry:
            # Before verification clears them: which attempt and batch registered each id.
            tokens = registry.registered(
                *(int(t.timestamp() * _US) for t in (window.start, window.end))
            )
            report.lost_to_crash = _held_by_crashed_attempt(report, tokens, missing)
            rotation = next((f for f in report.faults if f.kind == "log_rotation"), None)
            if rotation is not None:
                rotation_faults.replayed_batch_written(rotation, tokens, sampler.counts)
            before = verify(
                settings, store, registry, window, run="chaos-before",
                latency_bound_s=24 * 3600, clear_tokens=True,
            )  # fmt: skip
            report.verification_before = before.to_dict()
            recovered = recover(settings, store, registry, window, dry_run=False)
            report.recovered = recovered.reinjected
            drain = Sampler(settings, store, config.sample_s, time.monotonic(), 0)
            drain.start()
            settle_s = min(config.idle_s, 10.0)
            if recovered.reinjected:
                # The running pipelines read the recovery logs as input, as in production.
                step("the pipelines join the recovered clicks")
                _wait_idle(drain, settle_s, caught_up=lambda: _caught_up(settings))
            _after_recovery(settings, store, services, config, report, sampler, start_us, step)
            _wait_idle(drain, settle_s, caught_up=lambda: _caught_up(settings))
            drain.stop()
            report.duplicates_seen = max(report.duplicates_seen, drain.duplicates_seen)
            services.stop()
            after = verify(
                settings, store, registry, window, run="chaos-after",
                latency_bound_s=24 * 3600, clear_tokens=True,
            )  # fmt: skip
            report.verification_after = after.to_dict()
        final = after.completeness
        report.unjoinable = final.unjoinable
        # All of the output, not only the verification window's (an id whose server
        # clock ran ahead may fall past its end).
        final_rows = rows_under(store, output_prefix("joined"))
        final_count = count_joins(final_rows, manifest.expected_joins)
        final_ids = {str(r["click_id"]) for r in final_rows}
        report.joined = final_count.joined
        report.missing_after_recovery = final_count.missing
        report.duplicates_seen = max(
            report.duplicates_seen, final.duplicates, final_count.duplicates
        )
        report.accounting = accounting(settings, store, manifest, final_ids)
    finally:
        services.stop()
        thaw_s3(stack)
    report.seconds = round(time.monotonic() - started, 1)
    return report


def _after_recovery(
    settings: PhotonSettings,
    store: ObjectStore,
    services: ServiceManager,
    config: ChaosConfig,
    report: ChaosReport,
    sampler: Sampler,
    start_us: int,
    step: Callable[[str], None],
) -> None:
    """The faults whose end comes after recovery: the zombie wakes up (its attempt
    fenced by then), a DC replays its logs while GC passes the stream's middle, and
    the log file faults are read back from the quarantine."""
    zombie = next((f for f in report.faults if f.kind == "zombie_during_recovery"), None)
    if zombie is not None:
        step("the zombie joiner wakes up, its attempt fenced by recovery")
        protocol_faults.resume_zombie(zombie, store)
    other = next(dc for dc in settings.dcs if dc != config.outage_dc)
    step(f"DC {other}'s joiner starts afresh and replays its logs while GC passes them")
    at_s = sampler.since_start()
    middle_us = start_us + int(config.duration_s / 2 * _US)
    record = protocol_faults.gc_during_catch_up(
        settings, services, other, middle_us, sampler.since_start
    )
    record.at_s = round(at_s, 1)
    report.faults.append(record)
    files = next((f for f in report.faults if f.kind == "log_file_faults"), None)
    if files is not None:
        protocol_faults.log_file_reports(files, store)
    retries = protocol_faults.task_retries(services, settings.dcs, settings.pipeline.spark_master)
    retries.ended_s = round(sampler.since_start(), 1)
    report.faults.append(retries)
    field_faults.field_reports(settings, store, report.faults)


def accounting(
    settings: PhotonSettings, store: ObjectStore, manifest: Manifest, joined: set[str]
) -> dict[str, Any]:
    """Where every distinct click of the run ended: joined, unjoinable, too old (below a
    GC boundary) or still pending in a retry store. A click joined by one DC may be too
    old for another that reached it after GC: it counts as joined. Every unjoinable
    record counts, superseded by recovery or not: no query of the run comes later than
    the retry limits, so a click both joined and given up on is the join's fault, not a
    late query's (photon.ops.supersede)."""
    unjoinable = {r["click_id"] for r in rows_under(store, output_prefix("unjoinable"))}
    too_old = {r["click_id"] for r in rows_under(store, output_prefix("too_old"))}
    pending = pending_retries(settings)
    clicks = set(manifest.expected_joins) | set(manifest.never_joinable)
    accounted = joined | unjoinable | too_old | pending
    return {
        "clicks": len(clicks),
        "joined": len(clicks & joined),
        "unjoinable": len(clicks & unjoinable - joined),
        "too_old": len(clicks & too_old - joined - unjoinable),
        "pending": len(clicks & pending - joined - unjoinable - too_old),
        "unaccounted": len(clicks - accounted),
        "joined_and_unjoinable": len(joined & unjoinable),
        "unjoinable_not_never_joinable": len(unjoinable - set(manifest.never_joinable)),
        "never_joinable_not_unjoinable": len(
            set(manifest.never_joinable) - unjoinable - too_old - pending
        ),
    }


def _inject(
    settings: PhotonSettings,
    stack: LocalStack,
    services: ServiceManager,
    config: ChaosConfig,
    report: ChaosReport,
    sampler: Sampler,
    clock: StreamClock,
) -> None:
    """Strike each fault when the stream reaches its share of the duration.

    A fault waits for the pipelines the last one stopped, and the stream is held
    meanwhile (``clock``): its share is of the stream's progress, so that each
    fault, however slowly Spark restarts, has the rest of the stream behind it.
    """
    down, other = config.outage_dc, next(dc for dc in settings.dcs if dc != config.outage_dc)
    every = list(settings.dcs)
    since = sampler.since_start
    strikes: dict[str, Callable[[], FaultRecord]] = {
        "dc_outage": lambda: dc_outage(services, config, since),
        "zookeeper_leader": lambda: kill_zk_leader(stack, config, sampler),
        "redis_restart": lambda: restart(stack, "redis", config.restart_after_s, since, every),
        "s3_unavailable": lambda: freeze_s3(stack, config.s3_freeze_s, since, every),
        "reshard": lambda: append_epoch(settings, since, every),
        "log_file_faults": lambda: protocol_faults.log_file_faults(settings, other, since),
        "poison_values": lambda: field_faults.poison_values(settings, since),
        "future_events": lambda: field_faults.future_events(settings, since),
        "torn_lines": lambda: field_faults.torn_lines(settings, since),
        "log_rotation": lambda: rotation_faults.log_rotation(
            settings, services, clock, other, down, since, FAULTY_RUN_TIMEOUT_S
        ),
        "stale_epoch_partition": lambda: protocol_faults.stale_epoch_partition(
            settings, services, other, since
        ),
        "zombie_during_recovery": lambda: protocol_faults.zombie_during_recovery(
            settings, services, clock, down, other, since, FAULTY_RUN_TIMEOUT_S
        ),
    }
    for n, dc in enumerate((down, other, down, other), start=1):
        strikes[f"kill_joiner_{n}"] = killer(services, dc, since)
    struck: list[tuple[float, list[FaultRecord], threading.Thread]] = []
    # The outage DC's joiner runs armed to crash after its first commit (from the
    # stream's start, while it has clicks to win); the scheduled faults wait for it.
    time.sleep(max(0.0, -since()))
    crash: list[FaultRecord] = []
    crash_timeout_s = config.duration_s + 120.0
    crash_thread = threading.Thread(
        target=lambda: crash.append(
            crash_after_commit(settings, services, down, since, crash_timeout_s)
        ),
        name="fault crash_after_commit",
        daemon=True,
    )
    struck.append((since(), crash, crash_thread))
    crash_thread.start()
    # Then the other DC's joiner, started armed once that crash came, crashes at every step.
    steps: list[FaultRecord] = []

    def replay_at_every_step() -> None:
        crash_thread.join()
        steps.append(
            protocol_faults.replay_at_every_step(
                services, clock, other, down, since, FAULTY_RUN_TIMEOUT_S
            )
        )

    steps_thread = threading.Thread(
        target=replay_at_every_step, name="fault replay_at_every_step", daemon=True
    )
    struck.append((since(), steps, steps_thread))
    steps_thread.start()
    for name, share in scheduled(config):
        _wait_stream_s(lambda: since() - clock.held_s, share * config.duration_s)
        wait_crashed(services)  # on a stream that flows: the crash needs new clicks
        clock.hold()
        _wait_streaming(services, settings.dcs)
        clock.resume()
        late_s = since() - clock.held_s - share * config.duration_s
        log.warning("chaos.fault", fault=name, share=share, late_s=round(late_s, 1))
        holder: list[FaultRecord] = []

        def run_fault(
            strike: Callable[[], FaultRecord] = strikes[name],
            holder: list[FaultRecord] = holder,
            name: str = name,
        ) -> None:
            try:
                holder.append(strike())
            except Exception as exc:  # the report says which fault failed, and why
                log.exception("chaos.fault_failed", fault=name)
                error = f"{type(exc).__name__}: {exc}"
                holder.append(FaultRecord(name, "raised", struck=False, detail={"error": error}))

        # Faults that last (an outage, a restart) run beside the ones that follow.
        thread = threading.Thread(target=run_fault, name=f"fault {name}", daemon=True)
        at_s = since()
        thread.start()
        struck.append((at_s, holder, thread))
    for at_s, holder, thread in struck:
        thread.join()
        record = holder[0] if holder else FaultRecord("failed", "raised", struck=False)
        record.at_s = round(at_s, 1)
        report.faults.append(record)


def _wait_stream_s(stream_s: Callable[[], float], at_s: float) -> None:
    """Until the stream has flowed ``at_s`` seconds (``stream_s``: since its start, less
    every hold): a fault's share is of the stream's progress, not of the wall clock."""
    while (left := at_s - stream_s()) > 0:
        time.sleep(min(left, 0.5))


def _wait_streaming(services: ServiceManager, dcs: list[str], timeout_s: float = 300.0) -> bool:
    """Until every app not held back (:meth:`ServiceManager.held`) runs its streaming query
    again; False if that took longer than ``timeout_s``.

    A fault strikes a pipeline that runs, not one still starting Spark after the
    last fault: on a slow machine the faults come later, and mean the same.
    """
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if all(
            services.held(dc, app) or services.streaming(dc, app)
            for dc in dcs
            for app in (QUERY_READER, JOINER)
        ):
            return True
        time.sleep(0.5)
    log.warning("chaos.not_streaming", timeout_s=timeout_s)
    return False


def _wait_idle(
    sampler: Sampler,
    idle_s: float,
    timeout_s: float = 1800.0,
    caught_up: Callable[[], bool] = lambda: True,
) -> None:
    """Until the output stopped growing ``idle_s`` ago and every joiner has caught up
    with its click logs: a joiner a fault restarted late (a slow machine) reads its
    backlog before the run ends, however long it took to start."""
    deadline = time.monotonic() + timeout_s
    last, quiet_since = -1, time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(2.0)
        total = sum(sampler.by_dc.values())
        if total != last:
            last, quiet_since = total, time.monotonic()
        elif time.monotonic() - quiet_since >= idle_s and caught_up():
            return


def _caught_up(settings: PhotonSettings) -> bool:
    return all(joiner_backlog(settings, dc).bytes == 0 for dc in settings.dcs)


def _recovery_times(
    report: ChaosReport,
    config: ChaosConfig,
    services: ServiceManager,
    joins: analysis.JoinTimes,
    started_wall_s: float,
) -> None:
    """Each fault's recovery, by when its DCs worked again; the outage's catch-up."""
    batches = {
        dc: analysis.batch_seconds(
            analysis.json_lines(services.log_path(dc, JOINER)), dc, started_wall_s
        )
        for dc in {dc for record in report.faults for dc in record.affects}
    }
    for record in report.faults:
        if record.ended_s is None:
            continue
        record.ended_s = round(record.ended_s, 1)
        # A DC that was not writing output when the fault struck (down, or starting
        # again) is not one it stopped.
        writing = analysis.writing_at(joins, record.at_s)
        record.affects = [dc for dc in record.affects if dc in writing]
        if record.affects:
            record.recovered_s = analysis.output_again_s(
                joins, record.affects, record.ended_s, batches
            )
        if record.kind == "zookeeper_leader" and "down_at_s" in record.detail:
            record.detail["joined_while_down"] = analysis.joined_between(
                joins, record.detail["down_at_s"], record.detail["restarted_at_s"]
            )
        if record.kind == "dc_outage":
            report.catch_up = analysis.catch_up(
                report.timeline,
                config.outage_dc,
                record.ended_s,
                config.caught_up_lag_s,
                analysis.json_lines(services.log_path(config.outage_dc, JOINER)),
                started_wall_s,
            )


def _held_by_crashed_attempt(
    report: ChaosReport, tokens: Mapping[str, str], missing: set[str]
) -> int:
    """How many of the missing clicks hold a token (``tokens``: id -> token, the
    registry's) of the attempt crashed after its commit."""
    crashed = {
        str(r.detail["lost_tokens"])
        for r in report.faults
        if r.kind in ("crash_after_commit", "zombie_during_recovery")
        and r.detail.get("lost_tokens")
    }
    if not crashed or not missing:
        return 0
    return sum(1 for c in missing if any(tokens.get(c, "").startswith(p) for p in crashed))


def _write_report(report: ChaosReport, config: ChaosConfig, dcs: list[str]) -> None:
    assert config.report_dir is not None
    outage = next((f for f in report.faults if f.kind == "dc_outage"), None)
    joins = {dc: Counter(seconds) for dc, seconds in report.joined_per_second.items()}
    paths = charts.draw(
        report.timeline,
        joins,
        dcs,
        [(f.kind, f.at_s) for f in report.faults],
        (config.outage_dc, outage.at_s, outage.ended_s or outage.at_s) if outage else None,
        report.catch_up,
        config.report_dir,
    )
    report.charts = [str(p) for p in paths]
    data = report.to_dict(with_timeline=True)
    (config.report_dir / "report.json").write_text(json.dumps(data, indent=2, default=str) + "\n")
