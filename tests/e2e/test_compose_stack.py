"""The compose stack for real: docker-compose.yml's containers on this machine's
Docker engine, built from debian:bookworm-slim (docs/deploy.md, "Compose").

One project for the module, brought up as `make compose-demo` brings it up (the S3
stand-in in MinIO's place where MinIO's image cannot be had: the one difference).
The tests read it as an operator would: the ensemble, the cache, the database and
the store answer; the joiners' Spark tasks run on the worker containers; a Spark
worker and the ZooKeeper leader are killed while both DCs join, and the output is
still exactly once; Airflow runs verification and recovery through its REST API;
Prometheus scrapes every target; and `docker-compose down -v` leaves nothing.
`make test` runs this module after the rest of the suite, alone: twenty
containers want the whole machine.
"""

from __future__ import annotations

import json
import os
import time
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from photon.storage import ObjectStore
from photon.tooling.compose.demo import (
    APPS,
    build_images,
    plan_images,
    project_settings,
    settled_audit,
)
from photon.tooling.compose.engine import DockerEngine
from photon.tooling.compose.project import ComposeProject, published_addresses
from photon.tooling.gen.model import MANIFEST_FILE
from photon.tooling.gen.simulator import load_manifest
from tests.conftest import REPO

pytestmark = [pytest.mark.e2e, pytest.mark.compose, pytest.mark.timeout(3600)]

#: Every long-running service but Grafana (its profile stays off).
LONG_RUNNING = {
    "zk1", "zk2", "zk3", "minio", "redis", "spark-master", "spark-worker1", "spark-worker2",
    *APPS, "postgres", "airflow-api-server", "airflow-scheduler", "airflow-dag-processor",
    "airflow-triggerer", "zk-exporter", "redis-exporter", "prometheus",
}  # fmt: skip
JOBS = {"minio-init", "airflow-init"}
#: A 50 s stream: long enough to kill a worker and the leader while both DCs join
#: (both faults land within ~30 s of the first joins), with over 1,000 joinable clicks.
QUERIES, RATE = 4_000, 80.0
DAGS = {"photon_verify", "photon_recover", "photon_gc_boundary", "photon_reshard"}
DAGS |= {"photon_logmap_compaction"}
#: The host ports the stack publishes (Grafana's profile off), all on loopback.
PUBLISHED = {"AIRFLOW_UI_PORT", "SPARK_MASTER_UI_PORT", "MINIO_PORT", "MINIO_CONSOLE_PORT"}
PUBLISHED |= {"PROMETHEUS_PORT"}


#: `make test` builds the images beside the rest of the suite, from the same tree, and
#: says here whether that build succeeded (``yes``; empty or unset: it did not run or
#: failed). Checking every layer again took ~40 s of a stage that runs alone.
IMAGES_BUILT = "COMPOSE_IMAGES_BUILT"


def images_built_beforehand() -> bool:
    value = os.environ.get(IMAGES_BUILT, "")
    if value not in ("", "yes"):
        raise pytest.UsageError(f"{IMAGES_BUILT} is 'yes' or empty, not {value!r}")
    return value == "yes"


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ComposeProject]:
    workdir = tmp_path_factory.mktemp("compose")
    engine = DockerEngine(REPO, workdir / "engine")
    engine.ensure_running()
    try:
        began = time.monotonic()
        took: dict[str, float] = {}
        if images_built_beforehand():
            standin = plan_images(engine)[0]  # built by `make test` just before
        else:
            standin, took = build_images(engine)
        print(f"images ready in {time.monotonic() - began:.0f} s: {took}")
        compose = ComposeProject(
            engine,
            f"photon-e2e-{uuid.uuid4().hex[:8]}",
            workdir,
            s3_standin=standin,
            extra_env={"GEN_QUERIES": str(QUERIES), "GEN_RATE": str(RATE)},
        )
        compose.write_env()
        try:
            began = time.monotonic()
            compose.up(without=("generator",))
            compose.wait_ready(LONG_RUNNING | JOBS, timeout_s=1200)
            print(f"every service healthy {time.monotonic() - began:.0f} s after up")
            yield compose
        finally:
            compose.down()
    finally:
        engine.stop()


