"""The terminal dashboard of ``photon status``: one snapshot as rich tables.

Pure rendering: :func:`render` turns a :class:`~photon.tooling.observe.status.Snapshot`
into a renderable; ``photon status`` redraws it with ``rich.live.Live`` every
interval. Red marks what needs on-call's attention (an app down, a ZooKeeper
ensemble without one leader, a joiner lagging more than a minute).
"""

from __future__ import annotations

import time
from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text

from photon.apps import APP_NAMES
from photon.tooling.observe.status import InputLag, Snapshot

_LAGGING_S = 60.0
_DC_ROWS = (
    "query reader",
    "joiner",
    "process (pid@host)",
    "clicks behind",
    "queries behind",
    "joined/s",
    "joined since start",
    "retries pending",
    "unjoinable",
    "quarantined",
    "latency p50",
    "latency p90",
    "Spark UI",
)


def _number(value: float | int | None, unit: str = "") -> str:
    if value is None:
        return "-"
    if isinstance(value, float) and not value.is_integer():
        return f"{value:,.2f}{unit}"
    return f"{int(value):,}{unit}"


def _bytes(value: int | None) -> str:
    if value is None:
        return "-"
    size = float(value)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:,.1f} {unit}" if unit != "B" else f"{int(size)} B"
        size /= 1024
    return f"{value} B"


def _state(ok: bool, text: str) -> Text:
    return Text(text, style="green" if ok else "bold red")


def _lag(lag: InputLag) -> Text:
    """Bytes, files and seconds behind; "unknown" (red) when the app cannot say."""
    if lag.bytes is None or lag.lag_s is None:
        return _state(False, "unknown (app down)")
    return _state(
        lag.lag_s < _LAGGING_S, f"{_bytes(lag.bytes)}, {lag.files} files, {lag.lag_s:.1f} s"
    )


def render(snapshot: Snapshot) -> Group:
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(snapshot.at))
    title = Text.assemble(
        ("Photon status ", "bold"),
        (stamp, "dim"),
        "  ",
        _state(snapshot.healthy, "healthy" if snapshot.healthy else "NEEDS ATTENTION"),
    )
    # One column a DC, one row a measure: fits a terminal whatever the number of DCs.
    dcs = Table(title="pipelines", title_justify="left")
    dcs.add_column("")
    for name in snapshot.dcs:
        dcs.add_column(f"DC {name}", justify="right")
    rows: dict[str, list[Text | str]] = {label: [] for label in _DC_ROWS}
    for dc in snapshot.dcs.values():
        for app in APP_NAMES:
            rows[app.replace("-", " ")].append(_state(dc.apps[app] == "up", dc.apps[app]))
        rows["clicks behind"].append(_lag(dc.input_lag["clicks"]))
        rows["queries behind"].append(_lag(dc.input_lag["queries"]))
        rows["joined/s"].append(_number(dc.joined_per_s))
        rows["joined since start"].append(_number(dc.joined_total))  # a counter: from 0 again
        rows["process (pid@host)"].append(
            " ".join(sorted(set(dc.processes.values()))) or "-"  # one process for both apps
        )
        rows["retries pending"].append(_number(dc.retries_pending))
        rows["unjoinable"].append(_number(dc.unjoinable_total))
        rows["quarantined"].append(_number(dc.quarantined_total))
        rows["latency p50"].append(_number(dc.latency_p50_s, " s"))
        rows["latency p90"].append(_number(dc.latency_p90_s, " s"))
        rows["Spark UI"].append(dc.spark_ui or "-")
    for label, cells in rows.items():
        dcs.add_row(label, *cells)
    registry = snapshot.registry
    zk = Table(title="registry (ZooKeeper)", title_justify="left")
    zk.add_column("node")
    zk.add_column("mode")
    zk.add_column("znodes", justify="right")
    for node in registry.nodes:
        zk.add_row(node.host, _state(node.mode in ("leader", "follower", "standalone"), node.mode),
                   _number(node.znodes))  # fmt: skip
    shards = Table(title=_shards_title(registry.epochs, registry.ids), title_justify="left")
    for column in ("shard", "ids", "buckets", "GC boundary"):
        shards.add_column(column, justify="right")
    for shard in registry.shards:
        boundary = shard["gc_boundary_us"]
        shards.add_row(
            str(shard["shard"]),
            _number(shard["ids"]),
            _number(shard["buckets"]),
            time.strftime("%m-%d %H:%M:%S", time.gmtime(boundary / 1e6)) if boundary else "-",
        )
    cache = snapshot.cache
    cache_table = Table(title="cache (Redis)", title_justify="left")
    for column in ("hit ratio", "memory used", "memory limit", "keys"):
        cache_table.add_column(column, justify="right")
    cache_table.add_row(
        "-" if cache.hit_ratio is None else f"{cache.hit_ratio:.1%}",
        _bytes(cache.memory_used_bytes),
        _bytes(cache.memory_max_bytes),
        _number(cache.keys),
    )
    parts: list[Any] = [title, dcs, zk, shards, cache_table]
    for problem in (registry.error, cache.error):
        if problem:
            parts.append(Text(f"problem: {problem}", style="bold red"))
    ensemble = _state(
        registry.healthy,
        "ensemble: one leader, the rest followers"
        if registry.healthy
        else "ensemble: NOT one leader and followers",
    )
    parts.insert(3, ensemble)
    return Group(*parts)


def _shards_title(epochs: list[dict[str, int]], ids: int) -> str:
    shards = " → ".join(str(e["shards"]) for e in epochs) or "-"
    return f"shards per epoch: {shards}; ids held: {ids:,}"
