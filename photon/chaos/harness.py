"""The chaos run (``photon chaos``): a live two-DC stream joined while faults strike.

On the running local stack, with a registry root, bucket, cache keys, logs
and pipeline state of its own:

1. ad servers write a live stream for every DC (a process of its own) while
   each DC's query reader and joiner run under a :class:`Supervisor`, which
   restarts whatever dies;
2. faults strike on a schedule of the stream's progress: kill -9 of a joiner
   at every 20% (alternating DCs); one DC's whole pipeline down for
   ``outage_s``, then back; kill -9 of the ZooKeeper leader (restarted after
   ``restart_after_s``); Redis killed and restarted; the S3 endpoint frozen
   (SIGSTOP) and resumed; a sharding epoch appended; a joiner crashed between
   its registry commit and its output write (``faults.crash_after_commit_p``)
   with its local state lost, so that batch is never replayed;
3. a sampler lists the joined output every ``sample_s`` and checks the union
   of every DC's output for a ``click_id`` seen twice;
4. when the stream has ended and the output stops growing, the pipelines are
   stopped, verification (:mod:`photon.ops.verify`) and recovery
   (:mod:`photon.ops.recover`) run, the pipelines run again until idle (the
   re-injected clicks), and the output is compared with the generator's
   manifest.

The S3 endpoint is frozen rather than restarted: the native stack's S3
stand-in (moto) keeps objects in memory, so a restart would lose the output
itself, which no pipeline could be blamed for. MinIO (compose) keeps them.

How it fails: a stack service that does not come back raises; the run
always stops its apps and thaws the S3 endpoint; the registry root, bucket
and cache keys are dropped at the end unless ``keep`` is set.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import structlog

from photon.chaos.supervisor import Supervisor
from photon.gen.model import GenConfig
from photon.gen.simulator import load_manifest
from photon.join.output import decode, rows_under
from photon.join.runtime import JOINER
from photon.ops.params import Window
from photon.ops.recover import recover
from photon.ops.verify import verify
from photon.registry_access import connect_registry
from photon.runs import clean_up, environment, wait_until_streaming, write_live
from photon.settings import PhotonSettings, load_settings
from photon.stack import process
from photon.stack.manager import LocalStack
from photon.stack.s3 import s3_client
from photon.storage import ObjectStore

log = structlog.get_logger(__name__)

_US = 1_000_000
_CHAOS_ENV = {
    "PHOTON_RETRY__INITIAL_BACKOFF_S": "0.5",
    "PHOTON_RETRY__MAX_BACKOFF_S": "4",
    "PHOTON_RETRY__MAX_ATTEMPTS": "6",
    "PHOTON_RETRY__MAX_AGE_S": "120",
    "PHOTON_PIPELINE__METRICS_BASE_PORT": "0",
    "PHOTON_SHARDS__MAX_CLOCK_SKEW_S": "5",
}


@dataclass(frozen=True)
class ChaosConfig:
    queries: int = 350_000
    query_rate: float = 2_000.0  # queries/s; clicks are ~0.3 of them
    outage_dc: str = "b"
    outage_s: float = 120.0
    restart_after_s: float = 10.0
    s3_freeze_s: float = 10.0
    sample_s: float = 2.0
    idle_s: float = 30.0
    seed: int = 2026
    keep: bool = False

    @property
    def duration_s(self) -> float:
        return self.queries / self.query_rate


@dataclass
class FaultRecord:
    kind: str
    target: str
    at_s: float  # since the stream started
    ended_s: float | None = None
    recovered_s: float | None = None  # from its end to the target's next joined object


@dataclass
class ChaosReport:
    clicks_in: int = 0
    expected_joins: int = 0
    joined: int = 0
    unjoinable: int = 0
    duplicates_seen: int = 0  # at any sample
    samples: int = 0
    missing_before_recovery: int = 0
    missing_after_recovery: int = 0
    recovered: int = 0
    verification_before: dict[str, Any] = field(default_factory=dict)
    verification_after: dict[str, Any] = field(default_factory=dict)
    faults: list[FaultRecord] = field(default_factory=list)
    app_starts: dict[str, int] = field(default_factory=dict)
    joined_per_dc_over_time: list[dict[str, float]] = field(default_factory=list)
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["faults_injected"] = dict(Counter(f.kind for f in self.faults))
        return data


class _Sampler:
    """Lists ``joined/`` every period; counts each click id across every DC's output."""

    def __init__(self, store: ObjectStore, period_s: float, started: float) -> None:
        self.store = store
        self.period_s = period_s
        self.started = started
        self.counts: Counter[str] = Counter()
        self.by_dc: Counter[str] = Counter()
        self.last_object_at: dict[str, float] = {}  # dc -> when its newest object was seen
        self.duplicates_seen = 0
        self.samples = 0
        self.timeline: list[dict[str, float]] = []
        self._seen: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="chaos-sampler", daemon=True)

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
        now = time.monotonic()
        for key in self.store.keys("joined/"):
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
            self.last_object_at[dc] = now
        self.samples += 1
        self.duplicates_seen = max(
            self.duplicates_seen, sum(n - 1 for n in self.counts.values() if n > 1)
        )
        self.timeline.append({"t_s": round(now - self.started, 1), **self.by_dc})


