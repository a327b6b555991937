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

import fcntl
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import structlog
from pydantic import BaseModel
from tenacity import RetryError, Retrying, retry_if_result, stop_after_delay, wait_fixed

from photon.errors import PhotonError
from photon.localfiles import last_lines
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


class ServiceRecord(BaseModel):
    name: str
    pid: int
    started_at: float
    ports: dict[str, int]
    directory: str
    output: str
    argv: list[str]

    @property
    def identity(self) -> process.ProcessIdentity:
        return process.ProcessIdentity(self.pid, self.started_at)


class StackState(BaseModel):
    host: str
    s3_backend: S3Backend
    spark_cluster: bool = False
    services: dict[str, ServiceRecord] = {}


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

    # -- public API ---------------------------------------------------------

    def up(self, *, spark_cluster: bool = False) -> StackStatus:
        """Start what is not running; ``spark_cluster`` adds the Spark master and workers
        (a stack once up with them keeps them until ``down``)."""
        with self._locked():
            state = self._load_state()
            backend = state.s3_backend if state else pick_backend()
            self._spark_cluster = spark_cluster or (state is not None and state.spark_cluster)
            services = self._services(backend)
            records = dict(state.services) if state else {}
            running = {n for n, r in records.items() if process.is_running(r.identity)}
            self._check_same_ports(services, records, running)
            to_start = [s for s in services if s.name not in running]
            if to_start:
                require_free(self.settings.stack.host, _merged_ports(to_start))
                started = self._start(to_start, backend, records)
                try:
                    self._wait_healthy(backend, started)
                except BaseException:
                    self._stop_started(started, backend, records)
                    raise
            S3Service(self.settings.stack, self.settings.s3, self.root, backend).ensure_bucket()
            return self._status(backend, records)

    def down(self, *, purge: bool = False) -> DownReport:
        with self._locked():
            state = self._load_state()
            report = DownReport(stopped=[], already_gone=[], still_listening={})
            if state is not None:
                # Stop everything (together) first; report afterwards, so nothing can leave a
                # server running.
                services = state.services
                gone = process.stop_all([r.identity for r in services.values()])
                for name, stopped in zip(services, gone, strict=True):
                    (report.stopped if stopped else report.already_gone).append(name)
                self.state_path.unlink()
                for record in state.services.values():
                    for setting, port in record.ports.items():
                        if port_is_listening(state.host, port):
                            report.still_listening[setting] = port
                log.info("stack.down", stopped=report.stopped, already_gone=report.already_gone)
            if purge and self.root.exists():
                shutil.rmtree(self.root)
            return report

    def status(self) -> StackStatus:
        state = self._load_state()
        if state is None:
            return StackStatus(
                services=[], endpoints={}, problems=[f"no stack recorded in {self.state_path}"]
            )
        self._spark_cluster = state.spark_cluster
        return self._status(state.s3_backend, state.services)

    def records(self) -> dict[str, ServiceRecord]:
        """What ``up`` recorded, by service name (empty when no stack runs)."""
        state = self._load_state()
        return dict(state.services) if state else {}

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

    def _start(
        self, services: list[Service], backend: S3Backend, records: dict[str, ServiceRecord]
    ) -> list[str]:
        started: list[str] = []
        for service in services:
            service.prepare()
            output = service.directory / "output.log"
            extra_env = service.env()
            identity = process.start_detached(
                service.argv(),
                output=output,
                env={**os.environ, **extra_env} if extra_env else None,
            )
            records[service.name] = ServiceRecord(
                name=service.name,
                pid=identity.pid,
                started_at=identity.started_at,
                ports=service.ports(),
                directory=str(service.directory),
                output=str(output),
                argv=service.argv(),
            )
            started.append(service.name)
            log.info("stack.started", service=service.name, pid=identity.pid)
            # Recorded at once, so that `photon down` finds it even if we die now.
            self._save_state(self._state(backend, records))
        return started

    def _wait_healthy(self, backend: S3Backend, started: list[str]) -> None:
        state = self._load_state()
        assert state is not None

        def still_starting(status: StackStatus) -> bool:
            dead = [s.name for s in status.services if s.name in started and not s.running]
            if dead:
                raise StackStartError(self._failure_message(state, dead, "exited during start"))
            return not status.healthy

        retrying = Retrying(
            stop=stop_after_delay(self.settings.stack.start_timeout_s),
            wait=wait_fixed(0.25),
            retry=retry_if_result(still_starting),
        )
        try:
            retrying(self._status, backend, state.services)
        except RetryError as exc:
            status = exc.last_attempt.result()
            unhealthy = [s.name for s in status.services if not s.healthy] or started
            raise StackStartError(
                self._failure_message(state, unhealthy, "not healthy in time")
                + "\nproblems: "
                + "; ".join(status.problems)
            ) from None

    def _stop_started(
        self, started: list[str], backend: S3Backend, records: dict[str, ServiceRecord]
    ) -> None:
        for name in started:
            process.stop(records.pop(name).identity)
        if records:
            self._save_state(self._state(backend, records))
        elif self.state_path.exists():
            self.state_path.unlink()

    def _status(self, backend: S3Backend, records: dict[str, ServiceRecord]) -> StackStatus:
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
        self, services: list[Service], records: dict[str, ServiceRecord], running: set[str]
    ) -> None:
        for service in services:
            record = records.get(service.name)
            if service.name in running and record is not None and record.ports != service.ports():
                raise StackError(
                    f"{service.name} already runs with ports {record.ports}, but the settings "
                    f"say {service.ports()}; run `photon down` first to change ports"
                )

    def _failure_message(self, state: StackState, names: list[str], what: str) -> str:
        parts = [f"local stack did not start: {', '.join(names)} {what}"]
        for name in names:
            record = state.services.get(name)
            if record is None:
                continue
            tail = last_lines(Path(record.output), _OUTPUT_TAIL_LINES)
            parts.append(f"--- last lines of {record.output} ---\n{tail}")
        return "\n".join(parts)

    def _state(self, backend: S3Backend, records: dict[str, ServiceRecord]) -> StackState:
        return StackState(
            host=self.settings.stack.host,
            s3_backend=backend,
            spark_cluster=self._spark_cluster,
            services=records,
        )

    def _load_state(self) -> StackState | None:
        if not self.state_path.exists():
            return None
        return StackState.model_validate_json(self.state_path.read_text())

    def _save_state(self, state: StackState) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        tmp = self.state_path.with_suffix(".json.tmp")
        tmp.write_text(state.model_dump_json(indent=2))
        tmp.replace(self.state_path)

    @contextmanager
    def _locked(self) -> Iterator[None]:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        with (self.state_dir / "stack.lock").open("w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)


def _merged_ports(services: list[Service]) -> dict[str, int]:
    ports: dict[str, int] = {}
    for service in services:
        ports |= service.ports()
    return ports
