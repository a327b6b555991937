"""Local Airflow 3 on the native stack: PostgreSQL from Debian, then Airflow's four services.

``AirflowStack.up`` (``photon airflow up``):

1. PostgreSQL (:mod:`photon.tooling.stack.postgres`): a cluster of our own in
   ``<airflow state>/postgres``, on the stack's loopback address only;
2. ``airflow db migrate`` into its database ``airflow``;
3. ``airflow api-server`` (UI and REST on ``airflow.api_port``, loopback),
   ``scheduler`` (LocalExecutor), ``dag-processor`` and ``triggerer``, with
   our ``dags/``, the admin from the settings (simple auth manager) and the
   connections ``photon_registry``, ``photon_object_store`` and
   ``spark_default`` made from Photon's settings. Every Airflow process gets
   the same ``PHOTON_*`` variables, so tasks and Spark jobs see our settings.

Processes are recorded by the stack's supervisor
(:mod:`photon.tooling.stack.supervisor`) in ``<airflow state>/airflow.json``;
``down`` stops exactly those. How it fails: a service that exits or is not
healthy within ``stack.start_timeout_s`` (x4: Airflow starts slowly) makes
``up`` stop what it started and raise :class:`AirflowStackError` with the
tail of its output.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog

from photon.errors import PhotonError
from photon.settings import (
    CONFIG_ENV_VAR,
    ENV_PREFIX,
    AirflowSettings,
    AlertSettings,
    PhotonSettings,
)
from photon.tooling import PROJECT_ROOT
from photon.tooling.stack import process
from photon.tooling.stack.ports import require_free
from photon.tooling.stack.postgres import LocalPostgres
from photon.tooling.stack.supervisor import SupervisedState, Supervisor

log = structlog.get_logger(__name__)

AIRFLOW_SERVICES = ("api-server", "scheduler", "dag-processor", "triggerer")


class AirflowStackError(PhotonError, RuntimeError):
    """Local Airflow cannot do what was asked; the message says why."""


def connection_env(settings: PhotonSettings) -> dict[str, str]:
    """``AIRFLOW_CONN_*`` of the registry, the object store and Spark, from the settings."""
    zk, s3 = settings.zookeeper, settings.s3
    registry: dict[str, Any] = {
        "conn_type": "photon-zookeeper",
        "host": ",".join(settings.zk_hosts),
        "schema": zk.root,
    }
    if zk.auth_user is not None and zk.auth_password is not None:
        registry |= {"login": zk.auth_user, "password": zk.auth_password.get_secret_value()}
    endpoint = settings.s3_endpoint_url.rstrip("/")
    scheme, _, rest = endpoint.partition("://")
    host, _, port = rest.partition(":")
    store: dict[str, Any] = {
        "conn_type": "photon-s3",
        "host": f"{scheme}://{host}",
        "login": s3.access_key,
        "password": s3.secret_key.get_secret_value(),
        "schema": s3.bucket,
        "extra": {"region": s3.region},
    }
    if port:
        store["port"] = int(port)
    master = settings.pipeline.spark_master
    env = {
        "AIRFLOW_CONN_PHOTON_REGISTRY": json.dumps(registry),
        "AIRFLOW_CONN_PHOTON_OBJECT_STORE": json.dumps(store),
        "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": master}),
    }
    alerts = settings.alerts
    if alerts.smtp_host:  # the failure notifier's mail server (plugins/notifications)
        env["AIRFLOW_CONN_PHOTON_SMTP"] = json.dumps(smtp_connection(alerts))
    return env


def smtp_connection(alerts: AlertSettings) -> dict[str, Any]:
    """The Airflow SMTP connection of the ``alerts`` settings (no SMTPS; STARTTLS if set)."""
    return {
        "conn_type": "smtp",
        "host": alerts.smtp_host,
        "port": alerts.smtp_port,
        "extra": {
            "from_email": alerts.email_from,
            "disable_ssl": True,
            "disable_tls": not alerts.smtp_starttls,
            "timeout": 10,
            "retry_limit": 2,
        },
    }


def write_passwords_file(path: Path, airflow: AirflowSettings) -> None:
    """The simple auth manager's passwords file: the admin from the settings, owner-only."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch(mode=0o600)
    path.chmod(0o600)  # before the secret goes in
    path.write_text(json.dumps({airflow.admin_user: airflow.admin_password.get_secret_value()}))


class AirflowState(SupervisedState):
    api_url: str


