"""Fixtures of the e2e tests."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

from photon.storage import s3_client
from photon.tooling.stack.manager import LocalStack
from tests.e2e.helpers import FAST_RETRIES


@pytest.fixture
def env(
    local_stack: LocalStack, stack_environment: dict[str, str], tmp_path: Path
) -> dict[str, str]:
    """The shared stack, with this test's own logs, state, registry root, bucket and cache keys.

    Tests generate logs with the same seed: cached queries of one must not join
    another's clicks whose query never arrives.
    """
    bucket = f"photon-e2e-{uuid.uuid4().hex[:10]}"
    s3_client(local_stack.settings.s3_endpoint_url, local_stack.settings.s3).create_bucket(
        Bucket=bucket
    )
    clean = {k: v for k, v in os.environ.items() if not k.startswith("PHOTON_")}
    return (
        clean
        | stack_environment
        | FAST_RETRIES
        | {
            "PHOTON_LOGS_ROOT": str(tmp_path / "logs"),
            "PHOTON_PIPELINE__STATE_ROOT": str(tmp_path / "state"),
            "PHOTON_ZOOKEEPER__ROOT": f"/photon-e2e-{uuid.uuid4().hex[:10]}",
            "PHOTON_S3__BUCKET": bucket,
            "PHOTON_REDIS__KEY_PREFIX": f"{bucket}:q",
        }
    )
