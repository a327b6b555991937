"""Airflow's UI, as on-call uses it: `photon airflow up`, then headless Chromium triggers a reshard.

Debian's chromium, driven by Playwright (no browser is downloaded). The
screenshots are kept in ``$PHOTON_TEST_ARTIFACTS`` (default ``.artifacts/``).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from photon.registry_access import connect_registry
from photon.stack.ports import free_ports
from tests.conftest import REPO, settings_from_env, stack_env
from tests.e2e.test_photon_command import run

pytestmark = pytest.mark.e2e

CHROMIUM = "/usr/bin/chromium"
# Chromium as root in a closed network: no sandbox, nothing fetched in the background.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ADMIN_PASSWORD = "ui-test-admin"


def artifacts() -> Path:
    path = Path(os.environ.get("PHOTON_TEST_ARTIFACTS", REPO / ".artifacts")) / "airflow-ui"
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture
def airflow_env(tmp_path: Path) -> Iterator[dict[str, str]]:
    """A private stack and Airflow (`photon up`, `photon airflow up`), stopped afterwards."""
    # PostgreSQL runs as the postgres user: its directory must be reachable by it.
    airflow_dir = Path(tempfile.mkdtemp(prefix="photon-airflow-ui-"))
    airflow_dir.chmod(0o755)
    api_port, pg_port = free_ports(2)
    env = stack_env(tmp_path) | {
        "PHOTON_AIRFLOW__STATE_DIR": str(airflow_dir),
        "PHOTON_AIRFLOW__API_PORT": str(api_port),
        "PHOTON_AIRFLOW__POSTGRES_PORT": str(pg_port),
        "PHOTON_AIRFLOW__ADMIN_PASSWORD": ADMIN_PASSWORD,
        "PHOTON_SHARDS__MAX_CLOCK_SKEW_S": "2",
    }
    try:
        run(env, "up")
        started = run(env, "airflow", "up")
        assert f"http://127.0.0.1:{api_port}" in started.stdout
        yield env
    finally:
        run(env, "airflow", "down", "--purge", check=False)
        run(env, "down", "--purge", check=False)
        shutil.rmtree(airflow_dir, ignore_errors=True)


def api(base: str, path: str, token: str) -> Any:
    request = urllib.request.Request(base + path, headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


def token(base: str) -> str:
    body = json.dumps({"username": "admin", "password": ADMIN_PASSWORD}).encode()
    request = urllib.request.Request(
        base + "/auth/token", data=body, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return str(json.loads(response.read())["access_token"])


def test_on_call_triggers_photon_reshard_from_the_ui_and_everything_listens_on_loopback(
    airflow_env: dict[str, str],
) -> None:
    from playwright.sync_api import expect, sync_playwright

    base = f"http://127.0.0.1:{airflow_env['PHOTON_AIRFLOW__API_PORT']}"
    shots = artifacts()
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        try:
            page.goto(base + "/", wait_until="networkidle")
            page.fill("input[name=username]", "admin")
            page.fill("input[name=password]", ADMIN_PASSWORD)
            page.locator("button[type=submit]").click()
            page.wait_for_url(base + "/", timeout=30_000)

            page.goto(base + "/dags/photon_reshard", wait_until="networkidle")
            expect(page.get_by_text("photon-oncall")).to_be_visible()
            page.get_by_role("button", name="Trigger").first.click()
            dialog = page.get_by_role("dialog")
            expect(dialog.get_by_text("New shard count")).to_be_visible()
            dialog.locator("input[name=element_shards]").fill("3")
            dialog.locator("input[name=element_skew_s]").fill("2")
            page.screenshot(path=shots / "1-trigger-form.png")
            dialog.get_by_role("button", name="Trigger").click()
            expect(dialog).to_be_hidden(timeout=15_000)

            auth = token(base)
            deadline = time.monotonic() + 240
            state = "queued"
            while time.monotonic() < deadline and state not in ("success", "failed"):
                time.sleep(2)
                runs = api(base, "/api/v2/dags/photon_reshard/dagRuns", auth)["dag_runs"]
                assert len(runs) == 1
                state = runs[0]["state"]
            run_id = runs[0]["dag_run_id"]
            conf = runs[0]["conf"]  # what the form sent
            assert (conf["shards"], float(conf["skew_s"]), conf["dry_run"]) == (3, 2.0, False)

            page.goto(base + f"/dags/photon_reshard/runs/{run_id}", wait_until="networkidle")
            page.wait_for_timeout(1000)
            page.screenshot(path=shots / "2-run.png")
        finally:
            browser.close()
    assert state == "success"
    assert (shots / "2-run.png").stat().st_size > 10_000
    registry = connect_registry(settings_from_env(airflow_env))
    try:
        epochs = registry.sharding().epochs
    finally:
        registry.close()
    assert epochs[-1].shards == 3 and len(epochs) == 2

    # Nothing listens beyond loopback (Airflow's log servers would bind every address:
    # `photon airflow up` runs the scheduler and triggerer without them).
    airflow = json.loads(run(airflow_env, "airflow", "status", "--json").stdout)
    assert airflow["healthy"] and airflow["exposed"] == [], airflow
    listening = sorted(a for addresses in airflow["listening"].values() for a in addresses)
    ports = (airflow_env["PHOTON_AIRFLOW__API_PORT"], airflow_env["PHOTON_AIRFLOW__POSTGRES_PORT"])
    assert listening == sorted(f"127.0.0.1:{port}" for port in ports)
    stack = json.loads(run(airflow_env, "stack", "status", "--json").stdout)
    assert stack["problems"] == []
    assert all(s["listening"] for s in stack["services"])  # every server seen listening
