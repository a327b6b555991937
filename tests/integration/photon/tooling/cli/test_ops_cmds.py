"""`photon verify` and `photon recover`: the operations DAGs on the command line, run as
on-call would run them (subprocesses of the installed `photon`) against the real stack."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
import urllib.request
from collections import Counter
from typing import Any

import pytest

from photon.join.output import rows_under
from photon.ops.verify import read_report
from tests.e2e.helpers import PHOTON
from tests.integration.ops_pipelines import OpsPhoton, S

pytestmark = pytest.mark.integration


def photon(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PHOTON, "--log-level", "warning", *args],
        env=dict(os.environ),  # the fixture's PHOTON_* settings
        capture_output=True,
        text=True,
        timeout=600,
    )


def _window(ops: OpsPhoton) -> list[str]:
    end = time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(time.time() - 1))
    start = time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(ops.start_us / S - 120))
    return ["--window-start", start, "--window-end", end]


def _verify(ops: OpsPhoton) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    result = photon("verify", *_window(ops), "--json")
    shown = json.loads(result.stdout)
    report = read_report(ops.store, shown["run"])
    assert report is not None, result.stdout + result.stderr[-3000:]
    # what it prints is the report it wrote, with links a browser opens as pages
    assert {k: shown[k] for k in report} == report
    for link in shown["links"].values():
        with urllib.request.urlopen(link, timeout=30) as page:
            assert page.headers["Content-Type"].startswith("text/html")
            assert b"<html" in page.read(4096).lower()
    return result, report


def test_verify_and_recover_restore_clicks_lost_between_commit_and_write(
    ops_photon: OpsPhoton,
) -> None:
    manifest = ops_photon.generate()
    ops_photon.joiner("a")
    ops_photon.crash_between_commit_and_write("a", 2)  # batch 2 dies after its commit
    ops_photon.run("a")
    ops_photon.run("b")

    # The summary on-call reads (the passing run below checks the --json form): one
    # verification fewer, each a Spark job and Great Expectations.
    table = photon("verify", *_window(ops_photon))
    assert table.returncode == 1, table.stdout + table.stderr[-3000:]
    assert "FAILED" in table.stdout and "lost" in table.stdout and "data_docs: http" in table.stdout
    key = re.search(r"^report: reports/verify/(\S+)/report\.html in bucket", table.stdout, re.M)
    assert key is not None, table.stdout
    report = read_report(ops_photon.store, key.group(1))
    assert report is not None and not report["passed"]
    lost = report["completeness"]["lost"]
    assert lost > 0

    dry = photon("recover", *_window(ops_photon), "--json")
    assert dry.returncode == 0, dry.stderr[-3000:]
    planned = json.loads(dry.stdout)
    assert planned["dry_run"] is True and planned["dead"] == lost and planned["deleted"] == 0

    done = photon("recover", *_window(ops_photon), "--no-dry-run", "--json")
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout)["reinjected"] == lost
    ops_photon.clock.now_us = time.time_ns() // 1000
    assert ops_photon.read_recovery_logs("a") == lost

    result, report = _verify(ops_photon)
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    assert report["passed"] and report["completeness"]["complete_pct"] == 100.0
    joined = Counter(r["click_id"] for r in rows_under(ops_photon.store, "joined/"))
    assert set(joined) == set(manifest.expected_joins) and max(joined.values()) == 1


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["recover", "--window-end", "2099-01-01T00:00:00Z", "--no-dry-run"], "window-end"),
        (["recover", "--dc", "zz"], "dc: 'zz' is not a configured DC"),
        (["verify", "--lookback-s", "-5"], "lookback-s"),
        (["verify", "--window-start", "yesterday"], "window-start"),
    ],
)
def test_bad_params_are_refused_naming_the_flag_before_any_change(
    ops_photon: OpsPhoton, args: list[str], named: str
) -> None:
    before = sorted(ops_photon.store.keys(""))
    result = photon(*args)
    assert result.returncode == 2, result.stdout + result.stderr
    assert named in result.stderr, result.stderr
    assert sorted(ops_photon.store.keys("")) == before
