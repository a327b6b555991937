from __future__ import annotations

import uuid

import pytest

from photon.tooling.chaos.stack_faults import add_shards
from photon.tooling.stack.manager import LocalStack
from registry import IdRegistry

pytestmark = pytest.mark.integration


def test_an_epoch_appended_by_another_fault_meanwhile_is_read_again_and_built_on(
    local_stack: LocalStack, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = f"/photon-test-{uuid.uuid4().hex[:12]}"
    hosts = local_stack.settings.zk_hosts
    fault, other = (IdRegistry.connect(hosts, root, default_shards=4) for _ in range(2))
    try:
        made = fault._ensure_shard
        raced: list[int] = []

        def other_appends_first(shard: int) -> None:
            # Between the fault's read of the config and its compare-and-set.
            if not raced:
                raced.append(other.append_epoch(6, max_skew_s=1).version)
            made(shard)

        monkeypatch.setattr(fault, "_ensure_shard", other_appends_first)
        _, after = add_shards(fault, 2, max_skew_s=2)
        assert raced  # the first try lost the race
        assert [e.shards for e in after.epochs] == [4, 6, 8]
        assert after.version > raced[0]
    finally:
        fault.close()
        other.close()
