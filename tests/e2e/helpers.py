"""What the e2e tests share: the `photon` command as users run it, fast retry settings."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil

PHOTON = str(Path(sys.executable).parent / "photon")

FAST_RETRIES = {
    "PHOTON_RETRY__INITIAL_BACKOFF_S": "0.5",
    "PHOTON_RETRY__MAX_BACKOFF_S": "2",
    "PHOTON_RETRY__MAX_ATTEMPTS": "4",
    "PHOTON_RETRY__MAX_AGE_S": "6",
}


def photon(env: dict[str, str], *args: str, timeout: float = 400) -> str:
    result = subprocess.run(
        [PHOTON, "--log-level", "warning", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result.stdout


def stop(process: subprocess.Popen[Any], grace_s: float = 60.0) -> None:
    """SIGTERM (a `photon` command then stops the apps it started), SIGKILL ``grace_s``
    later; never an unbounded wait, whatever holds the process's pipes."""
    if process.poll() is None:
        process.terminate()
        try:
            _drain_and_wait(process, grace_s)
        except subprocess.TimeoutExpired:
            process.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                _drain_and_wait(process, 30)
    for pipe in (process.stdin, process.stdout, process.stderr):
        if pipe is not None:
            with contextlib.suppress(OSError):
                pipe.close()


def _drain_and_wait(process: subprocess.Popen[Any], timeout_s: float) -> None:
    """Wait, reading its pipes meanwhile: a command stopping may write more than a pipe
    holds, and would block on it."""
    pipes = [p for p in (process.stdout, process.stderr) if p is not None and not p.closed]
    if pipes:
        with contextlib.suppress(ValueError, OSError):  # pipes a communicate() left unusable
            process.communicate(timeout=timeout_s)
    process.wait(timeout=timeout_s)


@contextlib.contextmanager
def running(
    argv: list[str], grace_s: float = 60.0, **popen: Any
) -> Iterator[subprocess.Popen[Any]]:
    """A process for the block, stopped by :func:`stop` as the block ends, however it ends.

    ``with subprocess.Popen(...)`` waits for the process without a bound as its block
    ends: a test stopped by its timeout in that block would wait there for good on a
    command that does not end (and keep the worker, and the suite, waiting with it).
    """
    process = subprocess.Popen(argv, **popen)
    try:
        yield process
    finally:
        stop(process, grace_s)


def dc_app(run: subprocess.Popen[str], dc: str) -> psutil.Process | None:
    """The app process `photon run` started for ``dc`` (its Spark driver's Python side)."""
    for child in psutil.Process(run.pid).children():
        with contextlib.suppress(psutil.NoSuchProcess):
            argv = child.cmdline()
            if "--dc" in argv and argv[argv.index("--dc") + 1] == dc:
                return child
    return None
