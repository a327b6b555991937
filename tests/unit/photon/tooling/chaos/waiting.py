"""Waiting in the chaos harness's unit tests: for a thread or a process to get somewhere."""

from __future__ import annotations

import time
from collections.abc import Callable


def until(condition: Callable[[], bool], timeout_s: float = 5.0, step_s: float = 0.01) -> bool:
    """Whether ``condition`` came true within ``timeout_s``, asked every ``step_s``."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(step_s)
    return True
