"""The log-file map's runs in the object store (S3 over HTTP), against compaction."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from photon.join.logmap import (
    LogFileMap,
    MapEntry,
    decode_run,
    delta_prefix,
    encode_run,
    sorted_prefix,
)
from photon.storage import ObjectStore

pytestmark = pytest.mark.integration


class _CompactsBetweenListings:
    """The real store; right after the first listing of a refresh, a compaction merges
    the delta runs into a sorted run and deletes them (as photon.ops.compaction does:
    the sorted run first)."""

    def __init__(self, real: ObjectStore, dc: str) -> None:
        self.real, self.dc, self.listings = real, dc, 0

    def keys(self, prefix: str) -> Iterator[str]:
        keys = list(self.real.keys(prefix))
        self.listings += 1
        if self.listings == 1:
            deltas = list(self.real.keys(delta_prefix(self.dc)))
            entries = [e for key in deltas for e in _decode(self.real, key)]
            self.real.put(f"{sorted_prefix(self.dc)}0001.parquet", encode_run(entries))
            self.real.delete(deltas)
        return iter(keys)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)


def _decode(store: ObjectStore, key: str) -> list[MapEntry]:
    data = store.get(key)
    assert data is not None
    return decode_run(data)


def test_a_refresh_with_a_compaction_between_its_listings_misses_no_entry(
    store: ObjectStore,
) -> None:
    entries = [MapEntry("10.1.0.1:7", 1_000 + n, "q.log", 100 * n) for n in range(5)]
    for n, entry in enumerate(entries):
        store.put(f"{delta_prefix('a')}{n:04d}.parquet", encode_run([entry]))
    racing = _CompactsBetweenListings(store, "a")
    logmap = LogFileMap(racing, "a")  # type: ignore[arg-type]

    assert logmap.refresh() == len(entries)
    assert racing.listings == 2
    assert list(store.keys(delta_prefix("a"))) == []  # the compaction did happen
    assert len(logmap) == len(entries)
