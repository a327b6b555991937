"""One layered settings object for every part of Photon.

Layers, highest first: values passed in code, ``PHOTON_*`` environment
variables (nested with ``__``: ``PHOTON_STACK__REDIS_PORT=6380``), an optional
TOML config file (``--config FILE`` or ``PHOTON_CONFIG``), then the defaults
below, which run the local stack on loopback.

Lists can be given in the environment as JSON (``["a","b"]``) or comma
separated (``a,b``). Invalid values fail at start with :class:`SettingsError`,
whose message names each bad setting both as a dotted path and as its
environment variable.
"""

from __future__ import annotations

import contextvars
import ipaddress
import json
import os
import re
import tomllib
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any, Literal, Self

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    FilePath,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import (
    BaseSettings,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from photon.apps import JOINER, QUERY_READER
from photon.errors import PhotonError

ENV_PREFIX = "PHOTON_"
CONFIG_ENV_VAR = "PHOTON_CONFIG"
#: Set by ``photon run`` for the apps it restarts (photon.tooling.pipeline): how many
#: times it restarted this one. Not a setting, like PHOTON_CONFIG.
RESTARTS_ENV_VAR = "PHOTON_APP_RESTARTS"
#: ``<i>/<n>``: the slice of the port range free ports are picked from in this process
#: (photon.tooling.stack.ports). Not a setting either: it picks, it configures nothing.
PORT_SLICE_ENV_VAR = "PHOTON_PORT_SLICE"
_NOT_SETTINGS = (CONFIG_ENV_VAR, RESTARTS_ENV_VAR, PORT_SLICE_ENV_VAR)

_DC_NAME = re.compile(r"[a-z][a-z0-9-]{0,31}")
_BUCKET_NAME = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
_ZNODE_PATH = re.compile(r"(/[A-Za-z0-9_.-]+)+")

Port = Annotated[int, Field(ge=1, le=65535)]
#: Finite: an infinite timeout, backoff or age hangs or never gives up, silently.
PositiveSeconds = Annotated[float, Field(gt=0, allow_inf_nan=False)]


def _not_empty_path(value: Any) -> Any:
    if isinstance(value, str) and not value.strip():
        raise ValueError("is empty (an unset variable?): name a path, or leave the setting out")
    return value


#: A path that is named: an empty value (``PHOTON_LOGS_ROOT=``) would be the working
#: directory, which commands that clean their directories would then clean.
NamedPath = Annotated[Path, BeforeValidator(_not_empty_path)]


class SettingsError(PhotonError, ValueError):
    """Settings that cannot be used; the message names every bad setting."""


def _split_list(value: Any) -> Any:
    """Accept a JSON list or a comma-separated string for list settings."""
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            try:
                return json.loads(text)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{text!r} is neither a JSON list nor comma-separated") from exc
        return [item.strip() for item in text.split(",") if item.strip()]
    return value


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ZooKeeperSettings(_Section):
    """The IdRegistry's ensemble. ``hosts`` unset means the local stack's nodes."""

    hosts: Annotated[list[str] | None, NoDecode] = None
    root: str = "/photon"
    session_timeout_s: PositiveSeconds = 10.0
    connect_timeout_s: PositiveSeconds = 15.0
    # kazoo's default command retry never gives up; ours does (docs/ARCHITECTURE.md).
    retry_max_tries: Annotated[int, Field(ge=0, le=100)] = 5
    retry_max_delay_s: PositiveSeconds = 2.0
    auth_user: str | None = None
    auth_password: SecretStr | None = None
    # Width of the registry's time buckets; fixed when a registry root is first created.
    bucket_s: Annotated[int, Field(ge=1, le=3600)] = 10
    max_ops_per_txn: Annotated[int, Field(ge=1, le=10_000)] = 1000
    max_in_flight: Annotated[int, Field(ge=1, le=256)] = 8

    _split = field_validator("hosts", mode="before")(_split_list)

    @field_validator("bucket_s")
    @classmethod
    def _check_bucket(cls, bucket_s: int) -> int:
        if 3600 % bucket_s:
            raise ValueError(f"{bucket_s} does not divide an hour (3600 s)")
        return bucket_s

    @field_validator("hosts")
    @classmethod
    def _check_hosts(cls, hosts: list[str] | None) -> list[str] | None:
        if hosts is None:
            return None
        if not hosts:
            raise ValueError("give at least one host:port, or leave it unset for the local stack")
        for host in hosts:
            name, sep, port = host.rpartition(":")
            if not sep or not name or not port.isdigit() or not 1 <= int(port) <= 65535:
                raise ValueError(f"{host!r} is not host:port")
        return hosts

    @field_validator("root")
    @classmethod
    def _check_root(cls, root: str) -> str:
        if not _ZNODE_PATH.fullmatch(root):
            raise ValueError(f"{root!r} is not an absolute znode path like /photon")
        return root

    @model_validator(mode="after")
    def _check_auth(self) -> Self:
        if (self.auth_user is None) != (self.auth_password is None):
            raise ValueError("auth_user and auth_password go together: set both or neither")
        return self


class S3Settings(_Section):
    """The object store. ``endpoint_url`` unset means the local stack's endpoint."""

    endpoint_url: str | None = None
    #: The endpoint as a browser reaches it, for the links to reports in the Airflow UI
    #: (compose: the published port, not the service name). Unset: ``endpoint_url``.
    public_endpoint_url: str | None = None
    bucket: str = "photon"
    access_key: str = "photon"
    secret_key: SecretStr = SecretStr("photon-local-secret")
    region: str = "us-east-1"

    @field_validator("endpoint_url", "public_endpoint_url")
    @classmethod
    def _check_endpoint(cls, url: str | None) -> str | None:
        if url is not None and not re.fullmatch(r"https?://[^/\s]+/?", url):
            raise ValueError(f"{url!r} is not an http(s)://host:port endpoint")
        return url

    @field_validator("bucket")
    @classmethod
    def _check_bucket(cls, bucket: str) -> str:
        if not _BUCKET_NAME.fullmatch(bucket) or ".." in bucket:
            raise ValueError(f"{bucket!r} is not a valid S3 bucket name")
        return bucket

    @field_validator("secret_key")
    @classmethod
    def _check_secret(cls, secret: SecretStr) -> SecretStr:
        if len(secret.get_secret_value()) < 8:
            raise ValueError("must be at least 8 characters (MinIO refuses shorter ones)")
        return secret


class RedisSettings(_Section):
    """The CacheEventStore. ``url`` unset means the local stack's server."""

    url: str | None = None
    #: The local stack's cap (docs/deploy.md, "Sizing the query cache"): about 300 bytes a
    #: cached query; 1 GiB holds two minutes of both DCs at 4,000 clicks/s.
    maxmemory_mb: Annotated[int, Field(ge=8, le=1_048_576)] = 1024
    #: Cached queries are keys <key_prefix>:<dc>:<query_id>.
    key_prefix: Annotated[str, Field(pattern=r"^[A-Za-z0-9:._-]{1,64}$")] = "photon:q"

    @field_validator("url")
    @classmethod
    def _check_url(cls, url: str | None) -> str | None:
        if url is not None and not re.fullmatch(r"rediss?://[^\s]+", url):
            raise ValueError(f"{url!r} is not a redis:// URL")
        return url


class ShardSettings(_Section):
    default_count: Annotated[int, Field(ge=1, le=4096)] = 8
    #: How far ahead of ZooKeeper's clock an event may be stamped and still be
    #: registered; one stamped further is held until it is in range, and no
    #: resharding epoch starts sooner than this after it is appended (docs/join.md,
    #: "Time"). Also how far ahead of its own clock the query reader's progress may go.
    max_clock_skew_s: PositiveSeconds = 60.0
    #: An event stamped further ahead of ZooKeeper's clock than this is quarantined
    #: (``future_stamped``) instead of held: no ad server's clock is that wrong.
    max_future_s: Annotated[float, Field(gt=0, le=366 * 86_400)] = 86_400.0

    @model_validator(mode="after")
    def _check_future(self) -> Self:
        if self.max_future_s < self.max_clock_skew_s:
            raise ValueError(
                f"max_future_s ({self.max_future_s}) must be at least max_clock_skew_s "
                f"({self.max_clock_skew_s})"
            )
        return self


class LogFileMapSettings(_Section):
    """The paper's W (seconds) and M (bytes) between log-file-map entries."""

    #: A lookup reads at most M bytes from each entry of [ts - W, ts]; with small
    #: W and M the reads stay short (a click whose query is not read yet reads
    #: them all), at the cost of more entries (compaction merges them).
    window_s: PositiveSeconds = 2.0
    max_bytes: Annotated[int, Field(ge=1024)] = 64 << 10
    #: On a click's first sight, a query younger than this that the cache lacks was
    #: not read yet (the query reader caches a query before it maps it), so the
    #: joiner retries the click instead of searching the logs. 0: always search.
    skip_fresh_s: Annotated[float, Field(ge=0, le=3600)] = 30.0


class RetrySettings(_Section):
    """Backoff for clicks whose query is not found yet."""

    initial_backoff_s: PositiveSeconds = 1.0
    max_backoff_s: PositiveSeconds = 300.0
    multiplier: Annotated[float, Field(ge=1.0, le=10.0)] = 2.0
    jitter: Annotated[float, Field(ge=0.0, le=1.0)] = 0.2
    max_attempts: Annotated[int, Field(ge=1, le=1000)] = 10
    #: A click whose query is not found is given up on (unjoinable) only once it was
    #: first seen this long ago *and* the DC's query reader has read every query up to
    #: the click's time plus this long (docs/join.md, "When a click is unjoinable"):
    #: it must exceed the longest delay of a query after its click.
    max_age_s: PositiveSeconds = 3 * 3600.0

    @model_validator(mode="after")
    def _check_order(self) -> Self:
        if self.initial_backoff_s > self.max_backoff_s:
            raise ValueError("initial_backoff_s must not exceed max_backoff_s")
        return self


#: local, local[N], local[*], local[N,F] / local[*,F] (F: tries a task gets), spark://host:port.
_SPARK_MASTER = re.compile(
    r"local(\[(\*|[1-9][0-9]*)(,[1-9][0-9]*)?\])?|spark://[^\s/:]+:[0-9]{1,5}"
)
_IDENTIFIER = r"[A-Za-z_][A-Za-z0-9_]*"
_DOTTED_PATH = re.compile(rf"{_IDENTIFIER}(\.{_IDENTIFIER})*[:.]{_IDENTIFIER}")


class PipelineSettings(_Section):
    """The long-running query reader and joiner of each DC (Spark Structured Streaming)."""

    #: Checkpoints, retry stores and attempt names live under <state_root>/<dc>/<app>/:
    #: local (DC) storage, never the object store. Unset: <stack.state_dir>/pipelines.
    state_root: NamedPath | None = None
    spark_master: str = "local[*]"
    trigger_s: PositiveSeconds = 1.0
    max_bytes_per_batch: Annotated[int, Field(ge=1024, le=1 << 30)] = 16 << 20
    #: The joiner's batches take up to this many bytes of click logs (unset: twice
    #: ``max_bytes_per_batch``). Its driver reads none of them (its tasks do, each
    #: keeping its own group's lines), and a backlog cut in two batches leaves a tail
    #: that both DCs race on (docs/join.md, "Pacing the joiner to its query reader").
    joiner_max_bytes_per_batch: Annotated[int | None, Field(ge=1024, le=1 << 30)] = None
    max_files_per_batch: Annotated[int, Field(ge=1, le=10_000)] = 64
    max_retries_per_batch: Annotated[int, Field(ge=1, le=1_000_000)] = 5_000
    #: When many of a batch's fresh queries are not cached yet (the query reader is
    #: behind), the joiner waits up to this long for them before deferring the
    #: clicks to the retry store (0: never waits).
    reader_wait_s: Annotated[float, Field(ge=0, le=60)] = 2.0
    #: While the DC's query reader has more than this many bytes of query logs past its
    #: last committed batch (a backlog: both apps just started, a DC back from an
    #: outage), the joiner reads no click newer than the queries the reader has read,
    #: instead of deferring most of them to the retry store (docs/join.md, "Pacing the
    #: joiner to its query reader"). 0: always paced while the reader is behind at all;
    #: off with ``pace_to_reader``.
    reader_pacing_bytes: Annotated[int, Field(ge=0, le=1 << 40)] = 4 << 20
    pace_to_reader: bool = True
    #: A click another DC prefers waits this long before this DC joins it (0: off).
    affinity_grace_s: Annotated[float, Field(ge=0, le=3600)] = 3.0
    #: Join on arrival: clicks waiting for their query, first seen this recently, are
    #: checked against the cache every batch and joined once it is there, not at their
    #: next backoff (0: off). One MGET a batch of their queries (docs/join.md, step 9).
    arrival_window_s: Annotated[float, Field(ge=0, le=3600)] = 120.0
    #: A click older than this by its id's time is never held (0: always held):
    #: its preferred DC had its chance; a DC back from an outage catches up without
    #: parking half its backlog in the retry store.
    affinity_max_age_s: Annotated[float, Field(ge=0, le=86_400)] = 30.0
    #: Lines of one query file are sorted by event time within this bound (late
    #: shipping): having read a file up to time T proves no unread query of it is older
    #: than T minus this. The query reader's progress (docs/join.md) rests on it.
    query_order_bound_s: Annotated[float, Field(ge=0, le=86_400)] = 5.0
    #: A query file read to its end that has not grown for this long no longer holds
    #: the query reader's progress back (its writer stopped or rolled over); with every
    #: query file and click file that idle, the progress runs on the clock less this.
    query_file_idle_s: Annotated[float, Field(gt=0, le=86_400)] = 30.0
    adapter: str = "photon.join.adapter:AdClickAdapter"
    #: Recovery fences a dead attempt, then waits this long and reads the attempt's
    #: output again before it takes any of its ids over: a write that passed the
    #: attempt's fence check just before it closed lands (or gives up) meanwhile. An
    #: object store put, retries included, is bounded by about a minute
    #: (docs/ARCHITECTURE.md, "Fencing a dead attempt").
    fence_settle_s: Annotated[float, Field(ge=0, le=3600)] = 60.0
    #: The joiner splits each batch's clicks by registry shard into this many groups,
    #: each joined by one Spark task (docs/join.md, "The join on executors"). 0: one
    #: group per core the joiner app has (its Spark default parallelism).
    join_groups: Annotated[int, Field(ge=0, le=4096)] = 0
    #: Join the groups in Spark tasks on the executors (false: one after another in
    #: the driver's thread, as a joiner without Spark does).
    join_on_executors: bool = True
    #: Each group's task reads the batch's log lines itself and keeps its own (the
    #: executors need the logs at the driver's path, as for the log-file map); false:
    #: the driver reads and decodes every line and hands each group its clicks
    #: (docs/join.md, "The join on executors").
    tasks_read_lines: bool = True
    #: With the groups on executors: a batch's groups run while Spark commits it and
    #: plans the next one, and the driver settles a batch when the next one comes
    #: (docs/join.md, "Batches that overlap").
    overlap_batches: bool = True
    #: With overlap and the groups reading their lines: a batch's Spark job starts
    #: before the batch ahead is settled; its tasks read their lines, then get their
    #: plan from the driver (docs/join.md, "Groups started before their plan").
    prestart_groups: bool = True
    #: With the groups on executors: build each Python worker's group joiner (its
    #: modules, registry session, Redis and object store clients) as the app starts,
    #: while the first batch waits for its query reader (docs/join.md, "Workers
    #: warmed before the first batch").
    warm_up_workers: bool = True
    #: On a local master, Spark's Python processes (the log source's, the task workers'
    #: daemon) are forked by the app's fork server, their modules imported once
    #: (docs/deploy.md, "Start-up"); off: each a new interpreter.
    fork_server: bool = True
    #: How long such a task waits for its plan before it frees its core and the driver
    #: runs its group in a job of its own.
    plan_wait_s: Annotated[float, Field(gt=0, le=600)] = 5.0
    #: ``photon run`` runs a DC's query reader and joiner as two streaming queries of one
    #: Spark application (one driver JVM a DC); off: each its own application
    #: (docs/join.md, "The apps").
    one_app_per_dc: bool = True
    #: ``photon run`` restarts an app that dies (a service manager's part: Spark's
    #: checkpoint makes it safe), the other DCs running on: first after this long,
    #: doubling up to restart_max_backoff_s (docs/ARCHITECTURE.md, "Restarts").
    restart_backoff_s: Annotated[float, Field(gt=0, le=3600)] = 1.0
    restart_max_backoff_s: Annotated[float, Field(gt=0, le=3600)] = 30.0
    #: An app that dies within crash_loop_s of its start this many times in a row
    #: (a bad setting, a missing dependency) is given up on; 0: never.
    crash_loop_limit: Annotated[int, Field(ge=0, le=1000)] = 5
    crash_loop_s: Annotated[float, Field(gt=0, le=3600)] = 60.0
    #: ``photon run`` starting DCs one after another: each DC's apps start once the
    #: DC before has joined its first batch (or died, or stagger_max_wait_s went by),
    #: so that each start-up has the cores to itself (docs/deploy.md, "Start-up").
    #: ``auto``: when this process may use at most one core for each DC it starts.
    staggered_start: Literal["auto", "on", "off"] = "auto"
    stagger_max_wait_s: Annotated[float, Field(gt=0, le=3600)] = 30.0
    #: Options of each app's driver JVM. The default trades peak JIT speed (the
    #: driver only plans micro-batches) for less CPU: four apps share two cores.
    driver_java_options: str = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
    #: Drivers map their classes from the installation's class archive when it is
    #: there (``make install`` builds it; spark_apps/class_archive.py): about half a
    #: driver's start-up. Off: every driver loads its classes itself.
    class_archive: bool = True
    #: Where the apps' drivers are reached (by executors on a cluster) and bind: loopback
    #: natively; a container's own name and 0.0.0.0 in compose.
    driver_host: Annotated[str, Field(pattern=r"^[A-Za-z0-9]([A-Za-z0-9.-]{0,252})$")] = "127.0.0.1"
    driver_bind_address: str = "127.0.0.1"
    #: On a standalone cluster (spark://), each app takes this many cores and its
    #: executors this much memory; without a bound, the first app takes every core.
    cluster_cores_per_app: Annotated[int, Field(ge=1, le=1024)] = 1
    executor_memory_mb: Annotated[int, Field(ge=256, le=1_048_576)] = 512
    #: Prometheus metrics of the apps, on the stack's host: the query reader of the
    #: i-th DC serves on base + 2i, its joiner on base + 2i + 1. 0: no endpoint.
    metrics_base_port: Annotated[int, Field(ge=0, le=65535)] = 9410
    #: Where the metrics endpoints listen. Unset: the stack's (loopback) host. In compose,
    #: 0.0.0.0 inside each container, so that Prometheus can scrape them.
    metrics_bind_address: str | None = None
    #: The Spark UI of each DC's application (natively one holds the DC's query reader
    #: and joiner): the i-th DC's on base + i, on driver_bind_address; batch jobs take
    #: the next port Spark finds free above the DCs'. 0: no UI (docs/operations.md).
    spark_ui_base_port: Annotated[int, Field(ge=0, le=65535)] = 4040
    #: Spark's event log of every application (what a history server shows), rolled
    #: every 64 MiB, a directory an application. Unset: <state_root>/spark-events.
    event_log: bool = True
    event_log_dir: NamedPath | None = None

    def batch_bytes(self, app: str) -> int:
        """The most bytes of logs one batch of ``app`` takes (``maxBytesPerTrigger``)."""
        if app != JOINER:
            return self.max_bytes_per_batch
        if self.joiner_max_bytes_per_batch is not None:
            return self.joiner_max_bytes_per_batch
        return min(2 * self.max_bytes_per_batch, 1 << 30)

    @model_validator(mode="after")
    def _check_restart_backoff(self) -> Self:
        if self.restart_max_backoff_s < self.restart_backoff_s:
            raise ValueError(
                f"restart_max_backoff_s ({self.restart_max_backoff_s:g}) is below "
                f"restart_backoff_s ({self.restart_backoff_s:g})"
            )
        return self

    @field_validator("spark_master")
    @classmethod
    def _check_master(cls, master: str) -> str:
        if not _SPARK_MASTER.fullmatch(master):
            raise ValueError(
                f"{master!r} is not local, local[N], local[*], local[N,F] or spark://host:port"
            )
        return master

    @field_validator("driver_bind_address", "metrics_bind_address")
    @classmethod
    def _check_bind_address(cls, address: str | None) -> str | None:
        if address is None:
            return None
        try:
            ipaddress.ip_address(address)
        except ValueError as exc:
            raise ValueError(f"{address!r} is not an IP address") from exc
        return address

    @field_validator("driver_java_options")
    @classmethod
    def _check_java_options(cls, options: str) -> str:
        bad = [o for o in options.split() if not re.fullmatch(r"-[A-Za-z][^\s'\"]*", o)]
        if bad:
            raise ValueError(f"{bad[0]!r} is not a JVM option (one word starting with '-')")
        return options

    @field_validator("adapter")
    @classmethod
    def _check_adapter(cls, path: str) -> str:
        if not _DOTTED_PATH.fullmatch(path):
            raise ValueError(f"{path!r} is not a dotted path like 'package.module:ClassName'")
        return path


#: A ZooKeeper node's JIT (StackSettings.zk_jit): the full compiler, or the quick one only.
ZkJit = Literal["peak", "quick"]


class StackSettings(_Section):
    """The local stack that ``photon up`` runs on loopback."""

    host: str = "127.0.0.1"
    state_dir: NamedPath = Path(".photon")
    zk_client_ports: Annotated[list[Port], NoDecode] = [2181, 2182, 2183]
    zk_quorum_ports: Annotated[list[Port], NoDecode] = [2888, 2889, 2890]
    zk_election_ports: Annotated[list[Port], NoDecode] = [3888, 3889, 3890]
    #: Each node holds the whole registry in its heap (~0.5 KiB an id): size it
    #: for the ids inside the GC window. A node out of heap exits.
    zk_heap_mb: Annotated[int, Field(ge=32, le=65536)] = 1024
    #: The nodes' JIT. ``peak``: the full compiler (C2), for a stack that runs for
    #: hours: a registered id costs the ensemble about a third less CPU once it is warm,
    #: after a minute or two of compiling beside the apps. ``quick``: the quick compiler
    #: only (C1), for a stack that lives for minutes (``photon demo``'s: its first joined
    #: click ~3 s sooner on one core). docs/join.md, "ZooKeeper's CPU per registered id".
    zk_jit: ZkJit = "peak"
    zk_classpath: str = "/usr/share/java/zookeeper.jar"
    redis_port: Port = 6379
    s3_port: Port = 9000
    #: The standalone Spark cluster of ``photon up --spark-cluster``: a master and
    #: one worker per entry of spark_worker_ports. The UIs' JSON shows the apps.
    spark_master_port: Port = 7077
    spark_master_ui_port: Port = 8090
    spark_worker_ports: Annotated[list[Port], NoDecode] = [7078, 7079]
    spark_worker_ui_ports: Annotated[list[Port], NoDecode] = [8091, 8092]
    #: Cores each worker offers: more than the machine has is fine, the apps mostly
    #: wait; four long-running apps and the batch jobs each take one.
    spark_worker_cores: Annotated[int, Field(ge=1, le=1024)] = 4
    spark_worker_memory_mb: Annotated[int, Field(ge=512, le=1_048_576)] = 4096
    start_timeout_s: PositiveSeconds = 60.0
    #: Prometheus (with the alert rules of docs/metrics.md), Redis's exporter and the
    #: ZooKeeper exporter, each where its Debian package is installed (docs/metrics.md).
    monitoring: bool = True
    prometheus_port: Port = 9090
    #: The alert rules that Prometheus loads. When unset, the project's own
    #: rules are used (``infra/prometheus/rules/photon.yml``, docs/metrics.md
    #: "Alerts"). Point it at a copy to try other thresholds on the local stack.
    prometheus_rules: FilePath | None = None
    redis_exporter_port: Port = 9121
    zk_exporter_port: Port = 9141

    _split = field_validator(
        "zk_client_ports",
        "zk_quorum_ports",
        "zk_election_ports",
        "spark_worker_ports",
        "spark_worker_ui_ports",
        mode="before",
    )(_split_list)

    @field_validator("host")
    @classmethod
    def _check_host(cls, host: str) -> str:
        try:
            loopback = ipaddress.ip_address(host).is_loopback
        except ValueError as exc:
            raise ValueError(f"{host!r} is not an IP address") from exc
        if not loopback:
            raise ValueError(f"{host} is not a loopback address; the local stack stays on loopback")
        return host

    @model_validator(mode="after")
    def _check_ports(self) -> Self:
        nodes = len(self.zk_client_ports)
        if nodes % 2 == 0:
            raise ValueError(f"a ZooKeeper ensemble needs an odd number of nodes, got {nodes}")
        if not len(self.zk_quorum_ports) == len(self.zk_election_ports) == nodes:
            raise ValueError("zk_client_ports, zk_quorum_ports, zk_election_ports differ in length")
        if not self.spark_worker_ports or len(self.spark_worker_ports) != len(
            self.spark_worker_ui_ports
        ):
            raise ValueError("spark_worker_ports and spark_worker_ui_ports: one each per worker")
        ports = [*self.ports().values()]
        duplicates = sorted({p for p in ports if ports.count(p) > 1})
        if duplicates:
            raise ValueError(f"ports used twice: {duplicates}")
        return self

    def ports(self) -> dict[str, int]:
        """Every port the stack listens on, named by the setting that holds it."""
        named = {f"zk_client_ports[{i}]": p for i, p in enumerate(self.zk_client_ports)}
        named |= {f"zk_quorum_ports[{i}]": p for i, p in enumerate(self.zk_quorum_ports)}
        named |= {f"zk_election_ports[{i}]": p for i, p in enumerate(self.zk_election_ports)}
        named |= {"redis_port": self.redis_port, "s3_port": self.s3_port}
        named |= {
            "prometheus_port": self.prometheus_port,
            "redis_exporter_port": self.redis_exporter_port,
            "zk_exporter_port": self.zk_exporter_port,
        }
        named |= {
            "spark_master_port": self.spark_master_port,
            "spark_master_ui_port": self.spark_master_ui_port,
        }
        named |= {f"spark_worker_ports[{i}]": p for i, p in enumerate(self.spark_worker_ports)}
        named |= {
            f"spark_worker_ui_ports[{i}]": p for i, p in enumerate(self.spark_worker_ui_ports)
        }
        return named

    @property
    def spark_master_url(self) -> str:
        return f"spark://{self.host}:{self.spark_master_port}"


Probability = Annotated[float, Field(ge=0.0, le=1.0)]


class FaultSettings(_Section):
    """Fault injection for the chaos suite (see :mod:`photon.faults`); all off by default."""

    crash_after_commit_p: Probability = 0.0
    #: A group's first try fails (raises, as a lost executor or an object store down
    #: past its retries would) after its registry commit: Spark retries the task.
    fail_task_after_commit_p: Probability = 0.0
    pause_after_commit_p: Probability = 0.0
    #: The joiner crashes (as kill -9 would) the first time one of its batches with
    #: clicks reaches this step boundary (photon.faults.STEPS); "" is off.
    crash_at_step: Literal[
        "", "planned", "looked_up", "registered", "written", "settled", "returned"
    ] = ""
    #: crash_at_step strikes only a streaming batch (one Spark numbered), not a retry
    #: pass: the chaos run's log rotation rotates the files its crashed batch read.
    crash_streaming_only: bool = False
    crash_mid_write_p: Probability = 0.0
    s3_error_p: Probability = 0.0
    s3_delay_s: Annotated[float, Field(ge=0, le=60)] = 0.0
    registry_delay_s: Annotated[float, Field(ge=0, le=60)] = 0.0
    seed: int | None = None


_EMAIL = r"^[^@\s]+@[^@\s]+$"


class AlertSettings(_Section):
    """Who hears of a failed operations DAG run. Every failed run logs a line; with
    recipients and an SMTP server, it also sends one mail (Airflow's SMTP connection
    ``photon_smtp``, which ``photon airflow up`` makes from these settings)."""

    email_to: Annotated[list[Annotated[str, Field(pattern=_EMAIL)]], NoDecode] = []
    email_from: Annotated[str, Field(pattern=_EMAIL)] = "photon-airflow@localhost"
    #: The SMTP server (unset: no mail, the log line alone).
    smtp_host: str | None = None
    smtp_port: Port = 25
    smtp_starttls: bool = False

    _split = field_validator("email_to", mode="before")(_split_list)


class AirflowSettings(_Section):
    """Local Airflow (``photon airflow up``): its API server/UI and its PostgreSQL."""

    api_port: Port = 8080
    postgres_port: Port = 5433
    #: The UI's admin (Airflow's simple auth manager); local use only: change it elsewhere.
    admin_user: Annotated[str, Field(pattern=r"^[A-Za-z][A-Za-z0-9_.-]{0,63}$")] = "admin"
    admin_password: SecretStr = SecretStr("photon-admin")
    postgres_password: SecretStr = SecretStr("photon-airflow")
    #: Airflow's own state (home, database files, logs). Unset: <stack.state_dir>/airflow.
    state_dir: NamedPath | None = None

    @field_validator("admin_password", "postgres_password")
    @classmethod
    def _check_password(cls, secret: SecretStr) -> SecretStr:
        value = secret.get_secret_value()
        if len(value) < 8 or any(c in value for c in ":@/ '\"\\"):
            raise ValueError("must be at least 8 characters, without ':@/', quotes or spaces")
        return secret

    @model_validator(mode="after")
    def _check_ports(self) -> Self:
        if self.api_port == self.postgres_port:
            raise ValueError("api_port and postgres_port must differ")
        return self


_config_file: contextvars.ContextVar[Path | None] = contextvars.ContextVar(
    "photon_config_file", default=None
)


class PhotonSettings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        env_nested_delimiter="__",
        extra="forbid",
        frozen=True,
    )

    logs_root: NamedPath = Path(".photon/logs")
    #: The apps' log lines: key=value (console) or one JSON object a line. Read from
    #: PHOTON_LOG_FORMAT before the settings load, so that their errors are logged too.
    log_format: Literal["console", "json"] = "console"
    dcs: Annotated[list[str], NoDecode] = ["a", "b"]
    retention: timedelta = timedelta(days=3)
    log_rollover_bytes: Annotated[int, Field(ge=1024)] = 64 << 20
    zookeeper: ZooKeeperSettings = ZooKeeperSettings()
    s3: S3Settings = S3Settings()
    redis: RedisSettings = RedisSettings()
    shards: ShardSettings = ShardSettings()
    log_file_map: LogFileMapSettings = LogFileMapSettings()
    retry: RetrySettings = RetrySettings()
    pipeline: PipelineSettings = PipelineSettings()
    stack: StackSettings = StackSettings()
    airflow: AirflowSettings = AirflowSettings()
    faults: FaultSettings = FaultSettings()
    alerts: AlertSettings = AlertSettings()

    _split = field_validator("dcs", mode="before")(_split_list)

    @field_validator("dcs")
    @classmethod
    def _check_dcs(cls, dcs: list[str]) -> list[str]:
        if not dcs:
            raise ValueError("name at least one datacenter")
        for dc in dcs:
            if not _DC_NAME.fullmatch(dc):
                raise ValueError(f"{dc!r} is not a DC name (lowercase letters, digits, '-')")
        if len(set(dcs)) != len(dcs):
            raise ValueError(f"DC names repeat: {dcs}")
        return dcs

    @field_validator("retention")
    @classmethod
    def _check_retention(cls, retention: timedelta) -> timedelta:
        if retention <= timedelta(0):
            raise ValueError("must be positive")
        return retention

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        config_file = _config_file.get()
        if config_file is not None:
            sources.append(TomlConfigSettingsSource(settings_cls, toml_file=config_file))
        return tuple(sources)

    # Endpoints: explicit settings win; otherwise the local stack's loopback servers.

    @property
    def zk_hosts(self) -> list[str]:
        if self.zookeeper.hosts is not None:
            return list(self.zookeeper.hosts)
        return [f"{self.stack.host}:{port}" for port in self.stack.zk_client_ports]

    @property
    def redis_url(self) -> str:
        return self.redis.url or f"redis://{self.stack.host}:{self.stack.redis_port}/0"

    @property
    def s3_endpoint_url(self) -> str:
        return self.s3.endpoint_url or f"http://{self.stack.host}:{self.stack.s3_port}"

    def metrics_port(self, dc: str, app: str) -> int | None:
        """Where the app of ``dc`` serves its metrics (None: it does not)."""
        base = self.pipeline.metrics_base_port
        if base == 0:
            return None
        port = base + 2 * self.dcs.index(dc) + (0 if app == QUERY_READER else 1)
        if port > 65535:
            raise SettingsError(f"pipeline.metrics_base_port {base} leaves no port for DC {dc}")
        return port

    def spark_ui_port(self, dc: str | None) -> int:
        """The Spark UI port of ``dc``'s app (``None``: a batch job's first try); 0: no UI."""
        base = self.pipeline.spark_ui_base_port
        if base == 0:
            return 0
        port = base + (len(self.dcs) if dc is None else self.dcs.index(dc))
        if port > 65535:
            raise SettingsError(f"pipeline.spark_ui_base_port {base} leaves no port for {dc}")
        return port

    @property
    def spark_event_log_dir(self) -> Path | None:
        """Where Spark writes its event logs (None: off)."""
        if not self.pipeline.event_log:
            return None
        return self.pipeline.event_log_dir or self.pipeline_root / "spark-events"

    def pipeline_dir(self, dc: str, app: str) -> Path:
        """The local state of one DC's app: checkpoint, retry store, attempt name."""
        self.dc_logs(dc)  # validates the DC
        return self.pipeline_root / dc / app

    @property
    def pipeline_root(self) -> Path:
        return self.pipeline.state_root or self.stack.state_dir / "pipelines"

    def dc_logs(self, dc: str) -> Path:
        if dc not in self.dcs:
            raise SettingsError(f"unknown DC {dc!r}; configured DCs: {', '.join(self.dcs)}")
        return self.logs_root / dc

    def redacted(self) -> dict[str, Any]:
        """The effective settings as plain JSON-able data, secrets masked."""
        data: dict[str, Any] = self.model_dump(mode="json")
        data["effective"] = {
            "zk_hosts": self.zk_hosts,
            "redis_url": self.redis_url,
            "s3_endpoint_url": self.s3_endpoint_url,
        }
        return data


