"""The apps' fork server (spark_apps/fork_server.py) with real processes: PySpark's daemon
started through the launcher as Spark starts it, and a Spark app whose Python processes
the server forks."""

from __future__ import annotations

import os
import signal
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from photon.tooling.runs import wait_until
from spark_apps.fork_client import SOCKET_ENV
from spark_apps.fork_server import DIRECTORY_PREFIX, MODULE
from spark_apps.session import SPARK_PYTHON_LAUNCHER

pytestmark = pytest.mark.integration


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], Path]]:
    directory = tmp_path / "fork"
    directory.mkdir(mode=0o700)
    socket_path = directory / "s"
    process = subprocess.Popen([sys.executable, "-m", MODULE, str(socket_path)],
                               stdin=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    deadline = time.monotonic() + 60
    while not socket_path.exists():
        assert process.poll() is None, process.stderr.read() if process.stderr else ""
        assert time.monotonic() < deadline, "the server did not start serving"
        time.sleep(0.05)
    yield process, socket_path
    if process.stdin is not None:
        process.stdin.close()
    process.wait(timeout=30)


def _children(pid: int) -> set[int]:
    found: set[int] = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        found.update(int(child) for child in (task / "children").read_text().split())
    return found


#: How PySpark's daemon exits, on SIGTERM and when its stdin ends alike (its ``finally``).
DAEMON_EXIT_CODE = 1


def _pyspark_daemon(socket_path: Path | None, cwd: Path | None = None) -> subprocess.Popen[bytes]:
    """PySpark's daemon as Spark starts it: through the launcher, its stdin and stdout
    Spark's pipes. It writes its port to stdout and ends when stdin does."""
    env = dict(os.environ, SPARK_PYTHON_INTERPRETER=sys.executable)
    env.pop(SOCKET_ENV, None)
    if socket_path is not None:
        env[SOCKET_ENV] = str(socket_path)
    return subprocess.Popen(
        [str(SPARK_PYTHON_LAUNCHER), "-m", "pyspark.daemon"], stdin=subprocess.PIPE,
        stdout=subprocess.PIPE, env=env, cwd=cwd,
    )  # fmt: skip


def _port(daemon: subprocess.Popen[bytes]) -> int:
    assert daemon.stdout is not None
    (port,) = struct.unpack("!i", daemon.stdout.read(4))
    return int(port)


def _gone(pid: int, within_s: float = 30) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                return True
        except FileNotFoundError:
            return True
        time.sleep(0.05)
    return False


def test_a_process_spark_starts_is_forked_by_the_server_with_spark_s_streams(
    server: tuple[subprocess.Popen[bytes], Path],
) -> None:
    process, socket_path = server
    daemon = _pyspark_daemon(socket_path)
    assert _port(daemon) > 0  # written to Spark's pipe, by the forked child
    (child,) = _children(process.pid)
    assert child != daemon.pid
    # named as Spark started it, as operators and tools look for it
    assert b" -m pyspark.daemon" in Path(f"/proc/{child}/cmdline").read_bytes()
    assert daemon.stdin is not None
    daemon.stdin.close()  # Spark closes it: the daemon ends, and its stand-in as it did
    assert daemon.wait(timeout=30) == DAEMON_EXIT_CODE
    assert _gone(child)


def _forked_daemon(
    server: tuple[subprocess.Popen[bytes], Path],
) -> tuple[subprocess.Popen[bytes], int]:
    """PySpark's daemon through the server, serving (its port read): its client, its pid."""
    process, socket_path = server
    daemon = _pyspark_daemon(socket_path)
    _port(daemon)
    (child,) = _children(process.pid)
    return daemon, child


def _wait_until_it_handles_sigterm(pid: int) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        status = Path(f"/proc/{pid}/status").read_text()
        caught = int(
            next(line for line in status.splitlines() if line.startswith("SigCgt:")).split()[1], 16
        )
        if caught & (1 << (signal.SIGTERM - 1)):
            return
        time.sleep(0.02)
    raise AssertionError("the daemon never handled SIGTERM")


def test_a_signal_to_the_stand_in_reaches_the_child_and_its_exit_is_the_stand_ins(
    server: tuple[subprocess.Popen[bytes], Path],
) -> None:
    daemon, child = _forked_daemon(server)
    _wait_until_it_handles_sigterm(child)  # the daemon writes its port before it does
    daemon.send_signal(signal.SIGTERM)  # how Spark stops its daemon
    assert daemon.wait(timeout=30) == DAEMON_EXIT_CODE  # not -SIGTERM: the daemon's own exit
    assert _gone(child)


def test_a_killed_stand_in_has_its_child_killed_by_the_server(
    server: tuple[subprocess.Popen[bytes], Path],
) -> None:
    process, socket_path = server
    daemon, child = _forked_daemon(server)
    daemon.kill()
    daemon.wait(timeout=30)
    assert _gone(child)
    assert process.poll() is None  # and serves on
    again = _pyspark_daemon(socket_path)
    assert _port(again) > 0 and len(_children(process.pid)) == 1
    again.kill()
    again.wait(timeout=30)


@pytest.mark.parametrize("how", ["no server", "another working directory"])
def test_without_the_server_the_launcher_runs_the_interpreter_itself(
    server: tuple[subprocess.Popen[bytes], Path], tmp_path: Path, how: str
) -> None:
    process, socket_path = server
    if how == "no server":
        daemon = _pyspark_daemon(tmp_path / "absent")
    else:
        daemon = _pyspark_daemon(socket_path, cwd=tmp_path)
    assert _port(daemon) > 0
    assert not _children(process.pid)
    # the launcher became the daemon
    assert b"pyspark.daemon" in Path(f"/proc/{daemon.pid}/cmdline").read_bytes()
    assert daemon.stdin is not None
    daemon.stdin.close()
    assert daemon.wait(timeout=30) == DAEMON_EXIT_CODE


#: A Photon app's session with its fork server: a task's daemon, and the log source's
#: processes for a stream's batch, are the server's children.
DRIVER = """
import os, sys, time
from pathlib import Path
from photon.settings import PipelineSettings
from spark_apps.session import photon_session, start_fork_server

pipeline = PipelineSettings(spark_master="local[1]")
if sys.argv[3] == "threaded":  # a driver that runs a thread already
    import threading
    threading.Thread(target=time.sleep, args=(60,), daemon=True).start()
server = start_fork_server(pipeline)
assert server is not None
print("forked from the driver", server.forked)
spark = photon_session("photon-test-fork-server", pipeline)

def daemon_parent(_rows):
    with open(f"/proc/{os.getppid()}/stat") as stat:
        yield int(stat.read().rsplit(")", 1)[1].split()[1])

print("task daemon's parent is the server",
      spark.sparkContext.parallelize([0], 1).mapPartitions(daemon_parent).collect()
      == [server.pid])
logs = Path(sys.argv[1])
(logs / "a.log").write_bytes(b"one\\ntwo\\nthree\\n")
rows = []
query = (spark.readStream.format("photon_growing_log").option("path", str(logs)).load()
         .writeStream.foreachBatch(lambda df, _: rows.extend(df.collect()))
         .option("checkpointLocation", sys.argv[2]).start())
deadline = time.monotonic() + 120
while len(rows) < 3 and time.monotonic() < deadline:
    time.sleep(0.2)
print("lines", sorted(bytes(r.raw) for r in rows))
query.stop()
spark.stop()
"""


@pytest.mark.parametrize("driver", ["one thread", "threaded"])
def test_a_photon_apps_spark_python_processes_are_forked_by_its_server(
    tmp_path: Path, driver: str
) -> None:
    """Forked from the driver while it is one thread; a new interpreter otherwise."""
    logs = tmp_path / "logs"
    logs.mkdir()
    result = subprocess.run(
        [sys.executable, "-c", DRIVER, str(logs), str(tmp_path / "checkpoint"), driver],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"forked from the driver {driver == 'one thread'}" in result.stdout, result.stdout
    assert "task daemon's parent is the server True" in result.stdout, result.stdout
    assert "lines [b'one', b'three', b'two']" in result.stdout, result.stdout
    assert "refused" not in result.stderr, result.stderr[-3000:]


#: A driver that starts its server and, once it serves, waits to be killed (it exits
#: with nothing printed if the server never serves: the test fails, it does not hang).
KILLED_DRIVER = """
import signal, sys, time
from spark_apps import fork_server
server = fork_server.start()
deadline = time.monotonic() + 60
while not server.socket_path.exists():
    if time.monotonic() > deadline:
        sys.exit("the server did not start serving")
    time.sleep(0.05)
print(server.pid, server.directory, flush=True)
signal.pause()
"""


def _driver(
    env: dict[str, str], *, own_group: bool = False
) -> tuple[subprocess.Popen[str], int, Path]:
    """A :data:`KILLED_DRIVER` serving: the process, its server's pid, its directory."""
    driver = subprocess.Popen([sys.executable, "-c", KILLED_DRIVER], stdout=subprocess.PIPE,
                              text=True, env=env, start_new_session=own_group)  # fmt: skip
    assert driver.stdout is not None
    pid, directory = driver.stdout.readline().split()
    return driver, int(pid), Path(directory)


def test_a_killed_driver_s_server_stops_and_removes_its_socket_s_directory() -> None:
    """SIGKILL gives the driver no exit of its own to clean up at: the server does."""
    driver, pid, directory = _driver(dict(os.environ))
    assert directory.is_dir()
    driver.kill()
    driver.wait(timeout=30)
    assert _gone(pid)
    assert wait_until(lambda: not directory.exists(), 30, 0.05)


def test_a_driver_killed_with_its_server_leaves_a_directory_the_next_start_removes(
    tmp_path: Path,
) -> None:
    """SIGKILL to the whole process group, as supervisors and the chaos tests send it:
    nothing is left running to clean up, so the next app's start does; a live server's
    directory, a new one's and anything not a server's stay."""
    env = dict(os.environ, TMPDIR=str(tmp_path))
    env.pop(SOCKET_ENV, None)
    live, _live_server, live_directory = _driver(env)
    try:
        killed, killed_server, killed_directory = _driver(env, own_group=True)
        os.killpg(killed.pid, signal.SIGKILL)
        killed.wait(timeout=30)
        assert _gone(killed_server)
        assert {p.name for p in killed_directory.iterdir()} == {"s", "lock"}

        # From before servers locked their directories: no lock, a socket no one
        # listens on, an hour old. And one just made (its lock not made yet).
        legacy = tmp_path / f"{DIRECTORY_PREFIX}legacy"
        legacy.mkdir(mode=0o700)
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as dead:
            dead.bind(str(legacy / "s"))
        hour_ago = time.time() - 3600
        os.utime(legacy, (hour_ago, hour_ago))
        new = tmp_path / f"{DIRECTORY_PREFIX}new"
        new.mkdir(mode=0o700)
        unrelated = tmp_path / "photon-forks"
        unrelated.mkdir()

        next_app = subprocess.run([sys.executable, "-c", STARTING_DRIVER], env=env,
                                  capture_output=True, text=True, timeout=120)  # fmt: skip
        assert next_app.returncode == 0, next_app.stderr[-3000:]
        assert not killed_directory.exists()
        assert not legacy.exists()
        assert live_directory.is_dir() and (live_directory / "s").exists()
        assert new.is_dir() and unrelated.is_dir()
        assert not Path(next_app.stdout.strip()).exists()  # its own, removed as it exited
    finally:
        live.terminate()  # SIGTERM: no atexit, so its server cleans up after it
        live.wait(timeout=30)
    assert wait_until(lambda: not live_directory.exists(), 30, 0.05)


#: A driver that starts its server (which sweeps first) and exits normally.
STARTING_DRIVER = """
from spark_apps import fork_server
print(fork_server.start().directory)
"""
