"""The CPU sampler against real processes: a busy one counts as a core, an idle one as none."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator

import psutil
import pytest

from photon.tooling.bench.cpu import CpuSampler, cores_busy

pytestmark = pytest.mark.integration

_SPIN = "import time\nend = time.time() + {s}\nwhile time.time() < end: pass\n"


@pytest.fixture
def spinning() -> Iterator[subprocess.Popen[bytes]]:
    """A process that keeps one core busy (for 10 s at most)."""
    child = subprocess.Popen([sys.executable, "-c", _SPIN.format(s=10.0)])
    try:
        yield child
    finally:
        child.kill()
        child.wait()


@pytest.fixture
def sleeping() -> Iterator[subprocess.Popen[bytes]]:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        yield child
    finally:
        child.kill()
        child.wait()


def test_a_busy_service_counts_as_the_cpu_it_ran_and_the_machine_as_at_least_that(
    spinning: subprocess.Popen[bytes],
) -> None:
    time.sleep(0.5)  # past the interpreter's start
    spinner = psutil.Process(spinning.pid)
    with CpuSampler([spinning.pid], period_s=0.05) as sampler:
        time.sleep(0.2)
        # The same window measured apart: the spinner's own CPU time, by psutil. On an
        # idle machine it is a core; on a loaded one (a suite's other worker) less, and
        # the sampler must say what it really got, not what it would get alone.
        began, cpu_began = time.time(), sum(spinner.cpu_times()[:2])
        time.sleep(1.5)
        ended, cpu_ended = time.time(), sum(spinner.cpu_times()[:2])
        time.sleep(0.2)
    busy = cores_busy(sampler.samples, [(began, ended)])
    assert busy is not None
    measured = (cpu_ended - cpu_began) / (ended - began)
    assert measured > 0.05, "the spinner did not run: nothing to compare"
    # within a sample period's interpolation at each end, and a clock tick
    assert busy.services == pytest.approx(measured, abs=0.1)
    assert busy.services <= 1.1  # one process keeps one core busy at most
    assert busy.machine >= busy.services - 0.1


def test_an_idle_service_counts_as_none(sleeping: subprocess.Popen[bytes]) -> None:
    time.sleep(0.5)
    with CpuSampler([sleeping.pid], period_s=0.05) as sampler:
        time.sleep(1.0)
    busy = cores_busy(sampler.samples, [(sampler.samples[0].at, sampler.samples[-1].at)])
    assert busy is not None
    assert busy.services == pytest.approx(0.0, abs=0.05)
