"""GC of the IdRegistry: move each shard's boundary to ``now - retention``, then collect.

Now is ZooKeeper's clock (:meth:`registry.IdRegistry.zk_now_us`), not the GC
host's: a host clock running ahead would otherwise move boundaries past live
ids for good (a boundary never goes back).

A boundary only moves forward: where a shard's boundary is already past the
target (a longer retention was shortened, or a clock behind), it stays
where it is and the report says so. Expired buckets (wholly below the
boundary) are deleted with multi-op deletes.

How it fails: a registry error stops the run where it is; the boundaries
already advanced stay advanced (idempotent: the next run goes on from there).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from datetime import timedelta
from typing import Any

import structlog

from registry import IdRegistry

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class ShardGc:
    shard: int
    boundary_before_us: int
    boundary_us: int
    deleted_buckets: int
    deleted_ids: int
    ids_left: int


@dataclass(frozen=True, slots=True)
class GcRun:
    target_us: int
    dry_run: bool
    shards: list[ShardGc]

    def to_dict(self) -> dict[str, Any]:
        return {
            "target_us": self.target_us,
            "dry_run": self.dry_run,
            "shards": [asdict(s) for s in self.shards],
            "deleted_ids": sum(s.deleted_ids for s in self.shards),
            "ids_left": sum(s.ids_left for s in self.shards),
        }


def gc_target_us(retention: timedelta, now_us: int | None = None) -> int:
    now = time.time_ns() // 1000 if now_us is None else now_us
    return now - int(retention.total_seconds() * 1_000_000)


def advance_and_collect(
    registry: IdRegistry,
    retention: timedelta,
    *,
    now_us: int | None = None,
    shards: list[int] | None = None,
    dry_run: bool = False,
) -> GcRun:
    """Advance every shard's boundary (never back), delete expired buckets, report sizes."""
    target = gc_target_us(retention, registry.zk_now_us() if now_us is None else now_us)
    count = registry.sharding().max_shards
    chosen = list(range(count)) if shards is None else shards
    for shard in chosen:
        if not 0 <= shard < count:
            raise ValueError(f"shard {shard} does not exist (0..{count - 1})")
    sizes = {s.shard: s.ids for s in registry.shard_stats()}
    results = []
    for shard in chosen:
        before = registry.gc_boundary(shard)
        if dry_run:
            results.append(ShardGc(shard, before, max(before, target), 0, 0, sizes[shard]))
            continue
        boundary = registry.advance_gc_boundary(shard, max(before, target))
        report = registry.gc(shard)
        results.append(
            ShardGc(
                shard,
                before,
                boundary,
                report.deleted_buckets,
                report.deleted_ids,
                sizes[shard] - report.deleted_ids,
            )
        )
        log.info(
            "ops.gc.shard",
            shard=shard,
            boundary_before_us=before,
            boundary_us=boundary,
            deleted_ids=report.deleted_ids,
            ids_left=sizes[shard] - report.deleted_ids,
        )
    return GcRun(target, dry_run, results)
