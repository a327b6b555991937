"""The local stack: a ZooKeeper ensemble, Redis and an S3 endpoint on loopback,
Prometheus and its exporters (:mod:`photon.tooling.stack.monitoring`) where installed,
plus, with ``spark_cluster``, a Spark standalone master and its workers.

``LocalStack.up`` is idempotent: it starts only the services that are not
running, after checking that every port they need is free (a taken port
raises :class:`~photon.tooling.stack.ports.PortInUseError` and starts nothing), waits
until the whole stack is healthy, creates the bucket and records pids, start
times, ports and directories in ``<state_dir>/stack.json``. ``down`` stops
exactly the processes recorded there (pid *and* start time must match) and
nothing else. A file lock keeps two ``photon up``/``down`` from interleaving.

How it fails: a service that exits or stays unhealthy past
``stack.start_timeout_s`` makes ``up`` stop what this call started and raise
:class:`StackStartError` with the tail of that service's output.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import structlog

from photon.errors import PhotonError
from photon.settings import PhotonSettings
from photon.tooling.stack import process
from photon.tooling.stack.monitoring import (
    PrometheusService,
    RedisExporterService,
    ZooKeeperExporterService,
    monitoring_services,
)
from photon.tooling.stack.ports import port_is_listening, require_free
from photon.tooling.stack.redis_server import RedisService
from photon.tooling.stack.s3 import S3Backend, S3Service, pick_backend
from photon.tooling.stack.spark import SparkMaster, SparkWorker
from photon.tooling.stack.supervisor import ProcessRecord, SupervisedState, Supervisor
from photon.tooling.stack.zookeeper import ZooKeeperNode, ensemble_healthy

log = structlog.get_logger(__name__)

_OUTPUT_TAIL_LINES = 20


class StackError(PhotonError, RuntimeError):
    """The local stack cannot do what was asked; the message says why."""


class StackStartError(StackError):
    pass


class Service(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def directory(self) -> Path: ...
    def ports(self) -> dict[str, int]: ...
    def prepare(self) -> None: ...
    def argv(self) -> list[str]: ...
    def env(self) -> dict[str, str]: ...


class StackState(SupervisedState):
    host: str
    s3_backend: S3Backend
    spark_cluster: bool = False


@dataclass(slots=True)
class ServiceStatus:
    name: str
    running: bool
    healthy: bool
    detail: str
    pid: int | None
    ports: dict[str, int]
    #: Every TCP address:port the service (with its child processes) listens on.
    listening: list[str] = field(default_factory=list)


@dataclass(slots=True)
class StackStatus:
    services: list[ServiceStatus]
    endpoints: dict[str, str]
    problems: list[str] = field(default_factory=list)

    @property
    def healthy(self) -> bool:
        return bool(self.services) and not self.problems

    def to_dict(self) -> dict[str, object]:
        return {
            "healthy": self.healthy,
            "problems": self.problems,
            "endpoints": self.endpoints,
            "services": [
                {
                    "name": s.name,
                    "running": s.running,
                    "healthy": s.healthy,
                    "detail": s.detail,
                    "pid": s.pid,
                    "ports": s.ports,
                    "listening": s.listening,
                }
                for s in self.services
            ],
        }


@dataclass(slots=True)
class DownReport:
    stopped: list[str]
    already_gone: list[str]
    still_listening: dict[str, int]


class LocalStack:
    def __init__(self, settings: PhotonSettings) -> None:
        self.settings = settings
        self._spark_cluster = False
        self.state_dir = settings.stack.state_dir
        self.root = self.state_dir / "stack"
        self.state_path = self.state_dir / "stack.json"
        self.supervisor = Supervisor(
            self.state_path,
            StackState,
            what="local stack",
            error=StackStartError,
            tail_lines=_OUTPUT_TAIL_LINES,
        )

    # -- public API ---------------------------------------------------------

    def up(self, *, spark_cluster: bool = False) -> StackStatus:
        """Start what is not running; ``spark_cluster`` adds the Spark master and workers
        (a stack once up with them keeps them until ``down``)."""
        with self.supervisor.locked():
            state = self.supervisor.load()
            backend = state.s3_backend if state else pick_backend()
            self._spark_cluster = spark_cluster or (state is not None and state.spark_cluster)
            state = StackState(
                host=self.settings.stack.host,
                s3_backend=backend,
                spark_cluster=self._spark_cluster,
                services=state.services if state else {},
            )
            services = self._services(backend)
            running = self.supervisor.running(state)
            self._check_same_ports(services, state.services, running)
            to_start = [s for s in services if s.name not in running]
            if to_start:
                require_free(self.settings.stack.host, _merged_ports(to_start))
                started: list[str] = []
                try:
                    for service in to_start:
                        self._start(state, service)
                        started.append(service.name)
                    self.supervisor.wait(
                        state,
                        lambda: self._status(backend, state.services).healthy,
                        "the stack",
                        timeout_s=self.settings.stack.start_timeout_s,
                        detail=lambda: "; ".join(self._status(backend, state.services).problems),
                        watched=started,
                    )
                except BaseException:
                    self.supervisor.stop(state, started)
                    raise
            S3Service(self.settings.stack, self.settings.s3, self.root, backend).ensure_bucket()
            return self._status(backend, state.services)

    def down(self, *, purge: bool = False) -> DownReport:
        with self.supervisor.locked():
            state = self.supervisor.load()
            report = DownReport(stopped=[], already_gone=[], still_listening={})
            if state is not None:
                # Stop everything (together) first; report afterwards, so nothing can leave a
                # server running.
                records = dict(state.services)
                report.stopped, report.already_gone = self.supervisor.stop(state, list(records))
                for record in records.values():
                    for setting, port in record.ports.items():
                        if port_is_listening(state.host, port):
                            report.still_listening[setting] = port
                log.info("stack.down", stopped=report.stopped, already_gone=report.already_gone)
            if purge and self.root.exists():
                shutil.rmtree(self.root)
            return report

    def status(self) -> StackStatus:
        state = self.supervisor.load()
        if state is None:
            return StackStatus(
                services=[], endpoints={}, problems=[f"no stack recorded in {self.state_path}"]
            )
        self._spark_cluster = state.spark_cluster
        return self._status(state.s3_backend, state.services)

    def records(self) -> dict[str, ProcessRecord]:
        """What ``up`` recorded, by service name (empty when no stack runs)."""
        state = self.supervisor.load()
        return dict(state.services) if state else {}

    def running_pids(self, name_prefix: str = "") -> list[int]:
        """The pids of the services ``up`` recorded whose names start with
        ``name_prefix`` and that are still the processes it started (not others that
        took their pids since)."""
        return [
            record.pid
            for name, record in self.records().items()
            if name.startswith(name_prefix) and process.is_running(record.identity)
        ]

    # -- internals ----------------------------------------------------------

    def _services(self, backend: S3Backend) -> list[Service]:
        stack = self.settings.stack
        zk: list[Service] = [
            ZooKeeperNode(i + 1, stack, self.root) for i in range(len(stack.zk_client_ports))
        ]
        services = [
            *zk,
            RedisService(stack, self.settings.redis, self.root),
            S3Service(stack, self.settings.s3, self.root, backend),
        ]
        if self._spark_cluster:
            services.append(SparkMaster(stack, self.root))
            services += [
                SparkWorker(i, stack, self.root) for i in range(len(stack.spark_worker_ports))
            ]
        services += monitoring_services(self.settings, self.root)
        return services

    def _start(self, state: StackState, service: Service) -> None:
        service.prepare()
        extra_env = service.env()
        self.supervisor.start(
            state,
            service.name,
            service.argv(),
            output=service.directory / "output.log",
            env={**os.environ, **extra_env} if extra_env else None,
            ports=service.ports(),
            directory=service.directory,
        )

    def _status(self, backend: S3Backend, records: dict[str, ProcessRecord]) -> StackStatus:
        stack = self.settings.stack
        statuses: list[ServiceStatus] = []
        problems: list[str] = []
        modes: list[str] = []
        for service in self._services(backend):
            record = records.get(service.name)
            running = record is not None and process.is_running(record.identity)
            healthy, detail = False, "not running"
            if running:
                if isinstance(service, ZooKeeperNode):
                    mode = service.mode()
                    modes.append(mode)
                    healthy, detail = mode in ("leader", "follower", "standalone"), mode
                elif isinstance(
                    service,
                    RedisService
                    | S3Service
                    | SparkMaster
                    | SparkWorker
                    | PrometheusService
                    | RedisExporterService
                    | ZooKeeperExporterService,
                ):
                    healthy, detail = service.check()
            if not healthy:
                problems.append(f"{service.name}: {detail}")
            listening = process.listening(record.identity) if record and running else []
            exposed = [f"{a}:{p}" for a, p in listening if not process.is_loopback(a)]
            if exposed:  # the stack is for one machine: nothing of it is reachable from outside
                problems.append(f"{service.name}: listens beyond loopback on {', '.join(exposed)}")
            statuses.append(
                ServiceStatus(
                    name=service.name,
                    running=running,
                    healthy=healthy,
                    detail=detail,
                    pid=record.pid if record else None,
                    ports=service.ports(),
                    listening=[f"{a}:{p}" for a, p in listening],
                )
            )
        nodes = len(stack.zk_client_ports)
        leaders, followers = modes.count("leader"), modes.count("follower")
        if nodes > 1 and len(modes) == nodes and not ensemble_healthy(modes):
            problems.append(
                f"zookeeper: {leaders} leader(s) and {followers} follower(s), "
                f"expected 1 and {nodes - 1}"
            )
        endpoints = {
            "zookeeper": ",".join(f"{stack.host}:{p}" for p in stack.zk_client_ports),
            "redis": f"redis://{stack.host}:{stack.redis_port}/0",
            "s3": f"http://{stack.host}:{stack.s3_port}",
            "s3_bucket": self.settings.s3.bucket,
            "s3_backend": backend,
        }
        for service in self._services(backend):
            if isinstance(service, PrometheusService):
                endpoints["prometheus"] = service.url
        if self._spark_cluster:
            endpoints["spark_master"] = stack.spark_master_url
            endpoints["spark_master_ui"] = f"http://{stack.host}:{stack.spark_master_ui_port}"
        return StackStatus(services=statuses, endpoints=endpoints, problems=problems)

    def _check_same_ports(
        self, services: list[Service], records: dict[str, ProcessRecord], running: set[str]
    ) -> None:
        for service in services:
            record = records.get(service.name)
            if service.name in running and record is not None and record.ports != service.ports():
                raise StackError(
                    f"{service.name} already runs with ports {record.ports}, but the settings "
                    f"say {service.ports()}; run `photon down` first to change ports"
                )


def _merged_ports(services: list[Service]) -> dict[str, int]:
    ports: dict[str, int] = {}
    for service in services:
        ports |= service.ports()
    return ports
