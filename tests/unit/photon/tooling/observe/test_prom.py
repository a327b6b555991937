"""Parsing an app's /metrics text, summing series and estimating histogram quantiles."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from photon.tooling.observe.prom import Scrape, bucket_quantile, parse

pytestmark = pytest.mark.unit


def exposition() -> str:
    """What prometheus_client itself serves for a few of our series."""
    registry = CollectorRegistry()
    clicks = Counter("photon_clicks_total", "c", ["dc", "outcome"], registry=registry)
    clicks.labels("a", "joined").inc(7)
    clicks.labels("a", "unjoinable").inc(2)
    clicks.labels("b", "joined").inc(5)
    latency = Histogram(
        "photon_join_latency_seconds", "l", ["dc"], buckets=(1, 2, 4), registry=registry
    )
    for seconds in (0.5, 1.5, 1.5, 3.0):
        latency.labels("a").observe(seconds)
    return generate_latest(registry).decode()


def test_totals_sum_the_series_whose_labels_match() -> None:
    scrape = parse(exposition())
    assert scrape.total("photon_clicks_total", outcome="joined") == 12
    assert scrape.total("photon_clicks_total", dc="a") == 9
    assert scrape.total("photon_clicks_total", dc="a", outcome="joined") == 7
    assert scrape.total("photon_clicks_total", dc="c") == 0
    assert "photon_join_latency_seconds_bucket" in scrape.names()


def test_a_merge_counts_each_series_once_when_two_endpoints_serve_one_registry() -> None:
    # A DC's query reader and joiner in one process serve the same registry twice.
    same = Scrape.merged(parse(exposition()), parse(exposition()), None)
    assert same.total("photon_clicks_total", dc="a") == 9
    other = CollectorRegistry()
    Counter("photon_clicks_total", "c", ["dc", "outcome"], registry=other).labels("c", "x").inc()
    apart = Scrape.merged(parse(exposition()), parse(generate_latest(other).decode()))
    assert apart.total("photon_clicks_total") == 15


def test_quantiles_interpolate_inside_buckets_like_promql() -> None:
    scrape = parse(exposition())
    # 4 observations: le=1 → 1, le=2 → 3, le=4 → 4. The median (rank 2) lies in (1, 2].
    assert scrape.quantile("photon_join_latency_seconds", 0.5, dc="a") == pytest.approx(1.5)
    # p90 (rank 3.6) lies in (2, 4]: 2 + 2 * 0.6
    assert scrape.quantile("photon_join_latency_seconds", 0.9, dc="a") == pytest.approx(3.2)
    assert scrape.quantile("photon_join_latency_seconds", 0.5, dc="b") is None


def test_a_quantile_beyond_the_last_finite_bucket_is_that_bound() -> None:
    assert bucket_quantile(0.99, [(1.0, 1.0), (float("inf"), 10.0)]) == 1.0
    assert bucket_quantile(0.5, []) is None
    assert bucket_quantile(0.5, [(1.0, 0.0), (float("inf"), 0.0)]) is None


def test_a_quantile_outside_0_1_is_refused() -> None:
    with pytest.raises(ValueError, match="between 0 and 1"):
        parse(exposition()).quantile("photon_join_latency_seconds", 1.5)
