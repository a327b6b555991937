"""Fixtures the unit tests share."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest


@pytest.fixture
def collecting() -> Iterator[None]:
    """The cyclic collector on for the test, and as it was after it."""
    was = gc.isenabled()
    gc.enable()
    yield
    # Exactly as it was: a test that turned it off must not leave it off for the next.
    if was:
        gc.enable()
    else:
        gc.disable()
