"""The resharding rollout (photon.ops.reshard) on the real ensemble."""

from __future__ import annotations

import json
import time

import pytest

from photon.ops.params import ReshardParams
from photon.ops.reshard import PipelinesBehindError, apply, plan, rollout_status
from registry import IdRegistry
from registry.sharding import ShardingConfig

pytestmark = pytest.mark.integration


def _epochs(registry: IdRegistry) -> int:
    """The epochs in ZooKeeper now (the client's watched copy may lag a moment)."""
    data, stat = registry._zk.get(registry.layout.config)
    return len(ShardingConfig.from_json(data, stat.version).epochs)


def _request(registry: IdRegistry) -> object:
    return plan(registry, ReshardParams.parse({"shards": 6, "skew_s": 3.0}), 2.0)


def test_no_epoch_is_appended_while_a_pipeline_has_not_picked_up_the_current_config(
    registry: IdRegistry,
) -> None:
    registry.announce("joiner-a-current", {"app": "joiner", "dc": "a"})
    first = apply(registry, _request(registry))  # type: ignore[arg-type]
    # A pipeline whose session still says the config before that rollout.
    stale = f"{registry.root}/members/joiner-b-stale"
    registry._zk.create(stale, json.dumps({"config_version": first.config_version - 1}).encode(),
                        ephemeral=True)  # fmt: skip
    deadline = time.monotonic() + 5
    while (
        rollout_status(registry, first.config_version).members.get("joiner-a-current")
        != first.config_version
        and time.monotonic() < deadline
    ):
        time.sleep(0.05)  # the announcing client rewrites its node on the config change

    with pytest.raises(PipelinesBehindError, match="joiner-b-stale still use"):
        apply(registry, _request(registry))  # type: ignore[arg-type]
    assert _epochs(registry) == 2  # nothing appended

    registry._zk.delete(stale)  # that pipeline stopped: the next rollout may go
    second = apply(registry, _request(registry))  # type: ignore[arg-type]
    assert second.config_version > first.config_version
    assert second.epochs == _epochs(registry) == 3
