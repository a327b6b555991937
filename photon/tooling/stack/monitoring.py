"""The local stack's monitoring: Prometheus with Photon's alert rules, Redis's
exporter and the ZooKeeper exporter, as the compose file runs them.

* ``prometheus`` (Debian's ``prometheus``) scrapes every Photon app's metrics
  endpoint (``pipeline.metrics_base_port``: the query reader of the i-th DC on
  base + 2i, its joiner on base + 2i + 1; an app that is not running is simply
  ``up == 0``), the two exporters and itself, every 5 s, and evaluates
  ``infra/prometheus/rules/photon.yml``: the same jobs, labels and rules as
  compose's ``infra/prometheus/prometheus.yml``.
* ``redis-exporter`` (Debian's ``prometheus-redis-exporter``) serves ``redis_*``.
* ``zk-exporter`` (``photon stack zookeeper-exporter``) serves ``zookeeper_*``
  from each node's ``mntr``.

Each runs only where its binary is installed (``make`` installs both packages)
and ``stack.monitoring`` is on; the others do not depend on them.

How it fails: Prometheus is healthy when ``/-/ready`` answers 200; an exporter
when its ``/metrics`` answers with its ``*_up`` series. A rules file that does
not load makes Prometheus exit at start, which ``photon up`` reports with its
output.
"""

from __future__ import annotations

import shutil
import sys
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import yaml
from prometheus_client.parser import text_string_to_metric_families

from photon.apps import APP_NAMES
from photon.settings import PhotonSettings, StackSettings
from photon.tooling import PROJECT_ROOT

#: The alert rules, shared with compose (docs/metrics.md, "Alerts").
RULES_FILE = PROJECT_ROOT / "infra" / "prometheus" / "rules" / "photon.yml"
PROMETHEUS_BINARY = "prometheus"
REDIS_EXPORTER_BINARY = "prometheus-redis-exporter"
SCRAPE_INTERVAL = "5s"
EVALUATION_INTERVAL = "15s"


def _get(url: str, timeout_s: float) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as answer:  # noqa: S310 (loopback)
            return answer.status, answer.read().decode("utf-8", errors="replace")
    except urllib.error.HTTPError as exc:
        return exc.code, ""
    except (urllib.error.URLError, OSError) as exc:
        return 0, str(exc)


def _values(body: str, name: str) -> list[float]:
    """The values of the gauge ``name`` in a ``/metrics`` text."""
    try:
        families = list(text_string_to_metric_families(body))
    except ValueError:
        return []
    return [s.value for f in families if f.name == name for s in f.samples]


@dataclass(frozen=True, slots=True)
class PrometheusService:
    settings: PhotonSettings
    root: Path

    name = "prometheus"

    @property
    def stack(self) -> StackSettings:
        return self.settings.stack

    @property
    def directory(self) -> Path:
        return self.root / self.name

    @property
    def url(self) -> str:
        return f"http://{self.stack.host}:{self.stack.prometheus_port}"

    @property
    def rules(self) -> Path:
        """The alert rules it loads: the stack's setting, or the project's own. Absolute:
        Prometheus reads a relative rules path from its config file's directory."""
        return (self.stack.prometheus_rules or RULES_FILE).resolve()

    def ports(self) -> dict[str, int]:
        return {"prometheus_port": self.stack.prometheus_port}

    def prepare(self) -> None:
        (self.directory / "data").mkdir(parents=True, exist_ok=True)
        (self.directory / "prometheus.yml").write_text(
            yaml.safe_dump(self.config(), sort_keys=False)
        )

    def config(self) -> dict[str, object]:
        host = self.stack.host
        apps = []
        for dc in self.settings.dcs:
            for app in APP_NAMES:
                port = self.settings.metrics_port(dc, app)
                if port is not None:
                    apps.append({"targets": [f"{host}:{port}"], "labels": {"app": app, "dc": dc}})
        jobs: list[dict[str, object]] = [
            # the apps' own dc/app labels win (one process serves both of a DC's apps)
            {"job_name": "photon", "honor_labels": True, "static_configs": apps},
            {
                "job_name": "redis",
                "static_configs": [{"targets": [f"{host}:{self.stack.redis_exporter_port}"]}],
            },
            {
                "job_name": "zookeeper",
                "static_configs": [{"targets": [f"{host}:{self.stack.zk_exporter_port}"]}],
            },
            {"job_name": "prometheus", "static_configs": [{"targets": [self.url[7:]]}]},
        ]
        return {
            "global": {
                "scrape_interval": SCRAPE_INTERVAL,
                "evaluation_interval": EVALUATION_INTERVAL,
            },
            "rule_files": [str(rules)] if (rules := self.rules).is_file() else [],
            "scrape_configs": jobs,
        }

    def argv(self) -> list[str]:
        return [
            PROMETHEUS_BINARY,
            f"--config.file={self.directory / 'prometheus.yml'}",
            f"--storage.tsdb.path={self.directory / 'data'}",
            "--storage.tsdb.retention.time=2d",
            f"--web.listen-address={self.stack.host}:{self.stack.prometheus_port}",
            "--log.level=warn",
        ]

    def env(self) -> dict[str, str]:
        return {}

    def check(self, timeout_s: float = 2.0) -> tuple[bool, str]:
        status, body = _get(f"{self.url}/-/ready", timeout_s)
        if status != 200:
            return False, f"not ready ({status or body})"
        rules = self.rules
        loaded = "rules loaded" if rules.is_file() else f"no rules: {rules} missing"
        return True, f"ready; {loaded}"


