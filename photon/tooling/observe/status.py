"""What on-call looks at first: one snapshot of every DC, the registry and the cache.

:func:`collect` reads, each time it is called:

* per DC — each app's Prometheus endpoint (up when it answers; its counters
  and histograms, and its input lag gauges: bytes and files not committed yet,
  seconds behind in the logs' own time, see :mod:`photon.join.backlog`). An app
  that is down has an *unknown* lag, never 0; only an app whose metrics are off
  (``pipeline.metrics_base_port = 0``) has its lag read here, from its
  checkpoint, which works only where its state and logs are visible;
* the registry — ``srvr`` and ``mntr`` of every ZooKeeper node (mode, znode
  count), the sharding epochs and each shard's ids and GC boundary;
* the cache — Redis ``INFO`` (memory used, the limit) and the joiners' hit
  ratio (from their lookups, which is what the cache is for).

Rates (joined clicks per second) need two snapshots: pass the previous one.

How it fails: it does not. A part that cannot be reached is reported as
such (an app ``down``, a ZooKeeper node ``down``, the registry or Redis with
an ``error``), because a dashboard that raises at 3 a.m. shows nothing.
"""

from __future__ import annotations

import contextlib
import json
import time
import urllib.request
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import redis

from photon.apps import APP_NAMES, JOINER, QUERY_READER
from photon.join.backlog import Backlog, joiner_backlog, query_reader_backlog
from photon.settings import PhotonSettings
from photon.tooling.observe.prom import Scrape, scrape
from photon.tooling.stack.zookeeper import ensemble_healthy, four_letter_word, srvr_mode

if TYPE_CHECKING:
    from registry import IdRegistry


@dataclass
class InputLag:
    """How far an app is behind its logs; all None when that cannot be known."""

    bytes: int | None
    files: int | None
    lag_s: float | None  # in the logs' own time
    #: "metrics": the app's own gauges; "checkpoint": read here, its metrics being off;
    #: "unknown": the app is down or has not measured yet.
    source: str

    @classmethod
    def from_metrics(cls, page: Scrape | None, dc: str, app: str) -> InputLag:
        values = []
        for name in (f"photon_input_behind_{u}" for u in ("bytes", "files")):
            samples = page.matching(name, dc=dc, app=app) if page else []
            values.append(int(samples[0].value) if samples else None)
        lag = page.matching("photon_input_lag_seconds", dc=dc, app=app) if page else []
        if None in values or not lag:
            return cls.unknown()
        return cls(values[0], values[1], round(lag[0].value, 3), "metrics")

    @classmethod
    def from_checkpoint(cls, backlog: Backlog) -> InputLag:
        return cls(backlog.bytes, backlog.files, round(backlog.lag_s, 3), "checkpoint")

    @classmethod
    def unknown(cls) -> InputLag:
        return cls(None, None, None, "unknown")


@dataclass
class DcStatus:
    dc: str
    apps: dict[str, str]  # app -> "up" / "down" / "no metrics" (pipeline.metrics_base_port 0)
    input_lag: dict[str, InputLag]  # "queries" / "clicks"
    joined_total: int
    joined_per_s: float | None  # None on the first snapshot
    retries_pending: int
    unjoinable_total: int
    too_old_total: int
    quarantined_total: int
    latency_p50_s: float | None
    latency_p90_s: float | None
    cache_hits: int
    cache_misses: int
    #: Queries the log-file map found (the cache did not have them): with the hits,
    #: every query found, which the hit ratio is over (docs/join.md, "Cache hits").
    logs_found: int
    #: The DC's Spark application UI, when it answers there (pipeline.spark_ui_base_port)
    spark_ui: str | None = None
    #: app -> where its process runs, "<pid>@<host>" (its driver's Python side); apps
    #: that are down, or serve no metrics, are not here
    processes: dict[str, str] = field(default_factory=dict)

    @property
    def up(self) -> bool:
        return all(state == "up" for state in self.apps.values())


@dataclass
class ZkNode:
    host: str
    mode: str  # leader / follower / standalone / not serving / down
    znodes: int | None


@dataclass
class RegistryStatus:
    nodes: list[ZkNode]
    epochs: list[dict[str, int]] = field(default_factory=list)
    shards: list[dict[str, int]] = field(default_factory=list)
    ids: int = 0
    error: str | None = None

    @property
    def healthy(self) -> bool:
        return ensemble_healthy([n.mode for n in self.nodes])

    @property
    def znodes(self) -> int | None:
        counts = [n.znodes for n in self.nodes if n.znodes is not None]
        return max(counts) if counts else None


