"""Fixtures shared by the integration tests of the operations (``photon.ops``) and the DAGs."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from photon.registry_access import connect_registry
from photon.settings import load_settings
from photon.storage import ObjectStore, s3_client
from photon.tooling.stack.manager import LocalStack
from tests.integration.ops_pipelines import OpsPhoton, S, ops_environment
from tests.integration.photon.join.conftest import Clock


@pytest.fixture
def ops_photon(
    local_stack: LocalStack,
    stack_environment: dict[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[OpsPhoton]:
    env = ops_environment(stack_environment, tmp_path)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    settings = load_settings()
    s3_client(settings.s3_endpoint_url, settings.s3).create_bucket(Bucket=settings.s3.bucket)
    store = ObjectStore.from_settings(settings)
    registry = connect_registry(settings)
    start_us = time.time_ns() // 1000 - 20 * 60 * S  # a past window, well inside retention
    # The pipelines run after the events (joined_at >= click time, as in a live run).
    photon = OpsPhoton(settings, store, registry, start_us, Clock(start_us + 300 * S))
    try:
        yield photon
    finally:
        photon.close()
        registry.drop()
        registry.close()
