"""The chaos run (``photon chaos``): a live two-DC stream joined while faults strike.

On the running local stack, with a registry root, bucket, cache keys, logs
and pipeline state of its own:

1. ad servers write a live stream for every DC (a process of its own) while
   each DC's query reader and joiner run under a :class:`Supervisor`, which
   restarts whatever dies;
2. faults strike on a schedule of the stream's progress (:data:`SCHEDULE`):
   kill -9 of a joiner at every 20% (alternating DCs; the first ``joiner_kills``);
   the outage DC's whole pipeline down for ``outage_s``, then back (it catches
   up); kill -9 of the
   ZooKeeper leader (restarted after ``restart_after_s``, as a service
   manager would); Redis killed and restarted; the S3 endpoint frozen
   (SIGSTOP) and resumed; a sharding epoch appended. Before those, from the
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
dropped at the end unless ``keep`` is set.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import re
import signal
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import structlog
from tenacity import retry, retry_if_result, stop_after_delay, wait_fixed

from photon.faults import CRASH_EXIT_CODE, STEPS
from photon.join.backlog import joiner_backlog
from photon.join.output import decode, output_prefix, rows_under
from photon.join.runtime import JOINER, QUERY_READER, current_attempt
from photon.ops.params import Window
from photon.ops.recover import recover
from photon.ops.verify import pending_retries, verify
from photon.registry_access import connect_registry
from photon.settings import CONFIG_ENV_VAR, PhotonSettings, env_names_in_file, load_settings
from photon.storage import ObjectStore, s3_client
from photon.tooling.chaos import analysis, charts, protocol_faults
from photon.tooling.chaos.analysis import CatchUp, Sample
from photon.tooling.chaos.record import FaultRecord
from photon.tooling.chaos.supervisor import Supervisor
from photon.tooling.gen.model import GenConfig, Manifest
from photon.tooling.gen.simulator import load_manifest
from photon.tooling.runs import StreamClock, clean_up, environment, namespace, write_live
from photon.tooling.stack import process
from photon.tooling.stack.manager import LocalStack
from registry import IdRegistry

log = structlog.get_logger(__name__)

_US = 1_000_000
_CHAOS_ENV = {
    "PHOTON_RETRY__INITIAL_BACKOFF_S": "0.5",
    "PHOTON_RETRY__MAX_BACKOFF_S": "4",
    "PHOTON_RETRY__MAX_ATTEMPTS": "6",
    "PHOTON_RETRY__MAX_AGE_S": "120",
    "PHOTON_PIPELINE__METRICS_BASE_PORT": "0",
    # Query files that stopped growing let the reader's progress go after 10 s, not 30.
    "PHOTON_PIPELINE__QUERY_FILE_IDLE_S": "10",
    "PHOTON_SHARDS__MAX_CLOCK_SKEW_S": "5",
    # The joiners' writes go to a loopback S3: in flight for well under this.
    "PHOTON_PIPELINE__FENCE_SETTLE_S": "5",
}

#: When each fault strikes, as a share of the stream's duration. The joiner
#: kills alternate DCs, the outage DC first; its outage starts once it has
#: restarted from that kill and must end by :data:`_OUTAGE_ENDS_BY`, so that it
#: has caught up before its second kill (at 60%). The zombie strikes with much of
#: the stream still to come: its joiner must win a click after it starts again.
SCHEDULE = {
    "kill_joiner_1": 0.2,
    "dc_outage": 0.27,
    "zookeeper_leader": 0.3,
    "log_file_faults": 0.35,
    "kill_joiner_2": 0.4,
    "redis_restart": 0.45,
    "stale_epoch_partition": 0.55,
    "zombie_during_recovery": 0.58,
    "kill_joiner_3": 0.6,
    "s3_unavailable": 0.65,
    "reshard": 0.7,
    "kill_joiner_4": 0.8,
}
_OUTAGE_ENDS_BY = 0.5
JOINER_KILLS = sum(name.startswith("kill_joiner_") for name in SCHEDULE)

#: The crash after commit is not on the schedule: the outage DC's joiner runs with
#: this setting from the stream's start and crashes on its first batch that wins an
#: id; the scheduled faults wait until it has started again.
_CRASH_AFTER_COMMIT = {"PHOTON_FAULTS__CRASH_AFTER_COMMIT_P": "1"}

#: Every kind of fault a run must strike.
FAULT_KINDS = (
    "kill_joiner",
    "dc_outage",
    "zookeeper_leader",
    "redis_restart",
    "s3_unavailable",
    "reshard",
    "crash_after_commit",
    "replay_at_every_step",
    "stale_epoch_partition",
    "zombie_during_recovery",
    "gc_during_catch_up",
    "log_file_faults",
)
#: The faults that leave ids registered by a dead attempt and in no output, for recovery.
_LOSING_FAULTS = ("crash_after_commit", "zombie_during_recovery")
#: How long one faulty run (a crash to come, a pause) may take before it counts as missed.
_FAULTY_RUN_TIMEOUT_S = 240.0

#: The bounds docs/chaos.md sets for the returning DC.
MIN_CATCH_UP_SPEED_X = 5.0
MAX_WASTED_SHARE = 0.10


@dataclass(frozen=True)
class ChaosConfig:
    queries: int = 800_000
    query_rate: float = 1_000.0  # queries/s; clicks are ~0.3 of them
    outage_dc: str = "b"
    outage_s: float = 180.0
    restart_after_s: float = 20.0  # ZooKeeper node and Redis down this long
    s3_freeze_s: float = 10.0
    sample_s: float = 2.0
    idle_s: float = 30.0
    #: The returning DC has caught up once its lag (photon.join.backlog) is this short.
    caught_up_lag_s: float = 15.0
    #: How many of the schedule's joiner kills strike (the first ones: 20%, 40%, ...):
    #: each is a joiner restart to wait for; a short run takes fewer.
    joiner_kills: int = JOINER_KILLS
    seed: int = 2026
    keep: bool = False
    report_dir: Path | None = None  # charts and report.json; None: no files

    def __post_init__(self) -> None:
        for name in ("query_rate", "outage_s", "restart_after_s", "s3_freeze_s", "sample_s",
                     "idle_s", "caught_up_lag_s"):  # fmt: skip
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, not {getattr(self, name)}")
        if not 1 <= self.joiner_kills <= JOINER_KILLS:
            raise ValueError(f"joiner_kills must be 1 to {JOINER_KILLS}, not {self.joiner_kills}")
        if self.queries < 1_000:
            raise ValueError(f"queries must be at least 1000, not {self.queries}")
        longest = (_OUTAGE_ENDS_BY - SCHEDULE["dc_outage"]) * self.duration_s
        if self.outage_s > longest:
            raise ValueError(
                f"an outage of {self.outage_s:g} s does not end by {_OUTAGE_ENDS_BY:.0%} of a "
                f"{self.duration_s:.0f} s stream: at most {longest:.0f} s (or more queries)"
            )

    @property
    def duration_s(self) -> float:
        return self.queries / self.query_rate


@dataclass
class ChaosReport:
    clicks_in: int = 0
    expected_joins: int = 0
    joined: int = 0
    unjoinable: int = 0
    duplicates_seen: int = 0  # at any sample
    samples: int = 0
    missing_before_recovery: int = 0
    lost_to_crash: int = 0  # of those, held by the crashed attempt's token
    missing_after_recovery: int = 0
    recovered: int = 0
    catch_up: CatchUp | None = None
    verification_before: dict[str, Any] = field(default_factory=dict)
    verification_after: dict[str, Any] = field(default_factory=dict)
    faults: list[FaultRecord] = field(default_factory=list)
    app_starts: dict[str, int] = field(default_factory=dict)
    charts: list[str] = field(default_factory=list)
    timeline: list[Sample] = field(default_factory=list)
    #: Where every click ended (:func:`accounting`).
    accounting: dict[str, Any] = field(default_factory=dict)
    joined_per_second: dict[str, dict[int, int]] = field(default_factory=dict)
    stream_held_s: float = 0.0  # while faults waited for pipelines to stream again
    seconds: float = 0.0

    def checks(self) -> dict[str, bool]:
        """The acceptance checks of docs/chaos.md, as this run shows them."""
        struck = {f.kind for f in self.faults if f.struck}
        zk = next((f for f in self.faults if f.kind == "zookeeper_leader"), None)
        catch = self.catch_up
        return {
            "no_duplicate_at_any_sample": self.duplicates_seen == 0,
            "nothing_missing_after_recovery": self.missing_after_recovery == 0,
            "every_fault_struck": struck >= set(FAULT_KINDS),
            "crash_loss_confined_and_restored": 0
            < self.lost_to_crash
            == self.missing_before_recovery
            == self.recovered,
            "catch_up_at_least_5x": bool(
                catch and catch.speed_x is not None and catch.speed_x >= MIN_CATCH_UP_SPEED_X
            ),
            "wasted_joins_at_most_10pct": bool(
                catch and catch.wasted_share is not None and catch.wasted_share <= MAX_WASTED_SHARE
            ),
            "joining_went_on_with_a_zookeeper_node_down": bool(
                zk and zk.detail.get("joined_while_down", 0) > 0
            ),
            "zookeeper_node_rejoined": bool(
                zk and zk.detail.get("mode_after") in ("leader", "follower")
            ),
            "every_click_accounted_for_once": bool(self.accounting)
            and self.accounting["unaccounted"] == 0
            and self.accounting["joined_and_unjoinable"] == 0,
            "unjoinable_is_the_never_joinable_set": bool(self.accounting)
            and self.accounting["unjoinable_not_never_joinable"] == 0
            and self.accounting["never_joinable_not_unjoinable"] == 0,
        }

    def to_dict(self, *, with_timeline: bool = False) -> dict[str, Any]:
        data = asdict(self)
        if not with_timeline:
            del data["timeline"], data["joined_per_second"]
        data["faults_injected"] = dict(Counter(f.kind for f in self.faults))
        data["checks"] = self.checks()
        data["passed"] = all(data["checks"].values())
        return data


class _Sampler:
    """Every period: lists ``joined/`` (each click id counted across DCs), reads each backlog."""

    def __init__(
        self,
        settings: PhotonSettings,
        store: ObjectStore,
        period_s: float,
        started: float,
        started_wall_us: int,
    ) -> None:
        self.settings = settings
        self.store = store
        self.period_s = period_s
        self.started = started
        self.started_wall_us = started_wall_us
        self.counts: Counter[str] = Counter()
        self.joins: analysis.JoinTimes = {dc: Counter() for dc in settings.dcs}
        self.by_dc: Counter[str] = Counter()
        self.duplicates_seen = 0
        self.samples: list[Sample] = []
        self._seen: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="chaos-sampler", daemon=True)

    def since_start(self) -> float:
        return time.monotonic() - self.started

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
        self.sample()

    def _run(self) -> None:
        while not self._stop.wait(self.period_s):
            try:
                self.sample()
            except Exception as exc:  # the S3 endpoint may be frozen: sample next time
                log.info("chaos.sample_skipped", error=str(exc))

    def sample(self) -> None:
        t_s = round(self.since_start(), 1)
        backlogs = {dc: joiner_backlog(self.settings, dc) for dc in self.settings.dcs}
        for key in self.store.keys(output_prefix("joined")):
            if key in self._seen:
                continue
            data = self.store.get(key)
            if data is None:
                continue
            self._seen.add(key)
            dc = key.split("/")[1].removeprefix("dc=")
            rows = decode(data)
            self.counts.update(r["click_id"] for r in rows)
            self.by_dc[dc] += len(rows)
            self.joins.setdefault(dc, Counter()).update(
                (r["joined_at_us"] - self.started_wall_us) // _US for r in rows
            )
        self.duplicates_seen = max(
            self.duplicates_seen, sum(n - 1 for n in self.counts.values() if n > 1)
        )
        self.samples.append(
            Sample(
                t_s=t_s,
                backlog_bytes={dc: b.bytes for dc, b in backlogs.items()},
                lag_s={dc: b.lag_s for dc, b in backlogs.items()},
            )
        )


def chaos_environment(
    stamp: str, workdir: Path, config_file: Path | None, environ: Mapping[str, str]
) -> dict[str, str]:
    """The variables a chaos run sets for itself and every process it starts: roots,
    bucket and cache prefix of its own; the config file the user gave (``--config``),
    so the apps read it too; and the chaos run's defaults (:data:`_CHAOS_ENV`) for
    what neither the environment nor that file sets."""
    own = namespace(stamp, workdir)
    in_file: set[str] = set()
    if config_file is not None:
        own[CONFIG_ENV_VAR] = str(config_file.resolve())
        in_file = env_names_in_file(config_file)
    defaults = {k: v for k, v in _CHAOS_ENV.items() if k not in environ and k not in in_file}
    return defaults | own


def run_chaos(
    settings: PhotonSettings,
    config: ChaosConfig,
    *,
    workdir: Path,
    config_file: Path | None = None,
    step: Callable[[str], None] = lambda _: None,
) -> ChaosReport:
    stamp = f"chaos-{uuid.uuid4().hex[:8]}"
    with environment(chaos_environment(stamp, workdir, config_file, os.environ)):
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
            if not config.keep:
                clean_up(run_settings, store)
    if config.report_dir is not None:
        _write_report(report, config, run_settings.dcs)
    return report


def _run(
    settings: PhotonSettings,
    store: ObjectStore,
    config: ChaosConfig,
    step: Callable[[str], None],
    log_dir: Path,
) -> ChaosReport:
    report = ChaosReport()
    stack = LocalStack(settings)
    supervisor = Supervisor(settings, log_dir=log_dir)
    started = time.monotonic()
    step(f"pipelines of {', '.join(settings.dcs)} starting under the supervisor")
    # The other DCs' joiners start once the armed one crashed: the stream's first clicks
    # are its to win, however far behind its query reader runs on a loaded machine.
    # The first other DC's joiner then starts armed to crash at a batch's first step
    # boundary, and at each of the next ones in turn (protocol_faults.replay_at_every_step).
    other = next(dc for dc in settings.dcs if dc != config.outage_dc)
    supervisor.start(
        faulty={
            (config.outage_dc, JOINER): _CRASH_AFTER_COMMIT,
            (other, JOINER): protocol_faults.step_env(STEPS[0]),
        },
        after_crash=[(dc, JOINER) for dc in settings.dcs if dc != config.outage_dc],
    )
    try:
        # The stream, and its faults, start then (the joiner armed to crash streams too).
        if not _wait_streaming(supervisor, settings.dcs):
            raise RuntimeError("the pipelines did not start streaming within 300 s")
        lead_s = 5.0
        start_us = time.time_ns() // 1000 + int(lead_s * _US)
        cfg = GenConfig(
            seed=config.seed,
            dcs=settings.dcs,
            start_us=start_us,
            queries=config.queries,
            query_rate=config.query_rate,
            # The generator flushes clicks due after its live span at once, ahead of
            # their time: no hour-late tail here. The few lognormal stragglers left are
            # clock-skewed ids, which verification's latency expectation reports.
            click_delay_tail_fraction=0.0,
            outage_duration_s=0.0,  # the outage here is the pipeline's, not the logs'
            rollover_bytes=16 << 20,
        )
        clock = StreamClock()  # held while faults wait for the pipelines (_inject)
        writer = multiprocessing.get_context("spawn").Process(
            target=write_live,
            args=(cfg.model_dump_json(), str(settings.logs_root), clock),
            daemon=True,
        )
        writer.start()
        stream_started = time.monotonic() + lead_s
        stream_started_wall = time.time() + lead_s
        sampler = _Sampler(
            settings, store, config.sample_s, stream_started, int(stream_started_wall * _US)
        )
        sampler.start()
        step(f"stream of {config.queries} queries over {config.duration_s:.0f} s; faults strike")
        _inject(settings, stack, supervisor, config, report, sampler, clock)
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
        report.app_starts = dict(supervisor.events.starts)
        _recovery_times(report, config, supervisor, sampler.joins, stream_started_wall)

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
            report.lost_to_crash = _held_by_crashed_attempt(report, registry, window, missing)
            before = verify(
                settings, store, registry, window, run="chaos-before",
                latency_bound_s=24 * 3600, clear_tokens=True,
            )  # fmt: skip
            report.verification_before = before.to_dict()
            recovered = recover(settings, store, registry, window, dry_run=False)
            report.recovered = recovered.reinjected
            drain = _Sampler(settings, store, config.sample_s, time.monotonic(), 0)
            drain.start()
            settle_s = min(config.idle_s, 10.0)
            if recovered.reinjected:
                # The running pipelines read the recovery logs as input, as in production.
                step("the pipelines join the recovered clicks")
                _wait_idle(drain, settle_s, caught_up=lambda: _caught_up(settings))
            _after_recovery(settings, store, supervisor, config, report, sampler, start_us, step)
            _wait_idle(drain, settle_s, caught_up=lambda: _caught_up(settings))
            drain.stop()
            report.duplicates_seen = max(report.duplicates_seen, drain.duplicates_seen)
            supervisor.stop()
            after = verify(
                settings, store, registry, window, run="chaos-after",
                latency_bound_s=24 * 3600, clear_tokens=True,
            )  # fmt: skip
            report.verification_after = after.to_dict()
        final = after.completeness
        report.unjoinable = final.unjoinable
        final_ids = {r["click_id"] for r in rows_under(store, output_prefix("joined"))}
        # All of the output, not only the verification window's (an id whose server
        # clock ran ahead may fall past its end).
        report.joined = len(final_ids)
        report.missing_after_recovery = len(set(manifest.expected_joins) - final_ids)
        report.duplicates_seen = max(report.duplicates_seen, final.duplicates)
        report.accounting = accounting(settings, store, manifest, final_ids)
    finally:
        supervisor.stop()
        _thaw_s3(stack)
    report.seconds = round(time.monotonic() - started, 1)
    return report


def _after_recovery(
    settings: PhotonSettings,
    store: ObjectStore,
    supervisor: Supervisor,
    config: ChaosConfig,
    report: ChaosReport,
    sampler: _Sampler,
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
        settings, supervisor, other, middle_us, sampler.since_start
    )
    record.at_s = round(at_s, 1)
    report.faults.append(record)
    files = next((f for f in report.faults if f.kind == "log_file_faults"), None)
    if files is not None:
        protocol_faults.log_file_reports(files, store)


def accounting(
    settings: PhotonSettings, store: ObjectStore, manifest: Manifest, joined: set[str]
) -> dict[str, Any]:
    """Where every distinct click of the run ended: joined, unjoinable, too old (below a
    GC boundary) or still pending in a retry store. A click joined by one DC may be too
    old for another that reached it after GC: it counts as joined."""
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
    supervisor: Supervisor,
    config: ChaosConfig,
    report: ChaosReport,
    sampler: _Sampler,
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
        "dc_outage": lambda: _dc_outage(supervisor, config, since),
        "zookeeper_leader": lambda: _kill_zk_leader(stack, config, sampler),
        "redis_restart": lambda: _restart(stack, "redis", config.restart_after_s, since, every),
        "s3_unavailable": lambda: _freeze_s3(stack, config.s3_freeze_s, since, every),
        "reshard": lambda: _append_epoch(settings, since, every),
        "log_file_faults": lambda: protocol_faults.log_file_faults(settings, other, since),
        "stale_epoch_partition": lambda: protocol_faults.stale_epoch_partition(
            settings, supervisor, other, since
        ),
        "zombie_during_recovery": lambda: protocol_faults.zombie_during_recovery(
            settings, supervisor, clock, down, since, _FAULTY_RUN_TIMEOUT_S
        ),
    }
    for n, dc in enumerate((down, other, down, other), start=1):
        strikes[f"kill_joiner_{n}"] = _killer(supervisor, dc, since)
    struck: list[tuple[float, list[FaultRecord], threading.Thread]] = []
    # The outage DC's joiner runs armed to crash after its first commit (from the
    # stream's start, while it has clicks to win); the scheduled faults wait for it.
    time.sleep(max(0.0, -since()))
    crash: list[FaultRecord] = []
    crash_timeout_s = config.duration_s + 120.0
    crash_thread = threading.Thread(
        target=lambda: crash.append(
            _crash_after_commit(settings, supervisor, down, since, crash_timeout_s)
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
                supervisor, clock, other, since, _FAULTY_RUN_TIMEOUT_S
            )
        )

    steps_thread = threading.Thread(
        target=replay_at_every_step, name="fault replay_at_every_step", daemon=True
    )
    struck.append((since(), steps, steps_thread))
    steps_thread.start()
    late_s = 0.0  # how long faults waited for pipelines to stream again: the rest shift
    for name, share in scheduled(config):
        time.sleep(max(0.0, share * config.duration_s + late_s - since()))
        waited_from = since()
        _wait_crashed(supervisor)  # on a stream that flows: the crash needs new clicks
        clock.hold()
        _wait_streaming(supervisor, settings.dcs)
        clock.resume()
        late_s += since() - waited_from
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


def scheduled(config: ChaosConfig) -> list[tuple[str, float]]:
    """The faults that strike and their shares of the stream, in order: the schedule's,
    with the first ``config.joiner_kills`` of its joiner kills."""
    kills = [name for name in SCHEDULE if name.startswith("kill_joiner_")]
    left_out = set(kills[config.joiner_kills :])
    faults = [(name, share) for name, share in SCHEDULE.items() if name not in left_out]
    return sorted(faults, key=lambda fault: fault[1])


def _wait_crashed(supervisor: Supervisor, timeout_s: float = 300.0) -> None:
    """Until no joiner armed to crash is still on its faulty run."""
    deadline = time.monotonic() + timeout_s
    while supervisor.crashing() and time.monotonic() < deadline:
        time.sleep(0.5)


def _wait_streaming(supervisor: Supervisor, dcs: list[str], timeout_s: float = 300.0) -> bool:
    """Until every app not held back (:meth:`Supervisor.held`) runs its streaming query
    again; False if that took longer than ``timeout_s``.

    A fault strikes a pipeline that runs, not one still starting Spark after the
    last fault: on a slow machine the faults come later, and mean the same.
    """
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if all(
            supervisor.held(dc, app) or supervisor.streaming(dc, app)
            for dc in dcs
            for app in (QUERY_READER, JOINER)
        ):
            return True
        time.sleep(0.5)
    log.warning("chaos.not_streaming", timeout_s=timeout_s)
    return False


def _killer(
    supervisor: Supervisor, dc: str, since: Callable[[], float]
) -> Callable[[], FaultRecord]:
    def kill() -> FaultRecord:
        pid = supervisor.kill(dc, JOINER)
        return FaultRecord(
            "kill_joiner",
            f"joiner[{dc}]",
            ended_s=since(),
            affects=[dc],
            struck=pid is not None,
            detail={"pid": pid},
        )

    return kill


def _crash_after_commit(
    settings: PhotonSettings,
    supervisor: Supervisor,
    dc: str,
    since: Callable[[], float],
    timeout_s: float,
) -> FaultRecord:
    """The joiner dies between a registry commit and its output write, and its disk is lost.

    It runs armed (:data:`_CRASH_AFTER_COMMIT`) from the supervisor's start.
    Its batch is then never replayed (the new attempt starts from a fresh
    checkpoint): the ids it registered are lost until recovery restores them.
    """
    attempt = current_attempt(settings, dc)  # the armed run's: it streams already
    code = supervisor.await_crash(dc, JOINER, timeout_s)
    return FaultRecord(
        "crash_after_commit",
        f"joiner[{dc}]",
        ended_s=since(),
        affects=[dc],
        # Exit 137 (the process crashed itself), or killed by SIGKILL: the crash struck
        # in a Spark task, whose Python worker killed its driver (spark_apps.join_tasks).
        struck=code in (CRASH_EXIT_CODE, -signal.SIGKILL),
        # Its ids hold tokens "<dc>/<attempt>/<batch>" of this attempt, dead from now.
        detail={"exit_code": code, "lost_tokens": f"{dc}/{attempt}/" if attempt else None},
    )


def _dc_outage(
    supervisor: Supervisor, config: ChaosConfig, since: Callable[[], float]
) -> FaultRecord:
    supervisor.take_down(config.outage_dc)
    time.sleep(config.outage_s)
    supervisor.bring_up(config.outage_dc)
    return FaultRecord(
        "dc_outage", f"{config.outage_dc} (both apps)", ended_s=since(), affects=[config.outage_dc]
    )


def _kill_zk_leader(stack: LocalStack, config: ChaosConfig, sampler: _Sampler) -> FaultRecord:
    """Kill the leader; while it is down joining must go on; restarted, it must rejoin."""
    leader = _zookeeper_leader(stack)
    if leader is None:
        return FaultRecord("zookeeper_leader", "none found", struck=False)
    down_at = sampler.since_start()
    every = list(sampler.settings.dcs)

    def joined_since_down() -> bool:
        try:
            joins = {dc: Counter(seconds) for dc, seconds in list(sampler.joins.items())}
        except RuntimeError:  # the sampler thread added to it meanwhile: next time
            return False
        return analysis.joined_between(joins, down_at, sampler.since_start()) > 0

    # Down for restart_after_s, and on until some click was joined meanwhile (on a slow
    # machine a batch can take longer than that): what the check is about.
    record = _restart(stack, leader, config.restart_after_s, sampler.since_start, every,
                      kind="zookeeper_leader", until=joined_since_down)  # fmt: skip
    # The stack is healthy again (one leader, every other node a follower): the node
    # rejoined the ensemble by itself, with no step but its process started again.
    mode_after = {s.name: s.detail for s in stack.status().services}.get(leader)
    restarted_at = record.detail["restarted_at_s"]
    record.detail |= {
        "down_at_s": round(down_at, 1),
        "mode_after": mode_after,
        "rejoined_after_s": round(record.ended_s - restarted_at, 1) if record.ended_s else None,
    }  # joined_while_down: once the run's output is all read (_recovery_times)
    return record


@retry(
    retry=retry_if_result(lambda leader: leader is None),
    stop=stop_after_delay(60),
    wait=wait_fixed(1),
    retry_error_callback=lambda _: None,
)
def _zookeeper_leader(stack: LocalStack) -> str | None:
    """The leader's service name, asked until one answers: on a loaded machine a node's
    ``srvr`` can time out, or an election still runs after the last fault."""
    nodes = [s for s in stack.status().services if re.fullmatch(r"zk\d+", s.name)]
    modes = {s.name: s.detail for s in nodes}  # the ensemble's nodes, not its exporter
    return next((name for name, mode in modes.items() if mode == "leader"), None)


@retry(stop=stop_after_delay(120), wait=wait_fixed(1), reraise=True)
def _bring_up(stack: LocalStack) -> None:
    """Start what is not running and wait until the stack is healthy, asked again until
    it is: a fault beside this one (the S3 server frozen) can fail a try."""
    stack.up()


def _restart(
    stack: LocalStack,
    service: str,
    restart_after_s: float,
    since: Callable[[], float],
    affects: list[str],
    *,
    kind: str | None = None,
    until: Callable[[], bool] = lambda: True,
    longest_s: float = 180.0,
) -> FaultRecord:
    """Kill ``service``; start it again after ``restart_after_s`` once ``until()`` holds
    (or ``longest_s`` passed); wait until the stack is healthy."""
    record = stack.records()[service]
    process.kill(record.identity)
    time.sleep(restart_after_s)
    deadline = time.monotonic() + longest_s - restart_after_s
    while not until() and time.monotonic() < deadline:
        time.sleep(0.5)
    restarted_at = since()
    _bring_up(stack)
    return FaultRecord(
        kind or f"{service}_restart",
        service,
        ended_s=since(),
        affects=affects,
        detail={"restarted_at_s": round(restarted_at, 1)},
    )


def _freeze_s3(
    stack: LocalStack, freeze_s: float, since: Callable[[], float], affects: list[str]
) -> FaultRecord:
    record = stack.records()["s3"]
    os.kill(record.pid, signal.SIGSTOP)
    try:
        time.sleep(freeze_s)
    finally:
        os.kill(record.pid, signal.SIGCONT)
    return FaultRecord("s3_unavailable", "s3 (frozen)", ended_s=since(), affects=affects)


def _thaw_s3(stack: LocalStack) -> None:
    record = stack.records().get("s3")
    if record is not None and process.is_running(record.identity):
        os.kill(record.pid, signal.SIGCONT)


def _append_epoch(
    settings: PhotonSettings, since: Callable[[], float], affects: list[str]
) -> FaultRecord:
    with connect_registry(settings) as registry:
        current = registry.sharding().epochs[-1].shards
        registry.append_epoch(current + 2, max_skew_s=settings.shards.max_clock_skew_s)
    return FaultRecord(
        "reshard", f"{current} -> {current + 2} shards", ended_s=since(), affects=affects
    )


def _wait_idle(
    sampler: _Sampler,
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
    supervisor: Supervisor,
    joins: analysis.JoinTimes,
    started_wall_s: float,
) -> None:
    """Each fault's recovery, by when its DCs worked again; the outage's catch-up."""
    batches = {
        dc: analysis.batch_seconds(
            analysis.json_lines(supervisor.log_path(dc, JOINER)), dc, started_wall_s
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
                analysis.json_lines(supervisor.log_path(config.outage_dc, JOINER)),
                started_wall_s,
            )


def _held_by_crashed_attempt(
    report: ChaosReport, registry: IdRegistry, window: Window, missing: set[str]
) -> int:
    """How many of the missing clicks hold a token of the attempt crashed after its commit."""
    crashed = {
        str(r.detail["lost_tokens"])
        for r in report.faults
        if r.kind in ("crash_after_commit", "zombie_during_recovery")
        and r.detail.get("lost_tokens")
    }
    if not crashed or not missing:
        return 0
    start_us, end_us = (int(t.timestamp() * _US) for t in (window.start, window.end))
    tokens = registry.registered(start_us, end_us)
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