def run_chaos(
    settings: PhotonSettings,
    config: ChaosConfig,
    *,
    workdir: Path,
    step: Callable[[str], None] = lambda _: None,
) -> ChaosReport:
    stamp = f"chaos-{uuid.uuid4().hex[:8]}"
    own = {
        "PHOTON_LOGS_ROOT": str(workdir / "logs"),
        "PHOTON_PIPELINE__STATE_ROOT": str(workdir / "state"),
        "PHOTON_ZOOKEEPER__ROOT": f"/photon-{stamp}",
        "PHOTON_S3__BUCKET": f"photon-{stamp}",
        "PHOTON_REDIS__KEY_PREFIX": f"photon-{stamp}:q",
    }
    defaults = {k: v for k, v in _CHAOS_ENV.items() if k not in os.environ}
    with environment(defaults | own):
        run_settings = load_settings()
        if len(run_settings.dcs) < 2:
            raise ValueError("a chaos run needs at least two DCs")
        if config.outage_dc not in run_settings.dcs:
            raise ValueError(f"outage DC {config.outage_dc!r} is not one of {run_settings.dcs}")
        s3 = s3_client(run_settings.s3_endpoint_url, run_settings.s3)
        s3.create_bucket(Bucket=run_settings.s3.bucket)
        store = ObjectStore.from_settings(run_settings)
        try:
            return _run(run_settings, store, config, step)
        finally:
            if not config.keep:
                clean_up(run_settings, store)


def _run(
    settings: PhotonSettings, store: ObjectStore, config: ChaosConfig, step: Callable[[str], None]
) -> ChaosReport:
    report = ChaosReport()
    stack = LocalStack(settings)
    supervisor = Supervisor(settings)
    started = time.monotonic()
    finished = threading.Event()
    step(f"pipelines of {', '.join(settings.dcs)} starting under the supervisor")
    supervisor.start()
    try:
        if not wait_until_streaming(settings, finished):
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
        writer = multiprocessing.get_context("spawn").Process(
            target=write_live, args=(cfg.model_dump_json(), str(settings.logs_root)), daemon=True
        )
        writer.start()
        stream_started = time.monotonic() + lead_s
        sampler = _Sampler(store, config.sample_s, stream_started)
        sampler.start()
        step(f"stream of {config.queries} queries over {config.duration_s:.0f} s; faults strike")
        _inject(settings, stack, supervisor, config, report, stream_started)
        writer.join()
        step("stream written; waiting for the output to settle")
        _wait_idle(sampler, config.idle_s)
        sampler.stop()
        supervisor.stop()
        report.duplicates_seen = sampler.duplicates_seen
        report.samples = sampler.samples
        report.joined_per_dc_over_time = sampler.timeline
        report.app_starts = dict(supervisor.events.starts)
        _recovery_times(report, sampler)

        manifest = load_manifest(settings.logs_root)
        report.clicks_in = manifest.clicks
        report.expected_joins = len(manifest.expected_joins)
        joined = set(sampler.counts)
        report.missing_before_recovery = len(set(manifest.expected_joins) - joined)
        window = Window(
            start=datetime.fromtimestamp(start_us / _US - 3600, tz=UTC), end=datetime.now(UTC)
        )
        step("verification, then recovery of lost clicks")
        with connect_registry(settings) as registry:
            before = verify(
                settings, store, registry, window, run="chaos-before",
                latency_bound_s=24 * 3600, clear_tokens=True,
            )  # fmt: skip
            report.verification_before = before.to_dict()
            recovered = recover(settings, store, registry, window, dry_run=False)
            report.recovered = recovered.reinjected
            if recovered.reinjected:
                _drain(settings)
            after = verify(
                settings, store, registry, window, run="chaos-after",
                latency_bound_s=24 * 3600, clear_tokens=True,
            )  # fmt: skip
            report.verification_after = after.to_dict()
        final = after.completeness
        report.joined = final.joined
        report.unjoinable = final.unjoinable
        final_ids = {r["click_id"] for r in rows_under(store, "joined/")}
        report.missing_after_recovery = len(set(manifest.expected_joins) - final_ids)
        report.duplicates_seen = max(report.duplicates_seen, final.duplicates)
    finally:
        finished.set()
        supervisor.stop()
        _thaw_s3(stack)
    report.seconds = round(time.monotonic() - started, 1)
    return report


