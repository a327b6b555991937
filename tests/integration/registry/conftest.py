from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator

import pytest

from photon.tooling.stack.manager import LocalStack
from registry import IdRegistry

Connect = Callable[..., IdRegistry]


@pytest.fixture
def registry_root() -> str:
    return f"/photon-test-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def connect(local_stack: LocalStack, registry_root: str) -> Iterator[Connect]:
    """Open registries on the shared ensemble under this test's own root; closed after."""
    opened: list[IdRegistry] = []

    def open_registry(**kwargs: object) -> IdRegistry:
        kwargs.setdefault("default_shards", 4)
        reg = IdRegistry.connect(local_stack.settings.zk_hosts, registry_root, **kwargs)  # type: ignore[arg-type]
        # A new session may land on a follower behind the leader: start it caught up,
        # so what the test's other clients wrote before is there to read.
        reg._zk.sync(registry_root)
        opened.append(reg)
        return reg

    yield open_registry
    for reg in opened:
        reg.close()


@pytest.fixture
def registry(connect: Connect) -> IdRegistry:
    return connect()
