"""The suite's watchdog (tests/watchdog.py): why it is needed, and that it bounds a test."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time

import psutil
import pytest

from tests.watchdog import UNBOUNDED_TEST_LIMIT_S, limit_of

pytestmark = pytest.mark.unit


def test_airflows_dag_import_timeout_cancels_a_running_alarm() -> None:
    """What pytest-timeout's SIGALRM method meets in any test that loads a DAG."""
    from airflow.models.dagbag import timeout

    previous = signal.signal(signal.SIGALRM, lambda *_: None)
    try:
        signal.setitimer(signal.ITIMER_REAL, 600)
        with timeout(30):
            pass
        assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def test_a_hung_process_is_reported_and_ended_with_what_it_started() -> None:
    script = textwrap.dedent(
        """
        import subprocess, sys, time
        from tests.watchdog import Watchdog

        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
        print(child.pid, flush=True)
        Watchdog(sys.stderr).arm("a test that hangs", 1.0)

        def waiting_forever_here():
            time.sleep(120)

        waiting_forever_here()
        """
    )
    started = time.monotonic()
    hung = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        out, err = hung.communicate(timeout=60)
    finally:
        hung.kill()
    assert hung.returncode == 1
    assert time.monotonic() - started < 30
    assert "a test that hangs still running 1 s after it started" in err
    assert "waiting_forever_here" in err  # the main thread's stack
    child_pid = int(out.split()[0])
    assert not psutil.pid_exists(child_pid) or psutil.Process(child_pid).status() == "zombie"


def test_a_disarmed_watchdog_lets_the_process_finish() -> None:
    script = textwrap.dedent(
        """
        import sys, time
        from tests.watchdog import Watchdog

        watchdog = Watchdog(sys.stderr)
        watchdog.arm("a quick test", 0.5)
        watchdog.disarm()
        time.sleep(1.5)
        print("finished")
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert (done.returncode, done.stdout.strip(), done.stderr) == (0, "finished", "")


@pytest.mark.timeout(45)
def test_the_limit_is_the_tests_own_timeout(request: pytest.FixtureRequest) -> None:
    assert limit_of(request.node) == 45


def test_without_a_marker_the_limit_is_the_ini_files(request: pytest.FixtureRequest) -> None:
    assert limit_of(request.node) == float(request.config.getini("timeout"))


@pytest.mark.timeout(0)
def test_a_test_without_a_timeout_is_still_bounded(request: pytest.FixtureRequest) -> None:
    assert limit_of(request.node) == UNBOUNDED_TEST_LIMIT_S
