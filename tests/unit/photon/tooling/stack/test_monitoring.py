"""The native stack's monitoring matches compose's: the same jobs, labels and rules."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from photon.settings import PhotonSettings, StackSettings
from photon.tooling.stack import monitoring
from photon.tooling.stack.monitoring import RULES_FILE, PrometheusService, monitoring_services

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[5]


def _labels(job: dict[str, object]) -> set[tuple[str, str]]:
    configs = job["static_configs"]
    assert isinstance(configs, list)
    return {(c["labels"]["app"], c["labels"]["dc"]) for c in configs}


def test_native_prometheus_scrapes_what_compose_does_with_the_same_rules(tmp_path: Path) -> None:
    settings = PhotonSettings(dcs=["a", "b"])
    config = PrometheusService(settings, tmp_path).config()
    compose = yaml.safe_load((REPO / "infra/prometheus/prometheus.yml").read_text())
    native_jobs = {j["job_name"]: j for j in config["scrape_configs"]}  # type: ignore[attr-defined]
    compose_jobs = {j["job_name"]: j for j in compose["scrape_configs"]}
    # MinIO is compose's only: the native S3 stand-in may be moto, which has no metrics
    assert set(native_jobs) - {"prometheus"} == set(compose_jobs) - {"minio"}
    assert _labels(native_jobs["photon"]) == _labels(compose_jobs["photon"])
    # the series' own app label wins over the target's: no exported_app relabelling
    assert native_jobs["photon"]["honor_labels"] is compose_jobs["photon"]["honor_labels"] is True
    targets = sorted(c["targets"][0] for c in native_jobs["photon"]["static_configs"])
    assert targets == [f"127.0.0.1:{p}" for p in (9410, 9411, 9412, 9413)]
    assert config["rule_files"] == [str(RULES_FILE)]
    assert REPO / "infra/prometheus" / compose["rule_files"][0] == RULES_FILE


def test_apps_without_metrics_ports_are_not_scraped(tmp_path: Path) -> None:
    settings = PhotonSettings(pipeline={"metrics_base_port": 0})  # type: ignore[arg-type]
    config = PrometheusService(settings, tmp_path).config()
    photon = next(j for j in config["scrape_configs"] if j["job_name"] == "photon")  # type: ignore[attr-defined]
    assert photon["static_configs"] == []


def test_monitoring_runs_what_is_installed_and_nothing_when_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def names(settings: PhotonSettings) -> list[str]:
        return [service.name for service in monitoring_services(settings, tmp_path)]

    monkeypatch.setattr(monitoring, "installed", lambda binary: True)
    assert names(PhotonSettings()) == ["prometheus", "redis-exporter", "zk-exporter"]
    monkeypatch.setattr(monitoring, "installed", lambda binary: False)
    assert names(PhotonSettings()) == ["zk-exporter"]  # ours: always there
    assert names(PhotonSettings(stack=StackSettings(monitoring=False))) == []


def test_prometheus_loads_the_rules_the_stack_names_and_refuses_a_missing_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rules = tmp_path / "rules.yml"
    rules.write_text("groups: []\n")
    settings = PhotonSettings(stack=StackSettings(prometheus_rules=rules))
    prometheus = PrometheusService(settings, tmp_path)
    assert prometheus.config()["rule_files"] == [str(rules)]
    assert PrometheusService(PhotonSettings(), tmp_path).rules == RULES_FILE.resolve()
    # a relative path is the working directory's, not the config file's
    monkeypatch.chdir(tmp_path)
    relative = PhotonSettings(stack=StackSettings(prometheus_rules=Path("rules.yml")))
    assert PrometheusService(relative, tmp_path / "x").config()["rule_files"] == [str(rules)]
    with pytest.raises(ValueError, match="prometheus_rules"):
        StackSettings(prometheus_rules=tmp_path / "missing.yml")
