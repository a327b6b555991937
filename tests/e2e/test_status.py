"""On-call's view of a running two-DC demo: `photon status`, its dashboard, the metrics.

Ad servers write both DCs' logs live while both DCs' pipelines run with their
metrics endpoints on. Then: `photon status --json` must give every field with
live values; the dashboard, run in a pseudo-terminal, must draw them; every
metric of docs/metrics.md must be served by the app the doc names; and SIGTERM
(what Ctrl-C does) must stop every app cleanly.
"""

from __future__ import annotations

import json
import os
import pty
import re
import select
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

import psutil
import pytest

from photon.tooling.observe.prom import Scrape, parse, scrape
from photon.tooling.observe.recorder import read_records
from photon.tooling.stack.ports import free_ports
from tests.conftest import REPO
from tests.e2e.helpers import PHOTON

pytestmark = pytest.mark.e2e

GEN = [PHOTON, "--log-level", "warning", "gen", "--mode", "live"]
RUN = [PHOTON, "--log-level", "warning", "run", "--dcs", "a,b"]
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")


def _metrics_text(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        return str(response.read().decode())


def documented_metrics() -> list[dict[str, str]]:
    """The rows of docs/metrics.md's table: name, type, exported by, when."""
    rows = []
    for line in (REPO / "docs" / "metrics.md").read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 6 and cells[0].startswith("`photon_"):
            rows.append(
                {"name": cells[0].strip("`"), "type": cells[1], "apps": cells[3], "when": cells[4]}
            )
    return rows


def status_json(env: dict[str, str]) -> dict[str, Any]:
    result = subprocess.run(
        [PHOTON, "--log-level", "warning", "status", "--json", "--interval", "5"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode in (0, 1), result.stderr
    data: dict[str, Any] = json.loads(result.stdout)
    return data


def dashboard_screen(env: dict[str, str], seconds: float) -> tuple[str, int]:
    """Run the live dashboard in a pseudo-terminal for `seconds` after it first drew (a loaded
    machine takes a while to import and collect); what it drew, and its exit status."""
    controller, terminal = pty.openpty()
    proc = subprocess.Popen(
        [PHOTON, "--log-level", "warning", "status", "--interval", "1"],
        env=env | {"TERM": "xterm-256color", "COLUMNS": "120", "LINES": "60"},
        stdin=terminal,
        stdout=terminal,
        stderr=terminal,
        start_new_session=True,
    )
    os.close(terminal)
    chunks: list[bytes] = []
    deadline = time.monotonic() + 180  # until it first draws
    drawn = False
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            ready, _, _ = select.select([controller], [], [], 0.5)
            if ready:
                try:
                    chunks.append(os.read(controller, 65536))
                except OSError:
                    break
            if not drawn and b"Photon status" in b"".join(chunks):
                drawn = True
                deadline = time.monotonic() + seconds
        proc.send_signal(signal.SIGINT)  # Ctrl-C leaves the dashboard
        status = proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(controller)
    return _ANSI.sub("", b"".join(chunks).decode("utf-8", errors="replace")), status


@pytest.mark.timeout(900)
def test_status_dashboard_metrics_and_report_of_a_running_two_dc_demo(
    env: dict[str, str], tmp_path: Path
) -> None:
    base = free_ports(4, consecutive=True)[0]
    ui_base = free_ports(3, consecutive=True)[0]  # each DC's Spark UI; the third: not another's
    recorded = tmp_path / "run"
    env = env | {
        "PHOTON_PIPELINE__METRICS_BASE_PORT": str(base),
        "PHOTON_PIPELINE__SPARK_UI_BASE_PORT": str(ui_base),
        # Each DC joins the clicks it prefers, however far behind the other it runs: on a
        # slow machine a DC late by more than the grace joined none (the other took them
        # all), and it has latencies and rates to show only if it joins some.
        "PHOTON_PIPELINE__AFFINITY_GRACE_S": "600",
        "PHOTON_PIPELINE__AFFINITY_MAX_AGE_S": "0",
    }
    writer = subprocess.Popen(
        # 15 minutes of logs, longer than the test lasts: clicks still flow when the apps are
        # up at last on a slow machine, so joined/s has something to show
        [*GEN, "--queries", "90000", "--rate", "100", "--outage-s", "0"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    run = subprocess.Popen(
        # no --until-idle: runs on until SIGTERM; its metrics recorded for `photon report`
        [*RUN, "--record", str(recorded), "--record-interval", "1"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    ports = {("query reader", "a"): base, ("joiner", "a"): base + 1}
    ports |= {("query reader", "b"): base + 2, ("joiner", "b"): base + 3}
    try:
        # Both joiners joining: every endpoint answers and clicks are joined (four Spark
        # apps starting on a loaded 2-core machine can take minutes).
        deadline = time.monotonic() + 480
        scrapes: dict[tuple[str, str], Scrape | None] = {}
        while True:
            scrapes = {k: scrape(f"http://127.0.0.1:{p}/metrics") for k, p in ports.items()}
            joined = [
                (s or Scrape()).total("photon_clicks_total", outcome="joined")
                for (app, _), s in scrapes.items()
                if app == "joiner"
            ]
            if all(scrapes.values()) and all(j > 0 for j in joined):
                break
            assert run.poll() is None and time.monotonic() < deadline, scrapes
            time.sleep(1)

        data: dict[str, Any] = {}
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:  # until a rate shows clicks flowing (a slow
            data = status_json(env)  # machine's batches can be far apart)
            if any((d["joined_per_s"] or 0) > 0 for d in data["dcs"].values()):
                break
        assert data["healthy"] is True, data
        for name in ("a", "b"):
            dc = data["dcs"][name]
            assert dc["apps"] == {"query-reader": "up", "joiner": "up"} and dc["up"] is True
            for stream in ("queries", "clicks"):
                lag = dc["input_lag"][stream]  # the app's own gauges, read from its endpoint
                assert lag["source"] == "metrics", lag
                assert lag["bytes"] >= 0 and lag["files"] >= 0 and lag["lag_s"] >= 0
            assert dc["joined_total"] > 0 and dc["joined_per_s"] is not None
            # where the DC's driver runs: one process for both apps, its --dc this DC
            [where] = set(dc["processes"].values())
            pid, host = where.split("@")
            assert host == socket.gethostname()
            argv = psutil.Process(int(pid)).cmdline()
            assert argv[argv.index("--dc") + 1] == name
            assert dc["latency_p50_s"] > 0 and dc["latency_p90_s"] >= dc["latency_p50_s"]
            for counted in ("retries_pending", "unjoinable_total", "quarantined_total"):
                assert isinstance(dc[counted], int) and dc[counted] >= 0
        assert any(d["joined_per_s"] > 0 for d in data["dcs"].values())
        # Each DC's Spark UI, on loopback, linked from the status; its event log written.
        for i, name in enumerate(("a", "b")):
            ui = data["dcs"][name]["spark_ui"]
            assert ui == f"http://127.0.0.1:{ui_base + i}", data["dcs"][name]
            with urllib.request.urlopen(f"{ui}/api/v1/applications", timeout=10) as answer:
                assert [a["name"] for a in json.load(answer)] == [f"photon-pipeline-{name}"]
        events = Path(env["PHOTON_PIPELINE__STATE_ROOT"]) / "spark-events"
        assert len([p for p in events.rglob("*") if p.is_file()]) >= 2, events
        registry = data["registry"]
        assert registry["healthy"] and registry["error"] is None
        assert sorted(n["mode"] for n in registry["nodes"]) == ["follower", "follower", "leader"]
        assert registry["znodes"] > 0 and registry["epochs"][0]["shards"] >= 1
        assert registry["ids"] > 0 and sum(s["ids"] for s in registry["shards"]) == registry["ids"]
        cache = data["cache"]
        assert 0 < cache["hit_ratio"] <= 1 and cache["memory_used_bytes"] > 0
        assert cache["keys"] > 0 and cache["error"] is None

        screen, status = dashboard_screen(env, seconds=5)
        assert status == 0, screen[-2000:]
        for shown in ("Photon status", "DC a", "DC b", "joined/s", "latency p90", "leader",
                      "process (pid@host)", "joined since start",
                      "follower", "shards per epoch", "hit ratio", "memory used",
                      "Spark UI", f"127.0.0.1:{ui_base}"):  # fmt: skip
            assert shown in screen, (shown, screen[-3000:])

        # Every documented metric, from the app the doc names.
        rows = documented_metrics()
        assert len(rows) >= 15
        texts = {k: _metrics_text(p) for k, p in ports.items()}
        pages = {k: parse(text) for k, text in texts.items()}
        for row in rows:
            apps = [a.strip() for a in row["apps"].split(",")]
            sample = row["name"] + ("_count" if row["type"] == "histogram" else "")
            for (app, dc), page in pages.items():
                if app not in apps:
                    continue
                names = (row["name"], row["name"].removesuffix("_total"))
                declared = any(f"# TYPE {name} " in texts[(app, dc)] for name in names)
                assert declared, (row["name"], app, dc)
                if row["when"] == "always":
                    assert page.matching(sample, dc=dc), (row["name"], app, dc)

        writer.terminate()  # the ad servers stop mid-stream; the pipelines stop next
        writer.wait(timeout=60)
        run.send_signal(signal.SIGTERM)  # what Ctrl-C does, for a process without a terminal
        stdout, _ = run.communicate(timeout=120)
        assert run.returncode == 0
        apps = json.loads(stdout)["apps"]
        assert {(a["app"], a["dc"], a["exit"], a["stopped_by"]) for a in apps} == {
            (app, dc, 0, "signal") for app in ("query-reader", "joiner") for dc in ("a", "b")
        }
        check_report(recorded, tmp_path / "report", apps)
    finally:
        for proc in (writer, run):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in (writer, run):
            try:
                proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                proc.kill()


def check_report(recorded: Path, out: Path, apps: list[dict[str, Any]]) -> None:
    """`photon report` on the recorded run: a page, seven charts, tables that add up to the
    run's own metrics (the recorded counters and what each app said it did)."""
    result = subprocess.run(
        [PHOTON, "report", "--run", str(recorded), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    page = (out / "index.html").read_text()
    report = json.loads((out / "report.json").read_text())
    tables = {t["figure"]: t for t in report["tables"]}
    assert sorted(tables) == [7, 8, 9, 10, 11, 12, 13]
    for figure in tables:
        png = out / f"fig{figure}.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
        assert f"fig{figure}.png" in page and f"Fig. {figure}:" in page
        assert tables[figure]["rows"], figure  # the run's data, not an empty frame
    records = read_records(recorded)
    assert report["lines"] == len(records) > 10

    def column(figure: int, name: str) -> list[Any]:
        table = tables[figure]
        return [row[table["columns"].index(name)] for row in table["rows"]]

    def counter(name: str, dc: str, **labels: str) -> float:
        """The DC joiner's last recorded value (the run had no restart: counters only grow)."""
        last = next(r for r in reversed(records) if f"{dc}/joiner" in r["apps"])
        return sum(
            float(v)
            for n, lab, v in last["apps"][f"{dc}/joiner"]
            if n == name and all(lab.get(k) == x for k, x in labels.items())
        )

    said = {a["dc"]: a for a in apps if a["app"] == "joiner"}
    for dc in ("a", "b"):
        joined = sum(column(9, f"joined_{dc}"))
        assert joined == counter("photon_clicks_total", dc, outcome="joined") > 0
        # what the joiner reported at its stop: its last batches may end after the last scrape
        assert 0 < joined <= said[dc]["joined"]
        assert any(v is not None and v > 0 for v in column(7, f"p90_s_{dc}"))
        assert any(v is not None for v in column(13, f"lag_s_{dc}"))
    ids = sum(column(10, "ids"))
    registered = sum(counter("photon_registry_register_ids_total", dc) for dc in ("a", "b"))
    assert ids == registered > 0
    assert sum(column(10, "transactions")) > 0
    hits = sum(column(8, "cache_hits"))
    assert hits == sum(counter("photon_cache_lookups_total", dc, result="hit") for dc in ("a", "b"))
    wasted = sum(column(12, "wasted_a")) + sum(column(12, "wasted_b"))
    assert wasted == sum(counter("photon_clicks_total", dc, outcome="wasted") for dc in "ab")
    end_ids = sum(column(11, "ids_end"))
    assert end_ids == records[-1]["status"]["registry"]["ids"] > 0
