"""The stacks' one supervisor, with real (small) processes: it records what it starts at
once, stops exactly those, and fails fast on one that died, quoting its output."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from photon.errors import PhotonError
from photon.tooling.stack import process
from photon.tooling.stack.supervisor import SupervisedState, Supervisor

pytestmark = pytest.mark.integration


class DemoState(SupervisedState):
    label: str = ""


class DemoError(PhotonError, RuntimeError):
    pass


def _python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


@pytest.fixture
def supervisor(tmp_path: Path) -> Supervisor[DemoState]:
    return Supervisor(tmp_path / "demo.json", DemoState, what="demo stack", error=DemoError)


def test_a_start_is_recorded_at_once_and_stop_signals_exactly_the_recorded(
    supervisor: Supervisor[DemoState], tmp_path: Path
) -> None:
    state = DemoState(label="x")
    sleeper = supervisor.start(
        state,
        "sleeper",
        _python("import time; time.sleep(60)"),
        output=tmp_path / "sleeper.log",
        ports={"demo.port": 1},
        directory=tmp_path,
    )
    bystander = psutil.Popen(_python("import time; time.sleep(60)"))
    try:
        recorded = supervisor.load()
        assert recorded is not None and recorded.label == "x"
        assert recorded.services["sleeper"].pid == sleeper.pid
        assert recorded.services["sleeper"].ports == {"demo.port": 1}
        assert supervisor.running(recorded) == {"sleeper"}

        stopped, gone = supervisor.stop(recorded, ["sleeper", "never-started"])
        assert (stopped, gone) == (["sleeper"], [])
        assert not process.is_running(sleeper.identity)
        assert bystander.is_running()  # not ours: never signalled
        assert supervisor.load() is None  # nothing left: the state file is gone
    finally:
        bystander.kill()
        bystander.wait()


def test_a_process_that_dies_while_starting_fails_the_wait_at_once_with_its_output(
    supervisor: Supervisor[DemoState], tmp_path: Path
) -> None:
    state = DemoState()
    supervisor.start(
        state,
        "crasher",
        _python("import sys; print('port 1234 is taken', flush=True); sys.exit(3)"),
        output=tmp_path / "crasher.log",
    )
    started = time.monotonic()
    with pytest.raises(DemoError) as failure:
        supervisor.wait(state, lambda: False, "the demo", timeout_s=60)
    assert time.monotonic() - started < 30  # not the whole timeout
    message = str(failure.value)
    assert message.startswith("demo stack did not start: crasher exited during start")
    assert "port 1234 is taken" in message


def test_a_process_never_ready_fails_the_wait_at_its_deadline_with_the_problems(
    supervisor: Supervisor[DemoState], tmp_path: Path
) -> None:
    state = DemoState()
    record = supervisor.start(
        state, "slow", _python("import time; time.sleep(60)"), output=tmp_path / "slow.log"
    )
    try:
        with pytest.raises(DemoError, match=r"slow the demo not ready in time\n") as failure:
            supervisor.wait(state, lambda: False, "the demo", timeout_s=0.5, detail=lambda: "no")
        assert str(failure.value).endswith("problems: no")
    finally:
        supervisor.stop(state, ["slow"])
    assert not process.is_running(record.identity)


def test_locked_makes_a_second_holder_wait(supervisor: Supervisor[DemoState]) -> None:
    code = (
        "from pathlib import Path\n"
        "from photon.errors import PhotonError\n"
        "from photon.tooling.stack.supervisor import SupervisedState, Supervisor\n"
        f"s = Supervisor(Path({str(supervisor.state_path)!r}), SupervisedState, what='d',"
        " error=PhotonError)\n"
        "print('waiting', flush=True)\n"
        "with s.locked():\n"
        "    print('acquired', flush=True)\n"
    )
    with supervisor.locked():
        other = psutil.Popen(_python(code), stdout=subprocess.PIPE, text=True)
        assert other.stdout is not None
        assert other.stdout.readline() == "waiting\n"
        time.sleep(0.5)
        assert other.poll() is None  # blocked on the lock this test holds
    out, _ = other.communicate(timeout=30)
    assert out == "acquired\n"


def test_a_wait_watches_only_the_processes_it_is_told_to(
    supervisor: Supervisor[DemoState], tmp_path: Path
) -> None:
    """`photon up` restarting one service watches what it started, not an old record."""
    state = DemoState()
    gone = supervisor.start(state, "gone", _python("pass"), output=tmp_path / "gone.log")
    psutil.Process(gone.pid).wait(timeout=30)
    supervisor.wait(state, lambda: True, "the demo", timeout_s=5, watched=["fresh"])
    with pytest.raises(DemoError, match="gone exited during start"):
        supervisor.wait(state, lambda: True, "the demo", timeout_s=5)


def test_a_wall_clock_step_does_not_hide_a_recorded_process_from_stop(
    supervisor: Supervisor[DemoState], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """NTP or a VM's clock sync steps the wall clock; a process's start time in
    wall-clock terms moves with it. Compared so, ``photon down`` took every server
    for gone and left it running; compared by the time since boot, it stops them."""
    state = DemoState()
    sleeper = supervisor.start(
        state, "sleeper", _python("import time; time.sleep(60)"), output=tmp_path / "s.log"
    )
    boot_time, create_time = psutil.boot_time, psutil.Process.create_time
    step_s = 120.0  # the clock stepped two minutes ahead since the start
    monkeypatch.setattr(psutil, "boot_time", lambda: boot_time() + step_s)
    monkeypatch.setattr(psutil.Process, "create_time", lambda p: create_time(p) + step_s)
    recorded = supervisor.load()
    assert recorded is not None
    assert supervisor.running(recorded) == {"sleeper"}
    # A record from before the time since boot was kept is compared as before.
    old = process.ProcessIdentity(sleeper.pid, sleeper.started_at)
    assert not process.is_running(old)
    stopped, gone = supervisor.stop(recorded, ["sleeper"])
    assert (stopped, gone) == (["sleeper"], [])
    monkeypatch.undo()
    assert not process.is_running(sleeper.identity)
