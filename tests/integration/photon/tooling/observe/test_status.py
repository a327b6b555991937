"""What ``photon status`` and the run recorder read of the registry and the cache."""

from __future__ import annotations

import pytest

from photon.tooling.observe.status import RegistryProbe, _cache_status
from photon.tooling.stack.manager import LocalStack
from photon.tooling.stack.ports import free_ports
from tests.conftest import settings_from_env

pytestmark = pytest.mark.integration


def test_the_registry_is_read_over_one_session_for_every_snapshot(
    local_stack: LocalStack,
) -> None:
    with RegistryProbe(local_stack.settings) as probe:
        first = probe.status()
        session = probe._registry
        assert first.error is None and first.shards and session is not None
        for _ in range(3):
            assert probe.status().error is None
        assert probe._registry is session  # not a connection a snapshot
    assert probe._registry is None  # closed with the probe


def test_a_cache_that_does_not_answer_is_named_as_redis(stack_environment: dict[str, str]) -> None:
    [port] = free_ports(1)  # nothing listens there
    settings = settings_from_env(
        {**stack_environment, "PHOTON_REDIS__URL": f"redis://user:secret@127.0.0.1:{port}/0"}
    )
    status = _cache_status(settings, hits=0, from_logs=0)
    assert status.error is not None
    assert status.error.startswith(f"Redis at 127.0.0.1:{port}/0: ")
    assert "secret" not in status.error
    # The ratio is of the queries found, the cache's share: said even with Redis down.
    assert _cache_status(settings, hits=90, from_logs=10).hit_ratio == 0.9
