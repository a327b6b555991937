from __future__ import annotations

from pathlib import Path

import pytest

from photon.settings import RedisSettings, S3Settings, StackSettings
from photon.tooling.stack.redis_server import RedisService
from photon.tooling.stack.s3 import S3Service
from photon.tooling.stack.zookeeper import ZooKeeperNode, srvr_mode

pytestmark = pytest.mark.unit


def test_each_zookeeper_node_gets_its_own_dirs_ports_and_the_whole_ensemble(tmp_path: Path) -> None:
    stack = StackSettings(
        zk_client_ports=[5001, 5002, 5003],
        zk_quorum_ports=[5011, 5012, 5013],
        zk_election_ports=[5021, 5022, 5023],
    )
    node = ZooKeeperNode(2, stack, tmp_path)
    node.prepare()
    cfg = (tmp_path / "zk2" / "conf" / "zoo.cfg").read_text()
    assert f"dataDir={tmp_path / 'zk2' / 'data'}" in cfg
    assert "clientPort=5002" in cfg and "clientPortAddress=127.0.0.1" in cfg
    assert "admin.enableServer=false" in cfg  # three AdminServers would fight over 8080
    assert "snapSizeLimitInKb=102400" in cfg  # a restart replays at most 100 MiB of log
    assert (
        "server.1=127.0.0.1:5011:5021\nserver.2=127.0.0.1:5012:5022\nserver.3=127.0.0.1:5013:5023"
        in cfg
    )
    assert (tmp_path / "zk2" / "data" / "myid").read_text() == "2\n"
    assert node.ports() == {
        "zk_client_ports[1]": 5002,
        "zk_quorum_ports[1]": 5012,
        "zk_election_ports[1]": 5022,
    }
    argv = node.argv()
    assert argv[0] == "java" and "org.apache.zookeeper.server.quorum.QuorumPeerMain" in argv


@pytest.mark.parametrize(("jit", "quick_only"), [("peak", False), ("quick", True)])
def test_a_zookeeper_node_runs_the_jit_its_stack_asks_for_and_no_tree_digest(
    tmp_path: Path, jit: str, quick_only: bool
) -> None:
    argv = ZooKeeperNode(1, StackSettings.model_validate({"zk_jit": jit}), tmp_path).argv()
    assert ("-XX:TieredStopAtLevel=1" in argv) is quick_only
    assert "-Dzookeeper.digest.enabled=false" in argv
    # JVM options go before the main class, or they are the program's arguments.
    assert argv.index("-Dzookeeper.digest.enabled=false") < argv.index(
        "org.apache.zookeeper.server.quorum.QuorumPeerMain"
    )


def test_a_zookeeper_jit_that_is_not_peak_or_quick_is_refused() -> None:
    with pytest.raises(ValueError, match="zk_jit"):
        StackSettings.model_validate({"zk_jit": "fast"})


def test_redis_runs_without_persistence_and_with_an_lru_bound(tmp_path: Path) -> None:
    argv = RedisService(
        StackSettings(redis_port=7001), RedisSettings(maxmemory_mb=64), tmp_path
    ).argv()
    flags = dict(zip(argv[1::2], argv[2::2], strict=True))
    assert flags["--port"] == "7001" and flags["--bind"] == "127.0.0.1"
    assert flags["--maxmemory"] == "64mb" and flags["--maxmemory-policy"] == "allkeys-lru"
    assert flags["--save"] == "" and flags["--appendonly"] == "no"


def test_s3_uses_minio_credentials_only_for_minio(tmp_path: Path) -> None:
    minio = S3Service(StackSettings(), S3Settings(), tmp_path, "minio")
    assert minio.argv()[:2] == ["minio", "server"]
    assert minio.env()["MINIO_ROOT_USER"] == "photon"
    moto = S3Service(StackSettings(), S3Settings(), tmp_path, "moto")
    assert moto.argv()[1:3] == ["-m", "photon.tooling.stack.s3_standin"] and moto.env() == {}


def test_srvr_of_a_closed_port_is_down() -> None:
    from photon.tooling.stack.ports import free_ports

    assert srvr_mode("127.0.0.1", free_ports(1)[0], timeout_s=0.5) == "down"
