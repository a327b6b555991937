"""Photon against Spark's own stream-stream join on the same logs: ``photon bench compare``.

Each run generates one workload (both DCs' logs, every line written before
the apps start) and runs both systems on copies of it, one after the other
on the running stack:

* **photon**: both DCs' query readers and joiners until idle
  (:func:`photon.tooling.bench.pipeline.run_phase`), output in the object store;
* **spark_native**: per DC, ``spark_apps.native_join`` (the two DCs' apps at
  once, as Photon's run): file source, ``dropDuplicatesWithinWatermark``,
  a watermarked inner join; parquet on local disk (no object store: the
  cheaper write is the peer's). Its session is Photon's apps' own, Spark's UI
  and event log included (the event log under its workdir).

For each: ``seconds`` from launching the apps to the last joined output
(Photon: the joiner's log line of the batch that wrote the last joined object,
logged once its objects were written; native: the newest parquet file's
mtime), so both count their Spark start-up. Both are read after the run:
nothing lists the output while the apps run (a watcher listing every 0.2 s
took ~0.3 of the two cores from Photon's apps); ``input_events_per_s``, every line
of both DCs' logs over those seconds; ``start_up_s``, from the launch to the
first joined output, and ``after_first_output_s``, from there to the last.
No rate "after the first output": both systems join a backlog in one or two
batches once started, so the output comes within a second and such a rate
(328,640 events/s, once) would say nothing but how short that second was;
``completeness``, the share of the workload's joinable clicks in the union of
the DCs' output;
``duplicates_across_dcs``, click ids written more than once; ``unexpected``,
ids joined that the workload says are not joinable. Runs alternate which
system goes first; the report gives each run and the medians, and the
ratio of Photon's events/s to the native join's (the median of each run's).

Before the measured runs, ``warm_up_runs`` runs of both systems (1 by
default, on workloads of their own) warm what outlives a run: the stack's
services, ZooKeeper's JIT above all, and the page cache of both systems'
jars and modules. Every measured run still starts both systems' apps from
nothing. The warm-up runs are reported (``warm_up``), never in the medians
(docs/join.md, "Against Spark's own join").

How it fails: an app that exits non-zero raises :class:`RuntimeError` with
the tail of its log; a bad argument raises ``ValueError``.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from photon.localfiles import last_lines
from photon.settings import load_settings
from photon.tooling.bench.pipeline import run_phase
from photon.tooling.gen.model import GenConfig, Manifest
from photon.tooling.gen.simulator import load_manifest, simulate, write
from photon.tooling.runs import namespace
from spark_apps.contracts import NATIVE_JOIN_MODULE

StepCallback = Callable[[str], None]

#: The native join's watermark and join range (seconds): clicks later than this
#: after their query are beyond what it joins.
NATIVE_WATERMARK_S = 600


@dataclass
class SystemFigures:
    seconds: float
    input_events_per_s: float
    start_up_s: float | None
    after_first_output_s: float | None
    joined_distinct: int
    completeness: float
    duplicates_across_dcs: int
    unexpected: int


def _figures(
    seconds: float, ids: Counter[str], manifest: Manifest, output_s: list[float] | None = None
) -> SystemFigures:
    """``output_s``: when each output appeared, in seconds after the launch."""
    expected = manifest.expected_joins
    lines = input_lines(manifest)
    start_up = min(output_s) if output_s else None
    return SystemFigures(
        seconds=round(seconds, 1),
        input_events_per_s=round(lines / seconds) if seconds > 0 else 0,
        start_up_s=round(start_up, 1) if start_up is not None else None,
        after_first_output_s=round(seconds - start_up, 1) if start_up is not None else None,
        joined_distinct=len(ids),
        completeness=round(sum(1 for c in expected if c in ids) / len(expected), 4)
        if expected
        else 1.0,
        duplicates_across_dcs=sum(n - 1 for n in ids.values() if n > 1),
        unexpected=sum(1 for c in ids if c not in expected),
    )


def input_lines(manifest: Manifest) -> int:
    """Every line of every DC's logs: queries, clicks, duplicates, malformed."""
    return sum(
        stats.lines
        for dc in manifest.dcs.values()
        for files in dc.files.values()
        for stats in files.values()
    )


def _workload(dcs: list[str], queries: int, seed: int) -> GenConfig:
    return GenConfig(
        seed=seed,
        dcs=dcs,
        start_us=time.time_ns() // 1000 - 4 * 3_600_000_000,  # the late tail is in the logs
        queries=queries,
        query_rate=1_000.0,
        outage_duration_s=0.0,
        rollover_bytes=4 << 20,
    )


def _photon(workdir: Path, cfg: GenConfig) -> SystemFigures:
    phase = run_phase(workdir, "photon", lambda _: cfg, live=False, until_idle_s=5.0)
    manifest = load_manifest(workdir / "photon" / "logs")
    seconds = (phase.last_output_us - phase.started_us) / 1e6 if phase.last_output_us else 0.0
    output_s = [(at - phase.started_us) / 1e6 for at in phase.output_times_us]
    return _figures(seconds, phase.click_ids, manifest, output_s)


