"""A Photon on the shared stack, with its own registry root, bucket, logs and local state.

For the operations tests (``photon.ops`` and the DAGs): generated logs of two
DCs go through each DC's real query reader and joiner (built from the
settings, as the Spark apps build them), driven batch by batch on a clock the
test moves, so the registry, the outputs, the log-file map and the retry
stores are what a run leaves. The settings are also set as ``PHOTON_*`` and
``AIRFLOW_CONN_*`` variables, so Airflow tasks and Spark jobs see the same.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from photon.join.runtime import JoinerApp, QueryReaderApp, build_joiner, build_query_reader
from photon.logs.reader import GrowingLogReader
from photon.settings import PhotonSettings
from photon.storage import ObjectStore
from photon.tooling.gen.model import GenConfig, Manifest
from photon.tooling.gen.simulator import load_manifest, simulate, write
from registry import IdRegistry
from tests.conftest import settings_from_env
from tests.integration.photon.join.conftest import Clock, batches

S = 1_000_000


@dataclass
class OpsPhoton:
    settings: PhotonSettings
    store: ObjectStore
    registry: IdRegistry
    start_us: int
    clock: Clock
    manifest: Manifest | None = None
    joiners: dict[str, JoinerApp] = field(default_factory=dict)
    readers: dict[str, QueryReaderApp] = field(default_factory=dict)

    def generate(self, **config: Any) -> Manifest:
        cfg = GenConfig(
            **{
                "seed": 7,
                "start_us": self.start_us,
                "queries": 300,
                "query_rate": 100.0,
                "click_delay_tail_max_s": 60.0,
                "outage_duration_s": 0.0,
                "rollover_bytes": 16 * 1024,
                **config,
            }
        )
        write(simulate(cfg), self.settings.logs_root)
        self.manifest = load_manifest(self.settings.logs_root)
        return self.manifest

    def joiner(self, dc: str) -> JoinerApp:
        if dc not in self.joiners:
            app = build_joiner(self.settings, dc)
            assert app.joiner is not None
            app.joiner.clock = self.clock
            self.joiners[dc] = app
        return self.joiners[dc]

    def reader(self, dc: str) -> QueryReaderApp:
        if dc not in self.readers:
            app = build_query_reader(self.settings, dc)
            assert app.reader is not None
            app.reader.clock = self.clock
            self.readers[dc] = app
        return self.readers[dc]

    def run(self, dc: str, *, before_batch: Callable[[int], None] = lambda _: None) -> None:
        """The DC's queries and clicks, interleaved batch by batch, then its retries drained."""
        logs = self.settings.dc_logs(dc)
        queries = batches(logs / "queries", 8 * 1024)
        clicks = batches(logs / "clicks", 4 * 1024)
        joiner = self.joiner(dc).joiner
        reader = self.reader(dc).reader
        assert joiner is not None and reader is not None
        for n in range(max(len(queries), len(clicks))):
            self.clock.now_us += S // 10
            for lines in queries[n : n + 1]:
                reader.process(f"{n:012d}", lines)
            for lines in clicks[n : n + 1]:
                before_batch(n)
                joiner.process(f"{n:012d}", lines)
        self.drain(dc)

    def crash_between_commit_and_write(self, dc: str, batch: int) -> None:
        """Run the DC until its joiner dies between batch ``batch``'s registry commit and its
        output write (the batch stays open, as after a kill)."""
        joiner = self.joiner(dc).joiner
        assert joiner is not None
        writer = joiner.output
        write_joined = writer.joined

        def crash(*_: object, **__: object) -> list[str]:
            raise SystemExit("killed between the registry commit and the output write")

        def crash_at(n: int) -> None:
            writer.joined = crash if n == batch else write_joined  # type: ignore[method-assign]

        with pytest.raises(SystemExit):
            self.run(dc, before_batch=crash_at)
        writer.joined = write_joined  # type: ignore[method-assign]

    def read_recovery_logs(self, dc: str) -> int:
        """The DC's joiner reads the recovery logs in its click logs, as its source would;
        then its retries are drained. Returns the lines read."""
        joiner = self.joiner(dc).joiner
        assert joiner is not None
        reader = GrowingLogReader(self.settings.dc_logs(dc) / "clicks", pattern="recovery-*.log")
        offsets: dict[str, int] = {}
        lines = 0
        while (read := reader.read(offsets, max_bytes=1 << 20)).lines:
            self.clock.now_us += S // 10
            joiner.process(f"recovery-{lines:08d}", read.lines)
            offsets = read.offsets
            lines += len(read.lines)
        self.drain(dc)
        return lines

    def read_queries(self, dc: str, pattern: str) -> int:
        """The DC's query reader reads the query files matching ``pattern`` (files that
        appeared after its run), as its source would. Returns the lines read."""
        reader = self.reader(dc).reader
        assert reader is not None
        files = GrowingLogReader(self.settings.dc_logs(dc) / "queries", pattern=pattern)
        read = files.read({}, max_bytes=1 << 20)
        self.clock.now_us += S // 10
        reader.process(f"late-{self.clock.now_us:d}", read.lines)
        reader.publish_progress()
        return len(read.lines)

    def drain(self, dc: str) -> None:
        """Retry passes on the clock until the DC's retry store is empty."""
        app = self.joiner(dc)
        reader = self.reader(dc).reader
        assert app.joiner is not None and app.retries is not None and reader is not None
        for _ in range(100):
            reader.publish_progress()  # as the reader's app does between batches
            app.joiner.process_retries()
            if app.retries.pending() == 0:
                return
            self.clock.now_us += 5 * S
        raise AssertionError(f"{app.retries.pending()} clicks still pending in DC {dc}")

    def close(self) -> None:
        for app in [*self.joiners.values(), *self.readers.values()]:
            app.close()


