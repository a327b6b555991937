"""`photon up`/`down` against real servers: ZooKeeper ensemble, Redis, S3 endpoint."""

from __future__ import annotations

import io
import json
import socket
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import psutil
import pytest
import redis
from minio import Minio

from photon.settings import PhotonSettings
from photon.tooling.stack import process
from photon.tooling.stack.manager import LocalStack, StackStartError
from photon.tooling.stack.ports import PortInUseError, port_is_listening
from photon.tooling.stack.zookeeper import srvr_mode
from tests.conftest import settings_from_env, stack_env

pytestmark = pytest.mark.integration


def test_up_yields_an_ensemble_with_exactly_one_leader(local_stack: LocalStack) -> None:
    stack = local_stack.settings.stack
    modes = sorted(srvr_mode(stack.host, port) for port in stack.zk_client_ports)
    assert modes == ["follower", "follower", "leader"]
    status = local_stack.status()
    assert status.healthy, status.problems
    assert {s.name for s in status.services} == {
        *("zk1", "zk2", "zk3", "redis", "s3"),
        *("prometheus", "redis-exporter", "zk-exporter"),
    }


def test_redis_answers_with_an_lru_memory_bound(local_stack: LocalStack) -> None:
    client = redis.Redis.from_url(local_stack.settings.redis_url)
    try:
        assert client.ping()
        assert client.config_get("maxmemory-policy")["maxmemory-policy"] == "allkeys-lru"
        assert int(client.config_get("maxmemory")["maxmemory"]) == (
            local_stack.settings.redis.maxmemory_mb << 20
        )
    finally:
        client.close()


def test_objects_cross_between_boto3_and_the_minio_client(local_stack: LocalStack) -> None:
    settings = local_stack.settings
    from photon.storage import s3_client

    boto = s3_client(settings.s3_endpoint_url, settings.s3)
    host = settings.s3_endpoint_url.removeprefix("http://")
    mc = Minio(
        host,
        access_key=settings.s3.access_key,
        secret_key=settings.s3.secret_key.get_secret_value(),
        secure=False,
        region=settings.s3.region,
    )
    bucket = settings.s3.bucket
    assert bucket in [b["Name"] for b in boto.list_buckets()["Buckets"]]

    boto.put_object(Bucket=bucket, Key="it/from-boto3.txt", Body=b"written by boto3")
    response = mc.get_object(bucket, "it/from-boto3.txt")
    try:
        assert response.read() == b"written by boto3"
    finally:
        response.close()
        response.release_conn()

    data = b"written by minio"
    mc.put_object(bucket, "it/from-minio.txt", io.BytesIO(data), length=len(data))
    assert boto.get_object(Bucket=bucket, Key="it/from-minio.txt")["Body"].read() == data


def test_a_second_up_changes_nothing(local_stack: LocalStack) -> None:
    before = local_stack.state_path.read_bytes()
    pids = {name: r.pid for name, r in local_stack.records().items()}
    status = local_stack.up()
    assert status.healthy
    assert local_stack.state_path.read_bytes() == before
    assert {name: r.pid for name, r in local_stack.records().items()} == pids


def test_a_dead_service_is_restarted_by_up(local_stack: LocalStack) -> None:
    redis_record = local_stack.records()["redis"]
    others = {n: r.pid for n, r in local_stack.records().items() if n != "redis"}
    assert process.kill(redis_record.identity)
    assert not local_stack.status().healthy
    assert local_stack.up().healthy
    after = local_stack.records()
    assert after["redis"].pid != redis_record.pid
    assert {n: r.pid for n, r in after.items() if n != "redis"} == others


