"""What whole-pipeline runs (the demo, the benchmark, the chaos harness) share.

A run's namespace (its own registry root, bucket, cache keys, logs and state),
a private environment of ``PHOTON_*`` variables for a run, the live ad-server
writer in a process of its own (on a :class:`StreamClock` the run may pause),
waiting until a condition holds or every app streams, and the clean-up of what a run leaves in the
stack.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from multiprocessing.sharedctypes import Synchronized
from multiprocessing.synchronize import Event as EventType
from pathlib import Path

import redis

from photon.apps import JOINER, QUERY_READER
from photon.registry_access import connect_registry
from photon.settings import PhotonSettings
from photon.storage import ObjectStore, s3_client
from photon.tooling.gen.model import GenConfig
from photon.tooling.gen.simulator import simulate, write


def namespace(name: str, workdir: Path | None = None) -> dict[str, str]:
    """The ``PHOTON_*`` variables of a run named ``name`` (lower case, e.g.
    ``bench-burst-1a2b3c4d``): a registry root, a bucket and cache keys of its own,
    ``photon-<name>``, so a stack shared with earlier runs (or ``photon up``) cannot
    answer for this run's clicks; given ``workdir``, its own logs and pipeline state
    under it too."""
    values = {
        "PHOTON_ZOOKEEPER__ROOT": f"/photon-{name}",
        "PHOTON_S3__BUCKET": f"photon-{name}",
        "PHOTON_REDIS__KEY_PREFIX": f"photon-{name}:q",
    }
    if workdir is not None:
        values["PHOTON_LOGS_ROOT"] = str(workdir / "logs")
        values["PHOTON_PIPELINE__STATE_ROOT"] = str(workdir / "state")
    return values


@contextmanager
def environment(values: dict[str, str]) -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


class StreamClock:
    """The live writer's clock: the wall clock less the time the run held the stream.

    The chaos harness holds the stream while a fault waits for the pipelines
    the last one stopped (Spark restarting on a slow machine), so that every
    fault, however late, strikes with the stream still flowing behind it. Held,
    the clock stands still and the writer writes nothing; resumed, it goes on
    where it stood (the lines keep the times they were generated with, so they
    arrive as late as the hold was long, as a stalled log shipper's would).

    Holds nest: faults running side by side each hold and resume in pairs, and the
    stream flows again when the last of them resumed (one fault's end must not let
    the stream run under another's wait). Shared with the writer's process (made in
    the ``spawn`` context).
    """

    def __init__(self, wall: Callable[[], float] = time.time) -> None:
        self._wall = wall
        ctx = multiprocessing.get_context("spawn")
        self._held_s: Synchronized[float] = ctx.Value("d", 0.0)  # held, all holds ended
        self._held_at: Synchronized[float] = ctx.Value("d", 0.0)  # 0: not held now
        self._holds: Synchronized[int] = ctx.Value("i", 0)  # holds not resumed yet

    def __call__(self) -> float:
        now = self._wall()
        held_at = self._held_at.value
        return now - self._held_s.value - (now - held_at if held_at else 0.0)

    def hold(self) -> None:
        with self._holds.get_lock():
            self._holds.value += 1
            if self._holds.value == 1:
                self._held_at.value = self._wall()

    def resume(self) -> None:
        """End one hold; a resume with no hold to end changes nothing."""
        with self._holds.get_lock():
            if self._holds.value == 0:
                return
            self._holds.value -= 1
            if self._holds.value == 0:
                self._held_s.value += self._wall() - self._held_at.value
                self._held_at.value = 0.0

    @property
    def held_s(self) -> float:
        """How long the stream was held, all told."""
        held_at = self._held_at.value
        return self._held_s.value + (self._wall() - held_at if held_at else 0.0)


def write_live(
    config_json: str,
    logs_root: str,
    clock: StreamClock | None = None,
    go: EventType | None = None,
) -> None:
    """Simulate the stream, then (once ``go`` is set, if given) write it live.

    Given ``go``, the simulation runs while the apps start, not after: at 4,000
    clicks/s it takes ~20 CPU-s, and a stream simulated only once the apps stream
    starts that much after its own time (every line then shifted, and its clicks
    that much older when read).
    """
    # Ad servers have machines of their own; here they share two cores with
    # every app, and lines written late would count as the join's latency.
    with contextlib.suppress(OSError):  # raising priority needs root (CI has it)
        os.nice(-10)
    sim = simulate(GenConfig.model_validate_json(config_json))
    if go is not None:
        go.wait()
    write(sim, Path(logs_root), live=True, clock=clock or time.time)


def wait_until(condition: Callable[[], bool], timeout_s: float, step_s: float = 0.25) -> bool:
    """Whether ``condition`` came true within ``timeout_s``, asked every ``step_s``."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(step_s)
    return True


def wait_until_streaming(
    settings: PhotonSettings, finished: threading.Event, timeout_s: float = 300.0
) -> bool:
    """Wait until every app's streaming query has started (Spark wrote its checkpoint)."""
    markers = [
        settings.pipeline_dir(dc, app) / "checkpoint" / "metadata"
        for dc in settings.dcs
        for app in (JOINER, QUERY_READER)
    ]
    deadline = time.monotonic() + timeout_s
    while not all(m.exists() for m in markers):
        if finished.wait(0.5) or time.monotonic() > deadline:
            return False
    return True


def clean_up(settings: PhotonSettings, store: ObjectStore) -> None:
    """Drop what the phase left in the stack: its registry root, bucket and cache keys.

    A benchmark leaves ~1 KiB an id on every ZooKeeper node otherwise: a few
    runs would fill their heaps.
    """
    with connect_registry(settings) as registry:
        registry.drop()
    store.delete(list(store.keys("")))
    s3_client(settings.s3_endpoint_url, settings.s3).delete_bucket(Bucket=settings.s3.bucket)
    cache = redis.Redis.from_url(settings.redis_url)
    try:
        keys = list(cache.scan_iter(match=f"{settings.redis.key_prefix}:*", count=10_000))
        for start in range(0, len(keys), 10_000):
            cache.unlink(*keys[start : start + 10_000])
    finally:
        cache.close()
