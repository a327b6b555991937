"""Airflow's UI, as on-call uses it: `photon airflow up`, then headless Chromium opens and
triggers every operations DAG, with the defaults its form opens with.

Debian's chromium, driven by Playwright (no browser is downloaded). The
screenshots (each trigger form, each run) are kept in ``$PHOTON_TEST_ARTIFACTS``
(default ``.artifacts/``).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from photon.registry_access import connect_registry
from photon.tooling.stack.ports import free_ports
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


@pytest.fixture(scope="module")
def airflow_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """A private stack and Airflow (`photon up`, `photon airflow up`), stopped afterwards."""
    tmp_path = tmp_path_factory.mktemp("airflow-ui")
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


DAGS = (
    "photon_recover",
    "photon_verify",
    "photon_logmap_compaction",
    "photon_gc_boundary",
    "photon_reshard",
)


class AirflowUi:
    """One logged-in Chromium page on the API server, and its REST API."""

    def __init__(self, page: Any, base: str) -> None:
        self.page = page
        self.base = base
        self.auth = token(base)

    def open_trigger_form(self, dag_id: str) -> Any:
        from playwright.sync_api import expect

        self.page.goto(self.base + f"/dags/{dag_id}", wait_until="networkidle")
        expect(self.page.get_by_text("photon-oncall")).to_be_visible()
        self.page.get_by_role("button", name="Trigger").first.click()
        dialog = self.page.get_by_role("dialog")
        expect(dialog.get_by_text("Run Parameters")).to_be_visible()
        self.page.wait_for_timeout(500)  # the form validates as it renders
        return dialog

    def trigger(self, dialog: Any) -> None:
        from playwright.sync_api import expect

        button = dialog.get_by_role("button", name="Trigger")
        expect(button).to_be_enabled()
        button.click()
        expect(dialog).to_be_hidden()

    def show_run(self, dag_id: str, run_id: str) -> None:
        """The run's page, drawn: a loaded machine's browser may still be blank when the
        network is idle."""
        from playwright.sync_api import expect

        self.page.goto(self.base + f"/dags/{dag_id}/runs/{run_id}", wait_until="networkidle")
        expect(self.page.get_by_text("Task Instances").first).to_be_visible()
        expect(self.page.get_by_text(run_id).first).to_be_visible()
        self.page.wait_for_timeout(1000)

    def runs(self, dag_id: str) -> list[dict[str, Any]]:
        """The DAG's manual runs (the scheduled DAGs also run on their schedule)."""
        runs = api(self.base, f"/api/v2/dags/{dag_id}/dagRuns", self.auth)["dag_runs"]
        return [r for r in runs if r["run_type"] == "manual"]

    def run_ids(self, dag_id: str) -> set[str]:
        return {r["dag_run_id"] for r in self.runs(dag_id)}

    def wait_for_runs(
        self, before: dict[str, set[str]], timeout_s: float
    ) -> dict[str, dict[str, Any]]:
        """Each DAG's one new run (not in ``before``), once all have ended or the time is up."""
        deadline = time.monotonic() + timeout_s
        ended: dict[str, dict[str, Any]] = {}
        while time.monotonic() < deadline and len(ended) < len(before):
            time.sleep(2)
            for dag_id, known in before.items():
                new = [r for r in self.runs(dag_id) if r["dag_run_id"] not in known]
                assert len(new) <= 1, new
                if new and new[0]["state"] in ("success", "failed"):
                    ended[dag_id] = new[0]
        return ended

    def task_log(self, dag_id: str, run_id: str, task_id: str) -> str:
        quoted = urllib.parse.quote(run_id, safe="")
        path = f"/api/v2/dags/{dag_id}/dagRuns/{quoted}/taskInstances/{task_id}/logs/1"
        return json.dumps(api(self.base, path + "?full_content=true", self.auth))


@pytest.fixture
def ui(airflow_env: dict[str, str]) -> Iterator[AirflowUi]:
    from playwright.sync_api import expect, sync_playwright

    base = f"http://127.0.0.1:{airflow_env['PHOTON_AIRFLOW__API_PORT']}"
    # The API server shares two cores with the other tests' Spark apps: a page may
    # take far longer than Playwright's 5 s default to render what it waits for.
    expect.set_options(timeout=60_000)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.set_default_timeout(60_000)
        try:
            page.goto(base + "/", wait_until="networkidle")
            page.fill("input[name=username]", "admin")
            page.fill("input[name=password]", ADMIN_PASSWORD)
            page.locator("button[type=submit]").click()
            page.wait_for_url(base + "/", timeout=30_000)
            yield AirflowUi(page, base)
        finally:
            browser.close()


