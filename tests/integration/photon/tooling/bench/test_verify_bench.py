"""``photon bench verify`` on the real stack, small: what it writes and measures, and that
it leaves no bucket or registry root behind (its figures are for the benchmark run)."""

from __future__ import annotations

import pytest
from kazoo.client import KazooClient

from photon.storage import s3_client
from photon.tooling.bench import verify as verify_bench
from photon.tooling.stack.manager import LocalStack

pytestmark = pytest.mark.integration


def test_the_benchmark_verifies_the_same_window_at_both_sizes_and_cleans_up(
    local_stack: LocalStack,
) -> None:
    settings = local_stack.settings
    client = s3_client(settings.s3_endpoint_url, settings.s3)
    buckets_before = {b["Name"] for b in client.list_buckets()["Buckets"]}
    roots_before = zk_roots(settings.zk_hosts)
    steps: list[str] = []

    result = verify_bench.run(
        settings, hours=1, scale=3, batches_per_hour=4, clicks_per_batch=5, runs=2,
        on_step=steps.append,
    )  # fmt: skip

    data = result.to_dict()
    small, large = data["sizes"]
    assert (small["hours"], large["hours"]) == (1, 3)
    assert (small["objects"], large["objects"]) == (2 * 4, 3 * 2 * 4)  # DCs x batches x hours
    assert small["window_rows"] == large["window_rows"] == 2 * 4 * 5
    assert len(small["verify_s"]) == len(large["read_all_s"]) == 2
    assert data["output_growth"] == 3.0
    assert data["verify_ratio"] > 0 and isinstance(data["targets"]["verify_ratio_le_1_5"], bool)
    assert any("3x" in s for s in steps)
    assert {b["Name"] for b in client.list_buckets()["Buckets"]} == buckets_before
    assert zk_roots(settings.zk_hosts) <= roots_before


def zk_roots(hosts: list[str]) -> set[str]:
    zk = KazooClient(hosts=",".join(hosts))
    zk.start(timeout=10)
    try:
        return set(zk.get_children("/"))
    finally:
        zk.stop()
        zk.close()
