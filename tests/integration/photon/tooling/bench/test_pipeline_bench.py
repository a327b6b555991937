"""The pipeline benchmark's S3 watcher: every joined object seen, each at its first listing;
and the compare's output times, from the joiners' batch lines."""

from __future__ import annotations

import json
import time
import uuid
from datetime import datetime
from pathlib import Path

import pytest

from photon.apps import JOINER
from photon.storage import ObjectStore, s3_client
from photon.tooling.bench.pipeline import BatchLogTimes, ObjectWatcher
from photon.tooling.stack.manager import LocalStack

pytestmark = pytest.mark.integration


@pytest.fixture
def store(local_stack: LocalStack) -> ObjectStore:
    """An empty bucket of its own."""
    settings = local_stack.settings
    client = s3_client(settings.s3_endpoint_url, settings.s3)
    bucket = f"photon-w-{uuid.uuid4().hex[:12]}"
    client.create_bucket(Bucket=bucket)
    return ObjectStore(client, bucket)


@pytest.fixture
def walks(store: ObjectStore, monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """When the watcher walked the folders: each listing of ``joined/`` starts one."""
    started: list[float] = []
    folders = store.folders

    def counted(prefix: str) -> list[str]:
        if prefix == "joined/":
            started.append(time.monotonic())
        return folders(prefix)

    monkeypatch.setattr(store, "folders", counted)
    return started


def test_the_watcher_sees_every_object_of_both_series_once(store: ObjectStore) -> None:
    written: dict[str, int] = {}
    with ObjectWatcher(store, period_s=0.05) as watcher:
        for n in range(6):
            for key in (
                f"joined/dc=a/hour=2026-11-26T01/a-1/{n:012d}.parquet",
                f"joined/dc=b/hour=2026-11-26T02/b-1/retry-{n:012d}.parquet",
            ):
                # Taken before the put: the watcher may list the object before put returns.
                written[key] = time.time_ns() // 1000
                store.put(key, b"x")
            time.sleep(0.15)
        unforeseen = "joined/dc=a/hour=2026-11-26T01/a-1/unforeseen.parquet"
        store.put(unforeseen, b"x")  # outside both series
    assert set(watcher.first_seen_us) == {*written, unforeseen}
    for key, put_us in written.items():  # seen after the write began, within a few polls
        assert 0 <= watcher.first_seen_us[key] - put_us < 2_000_000


def test_the_watcher_sees_a_batch_s_groups_written_in_any_order(store: ObjectStore) -> None:
    """Parallel tasks write a batch's groups in any order: a group written after a later
    group of its batch was listed is still seen at once, not only at the watcher's end."""
    written: dict[str, int] = {}
    with ObjectWatcher(store, period_s=0.05) as watcher:
        for n in range(3):
            for group in (2, 0, 1):  # the last group first
                key = f"joined/dc=a/hour=2026-11-26T01/a-1/{n:012d}.g{group:03d}.parquet"
                written[key] = time.time_ns() // 1000
                store.put(key, b"x")
                time.sleep(0.3)  # several polls between two groups of a batch
        time.sleep(0.5)
        seen_while_running = dict(watcher.first_seen_us)
    assert set(seen_while_running) == set(written)
    for key, put_us in written.items():
        assert 0 <= watcher.first_seen_us[key] - put_us < 2_000_000


def test_the_watcher_walks_the_folders_once_a_discovery_period_not_every_poll(
    store: ObjectStore, walks: list[float]
) -> None:
    """The folder walk is most of a poll's listings: it runs once a discovery period,
    and a series that appears in between is still seen within that period."""
    first = "joined/dc=a/hour=2026-11-26T01/a-1/000000000001.parquet"
    later = "joined/dc=a/hour=2026-11-26T02/a-1/000000000002.parquet"  # a new hour's series
    store.put(first, b"x")
    with ObjectWatcher(store, period_s=0.05, discover_period_s=0.5) as watcher:
        time.sleep(0.6)
        put_us = time.time_ns() // 1000
        store.put(later, b"x")
        time.sleep(1.4)
        seen_while_running = dict(watcher.first_seen_us)
    assert set(seen_while_running) == {first, later}
    assert 0 <= seen_while_running[later] - put_us < 2_000_000
    # ~40 polls in 2 s: a walk at the first, then one about every 0.5 s
    assert 2 <= len(walks) <= 6


def test_each_dcs_first_series_is_seen_at_a_poll_not_a_discovery_period_later(
    store: ObjectStore, walks: list[float]
) -> None:
    """A run whose output comes in one batch would have it overstated by up to a
    discovery period: until each DC has a series the walk runs at every poll, and
    after that at its period again."""
    keys = {
        "a": "joined/dc=a/hour=2026-11-26T01/a-1/000000000001.parquet",
        "b": "joined/dc=b/hour=2026-11-26T01/b-1/000000000001.parquet",
    }
    put_us: dict[str, int] = {}
    with ObjectWatcher(store, period_s=0.05, discover_period_s=3.0, dcs=("a", "b")) as watcher:
        for dc in ("a", "b"):
            time.sleep(0.4)
            put_us[keys[dc]] = time.time_ns() // 1000
            store.put(keys[dc], b"x")
        time.sleep(0.8)  # a few polls, even on a loaded machine
        both_found = time.monotonic()
        time.sleep(1.2)
        seen_while_running = dict(watcher.first_seen_us)
    assert set(seen_while_running) == set(put_us)
    for key, at_us in put_us.items():  # a few polls, not the 3 s period
        assert 0 <= seen_while_running[key] - at_us < 1_000_000
    assert len(walks) >= 4  # at every poll while a DC had none, not once in the period
    assert [at for at in walks if at > both_found] == []  # then at the period: none yet


def test_batch_log_times_take_each_object_s_time_from_its_joiner_s_batch_line(
    store: ObjectStore, local_stack: LocalStack, tmp_path: Path
) -> None:
    """``photon bench compare``'s output times: read after the run, nothing listed during."""
    settings = local_stack.settings.model_copy(
        update={
            "dcs": ["a", "b"],
            "pipeline": local_stack.settings.pipeline.model_copy(update={"state_root": tmp_path}),
        }
    )
    logged = {("a", "000000000001"): "2026-12-06T01:00:30.378314+00:00",
              ("a", "retry-000000000002"): "2026-12-06T01:00:31.5+00:00",
              ("b", "000000000001"): "2026-12-06T01:00:32.25+00:00"}  # fmt: skip
    for dc in ("a", "b"):
        log = settings.pipeline_dir(dc, JOINER) / "app.log"
        log.parent.mkdir(parents=True)
        lines = ["Spark's own line, not JSON"] + [
            json.dumps({"event": "joiner.batch", "dc": dc, "batch": batch, "timestamp": at})
            for (line_dc, batch), at in logged.items()
            if line_dc == dc
        ]
        log.write_text("\n".join(lines) + "\n")
    keys = {
        "joined/dc=a/hour=2026-12-06T01/a-1/000000000001.g000.parquet": ("a", "000000000001"),
        "joined/dc=a/hour=2026-12-06T01/a-1/000000000001.g001.parquet": ("a", "000000000001"),
        "joined/dc=a/hour=2026-12-06T00/a-1/retry-000000000002.parquet": (
            "a", "retry-000000000002"),
        "joined/dc=b/hour=2026-12-06T01/b-1/000000000001.parquet": ("b", "000000000001"),
    }  # fmt: skip
    unlogged = "joined/dc=b/hour=2026-12-06T01/b-1/000000000002.parquet"  # app killed first
    for key in [*keys, unlogged]:
        store.put(key, b"x")
    before_us = time.time_ns() // 1000
    with BatchLogTimes(settings, store) as times:
        pass
    for key, batch in keys.items():
        expected = datetime.fromisoformat(logged[batch]).timestamp()
        assert times.first_seen_us[key] == round(expected * 1e6)
    assert times.first_seen_us[unlogged] >= before_us  # when it was found: after the run
