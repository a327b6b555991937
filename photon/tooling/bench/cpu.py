"""How busy the machine was while a phase joined: the scaling figure's ceiling.

The joiner's speed-up from one executor core to two is bounded by the machine as
well as by the join. At ``local[1]`` only the task is held to one core: the
driver, Spark's JVM and the stack's processes (ZooKeeper's three nodes, Redis,
the S3 stand-in, the monitoring) run beside it on the other cores. If the phase at one core
keeps ``U`` cores busy and the work per click stays the same, a machine of ``C``
cores goes at most ``C / U`` times as fast, however the work is split
(docs/join.md, "What the machine allows"). :class:`CpuSampler` reads the
machine's busy time (``/proc/stat``) and the stack's processes' (``/proc/<pid>/stat``)
every ``period_s``; :func:`cores_busy` integrates it over the phase's batches.

How it fails: where ``/proc`` cannot be read (not Linux) the sampler records
nothing and the figures are None; a service process that is gone counts as idle from then on.
"""

from __future__ import annotations

import itertools
import os
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

_PROC = Path("/proc")


@dataclass(frozen=True, slots=True)
class CpuSample:
    at: float  # wall-clock seconds (``time.time()``), as the apps' log timestamps
    machine_s: float  # CPU seconds every core spent busy since boot
    services_s: float  # CPU seconds of the stack's processes since they started
    driver_s: float = 0.0  # CPU seconds of the processes watched as the app's driver


@dataclass(frozen=True, slots=True)
class CoresBusy:
    """Average cores kept busy over some windows: the whole machine, the stack's services
    (and whatever else is not the app: the bench itself), the app's driver."""

    machine: float
    services: float
    driver: float = 0.0

    @property
    def app(self) -> float:
        """What the app under test kept busy: the machine less the services."""
        return max(0.0, self.machine - self.services)

    def to_dict(self) -> dict[str, float]:
        return {"machine_cores_busy": round(self.machine, 2),
                "services_cores_busy": round(self.services, 2),
                "driver_cores_busy": round(self.driver, 3)}  # fmt: skip


def machine_busy_s(proc_stat: str, ticks_per_s: int) -> float:
    """Busy CPU seconds of all cores from ``/proc/stat``'s first line (not idle, not
    waiting for I/O; guest time is already counted in user time)."""
    fields = proc_stat.split("\n", 1)[0].split()
    if not fields or fields[0] != "cpu":
        raise ValueError(f"not /proc/stat: {proc_stat[:40]!r}")
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(f) for f in fields[1:9])
    return (user + nice + system + irq + softirq + steal) / ticks_per_s


def process_busy_s(pid_stat: str, ticks_per_s: int) -> float:
    """A process's user and system CPU seconds from its ``/proc/<pid>/stat``."""
    after_name = pid_stat.rsplit(")", 1)[1].split()  # the name may hold spaces
    return (int(after_name[11]) + int(after_name[12])) / ticks_per_s


def _at(samples: Sequence[CpuSample], t: float) -> tuple[float, float, float]:
    """(machine, services, driver) CPU seconds at ``t``, between the samples around it."""
    for before, after in itertools.pairwise(samples):
        if before.at <= t <= after.at:
            share = (t - before.at) / (after.at - before.at) if after.at > before.at else 1.0
            return (
                before.machine_s + share * (after.machine_s - before.machine_s),
                before.services_s + share * (after.services_s - before.services_s),
                before.driver_s + share * (after.driver_s - before.driver_s),
            )
    raise ValueError(f"{t} is outside the samples")


def cores_busy(
    samples: Sequence[CpuSample], windows: Iterable[tuple[float, float]]
) -> CoresBusy | None:
    """Average cores busy over ``windows`` (start, end), or None when the samples do not
    cover every window or the windows last no time."""
    if len(samples) < 2:
        return None
    machine = services = driver = seconds = 0.0
    for start, end in windows:
        if start < samples[0].at or end > samples[-1].at:
            return None
        machine_start, services_start, driver_start = _at(samples, start)
        machine_end, services_end, driver_end = _at(samples, end)
        machine += machine_end - machine_start
        services += services_end - services_start
        driver += driver_end - driver_start
        seconds += end - start
    if seconds <= 0:
        return None
    return CoresBusy(machine / seconds, services / seconds, driver / seconds)


def ceiling(cores: int, busy_at_one_core: float) -> float:
    """The highest 1 -> 2 executor core speed-up a machine of ``cores`` allows when the
    phase at one executor core kept ``busy_at_one_core`` of them busy: twice at most."""
    if busy_at_one_core <= 0:
        raise ValueError(f"cores busy must be positive, not {busy_at_one_core}")
    return min(2.0, cores / busy_at_one_core)


def available_cores() -> int:
    """The cores this process may run on (its affinity), as the apps it starts."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


class CpuSampler:
    """Samples the machine's CPU and the stack's processes' every ``period_s`` in a thread.

    ``service_pids`` are the stack's processes: they count apart, so a report can
    say how much of the machine the registry and the stores took. The app's driver,
    started after the sampler, is added with :meth:`watch_driver`.
    """

    def __init__(
        self, service_pids: Iterable[int], period_s: float = 0.05, proc: Path = _PROC
    ) -> None:
        self.service_pids = tuple(service_pids)
        self.period_s = period_s
        self.proc = proc
        self.samples: list[CpuSample] = []
        self.driver_pids: list[int] = []
        self._last_busy_s: dict[int, float] = {}  # a process's, while it could be read
        self._ticks = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cpu-sampler", daemon=True)

    def __enter__(self) -> CpuSampler:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while True:
            sample = self.sample()
            if sample is None:
                return  # no /proc here: nothing to sample
            self.samples.append(sample)
            if self._stop.wait(self.period_s):
                # One last sample: windows that end at the stop are covered.
                last = self.sample()
                if last is not None:
                    self.samples.append(last)
                return

    def watch_driver(self, pid: int) -> None:
        """Count ``pid`` (the app's driver process) apart from here on."""
        self.driver_pids.append(pid)

    def sample(self) -> CpuSample | None:
        try:
            machine = machine_busy_s((self.proc / "stat").read_text(), self._ticks)
        except (OSError, ValueError):
            return None
        for pid in (*self.service_pids, *self.driver_pids):
            try:
                stat = (self.proc / str(pid) / "stat").read_text()
                self._last_busy_s[pid] = process_busy_s(stat, self._ticks)
            except (OSError, IndexError, ValueError):
                continue  # gone: idle from here on, at what it had spent
        busy = self._last_busy_s
        return CpuSample(
            time.time(),
            machine,
            sum(busy.get(pid, 0.0) for pid in self.service_pids),
            sum(busy.get(pid, 0.0) for pid in self.driver_pids),
        )
