"""Both DC pipelines under load: the figures of ``photon bench pipeline``.

Phases on the running stack, each with logs, pipeline state, registry
root, bucket and cache keys of its own:

* **scaling**: DC a's joiner alone, at ``local[1]`` and at ``local[2]``, on
  the same backlog (its query reader reads every query first) in the same
  batches and groups (2 MiB, two groups, at both), in rounds of
  one run each, eight by default (which goes first balanced over every four rounds). The
  join's own rate is joined clicks per second over the span of its steady
  batches (Spark's start-up is not the join's; reading and planning between
  batches is); a round's ratio is the speed-up from one executor core to
  two, and the phase reports the rounds' median. Beside it,
  how many cores the machine kept busy over each span, the stack's processes
  apart, and the ceiling that puts on the ratio (:mod:`photon.tooling.bench.cpu`):
  at one executor core the driver, Spark's JVM and the registry run beside
  the task on the other cores. And from the same batches
  (:mod:`photon.tooling.bench.scaling`): the serial share (no task running),
  CPU seconds per 1,000 joined clicks and the driver's part of them, and
  Amdahl's speed-up at 4, 8 and 32 executor cores;
* **throughput**: a burst workload (every log written before the apps start)
  through both DCs' query readers and joiners until idle:
  ``joined_per_batch_s``, the joined clicks over the busiest joiner's batch
  time, and the CPU seconds of every app per 1,000 joined clicks, launch to
  idle. (No rate over the output's ``joined_at_us``: a batch stamps all its
  clicks at once and a backlog drains in a few batches, so such a span is
  near zero and its rate measures nothing.)
* **latency**: ad servers write live at a fixed click rate while the apps
  run. A click's latency is from its time to its object's output time: the
  ``joiner.batch`` line of the batch that wrote it, logged once every object
  of the batch is written and the batch settled, so a little after the object
  became visible, never before (:class:`BatchLogTimes`; nothing lists the
  bucket while the apps run: on two cores a watcher listing it every 0.2 s,
  and the S3 stand-in answering, took cores from the apps it timed). The
  stream is simulated while the apps start, to start once they all stream
  and its planned start (:func:`live_lead_s`) has come; when it is ready only
  after that start (a slow machine), every line goes out later than the time
  it carries by the same amount (the manifest's ``live_start_shift_s``), and
  a click's time is its timestamp plus that shift: when it happened in the
  stream the apps saw. The
  ad-server simulator runs in a process of its own, at a higher priority
  where allowed (root), so that its own lag on two busy cores does not count
  as join latency; the first 10 s of clicks (apps warming up) are reported
  apart from the steady-state percentiles. Beside the end-to-end latency,
  the delay **from availability**: from when both the click's line and its
  query's were in the joining DC's logs (the later of the two ship times of
  the same, deterministic, simulation) to the output. The workload ships 5%
  of queries up to 30 s after their clicks by design: that wait is the
  workload's, this delay the join's;
* **knee**: the latency phase again at each higher rate of ``knee_rates``,
  in order, until p90 passes :data:`P90_BOUND_S`; the knee is the highest
  rate whose p90 stayed within it.

Plus: the cache hit ratio in the steady (live) phase — queries served by the
cache among those served by either EventStore (a query not read yet is in
neither, so it is not a lookup either store could serve; those are counted
as ``not_found_yet``) — wasted joins in the live phase (registered by the
other DC first, among all its register attempts; the burst's are reported
apart: two DCs that find the same backlog at once race for all of it) and
the registry's ids/s against its multi transactions/s over the busiest
joiner's batch time in the burst. Targets (docs/join.md, "Performance"):
p90 <= 5 s at 1,000 clicks/s, and p99 from availability <= 5 s; a knee >=
2,000 clicks/s; wasted < 5%; cache hits >= 90% in steady state; a 1 -> 2
core speed-up >= 90% of the machine's ceiling; a serial share <= 10% and the
driver's CPU <= 5% of the app's at two cores.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from photon.apps import JOINER, QUERY_READER
from photon.events.records import Stream
from photon.join.output import decode, output_prefix
from photon.localfiles import last_lines
from photon.logconfig import FORMAT_ENV
from photon.settings import PhotonSettings, load_settings
from photon.storage import ObjectStore, s3_client
from photon.tooling.bench.cpu import CpuSampler, available_cores, cores_busy
from photon.tooling.bench.scaling import (
    MODEL_CORES,
    SCALING_BATCH_BYTES,
    SCALING_GROUPS,
    BatchTimes,
    amdahl,
    per_thousand,
    round_order,
    rounded,
    serial_share,
    span,
    summarise_rounds,
    tasks_running,
)
from photon.tooling.chaos.analysis import json_lines, logged_at
from photon.tooling.gen.model import GenConfig
from photon.tooling.gen.simulator import load_manifest, simulate, write
from photon.tooling.pipeline import app_argv, app_summaries, run_pipelines
from photon.tooling.runs import clean_up, environment, namespace, wait_until_streaming, write_live
from photon.tooling.stack.manager import LocalStack

StepCallback = Callable[[str], None]

_BENCH_ENV = {
    "PHOTON_RETRY__INITIAL_BACKOFF_S": "0.5",
    # Capped at 8 s, not the default 300 s, so a click whose query never comes is given
    # up on within the phase; not at 2 s as before join on arrival (docs/join.md,
    # "Performance (measured)"): a late query's clicks are woken when it is cached, and
    # a 2 s cap only tried each never-joinable click ~22 times in its 45 s.
    "PHOTON_RETRY__MAX_BACKOFF_S": "8",
    "PHOTON_RETRY__MAX_ATTEMPTS": "4",
    "PHOTON_RETRY__MAX_AGE_S": "45",  # delayed queries arrive up to 30 s after their clicks
    "PHOTON_PIPELINE__METRICS_BASE_PORT": "0",
    # Query files that stopped growing let the reader's progress go after 10 s, not 30.
    "PHOTON_PIPELINE__QUERY_FILE_IDLE_S": "10",
    # Both DCs start together, as the peer of `photon bench compare` starts its two and as
    # every earlier figure was measured (`photon run` staggers them on two cores).
    "PHOTON_PIPELINE__STAGGERED_START": "off",
}


_BUSY_KEYS = ("machine_cores_busy", "services_cores_busy", "driver_cores_busy")

#: Rounds of the scaling phase: one run at one executor core and one at two each. Eight,
#: two of each four-round order cycle: a round's share of the ceiling is a ratio of two
#: runs of 3 to 7 s, and it moved from 0.67 to 1.41 within one bench run, so the median of
#: four missed a target a tenth wide where twelve, on the same tree, met it (docs/join.md,
#: "Current figures").
SCALING_ROUNDS = 8

#: The latency bound of the knee: the highest click rate whose p90 stays within it.
P90_BOUND_S = 5.0

#: How long the apps of a live phase wait with nothing to read before they stop.
LIVE_IDLE_S = 60.0

#: A live phase's apps stream ~10-15 s after launch on a 2-core machine.
_APPS_START_S = 15.0
#: The stream's simulation, per click, beside the starting apps (``live_lead_s``).
_SIMULATED_S_PER_CLICK = 100e-6

#: Clicks of the live phase's first seconds meet apps still warming up (JIT,
#: Python workers, connections): their latency is reported apart.
_WARM_UP_S = 10.0


@dataclass
class PhaseFigures:
    clicks_in: int = 0
    joined: int = 0
    seconds: float = 0.0
    started_us: int = 0  # when the apps were launched
    last_output_us: int = 0  # the last joined object's output time
    #: Each joined object's output time (its batch's line), one per object with rows.
    output_times_us: list[int] = field(default_factory=list)
    click_ids: Counter[str] = field(default_factory=Counter)  # of every DC's output
    apps: list[dict[str, Any]] = field(default_factory=list)
    latencies_s: list[tuple[int, float]] = field(default_factory=list)  # (click ts, latency)
    #: The ad servers' stream started this much after the times its lines carry (the
    #: simulation was ready after its planned start): when each click happened, live.
    start_shift_us: int = 0
    #: (click ts, seconds from when both the click and its query were in the DC's
    #: logs to its output): the join's own delay, the workload's lateness apart.
    available_latencies_s: list[tuple[int, float]] = field(default_factory=list)
    #: CPU seconds of every app of both DCs, launch to idle, per 1,000 joined clicks.
    cpu_s_per_1000_joined: float | None = None

    def joiner_sum(self, key: str) -> int:
        return sum(int(a.get(key, 0)) for a in self.apps if a["app"] == JOINER)


class BatchLogTimes:
    """Each joined object's output time from its joiner's log, once the apps are done:
    the ``joiner.batch`` line of the object's batch, logged after every object of the
    batch was written and the batch settled (``output_us``: a little after the
    object became visible, never before). Nothing is listed while the apps run."""

    def __init__(self, settings: PhotonSettings, store: ObjectStore) -> None:
        self.settings = settings
        self.store = store
        self.output_us: dict[str, int] = {}

    def __enter__(self) -> BatchLogTimes:
        return self

    def __exit__(self, *_: object) -> None:
        done_at = time.time_ns() // 1000
        logged: dict[tuple[str, str], int] = {}
        for dc in self.settings.dcs:
            for line in json_lines(self.settings.pipeline_dir(dc, JOINER) / "app.log"):
                at = logged_at(line) if line.get("event") == "joiner.batch" else None
                if at is not None and line.get("dc") == dc:
                    logged[(dc, str(line.get("batch")))] = round(at * 1e6)
        for key in self.store.keys(output_prefix("joined")):
            batch = _batch_stem(key).rpartition("/")[2]
            # A batch with no line (the app killed before it logged): the run's end.
            self.output_us[key] = logged.get((dc_of_key(key), batch), done_at)


def _batch_stem(key: str) -> str:
    """The key up to its batch (``…/000000000005`` of ``…/000000000005.g001.parquet``)."""
    folder, _, name = key.rpartition("/")
    return f"{folder}/{name.split('.', 1)[0]}" if name else key


def _percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _phase_env(workdir: Path, name: str) -> dict[str, str]:
    """A phase's own logs, state, registry root, bucket and cache keys, on the bench's
    defaults (each unless the environment sets it)."""
    defaults = {k: v for k, v in _BENCH_ENV.items() if k not in os.environ}
    return defaults | namespace(f"bench-{name}-{uuid.uuid4().hex[:8]}", workdir / name)


def run_phase(
    workdir: Path,
    name: str,
    cfg_for: Callable[[PhotonSettings], GenConfig],
    *,
    live: bool,
    until_idle_s: float,
) -> PhaseFigures:
    """One phase of both DCs' apps until idle. A joined object's output time is its
    joiner's ``joiner.batch`` line of its batch (:class:`BatchLogTimes`), read after
    the run: on two cores a watcher listing ``joined/`` every 0.2 s while the apps ran,
    and the S3 stand-in answering it, took ~0.3 of a core from the apps it timed
    (docs/join.md, "Performance (measured)")."""
    env = _phase_env(workdir, name) | {FORMAT_ENV: "json"}  # the batch lines are read back
    with environment(env):
        settings = load_settings()
        s3_client(settings.s3_endpoint_url, settings.s3).create_bucket(Bucket=settings.s3.bucket)
        store = ObjectStore.from_settings(settings)
        try:
            figures = PhaseFigures()
            finished = threading.Event()
            writer: threading.Thread | None = None
            live_config: GenConfig | None = None  # the live stream's
            if live:
                # A process of its own: sharing this one's GIL, the writer fell seconds
                # behind the clock, and that lag would count as the join's latency. It
                # simulates the stream while the apps start.
                live_config = cfg_for(settings)
                spawn = multiprocessing.get_context("spawn")
                go = spawn.Event()
                process = spawn.Process(
                    target=write_live,
                    args=(live_config.model_dump_json(), str(settings.logs_root), None, go),
                    daemon=True,
                )
                process.start()

                def start_writer() -> None:
                    # Steady state: the ad servers start once every app is streaming
                    # (Spark start-up is not the join's latency), each line at its time.
                    if not wait_until_streaming(settings, finished):
                        process.terminate()
                        return
                    go.set()
                    process.join()
                    manifest = load_manifest(settings.logs_root)
                    figures.clicks_in = manifest.clicks
                    figures.start_shift_us = round(manifest.live_start_shift_s * 1e6)

                writer = threading.Thread(target=start_writer, daemon=True)
                writer.start()
            else:
                sim = simulate(cfg_for(settings))
                figures.clicks_in = sim.clicks
                write(sim, settings.logs_root)
            started = time.monotonic()
            figures.started_us = time.time_ns() // 1000
            # Not the apps': the stack's processes, and this one.
            others = LocalStack(settings).running_pids()
            output_times = BatchLogTimes(settings, store)
            with CpuSampler([*others, os.getpid()], period_s=0.25) as sampler, output_times:
                try:
                    children = run_pipelines(settings, settings.dcs, until_idle_s=until_idle_s)
                finally:
                    finished.set()
            figures.seconds = time.monotonic() - started
            if writer is not None:
                writer.join()
            figures.apps = [summary for c in children for summary in app_summaries(c)]
            # The sampler ran while the apps did, launch to idle: its first and last samples.
            samples = sampler.samples
            busy = cores_busy(samples, [(samples[0].at, samples[-1].at)]) if samples else None
            run_s = samples[-1].at - samples[0].at if samples else 0.0
            available_us = available_at(live_config) if live_config is not None else {}
            for key, output_us in output_times.output_us.items():
                data = store.get(key)
                rows = decode(data) if data is not None else []
                if rows:
                    figures.last_output_us = max(figures.last_output_us, output_us)
                    figures.output_times_us.append(output_us)
                figures.click_ids.update(r["click_id"] for r in rows)
                figures.joined += len(rows)
                if available_us:
                    dc = dc_of_key(key)
                    figures.available_latencies_s += [
                        (r["click_ts_us"], (output_us - figures.start_shift_us - at_us) / 1e6)
                        for r in rows
                        if (at_us := available_us.get((dc, r["click_id"]))) is not None
                    ]
                figures.latencies_s += click_latencies(rows, output_us, figures.start_shift_us)
            if busy is not None:
                app_cpu_s = busy.app * run_s
                figures.cpu_s_per_1000_joined = rounded(per_thousand(app_cpu_s, figures.joined))
        finally:
            clean_up(settings, store)
    return figures


def available_at(cfg: GenConfig) -> dict[tuple[str, str], int]:
    """When each click could first be joined in each DC: the later of the first
    delivery of its line and of its query's line to that DC's logs (ship times, on the
    simulation's clock). The simulation is deterministic: the same as the one written."""
    sim = simulate(cfg)
    query_at: dict[tuple[str, str], int] = {}
    clicks: list[tuple[str, str, str, int]] = []
    for delivery in sim.deliveries:
        if delivery.malformed is not None or delivery.duplicate:
            continue
        record = json.loads(delivery.line)
        if delivery.stream is Stream.QUERIES:
            query_at.setdefault((delivery.dc, record["query_id"]), delivery.ship_us)
        else:
            clicks.append((delivery.dc, record["click_id"], record["query_id"], delivery.ship_us))
    available: dict[tuple[str, str], int] = {}
    for dc, click_id, query_id, ship_us in clicks:
        query_us = query_at.get((dc, query_id))
        if query_us is not None:
            available.setdefault((dc, click_id), max(ship_us, query_us))
    return available


def dc_of_key(key: str) -> str:
    """The DC of an output key, ``joined/dc=<dc>/hour=…``."""
    for part in key.split("/"):
        if part.startswith("dc="):
            return part[3:]
    raise ValueError(f"no dc= in {key}")


def click_latencies(
    rows: list[dict[str, Any]], seen_us: int, start_shift_us: int = 0
) -> list[tuple[int, float]]:
    """(click timestamp, seconds from when the click happened to ``seen_us``) of each
    joined row; a live stream that started ``start_shift_us`` late carried each click
    that much later than its timestamp."""
    return [(r["click_ts_us"], (seen_us - r["click_ts_us"] - start_shift_us) / 1e6) for r in rows]


def joiner_alone_env() -> dict[str, str]:
    """The settings of every scaling run (over the phase's own): DC a alone, the same
    batches and groups at every core count, batches back to back, no metrics port."""
    return {
        "PHOTON_DCS": "a",
        # Many batches, not one, and the same batches and groups at every core count.
        "PHOTON_PIPELINE__MAX_BYTES_PER_BATCH": str(SCALING_BATCH_BYTES),
        "PHOTON_PIPELINE__JOINER_MAX_BYTES_PER_BATCH": str(SCALING_BATCH_BYTES),
        "PHOTON_PIPELINE__JOIN_GROUPS": str(SCALING_GROUPS),
        # Batches back to back: at the default 1 s trigger a batch shorter than a second
        # waits for the next tick, and the span measured the trigger, not the join (the
        # same ~1 batch/s at one executor core and at two).
        "PHOTON_PIPELINE__TRIGGER_S": "0.05",
        "PHOTON_PIPELINE__METRICS_BASE_PORT": "0",
        FORMAT_ENV: "json",  # its batch reports are read back
    }


def _joiner_alone(workdir: Path, name: str, cores: int, queries: int) -> dict[str, Any]:
    """DC a's joiner alone at ``local[cores]`` on a backlog its query reader read first.

    The join's own rate: joined clicks per second of the span of its steady batches
    (first start to last end: Spark's start-up and the idle wait are not the join's,
    reading and planning between batches is). Same seed, same logs for every core
    count. Beside it, the serial share, CPU per 1,000 joined clicks and the driver's
    part of it (:mod:`photon.tooling.bench.scaling`).
    """
    alone = joiner_alone_env()
    with environment(_phase_env(workdir, name) | alone):
        settings = load_settings()
        s3_client(settings.s3_endpoint_url, settings.s3).create_bucket(Bucket=settings.s3.bucket)
        store = ObjectStore.from_settings(settings)
        try:
            write(
                simulate(
                    GenConfig(
                        seed=9,
                        dcs=["a"],
                        start_us=time.time_ns() // 1000 - 3_600_000_000,
                        queries=queries,
                        query_rate=1_000.0,
                        outage_duration_s=0.0,
                        click_delay_tail_fraction=0.0,
                        rollover_bytes=4 << 20,
                    )
                ),
                settings.logs_root,
            )
            _run_app(settings, QUERY_READER, "local[2]")
            # Not the app's: the stack's processes and this one (its sampler thread).
            others = LocalStack(settings).running_pids()
            with CpuSampler([*others, os.getpid()]) as sampler:
                _run_app(settings, JOINER, f"local[{cores}]", on_start=sampler.watch_driver)
            batches = [
                line
                for line in json_lines(settings.pipeline_dir("a", JOINER) / "app.log")
                if line.get("event") == "joiner.batch" and line.get("lines", 0) > 0
            ]
        finally:
            clean_up(settings, store)
    # The backlog's batches, after the first (its Python workers connect to the registry,
    # Redis and S3 then: a one-off cost); retry passes of never-joinable clicks are not
    # the join's throughput.
    steady = batches[1:]
    times = [
        BatchTimes(
            *batch_window(b),
            float(b["task_s"]),
            tuple((s, e) for s, e in b.get("busy") or ()),
            tuple(tuple((s, e) for s, e in task) for task in b.get("tasks_busy") or ()),
        )
        for b in steady
    ]
    window = span(times)
    seconds = window[1] - window[0] if window else 0.0
    joined = sum(int(b["joined"]) for b in steady)
    busy = cores_busy(sampler.samples, [window]) if window else None
    app_cpu_s = busy.app * seconds if busy else None
    driver_cpu_s = busy.driver * seconds if busy else None
    serial = serial_share(times)
    return {
        "cores": cores,
        "batch_bytes": SCALING_BATCH_BYTES,
        "groups": SCALING_GROUPS,
        "batches": len(steady),
        "joined": joined,
        "span_s": round(seconds, 2),
        "batch_seconds": round(sum(float(b["seconds"]) for b in steady), 2),
        "driver_plan_seconds": round(sum(float(b["plan_s"]) for b in steady), 2),
        "slowest_task_seconds": round(sum(t.task_s for t in times), 2),
        "joined_per_s": round(joined / seconds) if seconds > 0 else 0,
        # Three decimals: Amdahl's model is computed from it (two gave the same model
        # for every run whose share rounded alike), and the target is checked on it.
        "serial_share": rounded(serial, 3),
        "tasks_running": rounded(tasks_running(times)),
        "cpu_s_per_1000_joined": rounded(per_thousand(app_cpu_s, joined) if app_cpu_s else None, 3),
        "driver_cpu_s_per_1000_joined": rounded(
            per_thousand(driver_cpu_s, joined) if driver_cpu_s is not None else None, 3
        ),
        "driver_cpu_share": rounded(driver_cpu_s / app_cpu_s, 3)
        if app_cpu_s and driver_cpu_s is not None
        else None,
        # Over the span: every process, the stack's (ZooKeeper, Redis, S3…), the driver's.
        **(busy.to_dict() if busy else dict.fromkeys(_BUSY_KEYS)),
    }


def _run_app(
    settings: PhotonSettings,
    app: str,
    master: str,
    on_start: Callable[[int], None] | None = None,
) -> None:
    """One of DC a's apps until it is idle, its log in its state directory;
    ``on_start`` gets its driver's pid once it runs."""
    argv = [*app_argv(app, "a", until_idle_s=3.0, config=None), "--master", master]
    log_path = settings.pipeline_dir("a", app) / "app.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("wb") as log_file:
        process = subprocess.Popen(
            argv, env=dict(os.environ), stdout=log_file, stderr=subprocess.STDOUT
        )
        try:
            if on_start is not None:
                on_start(process.pid)
            code = process.wait(timeout=3600)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
    if code != 0:
        raise RuntimeError(f"{app} exited with {code}: {last_lines(log_path, 30)}")


def batch_window(batch: dict[str, Any]) -> tuple[float, float]:
    """(start, end) in wall-clock seconds of a ``joiner.batch`` log line: it is logged
    as the batch ends, with how long it took."""
    end = logged_at(batch)
    if end is None:
        raise ValueError(f"a joiner.batch line without a timestamp: {batch}")
    return end - float(batch["seconds"]), end


def run(
    *,
    burst_queries: int = 150_000,
    click_rate: float = 1_000.0,
    live_seconds: float = 60.0,
    knee_rates: Sequence[float] = (2_000.0, 4_000.0),
    scaling_queries: int = 300_000,
    scaling_rounds: int = SCALING_ROUNDS,
    on_step: StepCallback | None = None,
) -> dict[str, Any]:
    step = on_step or (lambda _: None)
    ctr = 0.3
    with tempfile.TemporaryDirectory(prefix="photon-bench-") as tmp:
        workdir = Path(tmp)
        scaling = run_scaling(workdir, scaling_queries, step, scaling_rounds)
        step(f"throughput: {burst_queries} queries written at once, both DCs")
        burst = run_phase(
            workdir,
            "burst",
            lambda s: GenConfig(
                seed=7,
                dcs=s.dcs,
                start_us=time.time_ns() // 1000 - 3_600_000_000,
                queries=burst_queries,
                query_rate=1_000.0,
                ctr=ctr,
                outage_duration_s=0.0,
                click_delay_tail_max_s=600.0,
                rollover_bytes=4 << 20,
            ),
            live=False,
            until_idle_s=5.0,
        )
        # The latency phase at ``click_rate``, then higher rates until p90 passes the bound.
        points: dict[float, tuple[PhaseFigures, dict[str, Any]]] = {}
        for rate in sorted({click_rate, *knee_rates}):
            step(f"latency: {rate:.0f} clicks/s written live for {live_seconds:.0f} s")
            figures = _live_phase(workdir, f"live{rate:.0f}", rate, ctr, live_seconds)
            points[rate] = (figures, _latency_point(figures, rate))
            p90 = points[rate][1]["latency_p90_s"]
            if rate >= click_rate and (p90 is None or p90 > P90_BOUND_S):
                break  # a higher rate is only slower
    live, latency = points[click_rate]
    knee = knee_of({rate: point["latency_p90_s"] for rate, (_, point) in points.items()})
    p90 = latency["latency_p90_s"]
    available_p99 = latency["available_p99_s"]
    from_cache, from_logs = live.joiner_sum("from_cache"), live.joiner_sum("from_logs")
    cache_hits = from_cache / (from_cache + from_logs) if from_cache + from_logs else 0.0
    # Both DCs joining the same live stream is where waste counts; a burst both DCs
    # find at once is raced for whole (reported apart).
    wasted_share, burst_wasted_share = _wasted_share(live), _wasted_share(burst)
    ids, txns = burst.joiner_sum("register_ids"), burst.joiner_sum("register_transactions")
    busiest_s = _busiest_joiner_s(burst)
    return {
        "scaling": scaling,
        "throughput": {
            "clicks_in": burst.clicks_in,
            "joined": burst.joined,
            "run_s": round(burst.seconds, 1),
            # A batch stamps its clicks at once, and a backlog drains in a few batches:
            # a rate over the output's stamps would measure nothing. The batch time is.
            "joined_per_batch_s": round(_batch_rate(burst)),
            "cpu_s_per_1000_joined": burst.cpu_s_per_1000_joined,
        },
        "latency": latency,
        "knee": {
            "clicks_per_s": knee,
            "p90_bound_s": P90_BOUND_S,
            "points": [point for _, point in points.values()],
        },
        "cache": {
            "hit_ratio": round(cache_hits, 3),
            "from_cache": from_cache,
            "from_logs": from_logs,
            "not_found_yet": live.joiner_sum("cache_misses") - from_logs,
        },
        "wasted_join_share": round(wasted_share, 4),
        "burst_wasted_join_share": round(burst_wasted_share, 4),
        "registry": {
            # Over the busiest joiner's batch time, as the burst's rate.
            "ids_per_s": round(ids / busiest_s) if busiest_s > 0 else 0,
            "transactions_per_s": round(txns / busiest_s, 1) if busiest_s > 0 else 0.0,
            "ids_per_transaction": round(ids / txns, 1) if txns else 0.0,
        },
        "targets": {
            "p90_le_5s_at_1000_clicks_per_s": p90 is not None and p90 <= P90_BOUND_S,
            "available_p99_le_5s_at_1000_clicks_per_s": available_p99 is not None
            and available_p99 <= P90_BOUND_S,
            "knee_ge_2000_clicks_per_s": knee is not None and knee >= 2_000,
            "wasted_lt_5pct": wasted_share < 0.05,
            "cache_hits_ge_90pct": cache_hits >= 0.9,
            **scaling_targets(scaling),
        },
        "apps": {"burst": burst.apps, "live": live.apps},
    }


def run_scaling(
    workdir: Path,
    scaling_queries: int,
    step: StepCallback | None = None,
    rounds: int = SCALING_ROUNDS,
) -> dict[str, Any]:
    """The scaling phase: DC a's joiner alone at one and at two executor cores, in
    ``rounds`` rounds (which goes first balanced: :func:`round_order`); each round's
    speed-up against the machine's ceiling and the medians over the rounds
    (:func:`summarise_rounds`), and Amdahl's model from the one-core runs' median
    serial share."""
    if rounds < 1:
        raise ValueError(f"rounds must be at least 1, not {rounds}")
    say = step or (lambda _: None)
    runs: list[dict[str, Any]] = []
    pairs: list[tuple[dict[str, Any], dict[str, Any]]] = []
    for index in range(rounds):
        by_cores: dict[int, dict[str, Any]] = {}
        for cores in round_order(index):
            say(f"scaling: round {index + 1} of {rounds}, DC a's joiner alone on {cores} core(s)")
            name = f"round{index}-cores{cores}"
            by_cores[cores] = {"round": index + 1} | _joiner_alone(
                workdir, name, cores, scaling_queries
            )
            runs.append(by_cores[cores])
        pairs.append((by_cores[1], by_cores[2]))
    summary = summarise_rounds(pairs, available_cores())
    serial_one = summary["at_1_core"]["serial_share"]
    return {
        "rounds": rounds,
        "runs": runs,
        **summary,
        "machine_cores": available_cores(),
        # Amdahl from the one-core runs' serial share: the most a cluster of n executor
        # cores gives while the driver's part stays as it is.
        "amdahl_speed_up": {str(n): round(amdahl(serial_one, n), 2) for n in MODEL_CORES}
        if serial_one is not None
        else None,
    }


def scaling_targets(scaling: dict[str, Any]) -> dict[str, bool]:
    """The scaling phase's targets, on its medians over the rounds: the speed-up near the
    ceiling, little serial time and little driver CPU at two cores (docs/join.md,
    "Performance (measured)")."""
    share, two = scaling["speed_up_share_of_ceiling"], scaling["at_2_cores"]
    serial, driver = two["serial_share"], two["driver_cpu_share"]
    return {
        "speed_up_ge_90pct_of_ceiling": share is not None and share >= 0.9,
        "serial_share_le_10pct_at_2_cores": serial is not None and serial <= 0.1,
        "driver_cpu_le_5pct_at_2_cores": driver is not None and driver <= 0.05,
    }


def knee_of(p90_by_rate: dict[float, float | None]) -> float | None:
    """The highest rate whose p90 stayed within the bound, below every rate that did not
    (a rate past the knee and a lower one within the bound by chance is no knee)."""
    knee = None
    for rate in sorted(p90_by_rate):
        p90 = p90_by_rate[rate]
        if p90 is None or p90 > P90_BOUND_S:
            break
        knee = rate
    return knee


def _live_phase(
    workdir: Path, name: str, click_rate: float, ctr: float, seconds: float
) -> PhaseFigures:
    query_rate = click_rate / (ctr * 1.1)  # ~10% of clicked queries get two clicks
    return run_phase(
        workdir,
        name,
        lambda s: GenConfig(
            seed=8,
            dcs=s.dcs,
            start_us=time.time_ns() // 1000 + round(live_lead_s(click_rate * seconds) * 1e6),
            queries=int(query_rate * seconds),
            query_rate=query_rate,
            ctr=ctr,
            outage_duration_s=0.0,
            click_delay_median_s=1.0,
            click_delay_tail_fraction=0.0,
            rollover_bytes=4 << 20,
        ),
        live=True,
        # Longer than the pause between the apps streaming and the stream's first line
        # (live_lead_s). The phase ends that much after its last output: the latencies
        # are the outputs', not the phase's.
        until_idle_s=LIVE_IDLE_S,
    )


def live_lead_s(clicks: float) -> float:
    """How long after its launch a live phase's stream starts: the apps' start-up, and
    the stream's simulation running beside it (~80 µs a click alone on a 2-core
    machine; more beside the starting apps). A stream ready only after its start goes
    out shifted (the manifest's ``live_start_shift_s``), its clicks that much older
    when read, which the join's age rules see: the affinity hold (30 s) and the
    retry's age limit (45 s here)."""
    return _APPS_START_S + clicks * _SIMULATED_S_PER_CLICK


def _latency_point(live: PhaseFigures, click_rate: float) -> dict[str, Any]:
    """A live phase's latency percentiles, the warm-up's apart."""
    first_click_us = min((ts for ts, _ in live.latencies_s), default=0)
    warm_from_us = first_click_us + int(_WARM_UP_S * 1e6)
    steady = [lat for ts, lat in live.latencies_s if ts >= warm_from_us]
    warm_up = [lat for ts, lat in live.latencies_s if ts < warm_from_us]
    available = [lat for ts, lat in live.available_latencies_s if ts >= warm_from_us]
    return {
        "click_rate_per_s": click_rate,
        "clicks_in": live.clicks_in,
        "joined": live.joined,
        "warm_up_s": _WARM_UP_S,
        "stream_start_shift_s": rounded(live.start_shift_us / 1e6),
        "latency_p50_s": rounded(_percentile(steady, 0.5)),
        "latency_p90_s": rounded(_percentile(steady, 0.9)),
        "latency_p99_s": rounded(_percentile(steady, 0.99)),
        # From when both the click and its query were in the logs: the join's own delay.
        "available_p50_s": rounded(_percentile(available, 0.5)),
        "available_p90_s": rounded(_percentile(available, 0.9)),
        "available_p99_s": rounded(_percentile(available, 0.99)),
        "warm_up_latency_p50_s": rounded(_percentile(warm_up, 0.5)),
        "warm_up_latency_p90_s": rounded(_percentile(warm_up, 0.9)),
    }


def _busiest_joiner_s(phase: PhaseFigures) -> float:
    """The batch seconds of the joiner that spent the most in batches."""
    seconds = [float(a.get("batch_seconds", 0.0)) for a in phase.apps if a["app"] == JOINER]
    return max(seconds, default=0.0)


def _batch_rate(phase: PhaseFigures) -> float:
    """Joined clicks per second the joiners spent in batches, the DCs side by side: the
    join's own rate, start-up and idle waits apart (the busiest joiner's batch time)."""
    busiest = _busiest_joiner_s(phase)
    return phase.joined / busiest if busiest > 0 else 0.0


def _wasted_share(phase: PhaseFigures) -> float:
    """Of the phase's registrations, the share another DC had won (both DCs joined it)."""
    wasted = phase.joiner_sum("wasted")
    attempts = wasted + phase.joiner_sum("joined")
    return wasted / attempts if attempts else 0.0
