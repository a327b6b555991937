"""The DC pipelines as users run them: Spark apps started by `photon`, on the real stack.

The generator's manifest is the ground truth; the checks read the output
objects straight from the bucket. Joiners killed mid-stream and resumed from
their checkpoints are the chaos test's (tests/e2e/test_chaos.py: four kills,
no duplicate at any sample, nothing missing but what recovery restores); one DC
killed under `photon run --dcs a,b` while the other joins on, and back by itself,
is the on-call walkthrough's (tests/e2e/test_airflow_ui.py).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from photon.join.output import decode
from photon.storage import ObjectStore, s3_client
from photon.tooling.gen.simulator import load_manifest
from photon.tooling.stack.manager import LocalStack
from tests.e2e.helpers import PHOTON, photon

pytestmark = pytest.mark.e2e


def output_rows(local_stack: LocalStack, env: dict[str, str], prefix: str) -> list[dict[str, Any]]:
    settings = local_stack.settings
    store = ObjectStore(s3_client(settings.s3_endpoint_url, settings.s3), env["PHOTON_S3__BUCKET"])
    rows: list[dict[str, Any]] = []
    for key in store.keys(prefix):
        data = store.get(key)
        assert data is not None
        rows += decode(data)
    return rows


def _attempts(retry_store: Path, click_id: str) -> int:
    """How often the joiner tried a click its retry store holds (0: not there yet)."""
    if not retry_store.exists():
        return 0
    with contextlib.closing(sqlite3.connect(retry_store, timeout=10)) as db:
        row = db.execute("SELECT attempts FROM retries WHERE click_id = ?", (click_id,)).fetchone()
    return int(row[0]) if row else 0


def _service_pid(local_stack: LocalStack, name: str) -> int:
    [service] = [s for s in local_stack.status().services if s.name == name]
    assert service.pid is not None
    return service.pid


def test_with_redis_killed_mid_run_the_join_goes_on_through_the_logs(
    local_stack: LocalStack, env: dict[str, str], tmp_path: Path
) -> None:
    env = env | {
        "PHOTON_PIPELINE__MAX_BYTES_PER_BATCH": "16384",
        "PHOTON_PIPELINE__JOINER_MAX_BYTES_PER_BATCH": "16384",
        "PHOTON_DCS": "a",
        # A click may expire only once the query reader has read past it (docs/join.md):
        # the never-joinable ones go after 20 s, however far behind the reader runs.
        "PHOTON_RETRY__MAX_AGE_S": "20",
    }
    photon(env, "gen", "--queries", "1500", "--start", "2026-01-01T00:00:00", "--outage-s", "0")
    manifest = load_manifest(Path(env["PHOTON_LOGS_ROOT"]))
    # One ad server's click log ships only once Redis is dead: however fast the joiner
    # went through the rest, those clicks are joined after the kill, from the logs.
    clicks = Path(env["PHOTON_LOGS_ROOT"]) / "a" / "clicks"
    *shipped, late = sorted(clicks.iterdir())
    assert shipped, "the generator wrote one click log: nothing to join before the kill"
    held = tmp_path / late.name  # outside the logs root: nothing reads it there
    late.rename(held)
    run = subprocess.Popen(
        [PHOTON, "--log-level", "warning", "run", "--dcs", "a", "--until-idle", "8"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        deadline = time.monotonic() + 240
        while len(output_rows(local_stack, env, "joined/")) < 100:
            assert run.poll() is None and time.monotonic() < deadline
            time.sleep(0.3)
        os.kill(_service_pid(local_stack, "redis"), signal.SIGKILL)
        held.rename(late)  # whole, at once: a rename, as a log shipper lands a file
        stdout, _ = run.communicate(timeout=400)
    finally:
        if run.poll() is None:
            run.kill()
        local_stack.up()  # Redis back for the other tests
    assert run.returncode == 0
    joiner = next(a for a in json.loads(stdout)["apps"] if a["app"] == "joiner")
    assert joiner["from_logs"] > 0  # the queries came from the log-file map
    joined = output_rows(local_stack, env, "joined/")
    counts = Counter(r["click_id"] for r in joined)
    assert [c for c, n in counts.items() if n > 1] == []
    assert set(counts) == set(manifest.expected_joins)


def test_a_click_whose_query_is_written_half_a_minute_later_is_joined_after_retries(
    local_stack: LocalStack, env: dict[str, str]
) -> None:
    env = env | {
        "PHOTON_DCS": "a",
        "PHOTON_RETRY__INITIAL_BACKOFF_S": "1",
        "PHOTON_RETRY__MAX_BACKOFF_S": "4",
        "PHOTON_RETRY__MAX_ATTEMPTS": "5",
        "PHOTON_RETRY__MAX_AGE_S": "600",
    }
    logs = Path(env["PHOTON_LOGS_ROOT"]) / "a"
    (logs / "queries").mkdir(parents=True)
    (logs / "clicks").mkdir(parents=True)
    now_us = time.time_ns() // 1000
    query_id = f"10.1.0.9:4242:{now_us}"
    click_id = f"10.2.0.9:4343:{now_us + 2_000_000}"
    click = json.dumps({"click_id": click_id, "query_id": query_id, "ad_id": "ad7"})
    (logs / "clicks" / "10.2.0.9.000000.log").write_text(click + "\n")
    run = subprocess.Popen(
        [PHOTON, "--log-level", "warning", "run", "--dcs", "a", "--until-idle", "5"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    retries = Path(env["PHOTON_PIPELINE__STATE_ROOT"]) / "a" / "joiner" / "retry.sqlite"
    try:
        # The query ships half a minute after its click, and after the joiner tried it 5
        # times (a slow machine's joiner may take longer than that to start).
        started = time.monotonic()
        while time.monotonic() - started < 30 or _attempts(retries, click_id) < 5:
            assert run.poll() is None, "the run stopped while a click waited for its query"
            assert time.monotonic() - started < 400, "the joiner did not retry the click"
            time.sleep(1)
        assert output_rows(local_stack, env, "joined/") == []
        query = json.dumps({"query_id": query_id, "query": "late shoes", "ad_ids": ["ad7"]})
        (logs / "queries" / "10.1.0.9.000000.log").write_text(query + "\n")
        stdout, _ = run.communicate(timeout=240)
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode == 0
    [row] = output_rows(local_stack, env, "joined/")
    assert (row["click_id"], row["query_id"], row["ad_shown"]) == (click_id, query_id, True)
    joiner = next(a for a in json.loads(stdout)["apps"] if a["app"] == "joiner")
    assert joiner["deferred"] >= 5  # it waited through several retries


def test_field_inputs_through_both_dcs_end_settled_and_exactly_once(
    local_stack: LocalStack, env: dict[str, str]
) -> None:
    """What ad servers and shippers send in the field, through `photon run --dcs a,b`:
    a value beyond the output schema, clicks stamped two hours and three days ahead,
    a torn last line in a rolled-over file. The run ends by itself (nothing it can
    settle is left), every joinable click is joined once across the DCs, the poison
    and the absurdly future click are quarantined with their reasons, and the click
    two hours ahead is held (not registered, not lost) for a later run."""
    env = env | {"PHOTON_RETRY__MAX_AGE_S": "6"}
    now_us = time.time_ns() // 1000
    hour = 3_600_000_000

    def query(n: int, at_us: int) -> str:
        return json.dumps({"query_id": f"10.1.0.9:4242:{at_us}", "query": f"q{n}", "ad_ids": []})

    def click(n: int, at_us: int, **fields: Any) -> str:
        return json.dumps(
            {"click_id": f"10.2.0.9:4343:{at_us + 500_000}",
             "query_id": f"10.1.0.9:4242:{at_us}", "ad_id": f"ad{n}", **fields}
        )  # fmt: skip

    times = [now_us - 60_000_000 + n * 1_000_000 for n in range(20)]
    future, absurd = now_us + 2 * hour, now_us + 72 * hour
    poison = times[5]
    queries = [query(n, t) for n, t in enumerate(times)] + [query(98, future), query(99, absurd)]
    clicks = [click(n, t, **({"cost_micros": 2**70} if t == poison else {})) for n, t in
              enumerate(times)] + [click(98, future), click(99, absurd)]  # fmt: skip
    for dc in ("a", "b"):
        logs = Path(env["PHOTON_LOGS_ROOT"]) / dc
        (logs / "queries").mkdir(parents=True)
        (logs / "clicks").mkdir(parents=True)
        (logs / "queries" / "10.1.0.9.000000.log").write_text("\n".join(queries) + "\n")
        # the first click file ends in a torn line; its writer moved on to the next one
        (logs / "clicks" / "10.2.0.9.000000.log").write_text(
            "\n".join(clicks[:10]) + "\n" + clicks[10][:25]
        )
        (logs / "clicks" / "10.2.0.9.000001.log").write_text("\n".join(clicks[10:]) + "\n")
    stdout = photon(env, "run", "--dcs", "a,b", "--until-idle", "5", timeout=600)

    joined = Counter(r["click_id"] for r in output_rows(local_stack, env, "joined/"))
    expected = {f"10.2.0.9:4343:{t + 500_000}" for t in times if t != poison}
    assert [c for c, n in joined.items() if n > 1] == []
    assert set(joined) == expected
    for dc in ("a", "b"):
        reasons = Counter(
            r["reason"] for r in output_rows(local_stack, env, f"quarantine/dc={dc}/")
        )
        assert reasons == {"unwritable": 1, "future_stamped": 1, "torn_line": 1}, reasons
    joiners = [a for a in json.loads(stdout)["apps"] if a["app"] == "joiner"]
    assert [j["held_too_new"] for j in joiners] == [1, 1]  # held for a later run, not lost
