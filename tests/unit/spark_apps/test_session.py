"""The Spark configuration every app and batch job starts with (no session started)."""

from __future__ import annotations

import pytest

from photon.settings import PipelineSettings
from spark_apps.session import session_conf

pytestmark = pytest.mark.unit


def test_locally_the_driver_stays_on_loopback_and_takes_no_cluster_bounds() -> None:
    conf = session_conf(PipelineSettings(), "local[*]")
    assert conf["spark.driver.host"] == conf["spark.driver.bindAddress"] == "127.0.0.1"
    assert conf["spark.ui.enabled"] == "false"
    assert "spark.cores.max" not in conf


def test_on_a_standalone_master_each_app_takes_a_bounded_share() -> None:
    pipeline = PipelineSettings(
        cluster_cores_per_app=2,
        executor_memory_mb=768,
        driver_host="joiner-a",
        driver_bind_address="0.0.0.0",
    )
    conf = session_conf(pipeline, "spark://spark-master:7077")
    assert conf["spark.cores.max"] == conf["spark.executor.cores"] == "2"
    assert conf["spark.executor.memory"] == "768m"
    assert (conf["spark.driver.host"], conf["spark.driver.bindAddress"]) == ("joiner-a", "0.0.0.0")
