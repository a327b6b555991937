"""Cluster mode, natively: `photon up --spark-cluster`, the apps on the standalone master.

A private stack (its own ports and directories) with the Spark master and two
workers, and the registry under a digest ACL: the main job's correctness
checks must hold with every app running on the cluster, with join tasks whose
first try fails after its registry commit (the master tries them again), nothing of the stack
or the apps may listen beyond loopback, Airflow's SparkSubmitOperator must
submit a batch job (log-file-map compaction) to the master when spark_default
names it, and a ZooKeeper client without the credentials must be refused.

This is the suite's run of the main job's full correctness checks
(``tests/e2e/main_job.py``); local mode's exactly-once is audited by the demo's
e2e test (`photon demo`), which runs the same two DCs with an outage.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import psutil
import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError

from photon.join.logmap import delta_prefix
from photon.ops.compaction import read_runs
from photon.storage import ObjectStore
from photon.tooling.gen.simulator import load_manifest
from photon.tooling.stack import process
from photon.tooling.stack.airflow import connection_env
from photon.tooling.stack.ports import free_ports
from photon.tooling.stack.spark import active_app_names, master_state
from spark_apps.dc_pipeline import APP_NAME as DC_APP_NAME
from tests.conftest import RunDag, settings_from_env, stack_env
from tests.e2e.helpers import FAST_RETRIES, PHOTON, photon
from tests.e2e.main_job import check_main_job
from tests.integration.dags.conftest import task_states

pytestmark = pytest.mark.e2e

#: `photon run` runs each DC's query reader and joiner as one Spark application.
APPS = {f"photon-{DC_APP_NAME}-{dc}" for dc in ("a", "b")}


@pytest.fixture
def cluster_env(tmp_path: Path) -> dict[str, str]:
    env = stack_env(tmp_path)
    taken = set(settings_from_env(env).stack.ports().values())
    ports = free_ports(6)
    while taken & set(ports):  # free now, but the stack's own picks may coincide
        ports = free_ports(6)
    clean = {k: v for k, v in os.environ.items() if not k.startswith("PHOTON_")}
    return (
        clean
        | env
        | FAST_RETRIES
        | {
            "PHOTON_STACK__SPARK_MASTER_PORT": str(ports[0]),
            "PHOTON_STACK__SPARK_MASTER_UI_PORT": str(ports[1]),
            "PHOTON_STACK__SPARK_WORKER_PORTS": f"{ports[2]},{ports[3]}",
            "PHOTON_STACK__SPARK_WORKER_UI_PORTS": f"{ports[4]},{ports[5]}",
            "PHOTON_ZOOKEEPER__AUTH_USER": "photon-e2e",
            "PHOTON_ZOOKEEPER__AUTH_PASSWORD": "cluster-e2e-secret",
        }
    )


def _exposed(pids: list[int]) -> list[str]:
    """Listening sockets of these processes (and their children) beyond loopback."""
    exposed = []
    for pid in pids:
        try:
            identity = process.identity_of(pid)
        except psutil.NoSuchProcess:
            continue
        exposed += [f"{pid} {a}:{p}" for a, p in process.listening(identity)]
    return [e for e in exposed if not process.is_loopback(e.split(" ")[1].rsplit(":", 1)[0])]


@pytest.mark.timeout(1200)
def test_both_dcs_join_on_the_standalone_cluster_under_a_registry_acl(
    cluster_env: dict[str, str], tmp_path: Path, run_dag: RunDag, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = settings_from_env(cluster_env)
    up = json.loads(photon(cluster_env, "up", "--spark-cluster", "--json", timeout=180))
    try:
        assert up["healthy"], up["problems"]
        names = {s["name"] for s in up["services"]}
        assert {"spark-master", "spark-worker1", "spark-worker2"} <= names
        master = up["endpoints"]["spark_master"]
        assert master == settings.stack.spark_master_url

        photon(cluster_env, "gen", "--queries", "1500", "--start", "2026-01-01T00:00:00",
               "--outage-s", "10")  # fmt: skip
        argv = [PHOTON, "--log-level", "warning", "run", "--dcs", "a,b", "--until-idle", "6"]
        stdout_path, stderr_path = tmp_path / "run.json", tmp_path / "run.err"
        # Join tasks' first tries fail after their registry commit, as a lost executor or
        # an object store down past its retries would fail them: the master runs each
        # again, and the retry must join its group as a replay. Each Python worker draws
        # from its own generator of this seed, first 0.134, then 0.847, 0.764, 0.255: its
        # first committing task always fails, some later ones too. (Seed 7 drew 0.324
        # first: a run whose workers each committed once saw no failure at all.)
        run_env = cluster_env | {
            "PHOTON_FAULTS__FAIL_TASK_AFTER_COMMIT_P": "0.3",
            "PHOTON_FAULTS__SEED": "1",
        }
        with stdout_path.open("w") as stdout_file, stderr_path.open("w") as stderr_file:
            run = subprocess.Popen(
                [*argv, "--master", master], env=run_env, stdout=stdout_file, stderr=stderr_file
            )
        seen: set[str] = set()
        exposed: list[str] = []
        # Eleven JVMs on two cores beside the other worker's tests: apps whose Python
        # workers were too slow to connect back start again after a backoff.
        deadline = time.monotonic() + 700
        while run.poll() is None and time.monotonic() < deadline:
            seen |= set(active_app_names(settings.stack))
            if seen >= APPS and not exposed:
                # Everything up at once: the stack, the drivers and the executors.
                pids = [s["pid"] for s in up["services"]] + [run.pid]
                exposed = _exposed(pids) or ["none"]
            time.sleep(1)
        assert run.wait(timeout=max(1, deadline - time.monotonic())) == 0, stderr_path.read_text()[
            -3000:
        ]
        assert seen >= APPS, f"the master reported only {sorted(seen)}"
        assert exposed == ["none"]

        store = ObjectStore.from_settings(settings)
        summary = json.loads(stdout_path.read_text())
        check_main_job(store, load_manifest(settings.logs_root), summary)
        retried = sum(a.get("task_retries", 0) for a in summary["apps"] if a["app"] == "joiner")
        assert retried > 0, "no join task was tried again: the fault never struck"

        # Airflow's SparkSubmitOperator submits to the master spark_default names.
        on_cluster = settings_from_env(cluster_env | {"PHOTON_PIPELINE__SPARK_MASTER": master})
        airflow_env = {k: v for k, v in cluster_env.items() if k.startswith("PHOTON_")}
        for key, value in (airflow_env | connection_env(on_cluster)).items():
            monkeypatch.setenv(key, value)
        deltas_before = read_runs(store, "a").delta_keys
        dag_run = run_dag("photon_logmap_compaction", dc="a", sample=20)
        assert str(dag_run.state) == "success", task_states(dag_run)
        state = master_state(settings.stack) or {}
        ran = {app["name"] for app in state.get("completedapps", []) + state.get("activeapps", [])}
        assert "photon-logmap-compaction" in ran, state
        assert deltas_before  # the query reader's runs, now merged into one sorted run
        assert list(store.keys(delta_prefix("a"))) == []
        assert len(read_runs(store, "a").sorted_keys) == 1

        stranger = KazooClient(hosts=",".join(settings.zk_hosts), timeout=10)
        stranger.start(timeout=15)
        try:
            with pytest.raises(NoAuthError):
                stranger.get_children(settings.zookeeper.root)
        finally:
            stranger.stop()
            stranger.close()
    finally:
        photon(cluster_env, "down", "--purge")
    assert active_app_names(settings.stack) == []
