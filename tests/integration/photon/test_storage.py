"""The object store over HTTP: write-once puts, listing, and bounded retries."""

from __future__ import annotations

import time
import uuid

import pytest

from photon.settings import S3Settings
from photon.storage import ObjectStore, ObjectStoreError, s3_client
from photon.tooling.stack.manager import LocalStack
from photon.tooling.stack.ports import free_ports

pytestmark = pytest.mark.integration


@pytest.fixture
def store(local_stack: LocalStack) -> ObjectStore:
    settings = local_stack.settings
    client = s3_client(settings.s3_endpoint_url, settings.s3)
    bucket = f"photon-s-{uuid.uuid4().hex[:12]}"
    client.create_bucket(Bucket=bucket)
    return ObjectStore(client, bucket)


def test_put_if_absent_keeps_the_first_write(store: ObjectStore) -> None:
    assert store.put("a/1", b"first", if_absent=True) is True
    assert store.put("a/1", b"second", if_absent=True) is False
    assert store.get("a/1") == b"first"
    assert store.put("a/1", b"third") is True
    assert store.get("a/1") == b"third"
    assert store.get("a/missing") is None and not store.exists("a/missing")


def test_keys_pages_through_long_listings(store: ObjectStore) -> None:
    for n in range(1_005):
        store.put(f"p/{n:05d}", b"x")
    store.put("q/other", b"x")
    keys = list(store.keys("p/"))
    assert keys == [f"p/{n:05d}" for n in range(1_005)]
    store.delete(keys)
    assert list(store.keys("p/")) == []


def test_an_endpoint_that_is_down_fails_within_the_retry_limit() -> None:
    port = free_ports(1)[0]
    client = s3_client(f"http://127.0.0.1:{port}", S3Settings(), timeout_s=0.5, attempts=1)
    store = ObjectStore(client, "photon", attempts=3, max_backoff_s=0.2)
    started = time.monotonic()
    with pytest.raises(ObjectStoreError, match="failed 3 times"):
        store.put("k", b"v")
    assert time.monotonic() - started < 10


def test_listing_keys_and_folders(store: ObjectStore) -> None:
    for key in ("j/dc=a/x/000002", "j/dc=a/x/000001", "j/dc=a/y/000001", "j/dc=b/z/1", "k/1"):
        store.put(key, b"x")
    assert list(store.keys("j/dc=a/x/")) == ["j/dc=a/x/000001", "j/dc=a/x/000002"]
    assert store.folders("j/") == ["j/dc=a/", "j/dc=b/"]
    assert store.folders("j/dc=a/") == ["j/dc=a/x/", "j/dc=a/y/"]
    assert store.folders("j/dc=b/z/") == []
