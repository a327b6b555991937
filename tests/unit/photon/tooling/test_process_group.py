"""An app's process group reaped whole: what outlives its leader (a Spark driver's JVM
and workers) is killed and waited for, so it writes nothing after."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from photon.tooling.process_group import group_members, reap_group, start_app

pytestmark = pytest.mark.unit

#: A leader that starts a child writing a line a tick to a file (as an orphaned JVM
#: goes on writing a checkpoint), says the child's pid, then waits to be killed.
_LEADER = """
import subprocess, sys, time
writer = (
    "import sys, time\\nwhile True:\\n"
    "    open(sys.argv[1], 'a').write('x\\\\n'); time.sleep(0.02)"
)
child = subprocess.Popen([sys.executable, "-c", writer, sys.argv[1]])
print(child.pid, flush=True)
time.sleep(600)
"""


def _leader(tmp_path: Path) -> tuple[subprocess.Popen[bytes], int, Path]:
    written = tmp_path / "checkpoint"
    out = tmp_path / "leader.out"
    with out.open("wb") as output:
        leader = start_app(
            [sys.executable, "-c", _LEADER, str(written)], output=output, env=os.environ
        )
    deadline = time.monotonic() + 20
    while not (out.read_text().strip() and written.exists()):
        assert time.monotonic() < deadline, "the leader did not start its child"
        time.sleep(0.05)
    return leader, int(out.read_text().split()[0]), written


def test_what_outlives_a_killed_leader_is_killed_and_writes_nothing_after(
    tmp_path: Path,
) -> None:
    leader, child, written = _leader(tmp_path)
    assert os.getpgid(leader.pid) == leader.pid != os.getpgid(0)  # a group of its own
    leader.send_signal(signal.SIGKILL)
    leader.wait()
    time.sleep(0.2)
    assert psutil.pid_exists(child)  # orphaned, still writing: what the reap is for
    assert reap_group(leader) == [child]
    assert not group_members(leader.pid)
    size = written.stat().st_size
    time.sleep(0.2)
    assert written.stat().st_size == size  # nothing written once it returned


def test_a_kept_process_outlives_the_reap(tmp_path: Path) -> None:
    leader, child, _ = _leader(tmp_path)
    leader.kill()
    leader.wait()
    try:
        assert reap_group(leader, keep=(child,)) == []
        assert psutil.Process(child).is_running()
    finally:
        os.kill(child, signal.SIGKILL)


def test_a_group_that_ended_with_its_leader_has_nothing_to_reap(tmp_path: Path) -> None:
    with (tmp_path / "out").open("wb") as output:
        leader = start_app([sys.executable, "-c", "pass"], output=output, env=os.environ)
    leader.wait()
    assert reap_group(leader) == []


def test_a_running_leader_is_not_reaped(tmp_path: Path) -> None:
    with (tmp_path / "out").open("wb") as output:
        leader = start_app(
            [sys.executable, "-c", "import time; time.sleep(60)"], output=output, env=os.environ
        )
    try:
        with pytest.raises(ValueError, match="still runs"):
            reap_group(leader)
    finally:
        leader.kill()
        leader.wait()
