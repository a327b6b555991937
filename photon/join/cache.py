"""The CacheEventStore: recent queries in Redis, shared by every joiner task of a DC.

The query reader puts each query it reads under ``<prefix>:<dc>:<query_id>``
(the raw JSON line); the joiner reads them back with one ``MGET`` per batch.
Redis runs with ``maxmemory`` and ``allkeys-lru``, so the cache bounds itself
by evicting the least recently used queries; the LogsEventStore finds those.

How it fails: the cache is best-effort. A Redis error or timeout is logged and
counted, the call answers "not cached" (lookups) or is dropped (puts), and
Redis is left alone for ``cooldown_s`` so a dead server costs one timeout, not
one per batch. Joins then come from the logs; nothing is lost.

:class:`CacheLossWatch` tells the joiner since when the cache has provably
lost nothing (no eviction, no restart, no flush): a query the reader put
after that is still there, so missing from the cache it is missing from the
logs the reader has read too (docs/join.md, "One joiner batch", step 5).
The query reader looks too, before it caches each batch
(:meth:`CacheEventStore.reader_look`), and publishes the newest query time it
had read at its last look that found a loss: where the joiner's look finds
what the reader's last one found, every query newer than that is cached
(:class:`photon.join.progress.ReaderProgress`), however old the query is.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterable, Mapping

import redis
import structlog

from photon import metrics
from photon.events.ids import EventId
from photon.join.cache_signs import CacheSigns

log = structlog.get_logger(__name__)

_MSET_CHUNK = 1_000
#: A key no query id can take (ids are ``<server ip>:<pid>:<ts>``); its absence
#: tells of a flush.
_SENTINEL = "~intact"
#: The query reader's own sentinel, holding a token of its choosing: a joiner that
#: finds the token the reader last published knows no flush came since the reader's
#: look (one it recreated has another token).
_READER_SENTINEL = "~intact-reader"


class CacheEventStore:
    def __init__(
        self,
        url: str,
        dc: str,
        *,
        prefix: str = "photon:q",
        timeout_s: float = 0.5,
        cooldown_s: float = 5.0,
    ) -> None:
        self.dc = dc
        self._prefix = f"{prefix}:{dc}:"
        self._cooldown_s = cooldown_s
        self._down_until = 0.0
        self._redis = redis.Redis.from_url(
            url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s
        )

    def put_many(self, queries: Mapping[str, bytes]) -> int:
        """Cache ``query_id -> raw line``; returns how many were stored (0 when Redis is down)."""
        if not queries or not self._available():
            return 0
        try:
            # MSET in chunks: one reply a chunk, not one a key (10x less client CPU).
            items = [(self._prefix + query_id, raw) for query_id, raw in queries.items()]
            with self._redis.pipeline(transaction=False) as pipe:
                for start in range(0, len(items), _MSET_CHUNK):
                    pipe.mset(dict(items[start : start + _MSET_CHUNK]))
                pipe.execute()
        except redis.RedisError as exc:
            self._failed("put", exc)
            return 0
        return len(queries)

    def find_many(
        self, query_ids: Iterable[EventId | str], *, count: bool = True
    ) -> dict[str, bytes]:
        """The cached raw lines of the ids found; the rest are simply absent (an
        :class:`~photon.join.eventstore.EventStore`). ``count=False``: a probe (which
        waiting clicks' queries came), not a lookup of the join: not counted."""
        ids = list(dict.fromkeys(str(query_id) for query_id in query_ids))
        if not ids:
            return {}
        found: dict[str, bytes] = {}
        if self._available():
            try:
                values = self._redis.mget([self._prefix + i for i in ids])
            except redis.RedisError as exc:
                self._failed("get", exc)
                values = [None] * len(ids)
            found = {i: v for i, v in zip(ids, values, strict=True) if v is not None}
        if count:
            metrics.CACHE_LOOKUPS.labels(self.dc, "hit").inc(len(found))
            metrics.CACHE_LOOKUPS.labels(self.dc, "miss").inc(len(ids) - len(found))
        return found

    def loss_signs(self) -> tuple[str, int, bool, str | None] | None:
        """(server run id, evicted keys, sentinel present, the query reader's sentinel
        token) as Redis reports them, setting the sentinel if absent; None when Redis
        does not answer. Any change of the first three between two looks means keys may
        have gone: a restart (new run id, no persistence), an eviction
        (``allkeys-lru``), a flush (the sentinel gone)."""
        if not self._available():
            return None
        try:
            with self._redis.pipeline(transaction=False) as pipe:
                pipe.info("server")
                pipe.info("stats")
                pipe.set(self._prefix + _SENTINEL, b"1", nx=True)
                pipe.get(self._prefix + _READER_SENTINEL)
                server, stats, created, token = pipe.execute()
        except redis.RedisError as exc:
            self._failed("info", exc)
            return None
        return str(server["run_id"]), int(stats["evicted_keys"]), not created, _text(token)

    def reader_look(self) -> CacheSigns | None:
        """The query reader's look before it caches a batch: the signs, its sentinel set
        (with a new token) if absent; None when Redis does not answer."""
        if not self._available():
            return None
        key = self._prefix + _READER_SENTINEL
        try:
            with self._redis.pipeline(transaction=False) as pipe:
                pipe.info("server")
                pipe.info("stats")
                pipe.set(key, secrets.token_hex(8).encode(), nx=True)
                pipe.get(key)
                server, stats, _, token = pipe.execute()
        except redis.RedisError as exc:
            self._failed("info", exc)
            return None
        if token is None:  # flushed between the set and the get: no look to go by
            return None
        return CacheSigns(str(server["run_id"]), int(stats["evicted_keys"]), _text(token))

    @property
    def available(self) -> bool:
        """False while Redis is left alone after a failure (lookups answer "not cached")."""
        return self._available()

    def close(self) -> None:
        self._redis.close()

    def _available(self) -> bool:
        return time.monotonic() >= self._down_until

    def _failed(self, what: str, exc: Exception) -> None:
        self._down_until = time.monotonic() + self._cooldown_s
        metrics.CACHE_ERRORS.labels(self.dc).inc()
        log.warning("cache.unavailable", dc=self.dc, op=what, error=str(exc))


class CacheLossWatch:
    """Since when a DC's cache has provably kept every query put into it.

    :meth:`lost_at` looks at Redis's signs of losing keys (:meth:`CacheEventStore.loss_signs`)
    and answers the last time it may have lost some: the first look (nothing is known of
    before), any look that finds a sign changed, and any look Redis does not answer.
    A query is put after it happened, so one newer than that time is still cached if it
    was put at all (the reader reports the puts it dropped: ``ReaderProgress``).

    How it fails: only towards "may have lost": then the joiner searches the logs as it
    would without the watch. A key deleted one by one is not seen (nothing does that).
    """

    def __init__(self, cache: CacheEventStore) -> None:
        self.cache = cache
        self._signs: tuple[str, int, bool] | None = None
        self._lost_at_us = 0
        #: What the last look showed of the query reader's (None: no answer).
        self.reader_signs: CacheSigns | None = None

    def lost_at(self, now_us: int) -> int:
        looked = self.cache.loss_signs()
        signs = None if looked is None else looked[:3]
        self.reader_signs = None if looked is None else CacheSigns(looked[0], looked[1], looked[3])
        if signs is None or signs != self._signs:
            self._lost_at_us = now_us
        # The sentinel is set now: the next look expects it present.
        self._signs = None if signs is None else (signs[0], signs[1], True)
        return self._lost_at_us


def _text(value: bytes | str | None) -> str | None:
    return value.decode("ascii", "replace") if isinstance(value, bytes) else value
