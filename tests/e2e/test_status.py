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
import subprocess
import time
import urllib.request
from typing import Any

import pytest

from photon.observe.prom import Scrape, parse, scrape
from photon.stack.ports import free_ports, port_is_free
from tests.conftest import REPO
from tests.e2e.helpers import PHOTON

pytestmark = pytest.mark.e2e

GEN = [PHOTON, "--log-level", "warning", "gen", "--mode", "live"]
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")


def _free_run_of_ports(count: int) -> int:
    for _ in range(50):
        [port] = free_ports(1)
        if port + count <= 65535 and all(port_is_free("127.0.0.1", port + i) for i in range(count)):
            return port
    raise AssertionError(f"no {count} consecutive free ports")


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
        [PHOTON, "--log-level", "warning", "status", "--json", "--interval", "2"],
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
    """Run the live dashboard in a pseudo-terminal; what it drew, and its exit status."""
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
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([controller], [], [], 0.5)
            if ready:
                try:
                    chunks.append(os.read(controller, 65536))
                except OSError:
                    break
        proc.send_signal(signal.SIGINT)  # Ctrl-C leaves the dashboard
        status = proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(controller)
    return _ANSI.sub("", b"".join(chunks).decode("utf-8", errors="replace")), status


def test_status_dashboard_and_metrics_of_a_running_two_dc_demo(env: dict[str, str]) -> None:
    base = _free_run_of_ports(4)
    env = env | {"PHOTON_PIPELINE__METRICS_BASE_PORT": str(base)}
    writer = subprocess.Popen(
        [*GEN, "--queries", "9000", "--rate", "100", "--outage-s", "0"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    run = subprocess.Popen(
        [PHOTON, "--log-level", "warning", "run", "--dcs", "a,b"],  # no --until-idle: runs on
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    ports = {("query reader", "a"): base, ("joiner", "a"): base + 1}
    ports |= {("query reader", "b"): base + 2, ("joiner", "b"): base + 3}
    try:
        # Both joiners joining: every endpoint answers and clicks are joined.
        deadline = time.monotonic() + 240
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
        for _ in range(10):  # until a rate shows clicks flowing
            data = status_json(env)
            if any((d["joined_per_s"] or 0) > 0 for d in data["dcs"].values()):
                break
        assert data["healthy"] is True, data
        for name in ("a", "b"):
            dc = data["dcs"][name]
            assert dc["apps"] == {"query-reader": "up", "joiner": "up"} and dc["up"] is True
            for stream in ("queries", "clicks"):
                lag = dc["input_lag"][stream]
                assert lag["bytes"] >= 0 and lag["files"] >= 0
            assert dc["input_lag"]["clicks"]["lag_s"] >= 0
            assert dc["joined_total"] > 0 and dc["joined_per_s"] is not None
            assert dc["latency_p50_s"] > 0 and dc["latency_p90_s"] >= dc["latency_p50_s"]
            for counted in ("retries_pending", "unjoinable_total", "quarantined_total"):
                assert isinstance(dc[counted], int) and dc[counted] >= 0
        assert any(d["joined_per_s"] > 0 for d in data["dcs"].values())
        registry = data["registry"]
        assert registry["healthy"] and registry["error"] is None
        assert sorted(n["mode"] for n in registry["nodes"]) == ["follower", "follower", "leader"]
        assert registry["znodes"] > 0 and registry["epochs"][0]["shards"] >= 1
        assert registry["ids"] > 0 and sum(s["ids"] for s in registry["shards"]) == registry["ids"]
        cache = data["cache"]
        assert 0 < cache["hit_ratio"] <= 1 and cache["memory_used_bytes"] > 0
        assert cache["keys"] > 0 and cache["error"] is None

        screen, status = dashboard_screen(env, seconds=8)
        assert status == 0, screen[-2000:]
        for shown in ("Photon status", "DC a", "DC b", "joined/s", "latency p90", "leader",
                      "follower", "shards per epoch", "hit ratio", "memory used"):  # fmt: skip
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
    finally:
        for proc in (writer, run):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in (writer, run):
            try:
                proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                proc.kill()
