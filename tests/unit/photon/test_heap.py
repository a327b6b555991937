"""The cyclic collector paused while a batch's objects are made, and as it was after."""

from __future__ import annotations

import gc

import pytest

from photon.heap import collector_paused

pytestmark = pytest.mark.unit


@pytest.mark.usefixtures("collecting")
def test_no_collection_inside_and_collecting_again_after() -> None:
    with collector_paused():
        assert not gc.isenabled()
    assert gc.isenabled()


@pytest.mark.usefixtures("collecting")
def test_collecting_again_after_an_error_inside() -> None:
    with pytest.raises(RuntimeError), collector_paused():
        raise RuntimeError("a bad batch")
    assert gc.isenabled()


@pytest.mark.usefixtures("collecting")
def test_a_collector_turned_off_before_stays_off() -> None:
    gc.disable()
    with collector_paused():
        pass
    assert not gc.isenabled()
