"""Verification's cost against the output's size: the figures of ``photon bench verify``.

Verification checks one event-time window, and the output is laid out by event
hour (photon.join.output), so its cost should follow the window, not all the
output ever written. Measured in one run, on a bucket and a registry root of
its own (both removed afterwards):

1. **1x**: ``hours`` hours of joined and unjoinable output, written by the
   joiner's own :class:`~photon.join.output.OutputWriter` (2 DCs, one object per
   batch and hour, ``batches_per_hour`` batches of ``clicks_per_batch`` clicks);
   the window is its oldest hour.
2. **10x** (``scale``): as many hours again, nine times over, written before
   the window, so the total output is ``scale`` times as large.

After one warm-up run (imports, the first GX context), at each size, ``runs``
times: the whole :func:`photon.ops.verify.verify` of the one-hour window (its
inputs given, as the Spark job gives them: the log scan is not the output's
cost), and, beside it, reading every object of the output
with the same reader, which is what verification cost before the output had
an hour in its keys. The figure to watch is ``verify_ratio``, the median
verification time at 10x over the median at 1x (target <= 1.5), with
``read_all_ratio`` beside it for contrast.

The registry root is empty (the window's ids are not registered): its scan is
by time bucket, the same at both sizes. How it fails: an unreachable S3
endpoint or ZooKeeper raises their errors; a bad argument raises ``ValueError``.
"""

from __future__ import annotations

import statistics
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from photon.join.output import HOUR_US, JOINED_BASE, OutputWriter, output_prefix
from photon.ops.params import Window
from photon.ops.verify import verify
from photon.ops.window_output import in_window
from photon.registry_access import connect_registry
from photon.settings import PhotonSettings
from photon.storage import ObjectStore, s3_client
from registry import IdRegistry

StepCallback = Callable[[str], None]

DCS = ("a", "b")


@dataclass(slots=True)
class SizeFigures:
    """One output size: its objects and the seconds of each run."""

    hours: int
    objects: int
    verify_s: list[float] = field(default_factory=list)
    read_all_s: list[float] = field(default_factory=list)
    window_rows: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "hours": self.hours,
            "objects": self.objects,
            "window_rows": self.window_rows,
            "verify_s": [round(s, 3) for s in self.verify_s],
            "verify_median_s": round(statistics.median(self.verify_s), 3),
            "read_all_s": [round(s, 3) for s in self.read_all_s],
            "read_all_median_s": round(statistics.median(self.read_all_s), 3),
        }


@dataclass(slots=True)
class VerifyBenchmark:
    window: tuple[str, str]
    sizes: list[SizeFigures] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        small, large = self.sizes[0], self.sizes[-1]

        def ratio(get: Callable[[SizeFigures], list[float]]) -> float:
            return round(statistics.median(get(large)) / statistics.median(get(small)), 3)

        verify_ratio = ratio(lambda s: s.verify_s)
        return {
            "window": {"start": self.window[0], "end": self.window[1]},
            "sizes": [s.to_dict() for s in self.sizes],
            "output_growth": round(large.objects / small.objects, 2),
            "verify_ratio": verify_ratio,
            "read_all_ratio": ratio(lambda s: s.read_all_s),
            "targets": {"verify_ratio_le_1_5": verify_ratio <= 1.5},
        }


def _click_id(ts_us: int, n: int) -> str:
    return f"10.0.{n % 200}.{n % 250 + 1}:{8000 + n % 1000}:{ts_us}"


def _hour_batches(
    hour_start_us: int, batches: int, clicks: int, dc_index: int
) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """(batch, joined rows) of one DC's hour: clicks spread evenly over the hour."""
    step_us = HOUR_US // (batches * clicks)
    for b in range(batches):
        rows = []
        for c in range(clicks):
            n = b * clicks + c
            ts_us = hour_start_us + n * step_us + dc_index  # DCs' clicks never collide
            click_id = _click_id(ts_us, n)
            rows.append(
                {
                    "click_id": click_id,
                    "query_id": _click_id(ts_us - 1_000_000, n),
                    "dc": DCS[dc_index],
                    "joined_at_us": ts_us + 2_000_000,
                    "token": f"{DCS[dc_index]}/bench/{b:012d}",
                }
            )
        yield f"{hour_start_us // HOUR_US:08d}{b:04d}", rows


