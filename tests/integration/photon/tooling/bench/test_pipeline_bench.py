"""The benchmarks' output times: each joined object's from its joiner's batch line."""

from __future__ import annotations

import json
import time
import uuid
from datetime import datetime
from pathlib import Path

import pytest

from photon.apps import JOINER
from photon.storage import ObjectStore, s3_client
from photon.tooling.bench.pipeline import BatchLogTimes
from photon.tooling.stack.manager import LocalStack

pytestmark = pytest.mark.integration


@pytest.fixture
def store(local_stack: LocalStack) -> ObjectStore:
    """An empty bucket of its own."""
    settings = local_stack.settings
    client = s3_client(settings.s3_endpoint_url, settings.s3)
    bucket = f"photon-w-{uuid.uuid4().hex[:12]}"
    client.create_bucket(Bucket=bucket)
    return ObjectStore(client, bucket)


def test_batch_log_times_take_each_object_s_time_from_its_joiner_s_batch_line(
    store: ObjectStore, local_stack: LocalStack, tmp_path: Path
) -> None:
    """Read after the run, nothing listed during (``photon bench pipeline`` and
    ``compare``)."""
    settings = local_stack.settings.model_copy(
        update={
            "dcs": ["a", "b"],
            "pipeline": local_stack.settings.pipeline.model_copy(update={"state_root": tmp_path}),
        }
    )
    logged = {("a", "000000000001"): "2026-12-06T01:00:30.378314+00:00",
              ("a", "retry-000000000002"): "2026-12-06T01:00:31.5+00:00",
              ("b", "000000000001"): "2026-12-06T01:00:32.25+00:00"}  # fmt: skip
    for dc in ("a", "b"):
        log = settings.pipeline_dir(dc, JOINER) / "app.log"
        log.parent.mkdir(parents=True)
        lines = ["Spark's own line, not JSON"] + [
            json.dumps({"event": "joiner.batch", "dc": dc, "batch": batch, "timestamp": at})
            for (line_dc, batch), at in logged.items()
            if line_dc == dc
        ]
        log.write_text("\n".join(lines) + "\n")
    keys = {
        "joined/dc=a/hour=2026-12-06T01/a-1/000000000001.g000.parquet": ("a", "000000000001"),
        "joined/dc=a/hour=2026-12-06T01/a-1/000000000001.g001.parquet": ("a", "000000000001"),
        "joined/dc=a/hour=2026-12-06T00/a-1/retry-000000000002.parquet": (
            "a", "retry-000000000002"),
        "joined/dc=b/hour=2026-12-06T01/b-1/000000000001.parquet": ("b", "000000000001"),
    }  # fmt: skip
    unlogged = "joined/dc=b/hour=2026-12-06T01/b-1/000000000002.parquet"  # app killed first
    for key in [*keys, unlogged]:
        store.put(key, b"x")
    before_us = time.time_ns() // 1000
    with BatchLogTimes(settings, store) as times:
        pass
    for key, batch in keys.items():
        expected = datetime.fromisoformat(logged[batch]).timestamp()
        assert times.output_us[key] == round(expected * 1e6)
    assert times.output_us[unlogged] >= before_us  # when it was found: after the run
