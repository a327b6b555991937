from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from photon.apps import JOINER, QUERY_READER
from photon.settings import PipelineSettings, SettingsError, load_settings

pytestmark = pytest.mark.unit


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    for key in list(os.environ):
        if key.startswith("PHOTON_"):
            monkeypatch.delenv(key)


def test_defaults_point_at_the_local_stack() -> None:
    s = load_settings()
    assert s.dcs == ["a", "b"]
    assert s.zk_hosts == ["127.0.0.1:2181", "127.0.0.1:2182", "127.0.0.1:2183"]
    assert s.redis_url == "redis://127.0.0.1:6379/0"
    assert s.s3_endpoint_url == "http://127.0.0.1:9000"
    assert s.retention == timedelta(days=3)


def test_environment_overrides_nested_values_and_lists(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PHOTON_DCS", "east,west")
    monkeypatch.setenv("PHOTON_STACK__ZK_CLIENT_PORTS", "[5001, 5002, 5003]")
    monkeypatch.setenv("PHOTON_ZOOKEEPER__ROOT", "/photon-test")
    monkeypatch.setenv("PHOTON_RETENTION", "PT6H")
    monkeypatch.setenv("PHOTON_LOG_FILE_MAP__WINDOW_S", "2.5")
    s = load_settings()
    assert s.dcs == ["east", "west"]
    assert s.zk_hosts == ["127.0.0.1:5001", "127.0.0.1:5002", "127.0.0.1:5003"]
    assert s.zookeeper.root == "/photon-test"
    assert s.retention == timedelta(hours=6)
    assert s.log_file_map.window_s == 2.5


def test_explicit_endpoints_win_over_the_local_stack(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PHOTON_ZOOKEEPER__HOSTS", "zk1:2181,zk2:2181,zk3:2181")
    monkeypatch.setenv("PHOTON_S3__ENDPOINT_URL", "http://minio:9000")
    monkeypatch.setenv("PHOTON_REDIS__URL", "redis://cache:6379/1")
    s = load_settings()
    assert s.zk_hosts == ["zk1:2181", "zk2:2181", "zk3:2181"]
    assert (s.s3_endpoint_url, s.redis_url) == ("http://minio:9000", "redis://cache:6379/1")


def test_a_config_file_is_a_layer_below_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "photon.toml"
    config.write_text('dcs = ["x", "y", "z"]\n[stack]\nredis_port = 7000\ns3_port = 7001\n')
    monkeypatch.setenv("PHOTON_STACK__S3_PORT", "7002")
    s = load_settings(config)
    assert s.dcs == ["x", "y", "z"]
    assert (s.stack.redis_port, s.stack.s3_port) == (7000, 7002)
    monkeypatch.setenv("PHOTON_CONFIG", str(config))
    assert load_settings().dcs == ["x", "y", "z"]


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"PHOTON_STACK__REDIS_PORT": "70000"}, "stack.redis_port (from PHOTON_STACK__REDIS_PORT)"),
        ({"PHOTON_DCS": "a,A"}, "dcs (from PHOTON_DCS)"),
        ({"PHOTON_DCS": "a,a"}, "dcs (from PHOTON_DCS)"),
        ({"PHOTON_DCS": "[oops"}, "dcs (from PHOTON_DCS)"),
        ({"PHOTON_ZOOKEEPER__ROOT": "photon"}, "zookeeper.root"),
        ({"PHOTON_ZOOKEEPER__HOSTS": "zk1"}, "zookeeper.hosts"),
        ({"PHOTON_ZOOKEEPER__AUTH_USER": "u"}, "zookeeper"),
        ({"PHOTON_S3__BUCKET": "Not_A_Bucket"}, "s3.bucket"),
        ({"PHOTON_S3__SECRET_KEY": "short"}, "s3.secret_key"),
        ({"PHOTON_S3__ENDPOINT_URL": "minio:9000"}, "s3.endpoint_url"),
        ({"PHOTON_REDIS__URL": "http://x"}, "redis.url"),
        ({"PHOTON_RETENTION": "-PT1H"}, "retention"),
        ({"PHOTON_SHARDS__DEFAULT_COUNT": "0"}, "shards.default_count"),
        ({"PHOTON_LOG_FILE_MAP__MAX_BYTES": "10"}, "log_file_map.max_bytes"),
        ({"PHOTON_RETRY__INITIAL_BACKOFF_S": "900"}, "retry"),
        ({"PHOTON_RETRY__JITTER": "1.5"}, "retry.jitter"),
        ({"PHOTON_STACK__HOST": "10.0.0.5"}, "stack.host"),
        ({"PHOTON_PIPELINE__SPARK_MASTER": "yarn"}, "pipeline.spark_master"),
        ({"PHOTON_PIPELINE__SPARK_MASTER": "local[2,0]"}, "pipeline.spark_master"),
        ({"PHOTON_PIPELINE__SPARK_MASTER": "local[2,]"}, "pipeline.spark_master"),
        (
            {"PHOTON_PIPELINE__DRIVER_JAVA_OPTIONS": "-Xmx1g; rm -rf /"},
            "pipeline.driver_java_options",
        ),
        ({"PHOTON_PIPELINE__ADAPTER": "not a path"}, "pipeline.adapter"),
        ({"PHOTON_STACK__ZK_CLIENT_PORTS": "1,2"}, "stack"),
        ({"PHOTON_STACK__REDIS_PORT": "2181"}, "ports used twice: [2181]"),
        ({"PHOTON_STACK__SPARK_MASTER_UI_PORT": "7077"}, "ports used twice: [7077]"),
        ({"PHOTON_STACK__SPARK_WORKER_UI_PORTS": "8091"}, "one each per worker"),
        ({"PHOTON_STACK__SPARK_WORKER_PORTS": "[]"}, "one each per worker"),
        ({"PHOTON_PIPELINE__DRIVER_BIND_ADDRESS": "joiner-a"}, "pipeline.driver_bind_address"),
        ({"PHOTON_PIPELINE__DRIVER_HOST": "a b"}, "pipeline.driver_host"),
        ({"PHOTON_PIPELINE__CLUSTER_CORES_PER_APP": "0"}, "pipeline.cluster_cores_per_app"),
        ({"PHOTON_PIPELINE__JOIN_GROUPS": "-1"}, "pipeline.join_groups"),
        ({"PHOTON_PIPELINE__JOINER_MAX_BYTES_PER_BATCH": "100"}, "joiner_max_bytes_per_batch"),
        ({"PHOTON_PIPELINE__JOINER_MAX_BYTES_PER_BATCH": "2GiB"}, "joiner_max_bytes_per_batch"),
        ({"PHOTON_PIPELINE__JOIN_GROUPS": "5000"}, "pipeline.join_groups"),
        ({"PHOTON_PIPELINE__JOIN_ON_EXECUTORS": "perhaps"}, "pipeline.join_on_executors"),
        ({"PHOTON_PIPELINE__ARRIVAL_WINDOW_S": "-1"}, "pipeline.arrival_window_s"),
        ({"PHOTON_PIPELINE__ARRIVAL_WINDOW_S": "7200"}, "pipeline.arrival_window_s"),
        ({"PHOTON_RETRY__MAX_AGE_S": "inf"}, "retry.max_age_s"),
        ({"PHOTON_PIPELINE__TRIGGER_S": "Infinity"}, "pipeline.trigger_s"),
        ({"PHOTON_ZOOKEEPER__SESSION_TIMEOUT_S": "nan"}, "zookeeper.session_timeout_s"),
        ({"PHOTON_LOGS_ROOT": ""}, "logs_root (from PHOTON_LOGS_ROOT): is empty"),
        ({"PHOTON_PIPELINE__STATE_ROOT": " "}, "pipeline.state_root"),
        ({"PHOTON_STACK__STATE_DIR": ""}, "stack.state_dir"),
        ({"PHOTON_NO_SUCH_THING": "1"}, "PHOTON_NO_SUCH_THING"),
        ({"PHOTON_STACK__REDIS_PORTT": "1"}, "PHOTON_STACK__REDIS_PORTT"),
    ],
)
def test_invalid_values_fail_at_start_naming_the_setting(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], named: str
) -> None:
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    with pytest.raises(SettingsError) as info:
        load_settings()
    assert named in str(info.value)