def _python_in(project: ComposeProject, service: str, code: str) -> Any:
    """Run ``code`` (printing JSON) in ``service``'s container, on its network."""
    return json.loads(project.exec(service, "python", "-c", code))


def _zookeeper_modes(project: ComposeProject) -> dict[str, str]:
    return dict(
        _python_in(
            project,
            "zk-exporter",
            "import json; from photon.tooling.stack.zookeeper import srvr_mode; "
            "print(json.dumps({f'zk{i}': srvr_mode(f'zk{i}', 2181) for i in (1, 2, 3)}))",
        )
    )


def _executors(project: ComposeProject, app: str) -> list[dict[str, Any]]:
    """The Spark application's executors, from its driver's REST API (in its container;
    the UI port is its DC's: 4040 + the DC's index, pipeline.spark_ui_base_port); none
    while the app is still starting."""
    port = 4040 + ["a", "b"].index(app.rpartition("-")[2])
    return list(
        _python_in(
            project,
            app,
            "import json, urllib.error, urllib.request as u\n"
            f"base = 'http://127.0.0.1:{port}/api/v1/applications'\n"
            "try:\n"
            "    app = json.load(u.urlopen(base, timeout=10))[0]['id']\n"
            "    print(json.dumps(json.load(u.urlopen(f'{base}/{app}/executors', timeout=10))))\n"
            "except (urllib.error.URLError, TimeoutError):\n"
            "    print('[]')  # its UI is not up, or not answering yet: the app is starting",
        )
    )


def _master(project: ComposeProject) -> Any:
    """The Spark master's view: workers, their cores, the applications."""
    port = project.env()["SPARK_MASTER_UI_PORT"]
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/", timeout=10) as response:
        return json.loads(response.read())


def _tasks_ended(executors: list[dict[str, Any]]) -> int:
    """Tasks ended on these executors (``totalTasks`` counts a task when it ends)."""
    return sum(int(e["totalTasks"]) for e in executors)


def _await_executors(
    project: ComposeProject,
    done: Callable[[dict[str, list[dict[str, Any]]]], bool],
    timeout_s: float,
) -> dict[str, set[str]]:
    """Poll every app's executors until ``done`` holds of them; the hosts each app's
    executors run on. On time-out, the assertion names what is missing."""
    deadline = time.monotonic() + timeout_s
    while True:
        time.sleep(3)
        executors = {  # the workers' executors: the driver is listed too, in its container
            app: [e for e in _executors(project, app) if e["id"] != "driver"] for app in APPS
        }
        hosts = {
            app: {e["hostPort"].partition(":")[0] for e in found}
            for app, found in executors.items()
        }
        if done(executors):
            return hosts
        if time.monotonic() > deadline:
            master = _master(project)
            missing = sorted(app for app, on in hosts.items() if not on)
            ended = {app: _tasks_ended(found) for app, found in executors.items()}
            apps = [(a.get("name"), a.get("state"), a.get("cores")) for a in master["activeapps"]]
            workers = [
                (w.get("host"), w.get("state"), w.get("coresused")) for w in master["workers"]
            ]
            raise AssertionError(
                f"after {timeout_s:.0f} s: apps without an executor on a worker {missing}, "
                f"tasks ended {ended}, hosts {hosts}, master's apps {apps}, "
                f"workers {workers}"
            )


def test_every_service_is_healthy_and_only_loopback_ports_are_published(
    project: ComposeProject,
) -> None:
    states = project.states()
    assert {s for s, state in states.items() if state.ready} >= LONG_RUNNING | JOBS
    assert "grafana" not in states  # its profile is off
    env = project.env()
    expected = {f"127.0.0.1:{env[name]}" for name in PUBLISHED}
    assert set(published_addresses(project.engine, project.name)) == expected