def _native(workdir: Path, cfg: GenConfig) -> tuple[SystemFigures, Manifest]:
    logs, out = workdir / "native" / "logs", workdir / "native" / "out"
    manifest = write(simulate(cfg), logs)
    # Its logs and state (the event logs) under its own workdir, as Photon's phase has.
    env = os.environ | namespace("bench-native", workdir / "native")
    started = time.time()
    children = []
    for dc in cfg.dcs:
        log_path = workdir / "native" / f"native-join-{dc}.log"
        with log_path.open("wb") as log_file:
            argv = [sys.executable, "-m", NATIVE_JOIN_MODULE, "--dc", dc,
                    "--logs-root", str(logs), "--out", str(out),
                    "--watermark-s", str(NATIVE_WATERMARK_S)]  # fmt: skip
            child = subprocess.Popen(argv, stdout=log_file, stderr=log_file, env=env)
            children.append((log_path, child))
    for log_path, child in children:
        if child.wait(timeout=3600) != 0:
            tail = last_lines(log_path, 30)
            raise RuntimeError(f"the native join exited with {child.returncode}: {tail}")
    ids: Counter[str] = Counter()
    newest = started
    output_s: list[float] = []
    for dc in cfg.dcs:
        for part in (out / f"dc={dc}").glob("*.parquet"):
            column = pq.read_table(part, columns=["click_id"]).column(0).to_pylist()
            if column:
                newest = max(newest, part.stat().st_mtime)
                output_s.append(part.stat().st_mtime - started)
            ids.update(column)
    return _figures(newest - started, ids, manifest, output_s), manifest


def run(
    *,
    queries: int = 100_000,
    runs: int = 3,
    seed: int = 11,
    warm_up_runs: int = 1,
    on_step: StepCallback | None = None,
) -> dict[str, Any]:
    if not 1 <= runs <= 20:
        raise ValueError(f"runs must be 1 to 20, not {runs}")
    if not 0 <= warm_up_runs <= 5:
        raise ValueError(f"warm_up_runs must be 0 to 5, not {warm_up_runs}")
    if queries < 1_000:
        raise ValueError(f"queries must be at least 1000, not {queries}")
    step = on_step or (lambda _: None)
    dcs = load_settings().dcs
    warm_up: list[dict[str, Any]] = []
    for n in range(warm_up_runs):
        label = f"warm-up {n + 1}/{warm_up_runs}"
        # Workloads of their own (seeds after the measured runs'): nothing measured
        # later finds its ids registered or its queries cached.
        warm_up.append(_one_run(_workload(dcs, queries, seed + runs + n), n, label, step))
    per_run = [
        _one_run(_workload(dcs, queries, seed + n), n, f"run {n + 1}/{runs}", step)
        for n in range(runs)
    ]
    keys = [f.name for f in fields(SystemFigures)]
    median = {
        system: {key: _median([r[system][key] for r in per_run]) for key in keys}
        for system in ("photon", "spark_native")
    }
    ratio = statistics.median(r["photon_vs_native_events_per_s"] for r in per_run)
    return {
        "workload": {"queries": queries, "dcs": dcs, "runs": runs, "warm_up_runs": warm_up_runs},
        "median": median,
        "photon_vs_native_events_per_s": ratio,
        "runs": per_run,
        "warm_up": warm_up,
        "targets": {
            "photon_events_per_s_ge_native": ratio >= 1.0,
            "photon_complete": all(r["photon"]["completeness"] == 1.0 for r in per_run),
            "photon_no_duplicates": all(r["photon"]["duplicates_across_dcs"] == 0 for r in per_run),
        },
    }


def _one_run(cfg: GenConfig, n: int, label: str, step: StepCallback) -> dict[str, Any]:
    """Both systems on copies of one workload; the ``n``-th run of its kind."""
    result: dict[str, Any] = {}
    # Alternating which goes first: neither always meets a machine the other warmed.
    order = ("photon", "spark_native") if n % 2 == 0 else ("spark_native", "photon")
    with tempfile.TemporaryDirectory(prefix="photon-compare-") as tmp:
        for system in order:
            step(f"{label}: {system} on {cfg.queries} queries")
            if system == "photon":
                result["photon"] = asdict(_photon(Path(tmp), cfg))
            else:
                figures, manifest = _native(Path(tmp), cfg)
                result["spark_native"] = asdict(figures)
                result["input_lines"] = input_lines(manifest)
                result["joinable"] = len(manifest.expected_joins)
    native_rate = result["spark_native"]["input_events_per_s"]
    result["photon_vs_native_events_per_s"] = (
        round(result["photon"]["input_events_per_s"] / native_rate, 2) if native_rate else 0.0
    )
    return result


def _median(values: list[Any]) -> Any:
    """The median, or None when a run had no such figure (its shape made it meaningless)."""
    return None if any(v is None for v in values) else statistics.median(values)
