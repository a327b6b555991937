"""The chaos supervisor with stand-in apps: small processes in place of the Spark apps.

Each stand-in says ``stream.started`` as the apps do; the one run armed to crash
exits with the crash's code once a file appears (the test decides when).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from photon.faults import CRASH_EXIT_CODE
from photon.join.runtime import JOINER, QUERY_READER
from photon.settings import PhotonSettings
from photon.tooling.chaos import supervisor as supervisor_module
from photon.tooling.chaos.supervisor import Supervisor

pytestmark = pytest.mark.unit

_STAND_IN = """
import os, pathlib, sys, time
print("stream.started", flush=True)
if os.environ.get("STAND_IN_CRASH"):
    while not pathlib.Path(os.environ["STAND_IN_CRASH"]).exists():
        time.sleep(0.05)
    sys.exit(int(os.environ["STAND_IN_EXIT"]))
time.sleep(600)
"""


def wait_for(condition: Callable[[], bool], timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


@pytest.fixture
def supervisor(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Supervisor]:
    def stand_in(app: str, dc: str, **_: object) -> list[str]:
        return [sys.executable, "-c", _STAND_IN, app, dc]

    monkeypatch.setattr(supervisor_module, "app_argv", stand_in)
    settings = PhotonSettings(logs_root=tmp_path / "logs", dcs=["a", "b"])
    supervisor = Supervisor(settings, log_dir=tmp_path / "app-logs", stop_timeout_s=5)
    try:
        yield supervisor
    finally:
        supervisor.stop()


def test_apps_held_for_a_crash_start_once_it_came(supervisor: Supervisor, tmp_path: Path) -> None:
    go = tmp_path / "crash-now"
    armed = {"STAND_IN_CRASH": str(go), "STAND_IN_EXIT": str(CRASH_EXIT_CODE)}
    supervisor.start(faulty={("b", JOINER): armed}, after_crash=[("a", JOINER)])
    wait_for(lambda: supervisor.streaming("b", JOINER) and supervisor.streaming("a", QUERY_READER))
    # a's joiner waits for b's crash: not running, held, and not a fault's target
    assert not supervisor.running("a", JOINER) and supervisor.held("a", JOINER)
    assert not supervisor.held("a", QUERY_READER) and not supervisor.held("b", JOINER)
    assert supervisor.kill("a", JOINER) is None
    assert supervisor.crashing()

    go.touch()
    assert supervisor.await_crash("b", JOINER, timeout_s=20) == CRASH_EXIT_CODE
    assert not supervisor.crashing() and not supervisor.held("a", JOINER)
    wait_for(lambda: supervisor.streaming("a", JOINER) and supervisor.streaming("b", JOINER))
    # b's joiner twice (the armed run, then afresh), every other app once
    assert dict(supervisor.events.starts) == {
        f"{app}[{dc}]": 2 if (dc, app) == ("b", JOINER) else 1
        for dc in ("a", "b")
        for app in (QUERY_READER, JOINER)
    }


def test_a_dc_taken_down_during_the_crash_keeps_its_held_apps_down(
    supervisor: Supervisor, tmp_path: Path
) -> None:
    go = tmp_path / "crash-now"
    armed = {"STAND_IN_CRASH": str(go), "STAND_IN_EXIT": str(CRASH_EXIT_CODE)}
    supervisor.start(faulty={("b", JOINER): armed}, after_crash=[("a", JOINER)])
    wait_for(lambda: supervisor.streaming("b", JOINER))
    supervisor.take_down("a")
    go.touch()
    supervisor.await_crash("b", JOINER, timeout_s=20)
    assert supervisor.held("a", JOINER) and not supervisor.running("a", JOINER)
    supervisor.bring_up("a")
    wait_for(lambda: supervisor.streaming("a", JOINER))