def test_the_ensemble_the_cache_the_database_and_the_store_answer(
    project: ComposeProject,
) -> None:
    assert sorted(_zookeeper_modes(project).values()) == ["follower", "follower", "leader"]
    env = project.env()
    ping = project.exec(
        "redis", "redis-cli", "-a", env["REDIS_PASSWORD"], "--no-auth-warning", "ping"
    )
    assert ping.strip() == "PONG"
    ready = project.exec(
        "postgres", "pg_isready", "-h", "127.0.0.1", "-U", "airflow", "-d", "airflow"
    )
    assert "accepting connections" in ready
    store = ObjectStore.from_settings(project_settings(project))
    assert list(store.keys("no-such-prefix/")) == []  # the bucket answers the verifier
    services = ("joiner-a", "joiner-b", "query-reader-a", "query-reader-b", "verifier")
    expected = {f"photon-{s}" for s in (*services, "operations")}
    if project.s3_standin:  # its users, as its init job made them (stored; MinIO checks)
        users = _python_in(
            project,
            "minio",
            "import boto3, json; iam = boto3.client('iam', endpoint_url='http://127.0.0.1:9000', "
            "region_name='us-east-1', aws_access_key_id='x', aws_secret_access_key='x'); "
            "print(json.dumps([u['UserName'] for u in iam.list_users()['Users']]))",
        )
        assert set(users) == expected
    else:  # MinIO's own users: the access keys of .env
        listed = project.compose(
            "run", "--rm", "--no-deps", "--entrypoint", "sh", "minio-init", "-c",
            'mc alias set m http://minio:9000 "$MINIO_ROOT_USER" "$MINIO_ROOT_PASSWORD" >/dev/null'
            " && mc admin user list m",
        )  # fmt: skip
        for service in (*services, "operations"):
            assert env[f"S3_{service.upper().replace('-', '_')}_ACCESS_KEY"] in listed


def test_both_dcs_join_on_the_workers_exactly_once_through_a_worker_and_the_leader_killed(
    project: ComposeProject,
) -> None:
    """The stream starts; the joiners' tasks run on the worker containers' executors;
    one worker is killed, then the ZooKeeper leader, while both DCs join; both come
    back (their restart policy, or a start); the audit is exactly once."""
    # The apps' executors first, before the stream: on a loaded machine twenty
    # containers' start-up takes minutes, and the faults should land in the stream.
    began = time.monotonic()
    on_workers = _await_executors(project, lambda by_app: all(by_app.values()), timeout_s=600)
    print(f"every app's executors on the workers {time.monotonic() - began:.0f} s after up")
    project.start("generator")
    began = time.monotonic()
    _await_executors(
        project,
        lambda by_app: all(_tasks_ended(by_app[app]) > 0 for app in ("joiner-a", "joiner-b")),
        timeout_s=QUERIES / RATE + 300,  # the stream's length, and a loaded machine's start
    )
    print(f"both joiners' tasks ran {time.monotonic() - began:.0f} s after the stream began")
    assert set().union(*on_workers.values()) <= {"spark-worker1", "spark-worker2"}, on_workers

    containers = project.containers()
    project.engine.run(["docker", "kill", containers["spark-worker1"]])
    time.sleep(15)  # spacing the two faults through the stream; nothing waits on it
    leader = next(node for node, mode in _zookeeper_modes(project).items() if mode == "leader")
    project.engine.run(["docker", "kill", containers[leader]])
    deadline = time.monotonic() + 120  # the two left elect a leader while both DCs join
    while "leader" not in _zookeeper_modes(project).values():
        assert time.monotonic() < deadline, _zookeeper_modes(project)
        time.sleep(1)
    for service in ("spark-worker1", leader):  # back, if the restart policy left it down
        if project.states()[service].status != "running":
            project.engine.run(["docker", "start", containers[service]])

    project.wait_ready({"generator"}, timeout_s=QUERIES / RATE + 600)
    project.wait_ready({"spark-worker1", leader, *APPS}, timeout_s=600)
    project.copy_out("generator", f"/data/logs/{MANIFEST_FILE}", project.workdir / MANIFEST_FILE)
    manifest = load_manifest(project.workdir)
    store = ObjectStore.from_settings(project_settings(project))
    result = settled_audit(store, manifest, timeout_s=900, poll_s=3.0)
    print(json.dumps(result.to_dict()))
    assert result.exactly_once, result.to_dict()
    assert result.joined == result.expected_joins > 1000
    assert set(result.joined_by_dc) <= {"a", "b"}