@dataclass
class CacheStatus:
    hit_ratio: float | None
    memory_used_bytes: int | None
    memory_max_bytes: int | None
    keys: int | None
    error: str | None = None


@dataclass
class Snapshot:
    at: float
    dcs: dict[str, DcStatus]
    registry: RegistryStatus
    cache: CacheStatus

    @property
    def healthy(self) -> bool:
        return all(d.up for d in self.dcs.values()) and self.registry.healthy

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["healthy"] = self.healthy
        for name, dc in self.dcs.items():
            data["dcs"][name]["up"] = dc.up
        data["registry"]["healthy"] = self.registry.healthy
        data["registry"]["znodes"] = self.registry.znodes
        return data


Pages = dict[tuple[str, str], Scrape | None]  # (dc, app) -> its endpoint's samples


def scrape_apps(settings: PhotonSettings) -> Pages:
    """Every app's endpoint, once (None: down, or its metrics are off)."""
    pages: Pages = {}
    for dc in settings.dcs:
        for app in APP_NAMES:
            port = settings.metrics_port(dc, app)
            url = f"http://{settings.stack.host}:{port}/metrics"
            pages[(dc, app)] = None if port is None else scrape(url)
    return pages


def collect(
    settings: PhotonSettings,
    previous: Snapshot | None = None,
    pages: Pages | None = None,
    probe: RegistryProbe | None = None,
) -> Snapshot:
    """A snapshot; ``pages``: the apps' endpoints when the caller scraped them already;
    ``probe``: a registry connection kept across snapshots (else one for this one)."""
    now = time.time()
    pages = scrape_apps(settings) if pages is None else pages
    dcs = {dc: _dc_status(settings, dc, now, previous, pages) for dc in settings.dcs}
    hits = sum(d.cache_hits for d in dcs.values())
    from_logs = sum(d.logs_found for d in dcs.values())
    if probe is None:
        with RegistryProbe(settings) as once:
            registry = once.status()
    else:
        registry = probe.status()
    return Snapshot(now, dcs, registry, _cache_status(settings, hits, from_logs))


def _dc_status(
    settings: PhotonSettings, dc: str, now: float, previous: Snapshot | None, pages: Pages
) -> DcStatus:
    scrapes = {app: pages.get((dc, app)) for app in APP_NAMES}
    joiner = scrapes[JOINER] or Scrape()
    both = Scrape.merged(*scrapes.values())
    joined = int(joiner.total("photon_clicks_total", dc=dc, outcome="joined"))
    rate = None
    before = previous.dcs.get(dc) if previous else None
    if previous is not None and before is not None and now > previous.at:
        rate = round(max(0, joined - before.joined_total) / (now - previous.at), 1)
    latency = "photon_join_latency_seconds"
    return DcStatus(
        dc=dc,
        apps={
            app: "no metrics"
            if settings.metrics_port(dc, app) is None
            else ("down" if scrapes[app] is None else "up")
            for app in APP_NAMES
        },
        input_lag={
            "queries": _input_lag(settings, dc, QUERY_READER, scrapes),
            "clicks": _input_lag(settings, dc, JOINER, scrapes),
        },
        joined_total=joined,
        joined_per_s=rate,
        retries_pending=int(joiner.total("photon_retries_pending", dc=dc)),
        unjoinable_total=int(joiner.total("photon_clicks_total", dc=dc, outcome="unjoinable")),
        too_old_total=int(joiner.total("photon_clicks_total", dc=dc, outcome="too_old")),
        quarantined_total=int(both.total("photon_quarantined_lines_total", dc=dc)),
        latency_p50_s=_rounded(joiner.quantile(latency, 0.5, dc=dc)),
        latency_p90_s=_rounded(joiner.quantile(latency, 0.9, dc=dc)),
        cache_hits=int(joiner.total("photon_cache_lookups_total", dc=dc, result="hit")),
        cache_misses=int(joiner.total("photon_cache_lookups_total", dc=dc, result="miss")),
        logs_found=int(joiner.total("photon_logmap_lookups_total", dc=dc, result="found")),
        spark_ui=spark_ui(settings, dc),
        processes={
            app: f"{info.labels['pid']}@{info.labels['host']}"
            for app in APP_NAMES
            for info in (scrapes[app] or Scrape()).matching("photon_app_info", dc=dc, app=app)[:1]
        },
    )


