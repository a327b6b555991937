"""`photon chaos` in a short form: every fault strikes, and no click is duplicated or lost."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import stack_env
from tests.e2e.test_photon_command import run

pytestmark = pytest.mark.e2e

FAULTS = {
    "kill_joiner",
    "dc_outage",
    "zookeeper_leader",
    "redis_restart",
    "s3_unavailable",
    "reshard",
    "crash_after_commit",
}


def test_a_short_chaos_run_ends_with_no_duplicate_and_nothing_missing(tmp_path: Path) -> None:
    env = stack_env(tmp_path)
    try:
        run(env, "up")
        result = run(
            env, "chaos", "--queries", "20000", "--rate", "400", "--outage-s", "10", "--json"
        )
    finally:
        run(env, "down", "--purge", check=False)
    report = json.loads(result.stdout)
    assert report["passed"] is True
    assert report["duplicates_seen"] == 0 and report["samples"] > 10
    assert report["missing_after_recovery"] == 0
    # the crash between registry commit and output write lost exactly what recovery restored
    assert report["missing_before_recovery"] > 0
    assert report["recovered"] == report["missing_before_recovery"]
    after = report["verification_after"]["completeness"]
    assert after["complete"] and after["duplicates"] == 0 and after["lost"] == 0
    assert report["joined"] == report["expected_joins"] > 5_000
    assert set(report["faults_injected"]) == FAULTS
    assert report["faults_injected"]["kill_joiner"] == 4
    assert report["app_starts"]["joiner[a]"] >= 3 and report["app_starts"]["joiner[b]"] >= 3
