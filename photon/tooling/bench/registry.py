"""IdRegistry throughput on the running ensemble: the figures of ``photon bench registry``.

Measured in one run, on a root of its own that is collected afterwards:

* ``unbatched_ids_per_s``: one synchronous ``register`` call per id;
* ``batched[size]``: ``register`` with batches of 100/500/1000 fresh ids,
  through the API with all its checks (validation, sharding, GC boundary,
  bucket creation, conflict resolution): ids/s, transactions/s, p50/p99 latency
  per batch;
* ``raw_multi[size]``: plain kazoo ``multi`` creates of the same sizes under a
  flat parent, timed from building the transaction to its answer (as the API
  is timed from its call): the ceiling the API is held against;
* ``lookup_ids_per_s``: ``lookup`` of registered ids, 1,000 a call;
* ``ensemble_cpu_s_per_1000_ids[size]`` and ``client_cpu_s_per_1000_ids[size]``:
  the CPU seconds the local stack's ZooKeeper nodes (all three) and this
  process spent per 1,000 ids registered through the API at each batch size.
  Their ratio depends less on the machine's speed than either. None where the
  ensemble is not the local stack's processes.

Targets (benchmark, not test): batched at 1,000 >= 25x unbatched, and >= 50%
of the raw multi ceiling at 1,000.
"""

from __future__ import annotations

import random
import statistics
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kazoo.client import KazooClient

from photon.registry_access import connect_registry
from photon.settings import PhotonSettings
from photon.tooling.bench.cpu import CpuSampler
from photon.tooling.bench.scaling import rounded
from photon.tooling.stack.manager import LocalStack
from registry import EventId, IdRegistry

BATCH_SIZES = (100, 500, 1000)

#: Called with a short description of the step being measured.
StepCallback = Callable[[str], None]


@dataclass(slots=True)
class BatchFigures:
    ids_per_s: float
    txn_per_s: float
    p50_ms: float
    p99_ms: float


@dataclass(slots=True)
class RegistryBenchmark:
    unbatched_ids_per_s: float = 0.0
    batched: dict[int, BatchFigures] = field(default_factory=dict)
    raw_multi: dict[int, BatchFigures] = field(default_factory=dict)
    lookup_ids_per_s: float = 0.0
    ensemble_cpu_s_per_1000_ids: dict[int, float | None] = field(default_factory=dict)
    client_cpu_s_per_1000_ids: dict[int, float] = field(default_factory=dict)

    @property
    def speedup_vs_unbatched(self) -> float:
        return self.batched[1000].ids_per_s / self.unbatched_ids_per_s

    @property
    def share_of_raw_ceiling(self) -> float:
        return self.batched[1000].ids_per_s / self.raw_multi[1000].ids_per_s

    def to_dict(self) -> dict[str, Any]:
        def figures(table: dict[int, BatchFigures]) -> dict[str, Any]:
            return {
                str(size): {
                    "ids_per_s": round(f.ids_per_s),
                    "txn_per_s": round(f.txn_per_s, 1),
                    "p50_ms": round(f.p50_ms, 1),
                    "p99_ms": round(f.p99_ms, 1),
                }
                for size, f in table.items()
            }

        return {
            "unbatched_ids_per_s": round(self.unbatched_ids_per_s),
            "batched_ids_per_s": {str(s): round(f.ids_per_s) for s, f in self.batched.items()},
            "raw_multi_ids_per_s": {str(s): round(f.ids_per_s) for s, f in self.raw_multi.items()},
            "batched": figures(self.batched),
            "raw_multi": figures(self.raw_multi),
            "lookup_ids_per_s": round(self.lookup_ids_per_s),
            "ensemble_cpu_s_per_1000_ids": {
                str(s): rounded(v, 4) for s, v in self.ensemble_cpu_s_per_1000_ids.items()
            },
            "client_cpu_s_per_1000_ids": {
                str(s): rounded(v, 4) for s, v in self.client_cpu_s_per_1000_ids.items()
            },
            "batched_1000_vs_unbatched": round(self.speedup_vs_unbatched, 1),
            "batched_1000_share_of_raw": round(self.share_of_raw_ceiling, 3),
            "targets": {
                "batched_ge_25x_unbatched": self.speedup_vs_unbatched >= 25,
                "batched_ge_half_raw_at_1000": self.share_of_raw_ceiling >= 0.5,
            },
        }


class _Ids:
    """Fresh ids around now, spread like live traffic over a minute of event time."""

    def __init__(self, seed: int) -> None:
        self._rng = random.Random(seed)
        self._now = time.time_ns() // 1000
        self._seen: set[str] = set()

    def take(self, n: int) -> list[str]:
        batch: list[str] = []
        while len(batch) < n:
            ts = self._now + self._rng.randrange(60_000_000)
            rng = self._rng
            ip = f"10.{rng.randrange(256)}.{rng.randrange(256)}.{rng.randrange(1, 255)}"
            text = str(EventId(ip, self._rng.randrange(1, 65536), ts))
            if text not in self._seen:
                self._seen.add(text)
                batch.append(text)
        return batch