def write_hours(
    store: ObjectStore, hour_starts_us: list[int], batches: int, clicks: int
) -> dict[str, str]:
    """Write the hours' output as the joiners write it; the joined clicks' query ids."""
    writers = [OutputWriter(store, dc, f"{dc}-bench") for dc in DCS]
    inputs: dict[str, str] = {}
    work: list[tuple[OutputWriter, str, list[dict[str, Any]]]] = []
    for hour_us in hour_starts_us:
        for i, writer in enumerate(writers):
            for batch, rows in _hour_batches(hour_us, batches, clicks, i):
                work.append((writer, batch, rows))
                inputs.update((r["click_id"], r["query_id"]) for r in rows)

    def put(item: tuple[OutputWriter, str, list[dict[str, Any]]]) -> None:
        writer, batch, rows = item
        writer.joined(batch, rows, JOINED_BASE)

    with ThreadPoolExecutor(max_workers=16) as pool:
        for _ in pool.map(put, work):
            pass
    return inputs


def run(
    settings: PhotonSettings,
    *,
    hours: int = 2,
    scale: int = 10,
    batches_per_hour: int = 360,
    clicks_per_batch: int = 50,
    runs: int = 3,
    on_step: StepCallback | None = None,
) -> VerifyBenchmark:
    if hours < 1 or scale < 2 or batches_per_hour < 1 or clicks_per_batch < 1 or runs < 1:
        raise ValueError("hours, batches, clicks and runs must be >= 1 and scale >= 2")
    step = on_step or (lambda _: None)
    bucket = f"photon-bench-verify-{uuid.uuid4().hex[:8]}"
    client = s3_client(settings.s3_endpoint_url, settings.s3)
    client.create_bucket(Bucket=bucket)
    s3 = settings.s3.model_copy(update={"bucket": bucket})
    with tempfile.TemporaryDirectory(prefix="photon-bench-verify-") as state:
        pipeline = settings.pipeline.model_copy(update={"state_root": Path(state)})
        bench_settings = settings.model_copy(update={"s3": s3, "pipeline": pipeline})
        store = ObjectStore.from_settings(bench_settings)
        root = f"{settings.zookeeper.root}-bench-{uuid.uuid4().hex[:8]}"
        registry = connect_registry(bench_settings, root=root)  # empty: see the docstring
        try:
            return _measure(
                bench_settings, store, registry, hours, scale, batches_per_hour,
                clicks_per_batch, runs, step,
            )  # fmt: skip
        finally:
            registry.drop()
            registry.close()
            store.delete(list(store.keys("")))
            client.delete_bucket(Bucket=bucket)


def _measure(
    settings: PhotonSettings,
    store: ObjectStore,
    registry: IdRegistry,
    hours: int,
    scale: int,
    batches: int,
    clicks: int,
    runs: int,
    step: StepCallback,
) -> VerifyBenchmark:
    now_hour_us = time.time_ns() // 1000 // HOUR_US * HOUR_US
    window_start_us = now_hour_us - (hours + 1) * HOUR_US  # all of it in the past
    window = Window(
        start=datetime.fromtimestamp(window_start_us / 1e6, UTC),
        end=datetime.fromtimestamp(window_start_us / 1e6, UTC) + timedelta(hours=1),
    )
    result = VerifyBenchmark((window.start.isoformat(), window.end.isoformat()))
    step(f"writing 1x: {hours} hour(s) of output")
    inputs = write_hours(
        store, [window_start_us + h * HOUR_US for h in range(hours)], batches, clicks
    )
    window_inputs = {c: q for c, q in inputs.items() if in_window(c, window)}
    step("warming up (imports, the first Great Expectations context)")
    verify(
        settings, store, registry, window, run="bench-warm-up",
        latency_bound_s=3600.0, clear_tokens=False, inputs=window_inputs,
    )  # fmt: skip
    older = [window_start_us - (h + 1) * HOUR_US for h in range((scale - 1) * hours)]
    for size, to_write in ((1, []), (scale, older)):
        if to_write:
            step(f"writing {size}x: {len(to_write)} more hour(s) of output")
            write_hours(store, to_write, batches, clicks)
        objects = sum(1 for _ in store.keys(output_prefix("joined")))
        figures = SizeFigures(hours=hours * size, objects=objects)
        for n in range(runs):
            step(f"{size}x: verifying the window, run {n + 1} of {runs}")
            started = time.perf_counter()
            report = verify(
                settings, store, registry, window, run=f"bench-{size}x-{n}",
                latency_bound_s=3600.0, clear_tokens=False, inputs=window_inputs,
            )  # fmt: skip
            figures.verify_s.append(time.perf_counter() - started)
            if not report.passed:
                raise RuntimeError(f"the benchmark's output failed verification: {report.failures}")
            figures.window_rows = report.completeness.output_rows
            step(f"{size}x: reading all output, run {n + 1} of {runs}")
            started = time.perf_counter()
            store.read_parquet(list(store.keys(output_prefix("joined"))), columns=["click_id"])
            figures.read_all_s.append(time.perf_counter() - started)
        result.sizes.append(figures)
    return result