def test_a_missing_config_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match="does not exist"):
        load_settings(tmp_path / "nope.toml")


def test_a_bad_config_file_value_names_the_file(tmp_path: Path) -> None:
    config = tmp_path / "bad.toml"
    config.write_text("[shards]\ndefault_count = -3\n")
    with pytest.raises(SettingsError, match=r"default_count \(from config file .*bad\.toml\)"):
        load_settings(config)


def test_secrets_are_masked_when_shown() -> None:
    shown = load_settings().redacted()
    assert "photon-local-secret" not in str(shown)
    assert shown["effective"]["zk_hosts"][0] == "127.0.0.1:2181"


def test_unknown_dc_is_refused() -> None:
    with pytest.raises(SettingsError, match="unknown DC 'c'"):
        load_settings().dc_logs("c")


@pytest.mark.parametrize(
    "master", ["local", "local[2]", "local[*]", "local[2,4]", "local[*,3]", "spark://h:7077"]
)
def test_every_master_spark_knows_is_taken_task_retries_included(master: str) -> None:
    assert PipelineSettings(spark_master=master).spark_master == master


def test_the_joiners_batches_take_twice_the_readers_bytes_unless_set() -> None:
    assert PipelineSettings().batch_bytes(QUERY_READER) == 16 << 20
    assert PipelineSettings().batch_bytes(JOINER) == 32 << 20
    assert PipelineSettings(max_bytes_per_batch=4096).batch_bytes(JOINER) == 8192
    assert PipelineSettings(max_bytes_per_batch=1 << 30).batch_bytes(JOINER) == 1 << 30
    alone = PipelineSettings(max_bytes_per_batch=4096, joiner_max_bytes_per_batch=2048)
    assert (alone.batch_bytes(JOINER), alone.batch_bytes(QUERY_READER)) == (2048, 4096)


def test_a_bad_value_is_blamed_on_the_layer_it_came_from(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "photon.toml"
    config.write_text("[stack]\nredis_port = 99999\n")
    monkeypatch.setenv("PHOTON_SHARDS__MAX_CLOCK_SKEW_S", "-1")
    monkeypatch.setenv("PHOTON_PIPELINE__RESTART_BACKOFF_S", "100")
    with pytest.raises(SettingsError) as caught:
        load_settings(config)
    lines = str(caught.value).splitlines()
    assert lines[0] == "invalid settings:"
    assert (
        f"  stack.redis_port (from config file {config}): Input should be less than or "
        "equal to 65535" in lines
    )
    assert (
        "  shards.max_clock_skew_s (from PHOTON_SHARDS__MAX_CLOCK_SKEW_S): Input should "
        "be greater than 0" in lines
    )
    # a check across a section's fields names what set them; no "Value error, " prefix
    assert (
        "  pipeline (from PHOTON_PIPELINE__RESTART_BACKOFF_S): restart_max_backoff_s (30) "
        "is below restart_backoff_s (100)" in lines
    )
