from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from photon.settings import S3Settings
from photon.tooling import runs
from photon.tooling.gen import simulator
from photon.tooling.gen.model import GenConfig
from photon.tooling.gen.simulator import Simulation
from photon.tooling.runs import StreamClock, namespace

pytestmark = pytest.mark.unit


def test_a_held_stream_clock_stands_still_and_goes_on_where_it_stood() -> None:
    wall = [1_000.0]
    clock = StreamClock(wall=lambda: wall[0])
    assert clock() == 1_000.0
    wall[0] += 5
    clock.hold()
    wall[0] += 30
    assert clock() == 1_005.0 and clock.held_s == 30
    clock.resume()
    wall[0] += 2
    assert clock() == 1_007.0 and clock.held_s == 30
    clock.resume()  # not held: nothing changes
    wall[0] += 1
    assert clock() == 1_008.0 and clock.held_s == 30


def test_holds_nest_the_stream_flows_when_the_last_one_resumed() -> None:
    wall = [1_000.0]
    clock = StreamClock(wall=lambda: wall[0])
    clock.hold()  # one fault's hold
    wall[0] += 10
    clock.hold()  # another's, beside it: the hold began when the first did
    wall[0] += 10
    clock.resume()  # the first fault is done: the second still holds
    wall[0] += 10
    assert clock() == 1_000.0 and clock.held_s == 30
    clock.resume()
    wall[0] += 4
    assert clock() == 1_004.0 and clock.held_s == 30


def test_a_runs_namespace_is_its_own_root_bucket_cache_keys_logs_and_state(
    tmp_path: Path,
) -> None:
    own = namespace("bench-burst-1a2b3c4d", tmp_path)
    assert own == {
        "PHOTON_ZOOKEEPER__ROOT": "/photon-bench-burst-1a2b3c4d",
        "PHOTON_S3__BUCKET": "photon-bench-burst-1a2b3c4d",
        "PHOTON_REDIS__KEY_PREFIX": "photon-bench-burst-1a2b3c4d:q",
        "PHOTON_LOGS_ROOT": str(tmp_path / "logs"),
        "PHOTON_PIPELINE__STATE_ROOT": str(tmp_path / "state"),
    }
    S3Settings(bucket=own["PHOTON_S3__BUCKET"])  # a valid bucket name
    assert set(namespace("demo-20261126-030000")) == {
        "PHOTON_ZOOKEEPER__ROOT", "PHOTON_S3__BUCKET", "PHOTON_REDIS__KEY_PREFIX"
    }  # fmt: skip


def test_a_live_writer_simulates_at_once_and_writes_only_once_told_to(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    simulated = threading.Event()

    def simulate_and_say(cfg: GenConfig) -> Simulation:
        sim = simulator.simulate(cfg)
        simulated.set()
        return sim

    monkeypatch.setattr(runs, "simulate", simulate_and_say)
    cfg = GenConfig(
        start_us=time.time_ns() // 1000 - 1_000_000,  # begun: written as soon as told
        queries=200,
        query_rate=10_000.0,
        click_delay_median_s=0.01,
        click_delay_tail_fraction=0.0,
    )
    go = threading.Event()
    writer = threading.Thread(
        target=runs.write_live, args=(cfg.model_dump_json(), str(tmp_path), None, go)
    )
    writer.start()
    try:
        assert simulated.wait(30), "the stream is simulated before the writer is told to go"
        assert not list(tmp_path.rglob("*")), "nothing written before go"
    finally:
        go.set()
        writer.join(60)
    manifest = simulator.load_manifest(tmp_path)
    assert manifest.queries + manifest.lost_queries == 200 and manifest.clicks > 0
