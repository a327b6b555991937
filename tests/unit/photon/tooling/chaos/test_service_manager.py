"""The chaos manager with stand-in apps: small processes in place of the Spark apps.

Each stand-in says ``stream.started`` as the apps do; the one run armed to crash
exits with the crash's code once a file appears (the test decides when).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from photon.apps import JOINER, QUERY_READER
from photon.faults import CRASH_EXIT_CODE
from photon.settings import PhotonSettings
from photon.tooling.chaos import service_manager as service_manager_module
from photon.tooling.chaos.service_manager import ServiceManager

pytestmark = pytest.mark.unit

_STAND_IN = """
import os, pathlib, subprocess, sys, time
print("stream.started", flush=True)
if os.environ.get("STAND_IN_CRASH"):
    while not pathlib.Path(os.environ["STAND_IN_CRASH"]).exists():
        time.sleep(0.05)
    if os.environ.get("STAND_IN_ORPHAN"):  # a child that outlives it, writing its state
        subprocess.Popen([sys.executable, "-c", _ORPHAN, os.environ["STAND_IN_ORPHAN"]])
        time.sleep(0.2)
    sys.exit(int(os.environ["STAND_IN_EXIT"]))
time.sleep(600)
"""
#: What a crashed driver's JVM does until it notices: it writes its checkpoint on.
_ORPHAN = """
import pathlib, sys, time
offsets = pathlib.Path(sys.argv[1]) / "checkpoint" / "offsets"
for n in range(3000):
    offsets.mkdir(parents=True, exist_ok=True)
    (offsets / str(n)).write_text("{}")
    time.sleep(0.01)
"""
_STAND_IN = f"_ORPHAN = {_ORPHAN!r}\n{_STAND_IN}"


def wait_for(condition: Callable[[], bool], timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


@pytest.fixture
def manager(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ServiceManager]:
    def stand_in(app: str, dc: str, **_: object) -> list[str]:
        return [sys.executable, "-c", _STAND_IN, app, dc]

    monkeypatch.setattr(service_manager_module, "app_argv", stand_in)
    settings = PhotonSettings(logs_root=tmp_path / "logs", dcs=["a", "b"])
    manager = ServiceManager(settings, log_dir=tmp_path / "app-logs", stop_timeout_s=5)
    try:
        yield manager
    finally:
        manager.stop()


def test_apps_held_for_a_crash_start_once_it_came(manager: ServiceManager, tmp_path: Path) -> None:
    go = tmp_path / "crash-now"
    armed = {"STAND_IN_CRASH": str(go), "STAND_IN_EXIT": str(CRASH_EXIT_CODE)}
    manager.start(faulty={("b", JOINER): armed}, after_crash=[("a", JOINER)])
    wait_for(lambda: manager.streaming("b", JOINER) and manager.streaming("a", QUERY_READER))
    # a's joiner waits for b's crash: not running, held, and not a fault's target
    assert not manager.running("a", JOINER) and manager.held("a", JOINER)
    assert not manager.held("a", QUERY_READER) and not manager.held("b", JOINER)
    assert manager.kill("a", JOINER) is None
    assert manager.crashing()

    go.touch()
    assert manager.await_crash("b", JOINER, timeout_s=20) == CRASH_EXIT_CODE
    assert not manager.crashing() and not manager.held("a", JOINER)
    wait_for(lambda: manager.streaming("a", JOINER) and manager.streaming("b", JOINER))
    # b's joiner twice (the armed run, then afresh), every other app once
    assert dict(manager.events.starts) == {
        f"{app}[{dc}]": 2 if (dc, app) == ("b", JOINER) else 1
        for dc in ("a", "b")
        for app in (QUERY_READER, JOINER)
    }


def test_a_dc_taken_down_during_the_crash_keeps_its_held_apps_down(
    manager: ServiceManager, tmp_path: Path
) -> None:
    go = tmp_path / "crash-now"
    armed = {"STAND_IN_CRASH": str(go), "STAND_IN_EXIT": str(CRASH_EXIT_CODE)}
    manager.start(faulty={("b", JOINER): armed}, after_crash=[("a", JOINER)])
    wait_for(lambda: manager.streaming("b", JOINER))
    manager.take_down("a")
    go.touch()
    manager.await_crash("b", JOINER, timeout_s=20)
    assert manager.held("a", JOINER) and not manager.running("a", JOINER)
    manager.bring_up("a")
    wait_for(lambda: manager.streaming("a", JOINER))


def test_a_crashed_run_leaves_nothing_that_writes_into_its_wiped_state(
    manager: ServiceManager, tmp_path: Path
) -> None:
    """What outlived the crashed driver (its JVM, writing its checkpoint) is killed
    before the state is wiped: the new attempt finds none of the old one's files."""
    go = tmp_path / "crash-now"
    state = manager.settings.pipeline_dir("b", JOINER)
    armed = {
        "STAND_IN_CRASH": str(go),
        "STAND_IN_EXIT": str(CRASH_EXIT_CODE),
        "STAND_IN_ORPHAN": str(state),
    }
    manager.start(faulty={("b", JOINER): armed})
    wait_for(lambda: manager.streaming("b", JOINER))
    go.touch()
    assert manager.await_crash("b", JOINER, timeout_s=20) == CRASH_EXIT_CODE
    time.sleep(0.3)
    assert not (state / "checkpoint").exists()


def test_each_death_on_its_own_is_reported_with_its_status_in_order(
    manager: ServiceManager,
) -> None:
    """A crash loop shows in the report as the statuses of one app's runs."""
    manager.start()
    wait_for(lambda: manager.streaming("a", JOINER))

    def restarted(killed: int) -> Callable[[], bool]:
        return lambda: manager.pids().get(f"{JOINER}[a]", killed) != killed

    for _ in range(2):
        pid = manager.kill("a", JOINER)
        assert pid is not None  # restarted after the manager's delay: a new process
        wait_for(restarted(pid))
        wait_for(lambda: manager.streaming("a", JOINER))
    assert manager.events.exit_codes() == {"joiner[a]": [-9, -9]}


def test_a_kill_followed_at_once_by_an_outage_is_reported_as_the_kill(
    manager: ServiceManager,
) -> None:
    """A kill and a DC outage may strike in one moment (late faults on a slow machine):
    the killed run's SIGKILL is in the report though the outage holds its DC at once."""
    manager.start()
    wait_for(lambda: manager.streaming("b", JOINER) and manager.streaming("b", QUERY_READER))
    assert manager.kill("b", JOINER) is not None
    manager.take_down("b")  # before the watcher's next look
    time.sleep(0.5)
    assert manager.events.exit_codes() == {"joiner[b]": [-9]}  # the outage's kills are not
    manager.bring_up("b")
    wait_for(lambda: manager.streaming("b", JOINER))
    assert manager.events.starts["joiner[b]"] == 2
