"""One compose project of the stack: its files, its ``.env``, up, health, down.

A :class:`ComposeProject` runs ``docker-compose`` (Debian's 1.29) on the repository's
``docker-compose.yml`` under a project name of its own, with an env file it owns
(made by ``photon stack compose-env``, with free loopback ports for everything the
stack publishes, so a native stack or another project on this machine is never
touched). Where MinIO's image cannot be had it adds the S3 stand-in's override
(``infra/docker/compose.s3-standin.yml``), the one difference named in
docs/deploy.md.

How it fails: a compose command that exits non-zero, or a service that is not
healthy (or a job that did not end well) within the wait: :class:`DockerError`
naming the services and the tail of their logs.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog
import yaml

from photon.tooling.compose.engine import DockerEngine, DockerError
from photon.tooling.stack import compose_env
from photon.tooling.stack.ports import free_ports

log = structlog.get_logger(__name__)

MINIO_IMAGE = "minio/minio:RELEASE.2025-04-22T22-12-26Z"
STANDIN_OVERRIDE = Path("infra/docker/compose.s3-standin.yml")
#: The .env variables of the ports the stack publishes on the host's loopback.
PUBLISHED_PORTS = (
    "AIRFLOW_UI_PORT",
    "SPARK_MASTER_UI_PORT",
    "MINIO_PORT",
    "MINIO_CONSOLE_PORT",
    "PROMETHEUS_PORT",
    "GRAFANA_PORT",
)


@dataclass
class ServiceState:
    service: str
    container: str
    status: str  # running, exited, ...
    health: str | None  # healthy, starting, unhealthy; None without a healthcheck
    exit_code: int

    @property
    def ready(self) -> bool:
        if self.health is not None:
            return self.health == "healthy"
        return self.status == "exited" and self.exit_code == 0  # a job that ended well


@dataclass
class ComposeProject:
    engine: DockerEngine
    name: str
    workdir: Path
    s3_standin: bool = False
    extra_env: dict[str, str] = field(default_factory=dict)

    @property
    def repo(self) -> Path:
        return self.engine.repo

    @property
    def env_file(self) -> Path:
        return self.workdir / ".env"

    def files(self) -> list[Path]:
        files = [self.repo / "docker-compose.yml"]
        if self.s3_standin:
            files.append(self.repo / STANDIN_OVERRIDE)
        return files

    def write_env(self) -> dict[str, str]:
        """The project's ``.env``: new secrets, free loopback ports, ``extra_env``."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.env_file.unlink(missing_ok=True)
        compose_env.write(self.repo / ".env.example", self.env_file)
        ports = dict(zip(PUBLISHED_PORTS, map(str, free_ports(len(PUBLISHED_PORTS))), strict=True))
        overrides = ports | self.extra_env
        lines = []
        for line in self.env_file.read_text().splitlines():
            key = line.partition("=")[0].strip()
            lines.append(f"{key}={overrides.pop(key)}" if key in overrides else line)
        lines += [f"{key}={value}" for key, value in overrides.items()]
        self.env_file.write_text("\n".join(lines) + "\n")  # owner-only, as written
        return self.env()

    def env(self) -> dict[str, str]:
        values = {}
        for line in self.env_file.read_text().splitlines():
            key, sep, value = line.partition("=")
            if sep and not line.lstrip().startswith("#"):
                values[key.strip()] = value.strip()
        return values

    def compose(self, *args: str, timeout_s: float = 900) -> str:
        argv = [
            "docker-compose",
            "--project-name",
            self.name,
            "--project-directory",
            str(self.repo),
        ]
        argv += ["--env-file", str(self.env_file)]
        for path in self.files():
            argv += ["--file", str(path)]
        return self.engine.run([*argv, *args], timeout_s=timeout_s)

    def up(self, *, without: tuple[str, ...] = ()) -> None:
        """Start every service (Grafana's profile aside) but ``without``; those later
        with :meth:`start` (the demo starts the generator once the pipelines are up)."""
        services = [] if not without else [s for s in self.services() if s not in without]
        self.compose("up", "--detach", "--no-build", *services, timeout_s=1800)

    def start(self, service: str) -> None:
        self.compose("up", "--detach", "--no-build", "--no-deps", service, timeout_s=600)

    def services(self) -> list[str]:
        """The services ``up`` starts (those of no profile)."""
        resolved = yaml.safe_load(self.compose("config", timeout_s=120))
        return [name for name, spec in resolved["services"].items() if not spec.get("profiles")]

    def down(self) -> None:
        """Every container, network and volume of the project gone."""
        self.compose("down", "--volumes", "--remove-orphans", "--timeout", "20", timeout_s=600)

    def containers(self) -> dict[str, str]:
        """Service → container id, for every container of the project (stopped too)."""
        return {service: state.container for service, state in self.states().items()}

    def states(self) -> dict[str, ServiceState]:
        states = {}
        for item in inspect_project(self.engine, self.name, stopped_too=True):
            state = item["State"]
            service = item["Config"]["Labels"]["com.docker.compose.service"]
            states[service] = ServiceState(
                service=service,
                container=item["Id"],
                status=state["Status"],
                health=(state.get("Health") or {}).get("Status"),
                exit_code=state.get("ExitCode", 0),
            )
        return states

    def wait_ready(self, services: set[str], timeout_s: float = 900) -> dict[str, ServiceState]:
        """Until every one of ``services`` is healthy (or, a job, ended with 0)."""
        deadline = time.monotonic() + timeout_s
        while True:
            states = self.states()
            waiting = sorted(s for s in services if s not in states or not states[s].ready)
            failed = [
                s for s in waiting
                if s in states and (states[s].health == "unhealthy"
                                    or (states[s].health is None and states[s].status == "exited"))
            ]  # fmt: skip
            if not waiting:
                return states
            if failed or time.monotonic() > deadline:
                why = "failed" if failed else f"not ready within {timeout_s:.0f} s"
                raise DockerError(
                    f"{why}: {', '.join(failed or waiting)}\n" + self.logs(failed or waiting)
                )
            time.sleep(3)

    def logs(self, services: list[str], lines: int = 20) -> str:
        try:
            return self.compose("logs", "--no-color", "--tail", str(lines), *services, timeout_s=60)
        except DockerError as exc:
            return str(exc)

    def exec(self, service: str, *argv: str, timeout_s: float = 120) -> str:
        return self.compose("exec", "-T", service, *argv, timeout_s=timeout_s)

    def copy_out(self, service: str, path: str, to: Path) -> None:
        container = self.containers()[service]
        self.engine.run(["docker", "cp", f"{container}:{path}", str(to)])


def inspect_project(
    engine: DockerEngine, project: str, *, stopped_too: bool = False
) -> list[dict[str, Any]]:
    """``docker inspect`` of the project's containers (running ones, or all)."""
    listing = ["docker", "ps", "--quiet", "--filter", f"label=com.docker.compose.project={project}"]
    if stopped_too:
        listing.insert(2, "--all")
    ids = engine.run(listing).split()
    return list(json.loads(engine.run(["docker", "inspect", *ids]))) if ids else []


def published_addresses(engine: DockerEngine, project: str) -> list[str]:
    """Every host address the project's running containers publish a port on."""
    addresses = []
    for item in inspect_project(engine, project):
        for bindings in (item["NetworkSettings"]["Ports"] or {}).values():
            for binding in bindings or []:
                addresses.append(f"{binding['HostIp']}:{binding['HostPort']}")
    return addresses
