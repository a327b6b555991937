"""The EventStore: where a joiner finds the query a click names (docs/join.md).

Two stores implement it, asked in order: the CacheEventStore
(:mod:`photon.join.cache`, recent queries in Redis, put there by the query
reader) and the LogsEventStore (:mod:`photon.join.logstore`, the DC's query
logs read through the log-file map). Both answer a batch of ids at once with
the raw lines they found, by query id.

How it fails: a store answers only what it found. An id it lacks is absent
from the answer, never an error: the click is retried later. A store that
cannot be reached either answers nothing (the cache: best-effort) or raises
(the logs: the batch fails and is replayed); each says which in its module.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from photon.events.ids import EventId


class EventStore(Protocol):
    """Finds queries by id: ``{str(query_id): raw JSON line}`` for those it has."""

    def find_many(self, query_ids: Iterable[EventId]) -> dict[str, bytes]: ...
