from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from photon.settings import PhotonSettings
from photon.tooling.chaos.metered_stream import MeteredStream
from photon.tooling.runs import StreamClock, wait_until

pytestmark = pytest.mark.unit


def _held(clock: StreamClock) -> Callable[[], bool]:
    def held() -> bool:
        before = clock()
        time.sleep(0.03)
        return clock() == before

    return held


def test_the_stream_is_held_while_the_joiner_has_unread_clicks_and_flows_when_it_has_none() -> None:
    clock = StreamClock()
    unread = [0]
    with MeteredStream(clock, PhotonSettings(), "a", check_s=0.01, unread=lambda: unread[0]):
        assert not _held(clock)()  # caught up: the stream flows
        unread[0] = 512  # the writer wrote, the joiner has not read it yet
        assert wait_until(_held(clock), 5.0, 0.01)
        unread[0] = 0
        assert wait_until(lambda: not _held(clock)(), 5.0, 0.01)
        unread[0] = 1
        assert wait_until(_held(clock), 5.0, 0.01)
    assert not _held(clock)()  # left as it found it


def test_a_hold_beside_the_meter_keeps_the_stream_held_and_an_unreadable_backlog_holds_it() -> None:
    clock = StreamClock()

    def unreadable() -> int:
        raise OSError("a checkpoint being written")

    clock.hold()  # another fault's
    with MeteredStream(clock, PhotonSettings(), "a", check_s=0.01, unread=unreadable):
        time.sleep(0.05)
    assert _held(clock)()  # the meter's exit did not end the other fault's hold
    clock.resume()
    assert not _held(clock)()
    with MeteredStream(clock, PhotonSettings(), "a", check_s=0.01, unread=unreadable):
        assert wait_until(_held(clock), 5.0, 0.01)
    assert not _held(clock)()