@dataclass(frozen=True, slots=True)
class RedisExporterService:
    stack: StackSettings
    root: Path

    name = "redis-exporter"

    @property
    def directory(self) -> Path:
        return self.root / self.name

    def ports(self) -> dict[str, int]:
        return {"redis_exporter_port": self.stack.redis_exporter_port}

    def prepare(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)

    def argv(self) -> list[str]:
        return [
            REDIS_EXPORTER_BINARY,
            "-redis.addr", f"redis://{self.stack.host}:{self.stack.redis_port}",
            "-web.listen-address", f"{self.stack.host}:{self.stack.redis_exporter_port}",
        ]  # fmt: skip

    def env(self) -> dict[str, str]:
        return {}

    def check(self, timeout_s: float = 2.0) -> tuple[bool, str]:
        url = f"http://{self.stack.host}:{self.stack.redis_exporter_port}/metrics"
        status, body = _get(url, timeout_s)
        up = _values(body, "redis_up") if status == 200 else []
        if not up:
            return False, f"no redis_up at {url} ({status or body[:200]})"
        return True, f"redis_up {up[0]:g}"


@dataclass(frozen=True, slots=True)
class ZooKeeperExporterService:
    stack: StackSettings
    root: Path

    name = "zk-exporter"

    @property
    def directory(self) -> Path:
        return self.root / self.name

    def ports(self) -> dict[str, int]:
        return {"zk_exporter_port": self.stack.zk_exporter_port}

    def prepare(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)

    def argv(self) -> list[str]:
        servers = ",".join(f"{self.stack.host}:{p}" for p in self.stack.zk_client_ports)
        return [sys.executable, "-m", "photon.tooling.cli.main", "stack", "zookeeper-exporter",
                "--servers", servers,
                "--listen", f"{self.stack.host}:{self.stack.zk_exporter_port}"]  # fmt: skip

    def env(self) -> dict[str, str]:
        return {}

    def check(self, timeout_s: float = 2.0) -> tuple[bool, str]:
        url = f"http://{self.stack.host}:{self.stack.zk_exporter_port}/metrics"
        status, body = _get(url, timeout_s)
        up = _values(body, "zookeeper_up") if status == 200 else []
        if not up:
            return False, f"no zookeeper_up at {url} ({status or body[:200]})"
        return True, f"{sum(up):g} of {len(up)} nodes answer mntr"


MonitoringService = PrometheusService | RedisExporterService | ZooKeeperExporterService


def installed(binary: str) -> bool:
    return shutil.which(binary) is not None


def monitoring_services(settings: PhotonSettings, root: Path) -> list[MonitoringService]:
    """The monitoring services this machine can run (none with ``stack.monitoring`` off)."""
    if not settings.stack.monitoring:
        return []
    services: list[MonitoringService] = []
    if installed(PROMETHEUS_BINARY):
        services.append(PrometheusService(settings, root))
    if installed(REDIS_EXPORTER_BINARY):
        services.append(RedisExporterService(settings.stack, root))
    services.append(ZooKeeperExporterService(settings.stack, root))
    return services
