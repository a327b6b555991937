"""Injected faults in real processes and against the real S3 endpoint."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid

import pytest

from photon.faults import CRASH_EXIT_CODE, FaultInjector
from photon.settings import FaultSettings
from photon.storage import ObjectStore, s3_client
from photon.tooling.stack.manager import LocalStack

pytestmark = pytest.mark.integration


def test_an_injected_crash_is_a_hard_exit_with_the_status_of_a_killed_process() -> None:
    code = (
        "from photon.faults import FaultInjector; from photon.settings import load_settings;"
        "FaultInjector(load_settings().faults).after_commit('000000000001');"
        "print('not reached')"
    )
    env = {"PHOTON_FAULTS__CRASH_AFTER_COMMIT_P": "1"}
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **env},
        check=False,
    )
    assert result.returncode == CRASH_EXIT_CODE
    assert "not reached" not in result.stdout


def test_injected_s3_errors_are_absorbed_by_the_stores_bounded_retries(
    local_stack: LocalStack,
) -> None:
    settings = local_stack.settings
    client = s3_client(settings.s3_endpoint_url, settings.s3)
    bucket = f"photon-f-{uuid.uuid4().hex[:12]}"
    client.create_bucket(Bucket=bucket)
    store = ObjectStore(client, bucket, attempts=10, max_backoff_s=0.05)
    store.faults = FaultInjector(FaultSettings(s3_error_p=0.3, seed=3))
    for n in range(20):
        assert store.put(f"k/{n}", b"x" * n, if_absent=True)
    assert sorted(store.keys("k/")) == sorted(f"k/{n}" for n in range(20))
    assert all(store.get(f"k/{n}") == b"x" * n for n in range(20))