def _inject(
    settings: PhotonSettings,
    stack: LocalStack,
    supervisor: Supervisor,
    config: ChaosConfig,
    report: ChaosReport,
    stream_started: float,
) -> None:
    """Strike each fault when the stream reaches its share of the duration."""
    other = next(dc for dc in settings.dcs if dc != config.outage_dc)
    kills = [(0.2, other), (0.4, config.outage_dc), (0.6, other), (0.8, config.outage_dc)]
    schedule: list[tuple[float, str, Callable[[], FaultRecord]]] = []
    for share, dc in kills:
        schedule.append((share, f"kill joiner[{dc}]", _killer(supervisor, dc)))
    schedule += [
        (0.25, "DC down", lambda: _dc_outage(supervisor, config)),
        (0.35, "ZooKeeper leader", lambda: _kill_zk_leader(stack, config.restart_after_s)),
        (0.45, "Redis", lambda: _restart(stack, "redis", config.restart_after_s)),
        (0.55, "S3 freeze", lambda: _freeze_s3(stack, config.s3_freeze_s)),
        (0.65, "epoch", lambda: _append_epoch(settings)),
        (0.7, "crash after commit", lambda: _crash_after_commit(supervisor, other)),
    ]
    schedule.sort(key=lambda item: item[0])
    struck: list[tuple[str, float, list[FaultRecord], threading.Thread]] = []
    for share, name, strike in schedule:
        at = stream_started + share * config.duration_s
        time.sleep(max(0.0, at - time.monotonic()))
        log.warning("chaos.fault", fault=name, share=share)
        holder: list[FaultRecord] = []

        def run_fault(
            strike: Callable[[], FaultRecord] = strike, holder: list[FaultRecord] = holder
        ) -> None:
            holder.append(strike())

        # Faults that last (an outage, a restart) run beside the ones that follow.
        thread = threading.Thread(target=run_fault, name=f"fault {name}", daemon=True)
        thread.start()
        struck.append((name, at - stream_started, holder, thread))
    for name, at_s, holder, thread in struck:
        thread.join()
        record = holder[0] if holder else FaultRecord(name, "failed to strike", 0.0)
        record.at_s = round(at_s, 1)
        report.faults.append(record)


def _killer(supervisor: Supervisor, dc: str) -> Callable[[], FaultRecord]:
    def kill() -> FaultRecord:
        supervisor.kill(dc, JOINER)
        return FaultRecord("kill_joiner", dc, 0.0, ended_s=time.monotonic())

    return kill