def _env_name(loc: tuple[str | int, ...]) -> str:
    parts = [str(p) for p in loc if not isinstance(p, int)]
    return ENV_PREFIX + "__".join(p.upper() for p in parts)


def _unknown_env_vars() -> list[str]:
    """PHOTON_* variables that name no setting: typos would otherwise be ignored silently."""
    unknown = []
    for key in sorted(os.environ):
        if not key.startswith(ENV_PREFIX) or key in _NOT_SETTINGS:
            continue
        model: type[BaseModel] | None = PhotonSettings
        for part in key[len(ENV_PREFIX) :].lower().split("__"):
            fields = model.model_fields if model is not None else {}
            if part not in fields:
                unknown.append(key)
                break
            annotation = fields[part].annotation
            if isinstance(annotation, type) and issubclass(annotation, BaseModel):
                model = annotation
            else:
                model = None
    return unknown


def env_names_in_file(config_file: Path) -> set[str]:
    """The ``PHOTON_*`` names of the values a TOML config file sets (``[retry]
    max_age_s = 60`` -> ``PHOTON_RETRY__MAX_AGE_S``): what an environment default
    must leave to the file, the environment layer being above the file's."""
    _check_toml(config_file)
    names: set[str] = set()

    def walk(table: dict[str, Any], loc: tuple[str, ...]) -> None:
        for key, value in table.items():
            if isinstance(value, dict):
                walk(value, (*loc, key))
            else:
                names.add(_env_name((*loc, key)))

    walk(tomllib.loads(config_file.read_text(encoding="utf-8")), ())
    return names


