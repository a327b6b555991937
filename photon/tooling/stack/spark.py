"""A Spark standalone cluster on loopback: one master and its workers.

Run from the pip-installed Spark (``pyspark/bin/spark-class``), the very
version the apps are pinned to, as
``spark-class org.apache.spark.deploy.master.Master`` and
``...deploy.worker.Worker``. Every process of it — the master, the workers and
the executors the workers launch — gets ``SPARK_LOCAL_IP`` set to the stack's
loopback host, which is where Spark binds its RPC ports *and* its web UIs
(without it the UIs listen on every address). The master's REST submission
server is off: it takes jobs from anyone who can reach it, and nothing here
uses it; apps connect over the master's RPC port, the UI's ``/json/`` reports them.

Executors start in the worker's work directory, not the app's: the apps hand
them absolute paths. They run the driver's interpreter (``PYSPARK_PYTHON``),
which has the project installed.

How it fails: the master is healthy when its ``/json/`` says ``ALIVE``; a
worker when the master lists it ``ALIVE`` — a worker that cannot reach the
master keeps retrying and stays unhealthy, which ``photon up`` reports.
"""

from __future__ import annotations

import json
import sys
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyspark

from photon.settings import StackSettings

MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
# The daemons only schedule: a small heap and a quick-starting JIT leave the cores to the apps.
_DAEMON_JAVA_OPTS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def spark_class() -> str:
    """The pip-installed Spark's launcher script."""
    return str(Path(pyspark.__file__).parent / "bin" / "spark-class")


def daemon_env(local_ip: str | None) -> dict[str, str]:
    """The environment of a master or worker; ``local_ip``: the one address to bind."""
    env = {
        "SPARK_DAEMON_MEMORY": "256m",
        "SPARK_DAEMON_JAVA_OPTS": _DAEMON_JAVA_OPTS,
        "PYSPARK_PYTHON": sys.executable,
        # The REST submission server takes jobs from anyone who reaches it; nothing uses it.
        "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false",
        # Finished apps' executor directories go after a day; a laptop's disk stays clean.
        "SPARK_WORKER_OPTS": "-Dspark.worker.cleanup.enabled=true "
        "-Dspark.worker.cleanup.appDataTtl=86400",
    }
    if local_ip is not None:
        env["SPARK_LOCAL_IP"] = local_ip
    return env


def master_argv(host: str, port: int, ui_port: int) -> list[str]:
    return [spark_class(), MASTER_CLASS, "--host", host, "--port", str(port),
            "--webui-port", str(ui_port)]  # fmt: skip


def worker_argv(
    master_url: str,
    *,
    host: str,
    port: int,
    ui_port: int,
    cores: int,
    memory_mb: int,
    work_dir: Path,
) -> list[str]:
    return [spark_class(), WORKER_CLASS, "--host", host, "--port", str(port),
            "--webui-port", str(ui_port), "--cores", str(cores), "--memory", f"{memory_mb}m",
            "--work-dir", str(work_dir), master_url]  # fmt: skip


def master_state(stack: StackSettings, timeout_s: float = 2.0) -> dict[str, Any] | None:
    """The master's ``/json/`` (workers, active and completed apps), or None when it is down."""
    url = f"http://{stack.host}:{stack.spark_master_ui_port}/json/"
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            state: dict[str, Any] = json.load(response)
    except (OSError, urllib.error.URLError, ValueError):
        return None
    return state


def active_app_names(stack: StackSettings) -> list[str]:
    """The names of the apps running on the master now (empty when it is down)."""
    state = master_state(stack) or {}
    return sorted(app["name"] for app in state.get("activeapps", []))


@dataclass(frozen=True, slots=True)
class SparkMaster:
    stack: StackSettings
    root: Path

    name = "spark-master"

    @property
    def directory(self) -> Path:
        return self.root / self.name

    def ports(self) -> dict[str, int]:
        return {
            "spark_master_port": self.stack.spark_master_port,
            "spark_master_ui_port": self.stack.spark_master_ui_port,
        }

    def prepare(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)

    def argv(self) -> list[str]:
        stack = self.stack
        return master_argv(stack.host, stack.spark_master_port, stack.spark_master_ui_port)

    def env(self) -> dict[str, str]:
        return daemon_env(self.stack.host)

    def check(self) -> tuple[bool, str]:
        state = master_state(self.stack)
        if state is None:
            return False, "UI does not answer"
        status = state.get("status", "?")
        alive = state.get("aliveworkers", 0)
        apps = len(state.get("activeapps", []))
        return status == "ALIVE", f"{status}; {alive} worker(s), {apps} app(s)"


@dataclass(frozen=True, slots=True)
class SparkWorker:
    index: int  # 0-based, the entry of spark_worker_ports
    stack: StackSettings
    root: Path

    @property
    def name(self) -> str:
        return f"spark-worker{self.index + 1}"

    @property
    def directory(self) -> Path:
        return self.root / self.name

    @property
    def port(self) -> int:
        return self.stack.spark_worker_ports[self.index]

    def ports(self) -> dict[str, int]:
        i = self.index
        return {
            f"spark_worker_ports[{i}]": self.port,
            f"spark_worker_ui_ports[{i}]": self.stack.spark_worker_ui_ports[i],
        }

    def prepare(self) -> None:
        (self.directory / "work").mkdir(parents=True, exist_ok=True)

    def argv(self) -> list[str]:
        return worker_argv(
            self.stack.spark_master_url,
            host=self.stack.host,
            port=self.port,
            ui_port=self.stack.spark_worker_ui_ports[self.index],
            cores=self.stack.spark_worker_cores,
            memory_mb=self.stack.spark_worker_memory_mb,
            work_dir=(self.directory / "work").resolve(),
        )

    def env(self) -> dict[str, str]:
        return daemon_env(self.stack.host)

    def check(self) -> tuple[bool, str]:
        state = master_state(self.stack)
        if state is None:
            return False, "master does not answer"
        # A restarted worker registers anew; the master keeps its dead predecessor listed.
        mine = [
            w
            for w in state.get("workers", [])
            if w.get("host") == self.stack.host and w.get("port") == self.port
        ]
        for worker in mine:
            if worker.get("state") == "ALIVE":
                return True, f"ALIVE; {worker.get('coresused', 0)}/{worker.get('cores')} cores"
        if mine:
            return False, f"registered, {mine[-1].get('state')}"
        return False, "not registered with the master"
