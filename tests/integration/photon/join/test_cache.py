"""The CacheEventStore against the real Redis: best-effort while Redis is down, back after."""

from __future__ import annotations

import os
import signal
import time
import uuid

import pytest
import redis
from prometheus_client import REGISTRY

from photon.join.cache import CacheEventStore, CacheLossWatch
from photon.tooling.stack.manager import LocalStack

pytestmark = pytest.mark.integration


def _redis_pid(stack: LocalStack) -> int:
    [redis] = [s for s in stack.status().services if s.name == "redis"]
    assert redis.pid is not None
    return redis.pid


def test_lookups_miss_while_redis_is_down_and_hit_again_once_it_is_back(
    local_stack: LocalStack,
) -> None:
    dc = f"t{uuid.uuid4().hex[:8]}"
    cache = CacheEventStore(local_stack.settings.redis_url, dc, timeout_s=0.3, cooldown_s=0.5)
    try:
        assert cache.put_many({"q1": b'{"query_id":"q1"}'}) == 1
        assert cache.find_many(["q1", "q2"]) == {"q1": b'{"query_id":"q1"}'}

        os.kill(_redis_pid(local_stack), signal.SIGKILL)
        time.sleep(0.2)
        started = time.monotonic()
        assert cache.find_many(["q1"]) == {}  # a miss, not an error
        assert cache.put_many({"q3": b"{}"}) == 0  # dropped during the cooldown
        assert time.monotonic() - started < 2  # one timeout at most, not one per call
        assert (REGISTRY.get_sample_value("photon_cache_errors_total", {"dc": dc}) or 0) >= 1
    finally:
        local_stack.up()  # Redis back (empty: it keeps nothing on disk)
    time.sleep(0.6)  # past the cooldown
    assert cache.put_many({"q4": b'{"query_id":"q4"}'}) == 1
    assert cache.find_many(["q4"]) == {"q4": b'{"query_id":"q4"}'}  # hits again
    cache.close()


def test_the_loss_watch_sees_a_flush_an_eviction_and_a_restart(local_stack: LocalStack) -> None:
    dc = f"t{uuid.uuid4().hex[:8]}"
    url = local_stack.settings.redis_url
    cache = CacheEventStore(url, dc, timeout_s=0.3, cooldown_s=0.5)
    admin = redis.Redis.from_url(url)
    watch = CacheLossWatch(cache)
    try:
        assert watch.lost_at(100) == 100  # the first look: nothing is known of before
        cache.put_many({"q1": b"{}"})
        assert watch.lost_at(200) == 100  # puts lose nothing

        admin.flushdb()  # an operator empties the cache
        assert watch.lost_at(300) == 300
        assert watch.lost_at(400) == 300

        limit = admin.config_get("maxmemory")["maxmemory"]
        used = int(admin.info("memory")["used_memory"])
        try:  # Redis at its memory bound evicts (allkeys-lru)
            admin.config_set("maxmemory", used + (1 << 20))
            for n in range(64):
                admin.set(f"photon-t-fill:{dc}:{n}", b"x" * 65_536)
        finally:
            admin.config_set("maxmemory", limit)
        assert int(admin.info("stats")["evicted_keys"]) > 0
        assert watch.lost_at(500) == 500
        assert watch.lost_at(600) == 500

        os.kill(_redis_pid(local_stack), signal.SIGKILL)
        time.sleep(0.2)
        assert watch.lost_at(700) == 700  # no answer: it may have lost anything
    finally:
        local_stack.up()  # Redis back (empty: it keeps nothing on disk)
    time.sleep(0.6)  # past the cooldown
    assert watch.lost_at(800) == 800  # a new server: everything before is gone
    assert watch.lost_at(900) == 800
    cache.close()
    admin.close()


def test_the_joiners_look_matches_the_readers_until_a_key_may_have_gone(
    local_stack: LocalStack,
) -> None:
    dc = f"t{uuid.uuid4().hex[:8]}"
    url = local_stack.settings.redis_url
    reader, joiner = (CacheEventStore(url, dc, timeout_s=0.3) for _ in range(2))
    admin = redis.Redis.from_url(url)
    watch = CacheLossWatch(joiner)
    try:
        looked = reader.reader_look()
        assert looked is not None and looked.reader_token
        assert reader.reader_look() == looked  # its sentinel kept, with its token
        watch.lost_at(100)
        assert watch.reader_signs == looked

        admin.delete(f"photon:q:{dc}:~intact-reader")  # a flush takes the sentinel
        watch.lost_at(200)
        assert watch.reader_signs == looked._replace(reader_token=None)
        again = reader.reader_look()
        assert again is not None and again.reader_token not in (None, looked.reader_token)
        watch.lost_at(300)
        assert watch.reader_signs == again  # matches the reader's newer look only
    finally:
        for store in (reader, joiner):
            store.close()
        admin.delete(f"photon:q:{dc}:~intact-reader", f"photon:q:{dc}:~intact")
        admin.close()
