"""The dashboard draws a snapshot: every DC's measures, the ensemble, shards and cache."""

from __future__ import annotations

import pytest
from rich.console import Console

from photon.tooling.observe.dashboard import render
from photon.tooling.observe.status import (
    CacheStatus,
    DcStatus,
    InputLag,
    RegistryStatus,
    Snapshot,
    ZkNode,
)

pytestmark = pytest.mark.unit


def dc(name: str, joiner: str = "up", lag_s: float = 1.0) -> DcStatus:
    clicks = InputLag(4096, 2, lag_s, "metrics") if joiner == "up" else InputLag.unknown()
    return DcStatus(
        dc=name,
        apps={"query-reader": "up", "joiner": joiner},
        input_lag={"queries": InputLag(2048, 1, 0.5, "metrics"), "clicks": clicks},
        joined_total=12345,
        joined_per_s=321.5,
        retries_pending=7,
        unjoinable_total=3,
        too_old_total=0,
        quarantined_total=4,
        latency_p50_s=1.25,
        latency_p90_s=2.5,
        cache_hits=90,
        cache_misses=10,
        logs_found=10,
    )


def snapshot(
    *dcs: DcStatus, modes: tuple[str, ...] = ("leader", "follower", "follower")
) -> Snapshot:
    nodes = [ZkNode(f"127.0.0.1:{2181 + i}", mode, 120) for i, mode in enumerate(modes)]
    registry = RegistryStatus(
        nodes=nodes,
        epochs=[{"start_us": 0, "shards": 8}, {"start_us": 1, "shards": 10}],
        shards=[{"shard": 0, "ids": 4321, "gc_boundary_us": 0, "buckets": 3}],
        ids=4321,
    )
    cache = CacheStatus(0.9, 3 << 20, 256 << 20, 999)
    return Snapshot(1_800_000_000.0, {d.dc: d for d in dcs}, registry, cache)


def screen(snap: Snapshot) -> str:
    console = Console(width=100, record=True, color_system=None)
    console.print(render(snap))
    return console.export_text()


def test_a_healthy_platform_shows_every_measure() -> None:
    text = screen(snapshot(dc("a"), dc("b")))
    assert "healthy" in text and "NEEDS ATTENTION" not in text
    expected = ["DC a", "DC b", "321.50", "12,345", "1.25 s", "2.50 s", "4.0 KiB, 2 files"]
    expected += ["leader", "follower", "8 → 10", "4,321", "90.0%", "3.0 MiB", "256.0 MiB"]
    for part in expected:
        assert part in text, part


def test_a_down_joiner_or_a_leaderless_ensemble_needs_attention() -> None:
    text = screen(snapshot(dc("a"), dc("b", joiner="down")))
    assert "NEEDS ATTENTION" in text
    assert "unknown (app down)" in text  # a down app's lag is not "0 B": it cannot be known
    text = screen(snapshot(dc("a"), modes=("follower", "down", "follower")))
    assert "NEEDS ATTENTION" in text and "NOT one leader" in text


def test_the_json_form_carries_the_derived_flags() -> None:
    data = snapshot(dc("a"), dc("b", joiner="down")).to_dict()
    assert data["healthy"] is False
    assert data["dcs"]["a"]["up"] is True and data["dcs"]["b"]["up"] is False
    assert data["registry"]["healthy"] is True and data["registry"]["znodes"] == 120


def test_input_lag_comes_from_the_apps_own_gauges_and_is_unknown_without_them() -> None:
    from photon.tooling.observe.prom import parse

    page = parse(
        'photon_input_behind_bytes{dc="a",app="joiner"} 4096\n'
        'photon_input_behind_files{dc="a",app="joiner"} 2\n'
        'photon_input_lag_seconds{dc="a",app="joiner"} 75.25\n'
        'photon_input_behind_bytes{dc="a",app="query-reader"} 10\n'
    )
    assert InputLag.from_metrics(page, "a", "joiner") == InputLag(4096, 2, 75.25, "metrics")
    # the query reader's gauges are incomplete (not measured yet), the app down, another DC's
    for lag in (
        InputLag.from_metrics(page, "a", "query-reader"),
        InputLag.from_metrics(None, "a", "joiner"),
        InputLag.from_metrics(page, "b", "joiner"),
    ):
        assert lag == InputLag.unknown() and lag.bytes is None
