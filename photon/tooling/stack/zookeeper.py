"""A ZooKeeper ensemble node on loopback, from Debian's ``zookeeper`` jars.

Each node gets its own directory with ``conf/zoo.cfg`` (plus ``log4j.properties``),
``data/myid`` and its output log, and runs
``java -cp <conf>:<zookeeper.jar> org.apache.zookeeper.server.quorum.QuorumPeerMain zoo.cfg``.
The AdminServer is off (three nodes would fight over its port 8080) and the
``srvr``/``ruok``/``mntr``/``stat`` four-letter words are allowed, since
health is read from ``srvr``: an ensemble is healthy when exactly one node
answers ``Mode: leader`` and every other ``Mode: follower``.

How it fails: a node that cannot reach a quorum answers ``srvr`` with "This
ZooKeeper instance is not currently serving requests" (reported as not
serving); a node that is down refuses the connection.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass
from pathlib import Path

from photon.settings import StackSettings, ZkJit

MAIN_CLASS = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
# Present with Debian's libslf4j-java; without a binding ZooKeeper logs nothing.
_SLF4J_BINDINGS = ("/usr/share/java/slf4j-log4j12.jar", "/usr/share/java/log4j-1.2.jar")

_TICK_MS = 1000  # session timeouts may range from 2 to 20 ticks: 2 s to 20 s
#: Transaction log (KiB) written after a snapshot before the next one; the compose file
#: sets the same (ZOO_CFG_EXTRA).
SNAP_SIZE_LIMIT_KB = 102_400


@dataclass(frozen=True, slots=True)
class ZooKeeperNode:
    node_id: int  # 1-based, ZooKeeper's myid
    stack: StackSettings
    root: Path

    @property
    def name(self) -> str:
        return f"zk{self.node_id}"

    @property
    def directory(self) -> Path:
        return self.root / self.name

    @property
    def client_port(self) -> int:
        return self.stack.zk_client_ports[self.node_id - 1]

    def ports(self) -> dict[str, int]:
        i = self.node_id - 1
        return {
            f"zk_client_ports[{i}]": self.stack.zk_client_ports[i],
            f"zk_quorum_ports[{i}]": self.stack.zk_quorum_ports[i],
            f"zk_election_ports[{i}]": self.stack.zk_election_ports[i],
        }

    def prepare(self) -> None:
        conf, data = self.directory / "conf", self.directory / "data"
        conf.mkdir(parents=True, exist_ok=True)
        data.mkdir(parents=True, exist_ok=True)
        (data / "myid").write_text(f"{self.node_id}\n")
        (conf / "zoo.cfg").write_text(self._zoo_cfg(data))
        (conf / "log4j.properties").write_text(_LOG4J)

    def argv(self) -> list[str]:
        return _java_argv(
            self.directory, self.stack.zk_heap_mb, self.stack.zk_classpath, self.stack.zk_jit
        )

    def env(self) -> dict[str, str]:
        return {}

    def mode(self, timeout_s: float = 2.0) -> str:
        """``leader``, ``follower``, ``standalone``, ``not serving`` or ``down``."""
        return srvr_mode(self.stack.host, self.client_port, timeout_s)

    def _zoo_cfg(self, data: Path) -> str:
        host = self.stack.host
        return zoo_cfg(
            data=data,
            client_port=self.client_port,
            client_address=host,
            servers=[
                (host, quorum, election)
                for quorum, election in zip(
                    self.stack.zk_quorum_ports, self.stack.zk_election_ports, strict=True
                )
            ],
        )


def zoo_cfg(
    *,
    data: Path,
    client_port: int,
    client_address: str,
    servers: list[tuple[str, int, int]],
    listen_on_all_ips: bool = False,
) -> str:
    """One node's ``zoo.cfg``: the native stack's and a container's (``serve``)."""
    members = "\n".join(
        f"server.{i}={host}:{quorum}:{election}"
        for i, (host, quorum, election) in enumerate(servers, 1)
    )
    return (
        f"tickTime={_TICK_MS}\n"
        "initLimit=10\n"
        "syncLimit=5\n"
        f"dataDir={data}\n"
        f"clientPort={client_port}\n"
        f"clientPortAddress={client_address}\n"
        "admin.enableServer=false\n"
        "4lw.commands.whitelist=srvr,ruok,mntr,stat\n"
        # keep snapshots from filling a laptop's disk
        "autopurge.snapRetainCount=3\n"
        "autopurge.purgeInterval=1\n"
        # Snapshot once 100 MiB of log is written, not after 4 GiB (the default): the
        # registry's multis are large, so 100k transactions made GiBs of log, and a
        # restart replayed it all, past `photon up`'s health wait.
        f"snapSizeLimitInKb={SNAP_SIZE_LIMIT_KB}\n"
        # In a container a node's own name is its container's address; quorum and
        # election must listen on every address of it.
        + ("quorumListenOnAllIPs=true\n" if listen_on_all_ips else "")
        + f"{members}\n"
    )


