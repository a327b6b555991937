from __future__ import annotations

import pytest

from photon.runs import StreamClock

pytestmark = pytest.mark.unit


def test_a_held_stream_clock_stands_still_and_goes_on_where_it_stood() -> None:
    wall = [1_000.0]
    clock = StreamClock(wall=lambda: wall[0])
    assert clock() == 1_000.0
    wall[0] += 5
    clock.hold()
    wall[0] += 30
    assert clock() == 1_005.0 and clock.held_s == 30
    clock.hold()  # held already: the hold began when it first did
    wall[0] += 10
    clock.resume()
    assert clock() == 1_005.0 and clock.held_s == 40
    wall[0] += 2
    clock.resume()  # not held: nothing changes
    assert clock() == 1_007.0 and clock.held_s == 40
