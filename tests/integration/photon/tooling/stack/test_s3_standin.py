"""The native stack's S3 stand-in over HTTP: a conditional put is atomic, as on S3."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import pytest
from botocore.exceptions import ClientError

from photon.settings import S3Settings
from photon.storage import ObjectStore, s3_client
from photon.tooling.stack.ports import free_ports

pytestmark = pytest.mark.integration


@pytest.fixture
def store() -> Iterator[ObjectStore]:
    [port] = free_ports(1)
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "photon.tooling.stack.s3_standin",
            "-H",
            "127.0.0.1",
            "-p",
            str(port),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        client = s3_client(f"http://127.0.0.1:{port}", S3Settings(), timeout_s=5, attempts=1)
        deadline = time.monotonic() + 30
        while True:
            try:
                client.create_bucket(Bucket="standin")
                break
            except Exception:
                assert time.monotonic() < deadline, "the stand-in did not start"
                time.sleep(0.2)
        yield ObjectStore(client, "standin")
    finally:
        server.terminate()
        server.wait(timeout=10)


def test_of_many_writers_racing_for_a_key_exactly_one_wins_and_its_bytes_stay(
    store: ObjectStore,
) -> None:
    for key in range(20):
        wins: list[int] = []
        errors: list[BaseException] = []

        def put(
            writer: int,
            key: int = key,
            wins: list[int] = wins,
            errors: list[BaseException] = errors,
        ) -> None:
            try:
                if store.put(f"k{key}", b"%d" % writer * 200_000, if_absent=True):
                    wins.append(writer)
            except (ClientError, OSError) as exc:
                errors.append(exc)

        threads = [threading.Thread(target=put, args=(n,)) for n in range(12)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors == [] and len(wins) == 1, (key, wins, errors)
        assert store.get(f"k{key}") == b"%d" % wins[0] * 200_000
