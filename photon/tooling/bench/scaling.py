"""What a joiner's batches say about scaling out: serial share, CPU per click, Amdahl.

``photon bench pipeline`` runs DC a's joiner alone on one backlog at one and at
two executor cores and reads its ``joiner.batch`` log lines back. From them:

* the **span**: from the first steady batch's start to the last one's end, wall
  time. Between two batches Spark and the driver plan the next one:
  that time belongs to the join as much as the batches' own;
* **tasks running**: how many of the batches' tasks ran at once, on average
  over the span; what separates it from the executor cores is the serial
  share and the time some cores had no task;
* the **serial share**: of the span, the time in which no task of the join
  ran: ``1 - covered / span``, where ``covered`` is the span's time that the
  batches' ``busy`` intervals (when any task did its own work, wall clock)
  cover, counted once where batches overlap. Lines without them (an older
  joiner) count ``sum(task_s)`` instead (``task_s``: a batch's slowest task).
  Driver planning, Spark's job round trips, settling, Spark's own work between
  batches, a task waiting for its plan: what no executor takes over;
* **Amdahl's speed-up** at ``n`` executor cores from the serial share ``s`` at
  one core: ``1 / (s + (1 - s) / n)``. The most any cluster gives while the
  driver's part stays as it is (docs/deploy.md, "Scaling out");
* **rounds**: the speed-up is a ratio of two runs' rates, and a run's rate
  moves with the machine from one minute to the next. So the phase runs in
  rounds, one run at each core count a round (which goes first balanced
  over every four rounds: :func:`round_order`), and reports each round's
  ratio and the medians over the rounds (:func:`summarise_rounds`): ratios
  of runs made side by side, not one pair's;
* **the same work at both core counts**: every run's batches are 2 MiB of
  click logs in two groups (:data:`SCALING_BATCH_BYTES`,
  :data:`SCALING_GROUPS`), at one executor core (its two groups one after the
  other) as at two, so that only the cores differ, as the machine's ceiling
  assumes. Each group pays for itself whatever its size (its registry round
  trips, its cache ``MGET``, its Parquet object and put, its plan) and each
  batch too (Spark's work between batches, the driver's): runs on batches of
  one size with groups one a core paid the groups' costs twice at two cores,
  and runs with a budget a core paid the batches' costs twice at one
  (docs/join.md, "The same work at one core and at two");
* **CPU per 1,000 joined clicks**: the CPU seconds the app's processes spent
  over the span (the machine's busy time less the stack's services and the
  bench itself), per 1,000 joined clicks: a figure that moves less with the
  machine's speed than a rate does. The **driver's share** of it is the app's
  Python driver process (planning, the retry store, settling); Spark's JVM and
  its Python workers (the tasks) are the rest.

How it fails: batch lines without a timestamp raise ``ValueError`` (from
:func:`photon.tooling.bench.pipeline.batch_window`'s parsing); no batch, a
span of no time or nothing joined give None, never a made-up figure.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from photon.tooling.bench.cpu import ceiling

#: The executor core counts the scale-out model is reported at.
MODEL_CORES = (4, 8, 32)

#: Every scaling run's batches, at one executor core and at two: 2 MiB of click logs in
#: two groups (~8,100 click lines a group on the phase's backlog). See above.
SCALING_BATCH_BYTES = 2 << 20
SCALING_GROUPS = 2

#: A run's figures given per core count as their medians over the rounds.
RUN_FIGURES = (
    "joined_per_s",
    "cpu_s_per_1000_joined",
    "driver_cpu_s_per_1000_joined",
    "driver_cpu_share",
    "serial_share",
    "tasks_running",
    "machine_cores_busy",
    "services_cores_busy",
)


@dataclass(frozen=True, slots=True)
class BatchTimes:
    """One steady batch: when it started and ended (wall-clock seconds), and how long
    its slowest task ran."""

    start: float
    end: float
    task_s: float
    #: When any of its tasks did its own work (wall-clock intervals); empty: unknown.
    busy: tuple[tuple[float, float], ...] = ()
    #: The same for each of its tasks apart; empty: unknown.
    tasks_busy: tuple[tuple[tuple[float, float], ...], ...] = ()


def span(batches: Sequence[BatchTimes]) -> tuple[float, float] | None:
    """(start, end) from the first batch's start to the last one's end; None if none."""
    if not batches:
        return None
    return min(b.start for b in batches), max(b.end for b in batches)


def serial_share(batches: Sequence[BatchTimes]) -> float | None:
    """The share of the span in which no task ran (0 to 1), or None without a span."""
    window = span(batches)
    if window is None or window[1] <= window[0]:
        return None
    if all(b.busy for b in batches):
        in_tasks = covered([span for b in batches for span in b.busy], window)
    else:
        in_tasks = sum(b.task_s for b in batches)
    return min(1.0, max(0.0, 1.0 - in_tasks / (window[1] - window[0])))


def tasks_running(batches: Sequence[BatchTimes]) -> float | None:
    """How many tasks ran at once, on average over the span: each task's own work in
    it, over its length. At ``n`` executor cores at most ``n``; below it by the serial
    share and by the time some cores had no task (a batch's task that ended before
    the other, the next batch's waiting for its plan). None without a span, or when a
    batch's line does not give its tasks apart (an older joiner)."""
    window = span(batches)
    if window is None or window[1] <= window[0] or not all(b.tasks_busy for b in batches):
        return None
    in_tasks = sum(covered(task, window) for b in batches for task in b.tasks_busy)
    return in_tasks / (window[1] - window[0])


def covered(spans: Sequence[tuple[float, float]], window: tuple[float, float]) -> float:
    """How much of ``window`` the ``spans`` cover, each moment counted once."""
    total, reach = 0.0, window[0]
    for start, end in sorted(spans):
        start, end = max(start, reach), min(end, window[1])
        if end > start:
            total += end - start
            reach = end
    return total


def amdahl(serial: float, cores: int) -> float:
    """The speed-up over one core at ``cores`` when ``serial`` of the one-core time
    cannot be split."""
    if not 0.0 <= serial <= 1.0:
        raise ValueError(f"a serial share is 0 to 1, not {serial}")
    if cores < 1:
        raise ValueError(f"cores must be at least 1, not {cores}")
    return 1.0 / (serial + (1.0 - serial) / cores)


def per_thousand(cpu_s: float, joined: int) -> float | None:
    """CPU seconds per 1,000 joined clicks; None when nothing was joined."""
    return 1000.0 * cpu_s / joined if joined > 0 else None


def round_order(round_index: int) -> tuple[int, int]:
    """The executor core counts of a round in the order they run: one core first, then
    two, in rounds 0 and 3 of every four, two first in rounds 1 and 2 (ABBA). In the
    first phases measured in rounds the run that went second was at times the slower
    one (docs/join.md, "Rounds, and which run goes first"); in four rounds each order
    comes twice, so such an effect, or a machine speeding up or slowing down steadily
    over the phase, favours neither core count."""
    if round_index < 0:
        raise ValueError(f"a round is numbered from 0, not {round_index}")
    return (1, 2) if round_index % 4 in (0, 3) else (2, 1)


def median_of(values: Sequence[float | None]) -> float | None:
    """The median, or None when there is none or a run had no such figure (a run that
    joined nothing has no rate: no median may hide it)."""
    if not values or any(v is None for v in values):
        return None
    return float(statistics.median(v for v in values if v is not None))


def summarise_rounds(
    rounds: Sequence[tuple[Mapping[str, Any], Mapping[str, Any]]], machine_cores: int
) -> dict[str, Any]:
    """Each round's speed-up (its two-core run's rate over its one-core run's), the
    machine's ceiling (from its one-core run's busy cores,
    :func:`photon.tooling.bench.cpu.ceiling`) and the speed-up's share of it; then the
    medians over the rounds, and each run figure's median per core count. ``rounds``
    gives (one-core run, two-core run) pairs, as ``_joiner_alone`` reports them.
    """
    if not rounds:
        raise ValueError("at least one round is needed")
    speed_ups: list[float | None] = []
    ceilings: list[float | None] = []
    shares: list[float | None] = []
    for one, two in rounds:
        rate_one, rate_two = one["joined_per_s"], two["joined_per_s"]
        speed_up = rate_two / rate_one if rate_one else None
        busy = one["machine_cores_busy"]
        most = ceiling(machine_cores, busy) if busy else None
        speed_ups.append(speed_up)
        ceilings.append(most)
        shares.append(speed_up / most if speed_up is not None and most else None)
    at_cores = {
        cores: {key: median_of([pair[n][key] for pair in rounds]) for key in RUN_FIGURES}
        for n, cores in enumerate((1, 2))
    }
    return {
        "speed_up_by_round": [rounded(v) for v in speed_ups],
        "machine_ceiling_by_round": [rounded(v) for v in ceilings],
        "share_of_ceiling_by_round": [rounded(v) for v in shares],
        "speed_up_1_to_2_cores": rounded(median_of(speed_ups)),
        "machine_ceiling": rounded(median_of(ceilings)),
        "speed_up_share_of_ceiling": rounded(median_of(shares)),
        "at_1_core": {key: _figure(key, v) for key, v in at_cores[1].items()},
        "at_2_cores": {key: _figure(key, v) for key, v in at_cores[2].items()},
    }


def _figure(key: str, value: float | None) -> float | int | None:
    """A rate in whole clicks per second; shares and CPU seconds to three decimals."""
    if value is None:
        return None
    return round(value) if key == "joined_per_s" else round(value, 3)


def rounded(value: float | None, digits: int = 2) -> float | None:
    """``value`` rounded, None kept None (a figure a run's shape left without one)."""
    return None if value is None else round(value, digits)