def _input_lag(
    settings: PhotonSettings, dc: str, app: str, scrapes: dict[str, Scrape | None]
) -> InputLag:
    if settings.metrics_port(dc, app) is None:
        local = query_reader_backlog if app == QUERY_READER else joiner_backlog
        return InputLag.from_checkpoint(local(settings, dc))
    return InputLag.from_metrics(scrapes[app], dc, app)


def spark_ui(settings: PhotonSettings, dc: str, timeout_s: float = 1.0) -> str | None:
    """The UI of ``dc``'s Spark application, when the one on its port is that DC's."""
    port = settings.spark_ui_port(dc)
    if not port:
        return None
    url = f"http://{settings.stack.host}:{port}"
    try:
        applications = f"{url}/api/v1/applications"  # http on the stack host: no file:
        with urllib.request.urlopen(applications, timeout=timeout_s) as answer:  # noqa: S310
            apps = json.load(answer)
    except (OSError, ValueError):
        return None
    mine = any(str(a.get("name", "")).endswith(f"-{dc}") for a in apps)
    return url if mine else None


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def _zk_node(host_port: str) -> ZkNode:
    host, _, port = host_port.rpartition(":")
    mode = srvr_mode(host, int(port))
    if mode == "down":
        return ZkNode(host_port, mode, None)
    znodes = None
    try:
        for line in four_letter_word(host, int(port), "mntr").splitlines():
            key, _, value = line.partition("\t")
            if key == "zk_znode_count" and value.strip().isdigit():
                znodes = int(value)
    except OSError:
        pass
    return ZkNode(host_port, mode, znodes)


class RegistryProbe:
    """The registry's state for snapshot after snapshot, over one connection.

    The dashboard and the run recorder take a snapshot every few seconds: a
    connection each time cost a ZooKeeper session each, and a line in the log.
    The connection is made on the first snapshot that finds a node serving and
    made again after an error; ``close()`` ends it.
    """

    def __init__(self, settings: PhotonSettings) -> None:
        self.settings = settings
        self._registry: IdRegistry | None = None

    def __enter__(self) -> RegistryProbe:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        if self._registry is not None:
            with contextlib.suppress(Exception):
                self._registry.close()
            self._registry = None

    def status(self) -> RegistryStatus:
        from photon.registry_access import connect_registry  # kazoo: only when asked

        settings = self.settings
        status = RegistryStatus(nodes=[_zk_node(h) for h in settings.zk_hosts])
        if not any(n.mode in ("leader", "follower", "standalone") for n in status.nodes):
            status.error = f"no ZooKeeper node of {', '.join(settings.zk_hosts)} serves"
            self.close()
            return status
        if self._registry is None:
            try:
                self._registry = connect_registry(settings)
            except Exception as exc:
                status.error = f"cannot connect to ZooKeeper: {exc}"
                return status
        registry = self._registry
        try:
            config = registry.sharding()
            status.epochs = [{"start_us": e.start_us, "shards": e.shards} for e in config.epochs]
            status.shards = [
                {
                    "shard": s.shard,
                    "ids": s.ids,
                    "gc_boundary_us": s.gc_boundary_us,
                    "buckets": s.buckets,
                }
                for s in registry.shard_stats()
            ]
            status.ids = sum(s["ids"] for s in status.shards)
        except Exception as exc:
            status.error = f"ZooKeeper: {exc}"
            self.close()  # connected again next time
        return status


def _cache_status(settings: PhotonSettings, hits: int, from_logs: int) -> CacheStatus:
    """The hit ratio: of the queries found, the share the cache served. A lookup of a
    query not read yet is in neither store, a miss of no store's making: its click
    retries, and counting each retry a miss made the ratio say how early clicks come."""
    ratio = round(hits / (hits + from_logs), 3) if hits + from_logs else None
    client = redis.Redis.from_url(settings.redis_url, socket_timeout=1, socket_connect_timeout=1)
    try:
        memory = client.info("memory")
        keys = int(client.dbsize())
    except redis.RedisError as exc:
        where = settings.redis_url.rsplit("@", 1)[-1].removeprefix("redis://")  # no password
        return CacheStatus(ratio, None, None, None, error=f"Redis at {where}: {exc}")
    finally:
        client.close()
    return CacheStatus(
        ratio,
        int(memory.get("used_memory", 0)),
        int(memory.get("maxmemory", 0)) or None,
        keys,
    )