def _crash_after_commit(supervisor: Supervisor, dc: str) -> FaultRecord:
    """The joiner dies between a registry commit and its output write, and its disk is lost.

    Its batch is then never replayed (the new attempt starts from a fresh
    checkpoint): the ids it registered are lost until recovery restores them.
    """
    code = supervisor.crash_with_lost_state(
        dc, JOINER, {"PHOTON_FAULTS__CRASH_AFTER_COMMIT_P": "1"}, timeout_s=120
    )
    return FaultRecord(
        "crash_after_commit", f"joiner[{dc}] exit {code}", 0.0, ended_s=time.monotonic()
    )


def _dc_outage(supervisor: Supervisor, config: ChaosConfig) -> FaultRecord:
    supervisor.take_down(config.outage_dc)
    time.sleep(config.outage_s)
    supervisor.bring_up(config.outage_dc)
    return FaultRecord("dc_outage", config.outage_dc, 0.0, ended_s=time.monotonic())


def _kill_zk_leader(stack: LocalStack, restart_after_s: float) -> FaultRecord:
    leader = next(
        (
            s.name
            for s in stack.status().services
            if s.name.startswith("zk") and s.detail == "leader"
        ),
        None,
    )
    if leader is None:
        return FaultRecord("zookeeper_leader", "none found", 0.0)
    return _restart(stack, leader, restart_after_s, kind="zookeeper_leader")


def _restart(
    stack: LocalStack, service: str, restart_after_s: float, *, kind: str | None = None
) -> FaultRecord:
    record = stack.records()[service]
    process.kill(record.identity)
    time.sleep(restart_after_s)
    stack.up()  # starts what is not running, waits until the stack is healthy
    return FaultRecord(kind or f"{service}_restart", service, 0.0, ended_s=time.monotonic())


def _freeze_s3(stack: LocalStack, freeze_s: float) -> FaultRecord:
    record = stack.records()["s3"]
    os.kill(record.pid, signal.SIGSTOP)
    try:
        time.sleep(freeze_s)
    finally:
        os.kill(record.pid, signal.SIGCONT)
    return FaultRecord("s3_unavailable", "s3", 0.0, ended_s=time.monotonic())


def _thaw_s3(stack: LocalStack) -> None:
    record = stack.records().get("s3")
    if record is not None and process.is_running(record.identity):
        os.kill(record.pid, signal.SIGCONT)


def _append_epoch(settings: PhotonSettings) -> FaultRecord:
    with connect_registry(settings) as registry:
        current = registry.sharding().epochs[-1].shards
        registry.append_epoch(current + 2, max_skew_s=settings.shards.max_clock_skew_s)
    return FaultRecord(
        "reshard", f"{current} -> {current + 2} shards", 0.0, ended_s=time.monotonic()
    )


def _wait_idle(sampler: _Sampler, idle_s: float, timeout_s: float = 1800.0) -> None:
    deadline = time.monotonic() + timeout_s
    last, quiet_since = -1, time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(2.0)
        total = sum(sampler.by_dc.values())
        if total != last:
            last, quiet_since = total, time.monotonic()
        elif time.monotonic() - quiet_since >= idle_s:
            return


def _drain(settings: PhotonSettings) -> None:
    """The pipelines again, until idle: they join the re-injected clicks."""
    from photon.pipeline import run_pipelines

    run_pipelines(settings, settings.dcs, until_idle_s=15.0)


def _recovery_times(report: ChaosReport, sampler: _Sampler) -> None:
    """Per fault: from its end until the output grew again (the sampler's timeline)."""
    for record in report.faults:
        if record.ended_s is None:
            continue
        ended = record.ended_s - sampler.started
        total_at_end = _total_at(sampler.timeline, ended)
        later = [
            point["t_s"]
            for point in sampler.timeline
            if point["t_s"] >= ended and _total(point) > total_at_end
        ]
        record.ended_s = round(ended, 1)
        record.recovered_s = round(later[0] - ended, 1) if later else None


def _total(point: dict[str, float]) -> float:
    return sum(v for k, v in point.items() if k != "t_s")


def _total_at(timeline: list[dict[str, float]], t_s: float) -> float:
    before = [p for p in timeline if p["t_s"] <= t_s]
    return _total(before[-1]) if before else 0.0
