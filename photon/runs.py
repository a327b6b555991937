"""What whole-pipeline runs (the benchmark, the chaos harness) share.

A private environment of ``PHOTON_*`` variables for a run, the live ad-server
writer in a process of its own, waiting until every app streams, and the
clean-up of what a run leaves in the stack.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import redis

from photon.gen.model import GenConfig
from photon.gen.simulator import simulate, write
from photon.join.runtime import JOINER, QUERY_READER
from photon.registry_access import connect_registry
from photon.settings import PhotonSettings
from photon.stack.s3 import s3_client
from photon.storage import ObjectStore


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


def write_live(config_json: str, logs_root: str) -> None:
    # Ad servers have machines of their own; here they share two cores with
    # every app, and lines written late would count as the join's latency.
    with contextlib.suppress(OSError):  # raising priority needs root (CI has it)
        os.nice(-10)
    write(simulate(GenConfig.model_validate_json(config_json)), Path(logs_root), live=True)


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
