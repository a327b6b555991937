"""The ZooKeeper exporter's parsing of ``mntr`` and of its server list."""

from __future__ import annotations

import pytest

from photon.tooling.observe.zookeeper_exporter import EnsembleCollector, parse_mntr, parse_servers
from photon.tooling.stack.ports import free_ports

pytestmark = pytest.mark.unit

MNTR = (
    "zk_version\t3.8.0-11, built on 2023-03-12\n"
    "zk_server_state\tleader\n"
    "zk_avg_latency\t0.4215\n"
    "zk_outstanding_requests\t3\n"
    "zk_znode_count\t1204\n"
    "zk_synced_followers\t2\n"
    "zk_p99_watch-notifier\t7\n"
)


def test_mntr_lines_become_keys_with_their_values() -> None:
    values = parse_mntr(MNTR)
    assert values["server_state"] == "leader"
    assert values["znode_count"] == "1204"
    assert values["avg_latency"] == "0.4215"
    assert values["p99_watch_notifier"] == "7"  # a Prometheus name, whatever mntr says


def test_a_server_not_serving_answers_no_values() -> None:
    assert parse_mntr("This ZooKeeper instance is not currently serving requests\n") == {}


def test_servers_are_host_port_pairs_and_a_bad_one_is_named() -> None:
    assert parse_servers("127.0.0.1:2181, zk2:2182") == [("127.0.0.1", 2181), ("zk2", 2182)]
    for bad in ("zk1", "zk1:", ":2181", "zk1:port", "zk1:70000"):
        with pytest.raises(ValueError, match=f"{bad!r} is not host:port"):
            parse_servers(f"127.0.0.1:2181,{bad}")


def test_a_server_that_refuses_is_down_and_has_no_other_series() -> None:
    [port] = free_ports(1)
    families = {f.name: f for f in EnsembleCollector([("127.0.0.1", port)], 0.5).collect()}
    assert [(s.labels, s.value) for s in families["zookeeper_up"].samples] == [
        ({"server": f"127.0.0.1:{port}"}, 0.0)
    ]
    assert families["zookeeper_server_state"].samples == []
    assert set(families) == {"zookeeper_up", "zookeeper_server_state"}
