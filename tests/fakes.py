"""In-memory stand-ins for the join's services, for fast unit tests of its decisions.

Each keeps the contract the join relies on, and nothing else:

* :class:`FakeRegistry`: one token per id, the first register wins; the same token
  registering again is answered ``COMMITTED`` (a replay); ids below a GC boundary are
  ``TOO_OLD``; a fenced attempt's ``check_fence`` raises. ``steal`` names ids another
  DC registers between a group's lookup and its register (a lost race).
* :class:`FakeEventStore`: queries by id (the cache, or the logs).
* :class:`FakeObjectStore`: keys to bytes; ``put(if_absent=True)`` writes once.

The integration tests run the same decisions against the real ZooKeeper, Redis and S3
(tests/integration/photon/join/); these run in milliseconds, without servers.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, cast

from photon.events.ids import EventId
from photon.join.adapter import AdClickAdapter
from photon.join.group import GroupParts
from photon.join.output import OutputWriter
from photon.storage import ObjectStore
from registry import AttemptFencedError, LookupResult, RegisterResult
from registry.client import RegisterCounters
from registry.sharding import stable_hash


@dataclass
class FakeRegistry:
    shards: int = 4
    gc_boundary_us: int = 0
    tokens: dict[str, str] = field(default_factory=dict)
    fenced: bool = False
    #: ids another DC registers (token ``steal_token``) just before this client's register
    steal: set[str] = field(default_factory=set)
    steal_token: str = "b/other/000000000001"
    counters: RegisterCounters = field(default_factory=RegisterCounters)

    def shard_of(self, event_id: EventId) -> int:
        return stable_hash(str(event_id)) % self.shards

    def lookup(self, ids: Iterable[str | EventId]) -> dict[str, LookupResult]:
        results = {}
        for raw in ids:
            key = str(raw)
            if EventId.parse(key).ts_us < self.gc_boundary_us:
                results[key] = LookupResult.TOO_OLD
            else:
                results[key] = LookupResult.PRESENT if key in self.tokens else LookupResult.ABSENT
        return results

    def register(self, items: Iterable[tuple[str | EventId, str]]) -> dict[str, RegisterResult]:
        pairs = [(str(i), token) for i, token in items]
        self.counters.calls += 1
        self.counters.ids += len(pairs)
        self.counters.transactions += 1
        for key in self.steal:
            self.tokens.setdefault(key, self.steal_token)
        results = {}
        for key, token in pairs:
            if EventId.parse(key).ts_us < self.gc_boundary_us:
                results[key] = RegisterResult.TOO_OLD
            elif self.tokens.setdefault(key, token) == token:
                results[key] = RegisterResult.COMMITTED
            else:
                results[key] = RegisterResult.ALREADY_REGISTERED
        return results

    def read_token(self, event_id: str | EventId) -> str | None:
        return self.tokens.get(str(event_id))

    def too_new(self, ids: Iterable[str | EventId]) -> set[str]:
        return set()  # no clock bound in the fake

    def check_fence(self, batch: str | None = None) -> None:
        if self.fenced:
            raise AttemptFencedError("attempt fenced (fake)")


@dataclass
class FakeEventStore:
    queries: dict[str, bytes] = field(default_factory=dict)
    available: bool = True
    asked: list[str] = field(default_factory=list)

    def find_many(self, query_ids: Iterable[EventId | str]) -> dict[str, bytes]:
        ids = [str(q) for q in query_ids]
        self.asked += ids
        return {q: self.queries[q] for q in ids if q in self.queries}


class _FakeLogFileMap:
    dc = "a"

    def refresh(self) -> None:
        pass


@dataclass
class FakeLogsStore(FakeEventStore):
    logmap: _FakeLogFileMap = field(default_factory=_FakeLogFileMap)


@dataclass
class FakeObjectStore:
    objects: dict[str, bytes] = field(default_factory=dict)

    def put(self, key: str, data: bytes, *, if_absent: bool = False) -> bool:
        if if_absent and key in self.objects:
            return False
        self.objects[key] = data
        return True

    def get(self, key: str) -> bytes | None:
        return self.objects.get(key)

    def exists(self, key: str) -> bool:
        return key in self.objects

    def keys(self, prefix: str, *, start_after: str = "") -> Iterator[str]:
        return iter(sorted(k for k in self.objects if k.startswith(prefix) and k > start_after))

    def delete(self, keys: list[str]) -> None:
        for key in keys:
            self.objects.pop(key, None)


@dataclass
class FakeServices:
    """One DC's services, and the group parts built on them."""

    dc: str = "a"
    attempt: str = "attempt1"
    registry: FakeRegistry = field(default_factory=FakeRegistry)
    cache: FakeEventStore = field(default_factory=FakeEventStore)
    logs: FakeLogsStore = field(default_factory=FakeLogsStore)
    store: FakeObjectStore = field(default_factory=FakeObjectStore)

    def parts(self) -> GroupParts:
        store = cast(ObjectStore, self.store)
        services: Any = (self.registry, self.cache, self.logs)
        registry, cache, logs = services
        return GroupParts(
            dc=self.dc,
            attempt=self.attempt,
            registry=registry,
            cache=cache,
            logs=logs,
            output=OutputWriter(store, self.dc, self.attempt),
            adapter=AdClickAdapter(),
        )
