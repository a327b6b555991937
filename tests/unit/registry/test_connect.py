"""Connecting to an ensemble that is not there: one clear error at once, no kazoo retries."""

from __future__ import annotations

import socket

import pytest
from kazoo.client import KazooClient

from registry import IdRegistry, RegistryUnavailableError
from registry.client import any_listening

pytestmark = pytest.mark.unit


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])  # closed again when the block ends


def test_any_listening_finds_a_server_among_the_hosts() -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        closed = _closed_port()
        assert any_listening([f"127.0.0.1:{closed}", f"127.0.0.1:{port}"], timeout_s=1)
        assert any_listening([f"127.0.0.1:{port}/photon-chroot"], timeout_s=1)
    assert not any_listening([f"127.0.0.1:{closed}", "127.0.0.1:not-a-port"], timeout_s=1)


def test_connecting_where_nothing_listens_fails_at_once_with_what_to_do(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def start(*_: object, **__: object) -> None:
        raise AssertionError("kazoo was started: it would retry until its timeout")

    monkeypatch.setattr(KazooClient, "start", start)
    hosts = [f"127.0.0.1:{_closed_port()}", f"127.0.0.1:{_closed_port()}"]
    with pytest.raises(RegistryUnavailableError, match="accepts connections") as info:
        IdRegistry.connect(hosts, "/photon")
    assert "is the ensemble up" in str(info.value) and hosts[0] in str(info.value)