def run(
    settings: PhotonSettings,
    *,
    batches: int = 30,
    unbatched: int = 300,
    on_step: StepCallback | None = None,
) -> RegistryBenchmark:
    step = on_step or (lambda _: None)
    root = f"{settings.zookeeper.root}-bench-{uuid.uuid4().hex[:8]}"
    ids = _Ids(seed=7)
    result = RegistryBenchmark()
    reg = connect_registry(settings, root=root)
    zk = KazooClient(
        hosts=",".join(settings.zk_hosts), timeout=settings.zookeeper.session_timeout_s
    )
    zk.start(timeout=settings.zookeeper.connect_timeout_s)
    registered: list[str] = []
    ensemble = _ensemble_sampler(settings)
    try:
        reg.register((i, "warm-up") for i in ids.take(1000))  # connections, watches, JIT

        step(f"unbatched: {unbatched} register calls of one id")
        started = time.perf_counter()
        for event_id in ids.take(unbatched):
            reg.register([(event_id, "bench")])
        result.unbatched_ids_per_s = unbatched / (time.perf_counter() - started)

        raw_parent = f"{root}-raw"
        zk.ensure_path(raw_parent)
        for size in BATCH_SIZES:
            step(f"batched: {batches} batches of {size} through the API")
            latencies = []
            ensemble_before, client_before = _ensemble_busy_s(ensemble), time.process_time()
            for _ in range(batches):
                batch = ids.take(size)
                t0 = time.perf_counter()
                reg.register((i, "bench") for i in batch)
                latencies.append(time.perf_counter() - t0)
                registered += batch
            thousands = size * batches / 1000
            ensemble_after = _ensemble_busy_s(ensemble)
            result.client_cpu_s_per_1000_ids[size] = (
                time.process_time() - client_before
            ) / thousands
            result.ensemble_cpu_s_per_1000_ids[size] = (
                (ensemble_after - ensemble_before) / thousands
                if ensemble_after is not None and ensemble_before is not None
                else None
            )
            result.batched[size] = _figures(size, latencies)

            step(f"raw multi: {batches} transactions of {size} creates")
            latencies = []
            for _ in range(batches):
                paths = [f"{raw_parent}/{event_id}" for event_id in ids.take(size)]
                # Timed like the API: building the request is part of a kazoo multi.
                t0 = time.perf_counter()
                txn = zk.transaction()
                for path in paths:
                    txn.create(path, b"bench")
                outcome = txn.commit()
                latencies.append(time.perf_counter() - t0)
                if not all(isinstance(r, str) for r in outcome):
                    raise RuntimeError(f"raw multi failed: {outcome[:3]}")
            result.raw_multi[size] = _figures(size, latencies)

        step(f"lookup: {len(registered)} ids, 1,000 a call")
        started = time.perf_counter()
        for start in range(0, len(registered), 1000):
            reg.lookup(registered[start : start + 1000])
        result.lookup_ids_per_s = len(registered) / (time.perf_counter() - started)
    finally:
        step("cleaning up the benchmark's znodes")
        _collect(reg)
        _delete_flat(zk, f"{root}-raw")
        zk.delete(root, recursive=True)
        zk.stop()
        zk.close()
        reg.close()
    return result


def _ensemble_sampler(settings: PhotonSettings) -> CpuSampler | None:
    """A sampler of the local stack's ZooKeeper nodes (records checked to be the
    processes the stack started, not others that took their pids); None without them."""
    pids = LocalStack(settings).running_pids("zk")
    return CpuSampler(pids) if pids else None


def _ensemble_busy_s(sampler: CpuSampler | None) -> float | None:
    """The CPU seconds the nodes have spent (None without them, or without ``/proc``)."""
    sample = sampler.sample() if sampler is not None else None
    return sample.services_s if sample is not None else None


def _figures(size: int, latencies: list[float]) -> BatchFigures:
    total = sum(latencies)
    ordered = sorted(latencies)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return BatchFigures(
        ids_per_s=size * len(latencies) / total,
        txn_per_s=len(latencies) / total,
        p50_ms=statistics.median(latencies) * 1000,
        p99_ms=p99 * 1000,
    )


def _delete_flat(zk: KazooClient, parent: str) -> None:
    if not zk.exists(parent):
        return
    children = zk.get_children(parent)
    for start in range(0, len(children), 1000):
        txn = zk.transaction()
        for name in children[start : start + 1000]:
            txn.delete(f"{parent}/{name}")
        txn.commit()
    zk.delete(parent)


def _collect(reg: IdRegistry) -> None:
    """Remove the benchmark's ids with the registry's own GC (multi deletes)."""
    far_future = time.time_ns() // 1000 + 86_400_000_000
    for shard in range(reg.sharding().max_shards):
        reg.advance_gc_boundary(shard, far_future)
        reg.gc(shard)
