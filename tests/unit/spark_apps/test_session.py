"""The Spark configuration every app and batch job starts with (no session started)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from photon.settings import PhotonSettings, PipelineSettings
from spark_apps.session import session_conf, use_project_interpreter

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


def test_the_ui_and_the_event_log_when_asked_for(tmp_path: Path) -> None:
    conf = session_conf(
        PipelineSettings(), "local[*]", ui_port=4041, event_log_dir=tmp_path / "events"
    )
    assert (conf["spark.ui.enabled"], conf["spark.ui.port"]) == ("true", "4041")
    assert int(conf["spark.ui.retainedJobs"]) <= 1000  # a stream's UI keeps its recent past
    assert conf["spark.eventLog.enabled"] == "true"
    assert conf["spark.eventLog.dir"] == (tmp_path / "events").as_uri()
    assert conf["spark.eventLog.rolling.enabled"] == "true"


def test_each_dc_has_its_ui_port_and_batch_jobs_the_next_and_zero_turns_them_off() -> None:
    settings = PhotonSettings(dcs=["a", "b"], pipeline={"spark_ui_base_port": 5050})  # type: ignore[arg-type]
    assert [settings.spark_ui_port(dc) for dc in ("a", "b", None)] == [5050, 5051, 5052]
    off = PhotonSettings(pipeline={"spark_ui_base_port": 0, "event_log": False})  # type: ignore[arg-type]
    assert off.spark_ui_port("a") == 0 and off.spark_event_log_dir is None
    assert settings.spark_event_log_dir == settings.pipeline_root / "spark-events"


def test_the_ui_binds_loopback_natively(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SPARK_LOCAL_IP", raising=False)
    use_project_interpreter(PipelineSettings())
    assert os.environ["SPARK_LOCAL_IP"] == "127.0.0.1"
    monkeypatch.delenv("SPARK_LOCAL_IP")
    use_project_interpreter(PipelineSettings(driver_bind_address="0.0.0.0"))  # compose
    assert "SPARK_LOCAL_IP" not in os.environ


def test_each_application_logs_its_events_in_a_directory_of_its_own(tmp_path: Path) -> None:
    from spark_apps.session import prepared_event_log

    joiner = prepared_event_log(tmp_path, "photon-joiner-a")
    reader = prepared_event_log(tmp_path, "photon-query-reader-a")
    # two apps started in one millisecond get one Spark id: their logs must not collide
    assert joiner == tmp_path / "photon-joiner-a" and joiner.is_dir()
    assert reader is not None and reader != joiner and reader.is_dir()
    assert prepared_event_log(None, "photon-joiner-a") is None
    assert prepared_event_log(tmp_path, "../x y") == tmp_path / ".._x_y"
