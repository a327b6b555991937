"""What a look at the query cache shows of lost keys (:class:`CacheSigns`).

Apart from :mod:`photon.join.cache` so that what only compares looks (the query
reader's progress, read by the joiner's log source as it paces its plan) does
not import Redis's client: a third of a second in each such process (docs/join.md,
"Pacing the joiner to its query reader").
"""

from __future__ import annotations

from typing import NamedTuple


class CacheSigns(NamedTuple):
    """What a look at Redis shows of lost keys: its run id (a restart changes it), its
    evicted key count (``allkeys-lru``) and the reader's sentinel token (a flush drops
    it). Two equal looks prove the cache lost nothing in between."""

    run_id: str
    evicted_keys: int
    reader_token: str | None
