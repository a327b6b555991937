"""The end-to-end tests' process helper (tests/e2e/helpers.py): bounded however a block ends."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest

from tests.e2e.helpers import running

pytestmark = pytest.mark.unit

#: A command that takes no notice of SIGTERM and never ends by itself.
STUBBORN = [
    sys.executable,
    "-c",
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
    "print('ready', flush=True); time.sleep(600)",
]


def test_a_block_that_fails_leaves_no_process_running_and_does_not_wait_for_it() -> None:
    started = time.monotonic()
    with (
        pytest.raises(RuntimeError, match="the test failed"),
        running(STUBBORN, grace_s=0.5, stdout=subprocess.PIPE, text=True) as process,
    ):
        assert process.stdout is not None and process.stdout.readline() == "ready\n"
        raise RuntimeError("the test failed")
    assert process.returncode == -signal.SIGKILL  # SIGTERM ignored, SIGKILL after the grace
    assert time.monotonic() - started < 30


def test_a_command_that_ends_in_the_block_is_left_as_it_ended() -> None:
    argv = [sys.executable, "-c", "raise SystemExit(3)"]
    with running(argv, stdout=subprocess.PIPE, text=True) as process:
        out, _ = process.communicate(timeout=60)
    assert (process.returncode, out) == (3, "")


def test_a_command_writing_as_it_stops_is_read_not_left_blocked_on_a_full_pipe() -> None:
    """Its SIGTERM handler writes 1 MiB (far more than a pipe holds) before it exits."""
    argv = [
        sys.executable,
        "-c",
        "import signal, sys, time\n"
        "def bye(*_):\n"
        "    sys.stdout.write('x' * (1 << 20)); sys.stdout.flush(); sys.exit(0)\n"
        "signal.signal(signal.SIGTERM, bye)\n"
        "print('ready', flush=True)\n"
        "time.sleep(600)\n",
    ]
    started = time.monotonic()
    with running(argv, grace_s=20, stdout=subprocess.PIPE, text=True) as process:
        assert process.stdout is not None and process.stdout.readline() == "ready\n"
    assert process.returncode == 0  # it exited on its own, not killed after the grace
    assert time.monotonic() - started < 15