def test_down_stops_everything_it_started_and_nothing_else(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    settings = settings_from_env(stack_env(tmp_path_factory.mktemp("own")))
    bystander = psutil.Popen(["sleep", "60"])  # a process that is not the stack's
    stack = LocalStack(settings)
    try:
        stack.up()
        records = stack.records()
        ports = [p for r in records.values() for p in r.ports.values()]
        report = stack.down(purge=True)
        assert sorted(report.stopped) == sorted(records)
        assert not report.still_listening
        for record in records.values():
            assert not process.is_running(record.identity)
        assert not [p for p in ports if port_is_listening(settings.stack.host, p)]
        assert not stack.state_path.exists()
        assert bystander.is_running()
        assert stack.down().stopped == []  # nothing left to stop
    finally:
        bystander.kill()
        bystander.wait()
        stack.down(purge=True)


def test_a_taken_port_is_a_clear_error_and_starts_nothing(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    settings: PhotonSettings = settings_from_env(stack_env(tmp_path_factory.mktemp("taken")))
    taken = settings.stack.redis_port
    holder = socket.socket()
    holder.bind((settings.stack.host, taken))
    holder.listen()
    stack = LocalStack(settings)
    children_before = {p.pid for p in psutil.Process().children(recursive=True)}
    try:
        with pytest.raises(PortInUseError, match=rf"{taken} \(redis_port\).*Nothing was started"):
            stack.up()
        assert not stack.state_path.exists()
        assert {p.pid for p in psutil.Process().children(recursive=True)} == children_before
        for port in settings.stack.zk_client_ports:
            assert not port_is_listening(settings.stack.host, port)
    finally:
        holder.close()


def test_a_service_that_dies_at_start_fails_up_and_leaves_nothing_running(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    env = stack_env(tmp_path_factory.mktemp("dies"))
    settings = settings_from_env(env | {"PHOTON_STACK__ZK_CLASSPATH": "/nonexistent/zk.jar"})
    stack = LocalStack(settings)
    children_before = {p.pid for p in psutil.Process().children(recursive=True)}
    with pytest.raises(StackStartError, match=r"zk\d exited during start") as info:
        stack.up()
    assert "last lines of" in str(info.value)  # the service's own output, for the operator
    assert "QuorumPeerMain" in str(info.value)  # java's complaint about the missing class
    assert not stack.state_path.exists()
    alive = {
        p.pid
        for p in psutil.Process().children(recursive=True)
        if p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    } - children_before
    assert not alive
    for port in settings.stack.ports().values():
        assert not port_is_listening(settings.stack.host, port)


def test_down_stops_everything_even_when_stderr_is_closed(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    import io
    import sys

    from photon.logconfig import configure_logging

    configure_logging("info")  # as the CLI does; stays in force for the whole session
    settings = settings_from_env(stack_env(tmp_path_factory.mktemp("closed")))
    stack = LocalStack(settings)
    stack.up()
    records = stack.records()
    closed = io.StringIO()
    closed.close()
    monkeypatch.setattr(sys, "stderr", closed)  # as at the end of a pytest session
    report = stack.down(purge=True)
    assert sorted(report.stopped) == sorted(records)
    assert not any(process.is_running(r.identity) for r in records.values())


def _prometheus(url: str, path: str) -> Any:
    with urllib.request.urlopen(f"{url}{path}", timeout=5) as answer:
        return json.load(answer)["data"]


def test_prometheus_scrapes_zookeeper_and_redis_and_loads_the_alert_rules(
    local_stack: LocalStack,
) -> None:
    url = local_stack.status().endpoints["prometheus"]
    rules = _prometheus(url, "/api/v1/rules")["groups"]
    assert {r["name"] for g in rules for r in g["rules"]} >= {"PhotonAppDown", "PhotonDcLagging"}

    def scraped(query: str) -> list[dict[str, Any]]:
        for _ in range(120):  # the first scrapes come within 5 s, on a busy machine later
            result: list[dict[str, Any]] = _prometheus(
                url, "/api/v1/query?" + urllib.parse.urlencode({"query": query})
            )["result"]
            if result:
                return result
            time.sleep(0.5)
        raise AssertionError(f"Prometheus has no {query}")

    nodes = local_stack.settings.stack.zk_client_ports
    up = scraped("zookeeper_up == 1")
    assert sorted(int(r["metric"]["server"].rsplit(":", 1)[1]) for r in up) == sorted(nodes)
    roles = scraped("zookeeper_server_state == 1")
    assert sorted(r["metric"]["state"] for r in roles) == ["follower", "follower", "leader"]
    assert [r["value"][1] for r in scraped("redis_up")] == ["1"]
    assert [r["value"][1] for r in scraped("redis_config_maxmemory")] == [
        str(local_stack.settings.redis.maxmemory_mb << 20)
    ]


def test_every_dashboard_query_is_valid_promql_and_the_registry_and_cache_panels_show_data(
    local_stack: LocalStack,
) -> None:
    """Each Grafana panel query runs on the stack's Prometheus ($dc as "all"); those of
    ZooKeeper and Redis have series (the apps' need a running pipeline)."""
    url = local_stack.status().endpoints["prometheus"]
    repo = Path(__file__).resolve().parents[5]
    dashboard = json.loads((repo / "infra/grafana/dashboards/photon.json").read_text())
    assert [v["name"] for v in dashboard["templating"]["list"]] == ["dc"]
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    assert any("photon_input_lag_seconds" in e for e in exprs)
    for expr in exprs:
        if expr.startswith(("photon", "up", "max by (dc", "sum by (dc", "histogram")):
            assert '=~"$dc"' in expr, expr  # the DC picker applies to every app panel
        query = urllib.parse.urlencode({"query": expr.replace("$dc", ".*")})
        deadline = time.monotonic() + 60
        while True:
            result = _prometheus(url, f"/api/v1/query?{query}")["result"]
            app_panel = "photon_" in expr or "job=" in expr
            if result or app_panel or time.monotonic() > deadline:
                break
            time.sleep(0.5)  # the exporters' first scrape
        assert result or app_panel, expr
