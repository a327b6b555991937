"""Spark's own stream-stream join, the peer ``photon bench compare`` measures: it joins what
its watermark allows, drops a DC's duplicate lines, and knows nothing of other DCs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

from photon.events.ids import parse_event_id
from photon.tooling.gen.model import GenConfig
from photon.tooling.gen.simulator import simulate, write
from photon.tooling.stack.ports import free_ports
from spark_apps.contracts import NATIVE_JOIN_MODULE
from spark_apps.native_join import native_join

pytestmark = pytest.mark.integration

WATERMARK_S = 600


def test_the_native_join_joins_each_click_within_its_range_once_per_dc(
    spark: SparkSession, tmp_path: Path
) -> None:
    cfg = GenConfig(
        seed=5,
        dcs=["a", "b"],
        start_us=time.time_ns() // 1000 - 4 * 3_600_000_000,
        queries=3_000,
        query_rate=100.0,
        click_delay_tail_fraction=0.05,  # some clicks hours late: beyond the watermark
        outage_duration_s=0.0,
    )
    manifest = write(simulate(cfg), tmp_path / "logs")
    assert manifest.dcs["a"].duplicate_click_lines > 0 and manifest.dcs["a"].malformed

    out = tmp_path / "out"
    query = (
        native_join(spark, tmp_path / "logs" / "a", WATERMARK_S)
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(300)
    assert query.exception() is None
    joined = pq.read_table(out, columns=["click_id", "query_id"]).to_pylist()

    def delay_s(click: str, query: str) -> float:
        return (parse_event_id(click).ts_us - parse_event_id(query).ts_us) / 1e6

    within = {c for c, q in manifest.expected_joins.items() if 0 <= delay_s(c, q) <= WATERMARK_S}
    ids = [row["click_id"] for row in joined]
    assert len(ids) == len(set(ids))  # the DC's duplicate click lines: dropped
    assert all(manifest.expected_joins[row["click_id"]] == row["query_id"] for row in joined)
    # All at once (one batch), the watermark drops nothing the range lets in.
    assert set(ids) == within
    assert len(within) < len(manifest.expected_joins)  # the hours-late clicks are missed


def test_the_peer_app_runs_photons_session_with_its_ui_and_an_event_log_a_dc(
    tmp_path: Path,
) -> None:
    """``photon bench compare`` runs the peer's command per DC: the same session as
    Photon's apps, Spark's UI on the DC's port and an event log in a directory a DC."""
    cfg = GenConfig(seed=6, dcs=["a", "b"], start_us=time.time_ns() // 1000 - 3_600_000_000,
                    queries=500, query_rate=100.0, outage_duration_s=0.0)  # fmt: skip
    manifest = write(simulate(cfg), tmp_path / "logs")
    ui_base = free_ports(2, consecutive=True)[0]  # DC a's, and DC b's the next
    env = os.environ | {
        "PHOTON_PIPELINE__STATE_ROOT": str(tmp_path / "state"),
        "PHOTON_PIPELINE__SPARK_UI_BASE_PORT": str(ui_base),
        "PHOTON_PIPELINE__SPARK_MASTER": "local[1]",
    }
    argv = [sys.executable, "-m", NATIVE_JOIN_MODULE, "--dc", "b", "--logs-root",
            str(tmp_path / "logs"), "--out", str(tmp_path / "out")]  # fmt: skip
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1])["dc"] == "b"
    (app_log,) = (tmp_path / "state" / "spark-events" / "spark-native-join-b").iterdir()
    (first,) = app_log.glob("events_1_*")  # Spark's rolling event log, compressed
    with pa.CompressedInputStream(pa.OSFile(str(first)), first.suffix.lstrip(".")) as stream:
        events = [json.loads(line) for line in stream.read().decode().splitlines()]
    (environment,) = [e for e in events if e["Event"] == "SparkListenerEnvironmentUpdate"]
    spark_conf = environment["Spark Properties"]
    assert spark_conf["spark.ui.enabled"] == "true"
    assert spark_conf["spark.ui.port"] == str(ui_base + 1)  # DC b's: the base's next
    joined = pq.read_table(tmp_path / "out" / "dc=b", columns=["click_id"]).column(0).to_pylist()
    assert joined and set(joined) <= set(manifest.expected_joins)
