"""What the e2e tests share: the `photon` command as users run it, fast retry settings."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from pathlib import Path

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


def dc_app(run: subprocess.Popen[str], dc: str) -> psutil.Process | None:
    """The app process `photon run` started for ``dc`` (its Spark driver's Python side)."""
    for child in psutil.Process(run.pid).children():
        with contextlib.suppress(psutil.NoSuchProcess):
            argv = child.cmdline()
            if "--dc" in argv and argv[argv.index("--dc") + 1] == dc:
                return child
    return None
