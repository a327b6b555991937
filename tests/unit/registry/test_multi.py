"""The registry's multi is byte for byte the request kazoo's TransactionRequest sends."""

from __future__ import annotations

import pytest
from kazoo.client import KazooClient
from kazoo.protocol.serialization import Transaction
from kazoo.security import ACL, make_digest_acl

from registry.multi import MultiBuilder, check_path

pytestmark = pytest.mark.unit

_BUCKET = "/photon/ids/3/493375/1776151"
_IDS = ["10.1.2.3:4242:1776151000123456", "10.1.2.3:4242:1776151000123457"]


def _client(hosts: str = "127.0.0.1:1", acl: list[ACL] | None = None) -> KazooClient:
    return KazooClient(hosts=hosts, default_acl=acl)  # never started: nothing is sent


def _kazoo_bytes(client: KazooClient, token: bytes) -> bytes:
    txn = client.transaction()
    txn.check("/photon/config/sharding", 7)
    txn.check("/photon/gc/3", 0)
    for name in _IDS:
        txn.create(f"{_BUCKET}/{name}", token)
    return bytes(Transaction(txn.operations).serialize())


def _our_bytes(client: KazooClient, token: bytes) -> bytes:
    multi = MultiBuilder(client)
    multi.check("/photon/config/sharding", 7)
    multi.check("/photon/gc/3", 0)
    for name in _IDS:
        multi.create(check_path(_BUCKET), name, token)
    return bytes(multi.request().serialize())


@pytest.mark.parametrize(
    ("hosts", "acl"),
    [
        ("127.0.0.1:1", None),
        ("127.0.0.1:1/tenant/one", None),
        ("127.0.0.1:1", [make_digest_acl("photon", "secret", all=True)]),
    ],
    ids=["open acl", "chroot", "digest acl"],
)
def test_the_request_is_what_kazoo_would_send(hosts: str, acl: list[ACL] | None) -> None:
    client = _client(hosts, acl)
    token = b"a/a-9c44a79a/000000000012"
    assert _our_bytes(client, token) == _kazoo_bytes(client, token)


def test_an_empty_value_is_encoded_as_kazoo_does() -> None:
    client = _client()
    assert _our_bytes(client, b"") == _kazoo_bytes(client, b"")


@pytest.mark.parametrize("path", ["photon/ids", "/photon//ids", "/photon/ids/", "/photon/./ids"])
def test_a_path_kazoo_would_rewrite_is_refused(path: str) -> None:
    with pytest.raises(ValueError, match="normalized"):
        check_path(path)
    with pytest.raises(ValueError, match="normalized"):
        MultiBuilder(_client()).check(path, 0)


@pytest.mark.parametrize("name", ["", "a/b", "/", ".", ".."])
def test_a_create_name_must_be_one_znode_name(name: str) -> None:
    with pytest.raises(ValueError, match="znode name"):
        MultiBuilder(_client()).create(_BUCKET, name, b"token")
