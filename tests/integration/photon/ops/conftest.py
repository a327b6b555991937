"""Fixtures of the operations' integration tests."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from photon.tooling.stack.manager import LocalStack
from registry import IdRegistry


@pytest.fixture
def registry(local_stack: LocalStack) -> Iterator[IdRegistry]:
    """A 4-shard registry under a root of this test's own, dropped afterwards."""
    reg = IdRegistry.connect(
        local_stack.settings.zk_hosts, f"/photon-ops-{uuid.uuid4().hex[:12]}", default_shards=4
    )
    try:
        yield reg
    finally:
        reg.drop()
        reg.close()
