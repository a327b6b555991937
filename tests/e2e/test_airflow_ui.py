"""Airflow's UI, as on-call uses it: `photon airflow up`, then headless Chromium opens and
triggers every operations DAG, with the defaults its form opens with.

Debian's chromium, driven by Playwright (no browser is downloaded). The
screenshots (each trigger form, each run) are kept in ``$TEST_ARTIFACTS_DIR``
(default ``.artifacts/``).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tenacity import (
    Retrying,
    retry_if_exception,
    retry_if_result,
    stop_after_attempt,
    stop_after_delay,
    wait_fixed,
)

from photon.join.output import decode
from photon.registry_access import connect_registry
from photon.storage import ObjectStore, s3_client
from photon.tooling.gen.simulator import load_manifest
from photon.tooling.stack.ports import free_ports
from tests.conftest import REPO, settings_from_env, stack_env
from tests.e2e.helpers import FAST_RETRIES, PHOTON, dc_app
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


#: Chromium aborts a navigation when the host's interfaces change (a Docker daemon
#: starting, a build container's network coming and going: `make test` builds the compose
#: images beside this module). A person would load the page again; so does ``goto``.
NETWORK_CHANGED = "net::ERR_NETWORK_CHANGED"
NAVIGATION_TRIES = 5


def goto(page: Any, url: str, **options: Any) -> Any:
    """``page.goto(url)``, again after a navigation aborted by a change of the host's
    network (up to ``NAVIGATION_TRIES`` tries); any other error is raised at once."""
    retrying = Retrying(
        retry=retry_if_exception(lambda error: NETWORK_CHANGED in str(error)),
        stop=stop_after_attempt(NAVIGATION_TRIES),
        wait=wait_fixed(1.0),
        reraise=True,
    )
    return retrying(page.goto, url, **options)


def artifacts() -> Path:
    path = Path(os.environ.get("TEST_ARTIFACTS_DIR", REPO / ".artifacts")) / "airflow-ui"
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
        # Recovery waits this long after fencing for writes in flight (60 s by default):
        # the joiners write to a loopback S3, in flight for well under it.
        "PHOTON_PIPELINE__FENCE_SETTLE_S": "5",
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

        goto(self.page, self.base + f"/dags/{dag_id}", wait_until="networkidle")
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

    def rest(self) -> None:
        """Leave Airflow's pages for a blank one: an open page polls the API and redraws
        (its renderer took ~100 CPU-seconds of a suite run on 2 cores, most of it while
        the tests waited on runs or pipelines); the login stays with the browser."""
        self.page.goto("about:blank")

    def trigger_api(self, dag_id: str, conf: dict[str, Any]) -> None:
        """A run triggered through the REST API, as a script would."""
        body = json.dumps({"logical_date": None, "conf": conf}).encode()
        request = urllib.request.Request(
            self.base + f"/api/v2/dags/{dag_id}/dagRuns",
            data=body,
            headers={"Authorization": f"Bearer {self.auth}", "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            assert response.status in (200, 201)

    def show_run(self, dag_id: str, run_id: str) -> None:
        """The run's page, drawn: a loaded machine's browser may still be blank when the
        network is idle."""
        from playwright.sync_api import expect

        goto(self.page, self.base + f"/dags/{dag_id}/runs/{run_id}", wait_until="networkidle")
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
        self.rest()
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

    def task_log(self, dag_id: str, run_id: str, task_id: str, try_number: int = 1) -> str:
        quoted = urllib.parse.quote(run_id, safe="")
        path = f"/api/v2/dags/{dag_id}/dagRuns/{quoted}/taskInstances/{task_id}/logs/{try_number}"
        return json.dumps(api(self.base, path + "?full_content=true", self.auth))

    def failed_task_logs(self, dag_id: str, run_id: str, shots: Path) -> str:
        """The logs of a run's tasks that did not succeed, each try's written beside the
        screenshots; their tails, to put in the failing assertion (the Airflow logs go
        with the test's temporary directory)."""
        quoted = urllib.parse.quote(run_id, safe="")
        path = f"/api/v2/dags/{dag_id}/dagRuns/{quoted}/taskInstances"
        tails = []
        for task in api(self.base, path, self.auth)["task_instances"]:
            tries = int(task.get("try_number") or 0)  # 0: it never ran (upstream failed)
            if task["state"] in ("success", "skipped") or tries == 0:
                continue
            for try_number in range(1, tries + 1):
                try:
                    text = self.task_log(dag_id, run_id, task["task_id"], try_number)
                except OSError as exc:  # the log is gone or not served: say so, go on
                    text = f"no log: {exc!r}"
                name = f"log-{dag_id}-{task['task_id']}-{try_number}.json"
                (shots / name).write_text(text)
                tails.append(f"{dag_id}.{task['task_id']} ({task['state']}, try {try_number}): "
                             f"{text[-2500:]}")  # fmt: skip
        return "\n".join(tails)


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
            goto(page, base + "/", wait_until="networkidle")
            page.fill("input[name=username]", "admin")
            page.fill("input[name=password]", ADMIN_PASSWORD)
            page.locator("button[type=submit]").click()
            page.wait_for_url(base + "/", timeout=30_000)
            ui = AirflowUi(page, base)
            ui.rest()
            yield ui
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

    # The reshard waits past its epoch's start (the default skew: the configured bound, 2 s
    # here); the Spark jobs start JVMs.
    # Five runs, two of them Spark jobs, beside the other worker's Spark cluster: minutes.
    ended = ui.wait_for_runs(before, timeout_s=660)
    for dag_id in DAGS:
        assert dag_id in ended, f"{dag_id} did not end in time"
        run_id = ended[dag_id]["dag_run_id"]
        ui.show_run(dag_id, run_id)
        ui.page.screenshot(path=shots / f"run-{dag_id}.png")
    states = {d: r["state"] for d, r in ended.items()}
    failed = [d for d, state in states.items() if state != "success"]
    assert states == dict.fromkeys(DAGS, "success"), "\n".join(
        [json.dumps(states)]
        + [ui.failed_task_logs(d, ended[d]["dag_run_id"], shots) for d in failed]
    )

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
    assert ended["photon_reshard"]["conf"] == {"shards": 8, "skew_s": None, "dry_run": False}
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
    airflow = healthy_airflow_status(airflow_env)
    assert airflow["healthy"] and airflow["exposed"] == [], airflow
    listening = {a for addresses in airflow["listening"].values() for a in addresses}
    ports = (airflow_env["PHOTON_AIRFLOW__API_PORT"], airflow_env["PHOTON_AIRFLOW__POSTGRES_PORT"])
    # Those two, and nothing beyond loopback (`exposed`, above): a process of Airflow's
    # may hold an ephemeral loopback listener for a moment (::ffff:127.0.0.1:<port>).
    assert {f"127.0.0.1:{port}" for port in ports} <= listening, listening
    stack = json.loads(run(airflow_env, "stack", "status", "--json").stdout)
    assert stack["problems"] == []
    assert all(s["listening"] for s in stack["services"])  # every server seen listening


def healthy_airflow_status(env: dict[str, str]) -> dict[str, Any]:
    """`photon airflow status --json`, asked again for up to a minute while Airflow calls
    itself unhealthy; the last answer. Airflow counts its DAG processor unhealthy once the
    processor's last heartbeat is older than 2.1 x ``[scheduler] job_heartbeat_sec``
    (10.5 s), and beside the suite's Spark apps on two cores a live one missed that for a
    moment (a CI run, 2026-12-06); a dead one stays unhealthy."""

    def status() -> dict[str, Any]:
        answer: dict[str, Any] = json.loads(
            run(env, "airflow", "status", "--json", check=False).stdout
        )
        return answer

    retrying = Retrying(
        stop=stop_after_delay(60),
        wait=wait_fixed(3),
        retry=retry_if_result(lambda answer: not answer["healthy"]),
        retry_error_callback=lambda state: state.outcome.result() if state.outcome else None,
    )
    answer: dict[str, Any] = retrying(status)
    return answer


def expect_no_required_empty_field(dialog: Any, dag_id: str) -> None:
    """Every input the form marks required has a value (the form opens valid)."""
    for field in dialog.locator("input[name^=element_][required]").all():
        if field.get_attribute("type") != "checkbox":
            assert field.input_value() != "", f"{dag_id}: {field.get_attribute('name')} is empty"


def test_the_form_or_the_task_refuses_a_bad_value_naming_the_field(ui: AirflowUi) -> None:
    from playwright.sync_api import expect

    shots = artifacts()
    before = {dag_id: ui.run_ids(dag_id) for dag_id in ("photon_recover", "photon_verify")}
    # The DC is a choice of the configured DCs, its empty choice saying what it means:
    # no other name can be sent.
    dialog = ui.open_trigger_form("photon_recover")
    dialog.get_by_role("combobox").click()  # the form's one drop-down
    choices = ui.page.get_by_role("option")
    expect(choices.first).to_be_visible()
    assert [c.inner_text().strip() for c in choices.all()] == [
        "(empty: the one that registered each click)", "DC a", "DC b"
    ]  # fmt: skip
    ui.page.screenshot(path=shots / "form-dc-choices.png", full_page=True)
    ui.page.keyboard.press("Escape")
    # A number out of its bounds: the form holds it to them (no run gets -5).
    lookback = dialog.locator("input[name=element_lookback_s]")
    lookback.fill("-5")
    lookback.press("Tab")
    expect(lookback).to_have_value("1")  # its minimum
    ui.page.screenshot(path=shots / "form-negative-lookback-held-to-bounds.png", full_page=True)
    ui.page.keyboard.press("Escape")
    assert ui.run_ids("photon_recover") == before["photon_recover"]  # no run was created

    # A DC the form cannot send, through the API (a script's typo): refused, naming the param.
    with pytest.raises(urllib.error.HTTPError) as refused:
        ui.trigger_api("photon_recover", {"dc": "z"})
    assert refused.value.code == 400 and "dc" in refused.value.read().decode()
    assert ui.run_ids("photon_recover") == before["photon_recover"]

    # A window end in the future: the task refuses it at once (no retry), naming the field.
    dialog = ui.open_trigger_form("photon_verify")
    tomorrow = time.strftime("%Y-%m-%dT%H:%M", time.gmtime(time.time() + 86_400))
    dialog.locator("input[name=element_window_end]").fill(tomorrow)
    ui.page.screenshot(path=shots / "refused-form-future-window-end.png", full_page=True)
    ui.trigger(dialog)

    ended = ui.wait_for_runs({"photon_verify": before["photon_verify"]}, timeout_s=240)
    verify = ended["photon_verify"]
    assert verify["conf"]["window_end"].startswith(tomorrow[:10]) and verify["state"] == "failed"
    verify_log = ui.task_log("photon_verify", verify["dag_run_id"], "validate_params")
    assert "window_end: " in verify_log and "is in the future" in verify_log, verify_log
    ui.show_run("photon_verify", verify["dag_run_id"])
    ui.page.screenshot(path=shots / "refused-run-future-window-end.png")


def _minute(epoch_s: float) -> str:
    """A time as the form's date-time field takes it (UTC, to the minute)."""
    return time.strftime("%Y-%m-%dT%H:%M", time.gmtime(epoch_s))


class Walkthrough:
    """On-call's steps in the UI: trigger a DAG from its form, read the run and its links."""

    def __init__(self, ui: AirflowUi, shots: Path) -> None:
        self.ui, self.shots = ui, shots

    def trigger(self, dag_id: str, window: tuple[str, str], *, dry_run: bool = True) -> str:
        before = {dag_id: self.ui.run_ids(dag_id)}
        dialog = self.ui.open_trigger_form(dag_id)
        dialog.locator("input[name=element_window_start]").fill(window[0])
        dialog.locator("input[name=element_window_end]").fill(window[1])
        if not dry_run:  # the form's one switch
            dialog.locator("[data-scope=switch][data-part=control]").click()
            assert not dialog.get_by_role("checkbox").is_checked()
        step = f"{dag_id}{'' if dry_run else '-for-real'}"
        self.ui.page.screenshot(path=self.shots / f"form-{step}.png", full_page=True)
        self.ui.trigger(dialog)
        ended = self.ui.wait_for_runs(before, timeout_s=420)
        assert dag_id in ended, f"{dag_id} did not end"
        run_id = str(ended[dag_id]["dag_run_id"])
        self.ui.show_run(dag_id, run_id)
        self.ui.page.screenshot(path=self.shots / f"run-{step}.png")
        return run_id

    def state(self, dag_id: str, run_id: str) -> str:
        quoted = urllib.parse.quote(run_id, safe="")
        return str(
            api(self.ui.base, f"/api/v2/dags/{dag_id}/dagRuns/{quoted}", self.ui.auth)["state"]
        )

    def links(self, dag_id: str, run_id: str, task_id: str) -> dict[str, str]:
        quoted = urllib.parse.quote(run_id, safe="")
        path = f"/api/v2/dags/{dag_id}/dagRuns/{quoted}/taskInstances/{task_id}/links"
        links = api(self.ui.base, path, self.ui.auth)["extra_links"]
        return {name: url for name, url in links.items() if url}

    def result(self, dag_id: str, run_id: str, task_id: str) -> Any:
        quoted = urllib.parse.quote(run_id, safe="")
        instance = f"/api/v2/dags/{dag_id}/dagRuns/{quoted}/taskInstances/{task_id}"
        path = f"{instance}/xcomEntries/return_value"
        value = api(self.ui.base, path, self.ui.auth)["value"]
        return json.loads(value) if isinstance(value, str) else value

    def open(self, url: str, shot: str) -> str:
        """A link opened in the browser, as a page (not a download): its text."""
        response = goto(self.ui.page, url, wait_until="domcontentloaded")
        assert response is not None and response.ok, url
        assert response.headers["content-type"].startswith("text/html"), response.headers
        self.ui.page.screenshot(path=self.shots / f"{shot}.png", full_page=True)
        return str(self.ui.page.inner_text("body"))


@pytest.mark.timeout(1500)
def test_on_call_walkthrough_a_dc_killed_clicks_lost_then_found_and_recovered_from_the_ui(
    airflow_env: dict[str, str], ui: AirflowUi
) -> None:
    """The on-call story, as a new on-call engineer lives it: DC b loses clicks (its
    joiner dies between its registry commit and its write, and comes back on a new disk);
    both DCs run under `photon run`, where killing DC b's driver leaves DC a joining and b
    comes back by itself; `photon_verify` from the UI fails, naming the lost clicks, in
    its report and its Data Docs (both open as pages from the task's links);
    `photon_recover` from the UI, a dry run and then for real, re-injects them; the
    pipelines join them; `photon_verify` passes. Screenshots: the artifacts' walkthrough/."""
    shots = artifacts() / "walkthrough"
    shots.mkdir(exist_ok=True)
    env = (
        airflow_env
        | FAST_RETRIES
        | {
            "PHOTON_PIPELINE__RESTART_BACKOFF_S": "3",
            # many batches: a run to kill into
            "PHOTON_PIPELINE__MAX_BYTES_PER_BATCH": "8192",
            "PHOTON_PIPELINE__JOINER_MAX_BYTES_PER_BATCH": "8192",
        }
    )
    # An hour and a half back: within the latency bound once recovered (the clicks of
    # its hours-late tail stamped ahead are held, outside the window).
    begin = time.time() - 90 * 60
    run(env, "gen", "--queries", "2000", "--start", _minute(begin) + ":00", "--outage-s", "0")
    manifest = load_manifest(Path(env["PHOTON_LOGS_ROOT"]))

    # DC b's joiner dies right after a registry commit that won ids, before the write...
    # (its query reader and joiner in one Spark application, as `photon run` runs a DC;
    # the run gives the app up after that one death instead of restarting it)
    crashed = run(env | {"PHOTON_FAULTS__CRASH_AFTER_COMMIT_P": "1",
                         "PHOTON_PIPELINE__CRASH_LOOP_LIMIT": "1",
                         "PHOTON_PIPELINE__CRASH_LOOP_S": "3600"},
                  "run", "--dcs", "b", "--until-idle", "5", check=False, timeout_s=300)  # fmt: skip
    assert crashed.returncode != 0, crashed.stderr[-2000:]
    died = r"query-reader\+joiner\[b\] died 1 times in a row .* \(last status (137|-9)\)"
    assert re.search(died, crashed.stderr), crashed.stderr[-2000:]  # killed, as the fault does
    # ...and comes back on a new disk (--fresh: its state is gone); both DCs under `photon
    # run`, where DC b's driver is killed mid-run.
    pipelines = subprocess.Popen(
        [PHOTON, "--log-level", "warning", "run", "--dcs", "a,b", "--until-idle", "8", "--fresh"],
        env={k: v for k, v in os.environ.items() if not k.startswith("PHOTON_")} | env,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 300
        store = _store(env)
        # The DCs stream and join (on one core DC b starts after DC a's first batch):
        # kill DC b.
        while not list(store.keys("joined/")) or dc_app(pipelines, "b") is None:
            assert pipelines.poll() is None and time.monotonic() < deadline
            time.sleep(0.3)
        killed, a = dc_app(pipelines, "b"), dc_app(pipelines, "a")
        assert killed is not None and a is not None
        killed.kill()
        while (restarted := dc_app(pipelines, "b")) is None or restarted.pid == killed.pid:
            assert pipelines.poll() is None and time.monotonic() < deadline
            time.sleep(0.2)
        # DC a ran on all the while b was dead and restarting: the same process
        assert a.is_running() and dc_app(pipelines, "a") == a
        stdout, stderr = pipelines.communicate(timeout=600)
    finally:
        if pipelines.poll() is None:
            pipelines.kill()
    assert pipelines.returncode == 0, stderr[-3000:]
    assert "query-reader+joiner[b]: restart 1 in 3 s; the other DCs run on" in stderr
    apps = json.loads(stdout)["apps"]
    assert {(x["dc"], x["restarts"], x["exit"]) for x in apps} == {("a", 0, 0), ("b", 1, 0)}

    walk = Walkthrough(ui, shots)
    window = (_minute(begin - 60), _minute(time.time() - 60))
    # Verification from the UI fails; its report and Data Docs say so, and open as pages.
    failed = walk.trigger("photon_verify", window)
    assert walk.state("photon_verify", failed) == "failed"
    links = walk.links("photon_verify", failed, "report")
    assert set(links) == {"Report", "Data Docs"}, links
    report = walk.open(links["Report"], "report-failed")
    assert "FAILED" in report and "lost" in report
    lost = int(re.search(r"(\d+) lost", report).group(1))  # type: ignore[union-attr]
    assert lost > 0
    docs = walk.open(links["Data Docs"], "data-docs-failed")
    assert "Status: Failed" in docs and "Every click of the window is settled" in docs
    assert "lost" in docs

    # Recovery from the UI: the dry run lists the lost clicks, the real run re-injects them.
    dry = walk.trigger("photon_recover", window)
    assert walk.state("photon_recover", dry) == "success"
    planned = walk.result("photon_recover", dry, "recover")
    assert planned["dry_run"] is True and planned["dead"] == lost and planned["deleted"] == 0
    done = walk.trigger("photon_recover", window, dry_run=False)
    assert walk.state("photon_recover", done) == "success"
    assert walk.result("photon_recover", done, "recover")["reinjected"] == lost

    # The pipelines join the re-injected clicks; verification passes, and says so.
    last_run_us = time.time_ns() // 1000
    ui.rest()
    run(env, "run", "--dcs", "a,b", "--until-idle", "8", timeout_s=600)
    passed = walk.trigger("photon_verify", window)
    report = walk.open(walk.links("photon_verify", passed, "report")["Report"], "report-passed")
    assert walk.state("photon_verify", passed) == "success", report
    assert "PASSED" in report and re.search(r"complete_pct\s+100\.0\b", report), report
    joined = Counter(
        r["click_id"]
        for key in _store(env).keys("joined/")
        for r in decode(_store(env).get(key) or b"")
    )
    assert [c for c, n in joined.items() if n > 1] == []
    # every joinable click, but those of the hours-late tail stamped ahead of now: held
    # (too new to register, docs/join.md "Time") for a later run, not lost
    due = {c for c in manifest.expected_joins if int(c.rsplit(":", 1)[1]) < last_run_us}
    assert due <= set(joined) <= set(manifest.expected_joins)


def _store(env: dict[str, str]) -> ObjectStore:
    settings = settings_from_env(env)
    return ObjectStore(s3_client(settings.s3_endpoint_url, settings.s3), settings.s3.bucket)