#: A container node's ports (compose): ZooKeeper's defaults.
CLIENT_PORT, QUORUM_PORT, ELECTION_PORT = 2181, 2888, 3888


def serve_argv(node_id: int, hosts: list[str], directory: Path, heap_mb: int) -> list[str]:
    """Prepare ``directory`` as node ``node_id`` (1-based) of the ensemble ``hosts`` and
    return the command that runs it: one container's node (``photon stack serve
    zookeeper``), configured as the native stack's nodes are (a container runs for
    hours: the full JIT)."""
    if not 1 <= node_id <= len(hosts):
        raise ValueError(f"node id {node_id} is not one of 1..{len(hosts)} ({','.join(hosts)})")
    conf, data = directory / "conf", directory / "data"
    conf.mkdir(parents=True, exist_ok=True)
    data.mkdir(parents=True, exist_ok=True)
    (data / "myid").write_text(f"{node_id}\n")
    (conf / "log4j.properties").write_text(_LOG4J)
    (conf / "zoo.cfg").write_text(
        zoo_cfg(
            data=data,
            client_port=CLIENT_PORT,
            client_address="0.0.0.0",
            servers=[(host, QUORUM_PORT, ELECTION_PORT) for host in hosts],
            listen_on_all_ips=True,
        )
    )
    return _java_argv(directory, heap_mb, "/usr/share/java/zookeeper.jar", "peak")


def _java_argv(directory: Path, heap_mb: int, zookeeper_jar: str, jit: ZkJit) -> list[str]:
    classpath = [str(directory / "conf"), zookeeper_jar]
    classpath += [jar for jar in _SLF4J_BINDINGS if Path(jar).is_file()]
    return [
        "java",
        f"-Xmx{heap_mb}m",
        # The quick compiler only, or the full one (StackSettings.zk_jit). No
        # per-transaction tree digest: a consistency self-check since ZooKeeper 3.6 that
        # hashes every node a transaction changes, on each node (docs/join.md,
        # "ZooKeeper's CPU per registered id"). One GC thread: the ensemble shares the
        # machine's cores with the apps.
        *(["-XX:TieredStopAtLevel=1"] if jit == "quick" else []),
        "-Dzookeeper.digest.enabled=false",
        "-XX:+UseSerialGC",
        "-Dzookeeper.log.dir=" + str(directory),
        "-Dzookeeper.root.logger=INFO,CONSOLE",
        "-cp",
        ":".join(classpath),
        MAIN_CLASS,
        str(directory / "conf" / "zoo.cfg"),
    ]


def four_letter_word(host: str, port: int, word: str, timeout_s: float = 2.0) -> str:
    """Send a ZooKeeper four-letter command and return the whole answer."""
    with socket.create_connection((host, port), timeout=timeout_s) as sock:
        sock.sendall(word.encode("ascii"))
        chunks = []
        while chunk := sock.recv(4096):
            chunks.append(chunk)
    return b"".join(chunks).decode("utf-8", errors="replace")


def ensemble_healthy(modes: list[str]) -> bool:
    """One node: standalone; more: exactly one leader and every other node a follower."""
    if len(modes) == 1:
        return modes == ["standalone"]
    return modes.count("leader") == 1 and modes.count("follower") == len(modes) - 1


def srvr_mode(host: str, port: int, timeout_s: float = 2.0) -> str:
    try:
        answer = four_letter_word(host, port, "srvr", timeout_s)
    except OSError:
        return "down"
    for line in answer.splitlines():
        if line.startswith("Mode:"):
            return line.split(":", 1)[1].strip()
    return "not serving"


_LOG4J = """\
log4j.rootLogger=${zookeeper.root.logger}
log4j.appender.CONSOLE=org.apache.log4j.ConsoleAppender
log4j.appender.CONSOLE.Threshold=INFO
log4j.appender.CONSOLE.layout=org.apache.log4j.PatternLayout
log4j.appender.CONSOLE.layout.ConversionPattern=%d{ISO8601} - %-5p [%t:%C{1}@%L] - %m%n
"""