def ops_environment(stack_environment: dict[str, str], tmp: Path) -> dict[str, str]:
    """PHOTON_* and AIRFLOW_CONN_* variables of a private Photon on the shared stack."""
    tag = uuid.uuid4().hex[:10]
    env = {
        **stack_environment,
        "PHOTON_LOGS_ROOT": str(tmp / "logs"),
        "PHOTON_PIPELINE__STATE_ROOT": str(tmp / "pipelines"),
        "PHOTON_ZOOKEEPER__ROOT": f"/photon-ops-{tag}",
        "PHOTON_S3__BUCKET": f"photon-ops-{tag}",
        "PHOTON_REDIS__KEY_PREFIX": f"photon-ops-{tag}",
        "PHOTON_SHARDS__DEFAULT_COUNT": "4",
        "PHOTON_SHARDS__MAX_CLOCK_SKEW_S": "2",
        "PHOTON_RETRY__INITIAL_BACKOFF_S": "1",
        "PHOTON_RETRY__MAX_BACKOFF_S": "2",
        "PHOTON_RETRY__MAX_ATTEMPTS": "2",
        "PHOTON_RETRY__MAX_AGE_S": "10",
        "PHOTON_PIPELINE__READER_WAIT_S": "0",
        # After fencing a dead attempt, recovery waits for writes in flight: none here.
        "PHOTON_PIPELINE__FENCE_SETTLE_S": "0.5",
    }
    settings = settings_from_env(env)
    env["AIRFLOW_CONN_PHOTON_REGISTRY"] = json.dumps(
        {
            "conn_type": "photon-zookeeper",
            "host": ",".join(settings.zk_hosts),
            "schema": settings.zookeeper.root,
        }
    )
    env["AIRFLOW_CONN_PHOTON_OBJECT_STORE"] = json.dumps(
        {
            "conn_type": "photon-s3",
            "host": f"http://{settings.stack.host}",
            "port": settings.stack.s3_port,
            "login": settings.s3.access_key,
            "password": settings.s3.secret_key.get_secret_value(),
            "schema": settings.s3.bucket,
        }
    )
    env["AIRFLOW_CONN_SPARK_DEFAULT"] = json.dumps({"conn_type": "spark", "host": "local[2]"})
    return env
