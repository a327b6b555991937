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
