"""The DC pipelines as users run them: Spark apps started by `photon`, on the real stack.

The generator's manifest is the ground truth; the checks read the output
objects straight from the bucket.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from photon.gen.simulator import load_manifest
from photon.join.output import decode
from photon.stack.manager import LocalStack
from photon.stack.s3 import s3_client
from photon.storage import ObjectStore

pytestmark = pytest.mark.e2e

PHOTON = str(Path(sys.executable).parent / "photon")

FAST_RETRIES = {
    "PHOTON_RETRY__INITIAL_BACKOFF_S": "0.5",
    "PHOTON_RETRY__MAX_BACKOFF_S": "2",
    "PHOTON_RETRY__MAX_ATTEMPTS": "4",
    "PHOTON_RETRY__MAX_AGE_S": "6",
}


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


def photon(env: dict[str, str], *args: str, timeout: float = 400) -> str:
    result = subprocess.run(
        [PHOTON, "--log-level", "warning", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result.stdout


def output_rows(local_stack: LocalStack, env: dict[str, str], prefix: str) -> list[dict[str, Any]]:
    settings = local_stack.settings
    store = ObjectStore(s3_client(settings.s3_endpoint_url, settings.s3), env["PHOTON_S3__BUCKET"])
    rows: list[dict[str, Any]] = []
    for key in store.keys(prefix):
        data = store.get(key)
        assert data is not None
        rows += decode(data)
    return rows


def test_both_dcs_join_every_joinable_click_exactly_once(
    local_stack: LocalStack, env: dict[str, str]
) -> None:
    photon(env, "gen", "--queries", "1500", "--start", "2026-01-01T00:00:00", "--outage-s", "10")
    manifest = load_manifest(Path(env["PHOTON_LOGS_ROOT"]))
    photon(env, "run", "--until-idle", "6")

    joined = output_rows(local_stack, env, "joined/")
    counts = Counter(r["click_id"] for r in joined)
    assert [c for c, n in counts.items() if n > 1] == []
    assert set(counts) == set(manifest.expected_joins)
    assert all(manifest.expected_joins[r["click_id"]] == r["query_id"] for r in joined)
    assert all(r["joined_at_us"] > 0 and r["dc"] in ("a", "b") for r in joined)
    for dc in ("a", "b"):
        unjoinable = output_rows(local_stack, env, f"unjoinable/dc={dc}/")
        assert {r["click_id"] for r in unjoinable} == set(manifest.never_joinable)
        quarantined = output_rows(local_stack, env, f"quarantine/dc={dc}/")
        assert len(quarantined) == len(manifest.dcs[dc].malformed)


def test_a_joiner_killed_mid_stream_resumes_from_its_checkpoint_without_loss_or_duplicate(
    local_stack: LocalStack, env: dict[str, str]
) -> None:
    env = env | {"PHOTON_PIPELINE__MAX_BYTES_PER_BATCH": "8192", "PHOTON_DCS": "a"}
    photon(env, "gen", "--queries", "2000", "--start", "2026-01-01T00:00:00", "--outage-s", "0")
    manifest = load_manifest(Path(env["PHOTON_LOGS_ROOT"]))
    photon(env, "read-queries", "--dc", "a", "--until-idle", "3")

    joiner = subprocess.Popen(
        [PHOTON, "--log-level", "warning", "join", "--dc", "a"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # its own group: kill -9 takes the JVM and workers too
    )
    try:
        deadline = time.monotonic() + 240
        while len(output_rows(local_stack, env, "joined/")) < 150:
            assert joiner.poll() is None, "the joiner stopped before it was killed"
            assert time.monotonic() < deadline, "the joiner wrote too little in time"
            time.sleep(0.5)
    finally:
        os.killpg(joiner.pid, signal.SIGKILL)
        joiner.wait()
    before = len(output_rows(local_stack, env, "joined/"))
    assert before < len(manifest.expected_joins)  # killed mid-stream indeed

    photon(env, "join", "--dc", "a", "--until-idle", "6")
    joined = output_rows(local_stack, env, "joined/")
    counts = Counter(r["click_id"] for r in joined)
    assert [c for c, n in counts.items() if n > 1] == []
    assert set(counts) == set(manifest.expected_joins)
