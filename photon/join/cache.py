"""The CacheEventStore: recent queries in Redis, shared by every joiner task of a DC.

The query reader puts each query it reads under ``<prefix>:<dc>:<query_id>``
(the raw JSON line); the joiner reads them back with one ``MGET`` per batch.
Redis runs with ``maxmemory`` and ``allkeys-lru``, so the cache bounds itself
by evicting the least recently used queries; the LogsEventStore finds those.

How it fails: the cache is best-effort. A Redis error or timeout is logged and
counted, the call answers "not cached" (lookups) or is dropped (puts), and
Redis is left alone for ``cooldown_s`` so a dead server costs one timeout, not
one per batch. Joins then come from the logs; nothing is lost.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping

import redis
import structlog

from photon import metrics

log = structlog.get_logger(__name__)

_MSET_CHUNK = 1_000


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

    def get_many(self, query_ids: Iterable[str]) -> dict[str, bytes]:
        """The cached raw lines of the ids found; the rest are simply absent."""
        ids = list(dict.fromkeys(query_ids))
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
        metrics.CACHE_LOOKUPS.labels(self.dc, "hit").inc(len(found))
        metrics.CACHE_LOOKUPS.labels(self.dc, "miss").inc(len(ids) - len(found))
        return found

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