class AirflowApi:
    """Airflow's REST API on the published port, as the admin."""

    def __init__(self, project: ComposeProject) -> None:
        env = project.env()
        self.base = f"http://127.0.0.1:{env['AIRFLOW_UI_PORT']}"
        login = {"username": env["AIRFLOW_ADMIN_USER"], "password": env["AIRFLOW_ADMIN_PASSWORD"]}
        self.token = str(self.call("/auth/token", login)["access_token"])

    def call(self, path: str, data: Any = None) -> Any:
        headers = {"Content-Type": "application/json"}
        if hasattr(self, "token"):
            headers["Authorization"] = f"Bearer {self.token}"
        body = None if data is None else json.dumps(data).encode()
        request = urllib.request.Request(self.base + path, data=body, headers=headers)
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.loads(response.read())


def test_airflow_loads_the_dags_and_runs_verification_and_recovery_on_the_stack(
    project: ComposeProject,
) -> None:
    states = project.states()
    for component in ("api-server", "scheduler", "dag-processor", "triggerer"):
        assert states[f"airflow-{component}"].health == "healthy", component
    airflow = AirflowApi(project)
    assert airflow.call("/api/v2/importErrors")["total_entries"] == 0
    loaded = {d["dag_id"] for d in airflow.call("/api/v2/dags?limit=100")["dags"]}
    assert loaded >= DAGS
    runs = {}
    for dag_id in ("photon_verify", "photon_recover"):  # their default params
        run = airflow.call(f"/api/v2/dags/{dag_id}/dagRuns", {"logical_date": None, "conf": {}})
        runs[dag_id] = run["dag_run_id"]
    deadline = time.monotonic() + 900
    ended: dict[str, str] = {}
    while len(ended) < len(runs) and time.monotonic() < deadline:
        time.sleep(5)
        for dag_id, run_id in runs.items():
            quoted = urllib.parse.quote(run_id, safe="")
            state = airflow.call(f"/api/v2/dags/{dag_id}/dagRuns/{quoted}")["state"]
            if state in ("success", "failed"):
                ended[dag_id] = state
    assert ended == {"photon_verify": "success", "photon_recover": "success"}


def test_prometheus_scrapes_every_target_and_loads_the_rules(project: ComposeProject) -> None:
    base = f"http://127.0.0.1:{project.env()['PROMETHEUS_PORT']}/api/v1"
    deadline = time.monotonic() + 120  # a target restarted by the fault test comes back
    while True:
        with urllib.request.urlopen(base + "/targets", timeout=10) as response:
            targets = json.loads(response.read())["data"]["activeTargets"]
        down = [(t["scrapeUrl"], t["lastError"]) for t in targets if t["health"] != "up"]
        if not down or time.monotonic() > deadline:
            break
        time.sleep(5)
    assert not down
    jobs = {t["labels"]["job"] for t in targets}
    assert jobs >= {"photon", "zookeeper", "redis"} | (set() if project.s3_standin else {"minio"})
    assert len([t for t in targets if t["labels"]["job"] == "photon"]) == 4
    with urllib.request.urlopen(base + "/rules", timeout=10) as response:
        groups = json.loads(response.read())["data"]["groups"]
    assert sum(len(g["rules"]) for g in groups) >= 6


def test_down_leaves_no_container_network_or_volume(project: ComposeProject) -> None:
    assert project.containers()
    project.down()
    label = f"label=com.docker.compose.project={project.name}"
    for kind in ("container", "network", "volume"):
        listing = ["docker", kind, "ls", "--quiet", "--filter", label]
        if kind == "container":
            listing.insert(3, "--all")
        assert project.engine.run(listing).split() == [], kind