@dataclass(slots=True)
class AirflowStatus:
    api_url: str
    admin_user: str
    services: dict[str, str]  # name -> "running" / "not running"
    health: dict[str, str]  # Airflow's own health report, by component
    #: Every TCP address:port each service (with its child processes) listens on.
    listening: dict[str, list[str]] = field(default_factory=dict)

    @property
    def exposed(self) -> list[str]:
        """Listening sockets beyond loopback: there must be none."""
        return [
            f"{name} {address}"
            for name, addresses in self.listening.items()
            for address in addresses
            if not process.is_loopback(address.rsplit(":", 1)[0])
        ]

    @property
    def healthy(self) -> bool:
        return (
            all(v == "running" for v in self.services.values())
            and bool(self.health)
            and all(v == "healthy" for v in self.health.values())
            and not self.exposed
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "healthy": self.healthy,
            "api_url": self.api_url,
            "admin_user": self.admin_user,
            "services": self.services,
            "health": self.health,
            "listening": self.listening,
            "exposed": self.exposed,
        }


class AirflowStack:
    def __init__(self, settings: PhotonSettings, *, config_file: Path | None = None) -> None:
        self.settings = settings
        self.config_file = config_file
        self.root = (settings.airflow.state_dir or settings.stack.state_dir / "airflow").resolve()
        self.home = self.root / "home"
        self.postgres = LocalPostgres(self.root / "postgres", settings.stack.host, settings.airflow)
        self.state_path = self.root / "airflow.json"
        host = settings.stack.host
        self.api_url = f"http://{host}:{settings.airflow.api_port}"
        self.supervisor = Supervisor(
            self.state_path,
            AirflowState,
            what="local Airflow",
            error=AirflowStackError,
            tail_lines=15,
        )

    # -- public API ---------------------------------------------------------------------

    def up(self) -> AirflowStatus:
        with self.supervisor.locked():
            state = self.supervisor.load() or AirflowState(api_url=self.api_url)
            running = self.supervisor.running(state)
            started: list[str] = []
            try:
                if "postgres" not in running:
                    require_free(
                        self.settings.stack.host,
                        {"airflow.postgres_port": self.settings.airflow.postgres_port},
                    )
                    self.postgres.init()
                    self._start(state, "postgres", self.postgres.argv(), user=self.postgres.run_as)
                    started.append("postgres")
                self._wait(state, self.postgres.ready, "postgres")
                self.postgres.ensure_database("airflow")
                self._prepare_home()
                missing = [s for s in AIRFLOW_SERVICES if s not in running]
                if missing:
                    self._migrate()
                if "api-server" in missing:
                    require_free(
                        self.settings.stack.host,
                        {"airflow.api_port": self.settings.airflow.api_port},
                    )
                for name in missing:
                    self._start(state, name, self._airflow_argv(name), env=self.env())
                    started.append(name)
                deadline = self.settings.stack.start_timeout_s * 4
                self._wait(state, lambda: self.status().healthy, "airflow", timeout_s=deadline)
            except BaseException:
                self.supervisor.stop(state, started, timeout_s=30)
                raise
        return self.status()

    def down(self, *, purge: bool = False) -> list[str]:
        stopped: list[str] = []
        with self.supervisor.locked():
            state = self.supervisor.load()
            if state is not None:
                # Airflow's services together, then its database.
                for names in (AIRFLOW_SERVICES, ("postgres",)):
                    stopped += self.supervisor.stop(state, names, timeout_s=30)[0]
                self.supervisor.forget()
            if purge and self.root.exists():
                shutil.rmtree(self.root)
        log.info("airflow.down", stopped=stopped)
        return stopped

    def status(self) -> AirflowStatus:
        state = self.supervisor.load()
        records = state.services if state else {}
        services: dict[str, str] = {}
        listening: dict[str, list[str]] = {}
        for name in ["postgres", *AIRFLOW_SERVICES]:
            record = records.get(name)
            running = record is not None and process.is_running(record.identity)
            services[name] = "running" if running else "not running"
            if record is not None and running:
                listening[name] = [f"{a}:{p}" for a, p in process.listening(record.identity)]
        return AirflowStatus(
            self.api_url, self.settings.airflow.admin_user, services, self._health(), listening
        )

    def env(self) -> dict[str, str]:
        """The environment of every Airflow process (and of ``airflow`` CLI calls)."""
        settings, af = self.settings, self.settings.airflow
        passed = {k: v for k, v in os.environ.items() if k.startswith(ENV_PREFIX)}
        if self.config_file is not None:
            passed[CONFIG_ENV_VAR] = str(self.config_file.resolve())
        bin_dir = str(Path(sys.executable).parent)
        return {
            **{k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")},
            **passed,
            **connection_env(settings),
            "PATH": bin_dir + os.pathsep + os.environ.get("PATH", ""),
            "AIRFLOW_HOME": str(self.home),
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": self.database_url(),
            "AIRFLOW__CORE__DAGS_FOLDER": str(PROJECT_ROOT / "dags"),
            "AIRFLOW__CORE__PLUGINS_FOLDER": str(self.home / "plugins"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            # The operations DAGs run on their schedules from the start (GC, compaction,
            # verification are the platform's upkeep): none waits to be unpaused, and
            # on-call's first manual run does not queue behind the run an unpause starts.
            "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            # Each of the five operations DAGs can run a task at once (sensors hold a slot):
            # with four, a DAG triggered beside the others waited minutes for one.
            "AIRFLOW__CORE__PARALLELISM": "8",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{af.admin_user}:admin",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(self._passwords_file),
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{self.api_url}/execution/",
            "AIRFLOW__API__BASE_URL": self.api_url,
            "AIRFLOW__API__HOST": settings.stack.host,
            "AIRFLOW__API__PORT": str(af.api_port),
            "AIRFLOW__API__WORKERS": "1",
            "AIRFLOW__API_AUTH__JWT_SECRET": self._secret("jwt_secret"),
            "AIRFLOW__API__SECRET_KEY": self._secret("api_secret"),
            "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(self.home / "logs"),
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "30",
            "GX_ANALYTICS_ENABLED": "false",
            "PYSPARK_PYTHON": sys.executable,
        }

    def database_url(self) -> str:
        return self.postgres.url("airflow")

    # -- Airflow ------------------------------------------------------------------------

    @property
    def _passwords_file(self) -> Path:
        return self.home / "passwords.json"

    def _prepare_home(self) -> None:
        (self.home / "plugins").mkdir(parents=True, exist_ok=True)
        write_passwords_file(self._passwords_file, self.settings.airflow)

    def _secret(self, name: str) -> str:
        path = self.home / name
        if not path.exists():
            self.home.mkdir(parents=True, exist_ok=True)
            path.write_text(secrets.token_urlsafe(32))
            path.chmod(0o600)
        return path.read_text().strip()

    def _migrate(self) -> None:
        result = subprocess.run(
            [self._airflow_bin(), "db", "migrate"],
            env=self.env(),
            capture_output=True,
            text=True,
            check=False,
            timeout=600,
        )
        if result.returncode != 0:
            raise AirflowStackError(
                f"airflow db migrate failed:\n{(result.stdout + result.stderr)[-3000:]}"
            )

    def _airflow_bin(self) -> str:
        return str(Path(sys.executable).parent / "airflow")

    def _airflow_argv(self, name: str) -> list[str]:
        if name == "api-server":
            host, port = self.settings.stack.host, self.settings.airflow.api_port
            return [self._airflow_bin(), name, "--host", host, "--port", str(port)]
        if name in ("scheduler", "triggerer"):
            # Their log servers bind every address, whatever the settings say; the API
            # server on this machine reads the task logs from disk and needs neither.
            return [self._airflow_bin(), name, "--skip-serve-logs"]
        return [self._airflow_bin(), name]

    def _health(self) -> dict[str, str]:
        try:
            with urllib.request.urlopen(  # noqa: S310 (our own http://loopback URL)
                f"{self.api_url}/api/v2/monitor/health", timeout=2
            ) as response:
                data = json.loads(response.read())
        except (urllib.error.URLError, OSError, ValueError):
            return {}
        return {name: str(part.get("status")) for name, part in data.items()}

    # -- plumbing -----------------------------------------------------------------------

    def _start(
        self,
        state: AirflowState,
        name: str,
        argv: list[str],
        *,
        env: dict[str, str] | None = None,
        user: str | None = None,
    ) -> None:
        output = self.root / "logs" / f"{name}.log"
        self.supervisor.start(state, name, argv, output=output, env=env, user=user)

    def _wait(
        self,
        state: AirflowState,
        ready: Callable[[], bool],
        what: str,
        *,
        timeout_s: float | None = None,
    ) -> None:
        timeout_s = timeout_s or self.settings.stack.start_timeout_s
        self.supervisor.wait(state, ready, what, timeout_s=timeout_s, poll_s=0.5)
