"""The CPU sampler against real processes: a busy one counts as a core, an idle one as none."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator

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


def test_a_busy_service_counts_as_about_a_core_and_the_machine_as_at_least_that(
    spinning: subprocess.Popen[bytes],
) -> None:
    time.sleep(0.5)  # past the interpreter's start
    with CpuSampler([spinning.pid], period_s=0.05) as sampler:
        time.sleep(1.5)
    samples = sampler.samples
    busy = cores_busy(samples, [(samples[1].at, samples[-2].at)])
    assert busy is not None
    # One core when it runs alone; on a loaded machine it may get less, never more.
    assert 0.3 <= busy.services <= 1.1
    assert busy.machine >= busy.services - 0.1


def test_an_idle_service_counts_as_none(sleeping: subprocess.Popen[bytes]) -> None:
    time.sleep(0.5)
    with CpuSampler([sleeping.pid], period_s=0.05) as sampler:
        time.sleep(1.0)
    busy = cores_busy(sampler.samples, [(sampler.samples[0].at, sampler.samples[-1].at)])
    assert busy is not None
    assert busy.services == pytest.approx(0.0, abs=0.05)