@pytest.mark.timeout(1200)
def test_on_call_triggers_every_dag_from_the_ui_with_its_defaults(
    airflow_env: dict[str, str], ui: AirflowUi
) -> None:
    shots = artifacts()
    before = {dag_id: ui.run_ids(dag_id) for dag_id in DAGS}
    for dag_id in DAGS:
        dialog = ui.open_trigger_form(dag_id)
        # Nothing to fill in: no required field is empty, the form is valid as it opens.
        expect_no_required_empty_field(dialog, dag_id)
        ui.page.screenshot(path=shots / f"trigger-form-{dag_id}.png", full_page=True)
        ui.trigger(dialog)

    # The reshard waits past its epoch's start (the default skew, 60 s); the Spark jobs start JVMs.
    # Five runs, two of them Spark jobs, beside the other worker's Spark cluster: minutes.
    ended = ui.wait_for_runs(before, timeout_s=660)
    for dag_id in DAGS:
        assert dag_id in ended, f"{dag_id} did not end in time"
        run_id = ended[dag_id]["dag_run_id"]
        ui.show_run(dag_id, run_id)
        ui.page.screenshot(path=shots / f"run-{dag_id}.png")
    assert {d: r["state"] for d, r in ended.items()} == dict.fromkeys(DAGS, "success")

    # What the forms sent: the documented defaults, the optional values unset.
    assert ended["photon_recover"]["conf"] == {
        "window_start": None,
        "window_end": None,
        "lookback_s": 3600,
        "settle_s": 120,
        "dc": None,
        "dry_run": True,
    }
    assert ended["photon_logmap_compaction"]["conf"] == {"dc": None, "sample": 200}
    assert ended["photon_verify"]["conf"]["window_end"] is None
    recover_log = ui.task_log("photon_recover", ended["photon_recover"]["dag_run_id"], "recover")
    assert '\\"dry_run\\": true' in recover_log or "'dry_run': True" in recover_log, recover_log
    assert (shots / "run-photon_recover.png").stat().st_size > 10_000

    registry = connect_registry(settings_from_env(airflow_env))
    try:
        epochs = registry.sharding().epochs
    finally:
        registry.close()
    assert epochs[-1].shards == 8 and len(epochs) == 2  # the reshard's default shard count

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


def expect_no_required_empty_field(dialog: Any, dag_id: str) -> None:
    """Every input the form marks required has a value (the form opens valid)."""
    for field in dialog.locator("input[name^=element_][required]").all():
        if field.get_attribute("type") != "checkbox":
            assert field.input_value() != "", f"{dag_id}: {field.get_attribute('name')} is empty"


def test_the_form_or_the_task_refuses_a_bad_value_naming_the_field(ui: AirflowUi) -> None:
    from playwright.sync_api import expect

    shots = artifacts()
    before = {dag_id: ui.run_ids(dag_id) for dag_id in ("photon_recover", "photon_verify")}
    # A DC name that is no name at all: the form's schema refuses it, naming the field.
    dialog = ui.open_trigger_form("photon_recover")
    dialog.locator("input[name=element_dc]").fill("Bad DC")
    dialog.get_by_role("button", name="Trigger").click()
    expect(dialog.get_by_text("Invalid input for param dc")).to_be_visible()
    ui.page.screenshot(path=shots / "refused-form-bad-dc.png", full_page=True)
    assert ui.run_ids("photon_recover") == before["photon_recover"]  # no run was created

    # A well-formed name of no configured DC, and a window end in the future: the task
    # refuses each at once (no retry), naming the field.
    dialog.locator("input[name=element_dc]").fill("z")
    ui.trigger(dialog)
    dialog = ui.open_trigger_form("photon_verify")
    tomorrow = time.strftime("%Y-%m-%dT%H:%M", time.gmtime(time.time() + 86_400))
    dialog.locator("input[name=element_window_end]").fill(tomorrow)
    ui.page.screenshot(path=shots / "refused-form-future-window-end.png", full_page=True)
    ui.trigger(dialog)

    ended = ui.wait_for_runs(before, timeout_s=240)
    recover, verify = ended["photon_recover"], ended["photon_verify"]
    assert recover["conf"]["dc"] == "z" and recover["state"] == "failed"
    assert verify["conf"]["window_end"].startswith(tomorrow[:10]) and verify["state"] == "failed"
    recover_log = ui.task_log("photon_recover", recover["dag_run_id"], "recover")
    assert "dc: 'z' is not a configured DC (a, b)" in recover_log, recover_log
    verify_log = ui.task_log("photon_verify", verify["dag_run_id"], "validate_params")
    assert "window_end: " in verify_log and "is in the future" in verify_log, verify_log
    ui.show_run("photon_verify", verify["dag_run_id"])
    ui.page.screenshot(path=shots / "refused-run-future-window-end.png")