def _check_toml(config_file: Path) -> None:
    """Raise :class:`SettingsError` naming the file, line and column of a TOML syntax
    error (the settings sources would say only the line and column)."""
    try:
        tomllib.loads(config_file.read_bytes().decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise SettingsError(f"config file {config_file} is not UTF-8 text: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise SettingsError(f"config file {config_file} is not valid TOML: {exc}") from None


def _source_of(
    loc: tuple[Any, ...], config_file: Path | None, in_file: set[str], overrides: dict[str, Any]
) -> str:
    """Where a bad value came from, in the layers' order: passed in code, the environment
    (its variable), the config file, else a default."""
    env = _env_name(loc)
    if loc and loc[0] in overrides:
        return "passed in code"
    # A section's variable (PHOTON_STACK) sets its every field, a field's only that one;
    # a check across a section's fields (loc: the section) blames what sets any of them.
    within = [n for n in sorted(os.environ) if n.startswith(env + "__")]
    for depth in range(len(loc), 0, -1):
        name = _env_name(loc[:depth])
        if name in os.environ:
            return f"from {name}"
    if within:
        return "from " + ", ".join(within)
    if config_file is not None and (
        env in in_file or any(n.startswith(env + "__") for n in in_file)
    ):
        return f"from config file {config_file}"
    return f"the default; set {env} or the config file"


def _message(error: Any) -> str:
    """Pydantic's message without its "Value error, " prefix (our own validators speak)."""
    return str(error["msg"]).removeprefix("Value error, ")


def load_settings(config_file: Path | None = None, **overrides: Any) -> PhotonSettings:
    """Build the settings from every layer; raise :class:`SettingsError` on bad values.

    ``config_file`` defaults to ``$PHOTON_CONFIG`` when that is set.
    """
    if config_file is None and os.environ.get(CONFIG_ENV_VAR):
        config_file = Path(os.environ[CONFIG_ENV_VAR])
    if config_file is not None and not config_file.is_file():
        raise SettingsError(f"config file {config_file} does not exist")
    if config_file is not None:
        _check_toml(config_file)
    unknown = _unknown_env_vars()
    if unknown:
        raise SettingsError(
            f"unknown setting(s) in the environment: {', '.join(unknown)} "
            "(see `photon settings show` for the names)"
        )
    token = _config_file.set(config_file)
    try:
        return PhotonSettings(**overrides)
    except ValidationError as exc:
        problems = []
        in_file = env_names_in_file(config_file) if config_file is not None else set()
        for error in exc.errors():
            loc = tuple(error["loc"])
            dotted = ".".join(str(p) for p in loc) or "settings"
            source = _source_of(loc, config_file, in_file, overrides)
            problems.append(f"  {dotted} ({source}): {_message(error)}")
        raise SettingsError("invalid settings:\n" + "\n".join(problems)) from None
    except ValueError as exc:  # e.g. a list in the environment that is not JSON
        raise SettingsError(f"invalid settings: {exc}") from None
    finally:
        _config_file.reset(token)
