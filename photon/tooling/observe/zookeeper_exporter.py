"""A Prometheus exporter for the ZooKeeper ensemble, from its ``mntr`` four-letter word.

Debian's ZooKeeper has no Prometheus metrics provider, and the compose image's
would name its series differently; so both stacks serve ZooKeeper's own
monitoring numbers the same way. Every numeric ``zk_<key>`` line of ``mntr``
(latencies, outstanding requests, znodes, watches, synced followers, ...) becomes
the gauge ``zookeeper_<key>{server="host:port"}``; ``zk_server_state`` becomes
``zookeeper_server_state{server, state} 1``; and ``zookeeper_up{server}`` says
whether the server answered. Each scrape asks every server afresh.

How it fails: a server that refuses, times out or is not serving ("This
ZooKeeper instance is not currently serving requests") gives ``zookeeper_up 0``
and no other series of its own; a scrape itself never fails.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator, Sequence

import structlog
from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from photon.tooling.stack.zookeeper import four_letter_word

log = structlog.get_logger(__name__)

_NOT_A_NAME = re.compile(r"[^a-zA-Z0-9_]")


def parse_mntr(answer: str) -> dict[str, str]:
    """``mntr``'s ``zk_<key>\\t<value>`` lines as {key: value}; empty when the answer
    holds none (a server not serving answers with a sentence)."""
    values: dict[str, str] = {}
    for line in answer.splitlines():
        key, tab, value = line.partition("\t")
        if tab and key.startswith("zk_"):
            values[_NOT_A_NAME.sub("_", key.removeprefix("zk_"))] = value.strip()
    return values


def _number(value: str) -> float | None:
    try:
        return float(value)
    except ValueError:
        return None  # zk_version and the like


class EnsembleCollector(Collector):
    """Collects ``mntr`` of each ``(host, port)`` at every scrape."""

    def __init__(self, servers: Sequence[tuple[str, int]], timeout_s: float = 2.0) -> None:
        self.servers = list(servers)
        self.timeout_s = timeout_s

    def collect(self) -> Iterator[GaugeMetricFamily]:
        up = GaugeMetricFamily(
            "zookeeper_up", "1 when the server answered mntr, else 0", labels=["server"]
        )
        state = GaugeMetricFamily(
            "zookeeper_server_state",
            "1 for the server's role: leader, follower or standalone",
            labels=["server", "state"],
        )
        gauges: dict[str, GaugeMetricFamily] = {}
        for host, port in self.servers:
            server = f"{host}:{port}"
            try:
                values = parse_mntr(four_letter_word(host, port, "mntr", self.timeout_s))
            except OSError:
                values = {}
            up.add_metric([server], 1.0 if values else 0.0)
            for key, value in values.items():
                if key == "server_state":
                    state.add_metric([server, value], 1.0)
                elif (number := _number(value)) is not None:
                    if key not in gauges:
                        gauges[key] = GaugeMetricFamily(
                            f"zookeeper_{key}", f"mntr's zk_{key}", labels=["server"]
                        )
                    gauges[key].add_metric([server], number)
        yield up
        yield state
        yield from gauges.values()


def parse_servers(servers: str) -> list[tuple[str, int]]:
    """``"host:port,host:port"`` as pairs; ValueError naming the bad entry."""
    pairs = []
    for entry in (e.strip() for e in servers.split(",")):
        host, colon, port = entry.rpartition(":")
        if not colon or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"{entry!r} is not host:port")
        pairs.append((host, int(port)))
    if not pairs:
        raise ValueError("no servers given")
    return pairs


def serve(servers: Sequence[tuple[str, int]], host: str, port: int) -> None:
    """Serve ``/metrics`` on ``host:port`` until the process is stopped."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(EnsembleCollector(servers))
    start_http_server(port, addr=host, registry=registry)
    log.info("zookeeper_exporter.serving", address=f"{host}:{port}", servers=len(servers))
    threading.Event().wait()
