"""What a chaos run sets for itself and its apps: its own roots, the user's config file
(``photon --config F chaos``), and its defaults only where neither the environment nor
that file sets a value."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from photon.settings import SettingsError, env_names_in_file, load_settings
from photon.tooling.chaos.config import ChaosConfig
from photon.tooling.chaos.harness import chaos_environment, run_chaos

pytestmark = pytest.mark.unit


@pytest.fixture(autouse=True)
def no_photon_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in list(os.environ):
        if key.startswith("PHOTON_"):
            monkeypatch.delenv(key)


def config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "photon.toml"
    path.write_text(text)
    return path


def test_a_config_file_names_the_variables_of_what_it_sets(tmp_path: Path) -> None:
    text = 'dcs = ["x", "y"]\n[retry]\nmax_age_s = 60\n[pipeline]\nfence_settle_s = 1\n'
    path = config(tmp_path, text)
    assert env_names_in_file(path) == {
        "PHOTON_DCS", "PHOTON_RETRY__MAX_AGE_S", "PHOTON_PIPELINE__FENCE_SETTLE_S"
    }  # fmt: skip
    with pytest.raises(SettingsError, match="not valid TOML"):
        env_names_in_file(config(tmp_path, "[retry\n"))


def test_the_users_config_file_reaches_the_run_and_wins_over_the_chaos_defaults(
    tmp_path: Path,
) -> None:
    path = config(tmp_path, "[retry]\nmax_age_s = 60\n")
    env = chaos_environment("chaos-1", tmp_path, path, {"PHOTON_RETRY__MAX_ATTEMPTS": "9"})
    assert env["PHOTON_CONFIG"] == str(path.resolve())  # the apps read it too
    assert "PHOTON_RETRY__MAX_AGE_S" not in env  # the file's 60, not the chaos default
    assert "PHOTON_RETRY__MAX_ATTEMPTS" not in env  # the environment's 9
    assert env["PHOTON_RETRY__MAX_BACKOFF_S"] == "4"  # set by neither: the chaos default
    assert env["PHOTON_ZOOKEEPER__ROOT"] == "/photon-chaos-1"
    assert env["PHOTON_S3__BUCKET"] == "photon-chaos-1"
    os.environ.update(env)
    try:
        settings = load_settings()
    finally:
        for key in env:
            os.environ.pop(key)
    assert settings.retry.max_age_s == 60 and settings.retry.max_backoff_s == 4


def test_without_a_config_file_the_chaos_defaults_apply(tmp_path: Path) -> None:
    env = chaos_environment("chaos-2", tmp_path, None, {})
    assert "PHOTON_CONFIG" not in env
    assert env["PHOTON_RETRY__MAX_AGE_S"] == "900"


def test_a_run_reads_the_config_file_it_is_given(tmp_path: Path) -> None:
    """The file names one DC: the run refuses it before it touches anything."""
    path = config(tmp_path, 'dcs = ["a"]\n')
    with pytest.raises(ValueError, match="at least two DCs"):
        run_chaos(load_settings(), ChaosConfig(outage_dc="a"), workdir=tmp_path, config_file=path)
    assert "PHOTON_CONFIG" not in os.environ  # the run's variables are gone with it


def test_apps_get_a_master_that_tries_a_failed_task_again_or_the_cluster_asked_for(
    tmp_path: Path,
) -> None:
    # task_retry_after_commit needs Spark to try a task again: local[*] would fail the job
    env = chaos_environment("chaos-3", tmp_path, None, {})
    assert env["PHOTON_PIPELINE__SPARK_MASTER"] == "local[*,4]"
    assert float(env["PHOTON_FAULTS__FAIL_TASK_AFTER_COMMIT_P"]) > 0
    on_cluster = chaos_environment(
        "chaos-4", tmp_path, None, {"PHOTON_PIPELINE__SPARK_MASTER": "local[2]"},
        spark_master="spark://127.0.0.1:7077",
    )  # fmt: skip
    assert on_cluster["PHOTON_PIPELINE__SPARK_MASTER"] == "spark://127.0.0.1:7077"
