"""A watchdog that bounds every test, and a worker's exit, whatever the test does.

pytest-timeout's default method arms SIGALRM. Airflow takes that signal over: loading
a ``DagBag`` (its import timeout) and running a task (its execution timeout) set their
own SIGALRM handler and, as they finish, cancel the timer, pytest-timeout's with it.
A test that loaded a DAG then ran with no bound at all: a hang in one kept CI waiting
until its own limit killed the whole run, with nothing said of where it hung.

This watchdog is a thread, which no signal handler can disarm. It fires a grace period
after the test's own timeout (pytest-timeout, where it still holds, fails the test first
and lets its fixtures clean up). Firing, it prints every thread's stack to the worker's
real stderr, stops every process the worker started (servers, Spark, subprocesses:
their session is not the worker's, so a signal to its group would miss them), and exits
the worker: pytest-xdist reports the test as crashed, and `make test`, which allows no
worker restart, ends the run there (a new worker would be handed the same test).

How it fails: it cannot interrupt a thread holding the GIL in C code forever (none of
ours does); a stack it prints may be cut short if the worker dies meanwhile.
"""

from __future__ import annotations

import faulthandler
import os
import threading
from typing import IO

import psutil
import pytest

from photon.tooling.stack.process import terminate_then_kill

#: After a test's own timeout, how long the watchdog waits for pytest-timeout to fail it
#: and for the test's fixtures to stop what it started.
GRACE_S = 120.0

#: How long a worker may take to exit once its session is over (threads, servers).
EXIT_LIMIT_S = 300.0

#: Without a timeout of its own (``timeout(0)``), a test is still bounded by this.
UNBOUNDED_TEST_LIMIT_S = 3600.0


def limit_of(item: pytest.Item) -> float:
    """The test's own pytest-timeout limit: its marker's, else the ini file's."""
    marker = item.get_closest_marker("timeout")
    raw = None
    if marker is not None:
        raw = marker.args[0] if marker.args else marker.kwargs.get("timeout")
    if raw is None:
        raw = item.config.getini("timeout")
    limit = float(raw or 0)
    return limit if limit > 0 else UNBOUNDED_TEST_LIMIT_S


def stop_children(grace_s: float = 10.0) -> None:
    """Terminate every descendant of this process, then kill those still running."""
    terminate_then_kill(psutil.Process().children(recursive=True), timeout_s=grace_s)


class Watchdog:
    """One timer for the test running now, writing to a stream the test cannot capture."""

    def __init__(self, stream: IO[str]) -> None:
        self._stream = stream
        self._timer: threading.Timer | None = None

    def arm(self, what: str, after_s: float) -> None:
        self.disarm()
        self._timer = threading.Timer(after_s, self._fire, args=(what, after_s))
        self._timer.daemon = True
        self._timer.name = "photon-test-watchdog"
        self._timer.start()

    def disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _fire(self, what: str, after_s: float) -> None:
        try:
            self._stream.write(
                f"\n{'+' * 30} watchdog {'+' * 30}\n"
                f"{what} still running {after_s:.0f} s after it started (pid {os.getpid()}): "
                "every thread's stack follows; the worker's processes are stopped and the "
                "worker exits.\n"
            )
            self._stream.flush()
            faulthandler.dump_traceback(file=self._stream, all_threads=True)
            self._stream.flush()
            stop_children()
        finally:
            os._exit(1)
