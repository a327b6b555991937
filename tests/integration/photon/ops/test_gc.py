"""GC of the IdRegistry (photon.ops.gc) on the real ensemble."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest

from photon.ops.gc import advance_and_collect
from registry import EventId, IdRegistry, LookupResult

pytestmark = pytest.mark.integration


def test_a_gc_host_whose_clock_runs_ahead_collects_no_live_id(
    registry: IdRegistry, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_now = time.time_ns() // 1000
    live = [str(EventId("10.9.0.1", n + 1, real_now - 600_000_000 + n)) for n in range(40)]
    old = [str(EventId("10.9.0.1", n + 1, real_now - 7_200_000_000 + n)) for n in range(40)]
    registry.register((i, "t") for i in live + old)
    ahead = time.time_ns() + 86_400 * 10**9
    monkeypatch.setattr(time, "time_ns", lambda: ahead)  # the GC host's clock: a day ahead
    run = advance_and_collect(registry, timedelta(hours=1))
    assert real_now - 3_660_000_000 < run.target_us < real_now - 3_540_000_000
    assert set(registry.lookup(live).values()) == {LookupResult.PRESENT}
    assert set(registry.lookup(old).values()) == {LookupResult.TOO_OLD}
    assert sum(s.deleted_ids for s in run.shards) == len(old)
