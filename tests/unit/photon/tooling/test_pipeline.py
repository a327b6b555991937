"""`photon run`'s launcher with stand-in apps: small processes in place of the Spark apps.

Each stand-in writes the summary of every app it runs into that app's state
directory, as the real apps do when they stop, and exits: a joiner-bearing one
after a moment (idle), a query reader alone only once it is told to stop.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from photon.apps import JOINER, QUERY_READER
from photon.settings import PhotonSettings, PipelineSettings
from photon.tooling import pipeline
from photon.tooling.pipeline import app_summaries, run_pipelines

pytestmark = pytest.mark.unit

_STAND_IN = """
import json, pathlib, signal, sys, time
app, state_root, dc = sys.argv[1], pathlib.Path(sys.argv[2]), sys.argv[3]
apps = ["query-reader", "joiner"] if app == "both" else [app]
stopped = []
signal.signal(signal.SIGTERM, lambda *_: stopped.append("signal"))
idle_at = time.monotonic() + 0.5  # a joiner goes idle; a query reader waits to be stopped
while not stopped and ("joiner" not in apps or time.monotonic() < idle_at):
    time.sleep(0.05)
for name in apps:
    (state_root / dc / name).mkdir(parents=True, exist_ok=True)
    summary = {"app": name, "dc": dc, "stopped_by": stopped[0] if stopped else "idle"}
    (state_root / dc / name / "summary.json").write_text(json.dumps(summary))
"""


@pytest.fixture
def launched(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    argvs: list[list[str]] = []

    def stand_in(app: str | None, dc: str, **_: object) -> list[str]:
        argv = [sys.executable, "-c", _STAND_IN, app or "both", str(tmp_path / "state"), dc]
        argvs.append(argv)
        return argv

    monkeypatch.setattr(pipeline, "app_argv", stand_in)
    return argvs


def settings(tmp_path: Path, one_app_per_dc: bool) -> PhotonSettings:
    return PhotonSettings(
        logs_root=tmp_path / "logs",
        dcs=["a", "b"],
        pipeline=PipelineSettings(state_root=tmp_path / "state", one_app_per_dc=one_app_per_dc),
    )


def test_one_application_a_dc_runs_both_apps_and_reports_each(
    tmp_path: Path, launched: list[list[str]]
) -> None:
    children = run_pipelines(settings(tmp_path, True), ["a", "b"], until_idle_s=1.0)
    assert [argv[3] for argv in launched] == ["both", "both"]
    assert [(c.dc, c.apps) for c in children] == [
        ("a", (QUERY_READER, JOINER)),
        ("b", (QUERY_READER, JOINER)),
    ]
    assert children[0].log_path == tmp_path / "state" / "a" / JOINER / "app.log"
    summaries = [s for c in children for s in app_summaries(c)]
    assert {(s["app"], s["dc"], s["exit"], s["stopped_by"]) for s in summaries} == {
        (app, dc, 0, "idle") for app in (QUERY_READER, JOINER) for dc in ("a", "b")
    }


def test_an_application_an_app_stops_the_query_readers_once_every_joiner_is_idle(
    tmp_path: Path, launched: list[list[str]]
) -> None:
    children = run_pipelines(settings(tmp_path, False), ["a"], until_idle_s=1.0)
    assert [argv[3] for argv in launched] == [QUERY_READER, JOINER]
    assert [c.apps for c in children] == [(QUERY_READER,), (JOINER,)]
    by_app = {s["app"]: s for c in children for s in app_summaries(c)}
    assert by_app[JOINER]["stopped_by"] == "idle"
    assert by_app[QUERY_READER]["stopped_by"] == "signal"  # told to stop after the joiner
