"""FrozenJoiner keeps a DC's joiner stopped while it lasts, real processes included."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator
from typing import cast

import psutil
import pytest

from photon.apps import JOINER
from photon.tooling.chaos.protocol_faults import FrozenJoiner
from photon.tooling.chaos.service_manager import ServiceManager
from photon.tooling.runs import wait_until

pytestmark = pytest.mark.unit


class _Tree:
    """What FrozenJoiner asks of the service manager: the app's process tree."""

    def __init__(self) -> None:
        self.processes: list[psutil.Process] = []

    def tree(self, dc: str, app: str) -> list[psutil.Process]:
        assert (dc, app) == ("a", JOINER)
        return list(self.processes)


@pytest.fixture
def start() -> Iterator[Callable[[], psutil.Process]]:
    started: list[subprocess.Popen[bytes]] = []

    def start_one() -> psutil.Process:
        process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        started.append(process)
        return psutil.Process(process.pid)

    yield start_one
    for process in started:
        process.kill()
        process.wait()


def _stopped(process: psutil.Process) -> bool:
    return process.status() == psutil.STATUS_STOPPED


def _running(processes: list[psutil.Process]) -> bool:
    return not any(_stopped(p) for p in processes)


def test_a_process_the_tree_starts_while_frozen_is_frozen_too_and_all_thaw_on_exit(
    start: Callable[[], psutil.Process],
) -> None:
    owner = _Tree()
    owner.processes.append(start())
    with FrozenJoiner(cast(ServiceManager, owner), "a", recheck_s=0.05) as frozen:
        # A signal takes effect when its process next runs: on a busy machine, later.
        assert wait_until(lambda: _stopped(owner.processes[0]), 5.0, 0.01)
        owner.processes.append(start())  # a worker the joiner starts meanwhile
        assert wait_until(lambda: _stopped(owner.processes[1]), 5.0, 0.01)
    assert frozen.processes == 2 and frozen.frozen_s >= 0
    assert wait_until(lambda: _running(owner.processes), 5.0, 0.01)


def test_two_freezes_of_one_joiner_keep_it_frozen_until_the_last_ends(
    start: Callable[[], psutil.Process],
) -> None:
    owner = _Tree()
    owner.processes.append(start())
    services = cast(ServiceManager, owner)
    later = FrozenJoiner(services, "a", recheck_s=0.05)
    with FrozenJoiner(services, "a", recheck_s=0.05):
        later.__enter__()
    # The first freeze thawed the process as it ended; the second freezes it again.
    assert wait_until(lambda: _stopped(owner.processes[0]), 5.0, 0.01)
    later.__exit__(None, None, None)
    assert wait_until(lambda: _running(owner.processes), 5.0, 0.01)
