"""`photon run`'s launcher with stand-in apps: small processes in place of the Spark apps.

Each stand-in writes the summary of every app it runs into that app's state
directory, as the real apps do when they stop, and exits: a joiner-bearing one
after a moment (idle), a query reader alone only once it is told to stop. With
``BATCH_AT_S`` set, a joiner-bearing one logs its first batch that long after
its start, as a real joiner logs ``joiner.batch``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

from photon.apps import JOINER, QUERY_READER
from photon.settings import PhotonSettings, PipelineSettings
from photon.tooling import pipeline
from photon.tooling.pipeline import app_summaries, run_pipelines

pytestmark = pytest.mark.unit

_STAND_IN = """
import json, os, pathlib, signal, subprocess, sys, time
app, state_root, dc = sys.argv[1], pathlib.Path(sys.argv[2]), sys.argv[3]
apps = ["query-reader", "joiner"] if app == "both" else [app]
orphan_log = state_root / dc / "orphan.log"
if dc == "b" and os.environ.get("ORPHAN") and os.environ["PHOTON_APP_RESTARTS"] == "0":
    # a child that outlives the run, writing on (as a dead driver's JVM does)
    state_root.joinpath(dc).mkdir(parents=True, exist_ok=True)
    writer = ("import sys, time\\n"
              "for _ in range(3000): open(sys.argv[1], 'a').write('x'); time.sleep(0.01)")
    subprocess.Popen([sys.executable, "-c", writer, str(orphan_log)])
    time.sleep(0.2)
# DC b's first DIES runs die at once, as a killed driver does (RESTARTS: told by the launcher)
if dc == "b" and int(os.environ["PHOTON_APP_RESTARTS"]) < int(os.environ.get("DIES", "0")):
    sys.exit(3)
orphan_at_start = orphan_log.stat().st_size if orphan_log.exists() else 0
stopped, started_at, batch_at = [], time.time(), None
signal.signal(signal.SIGTERM, lambda *_: stopped.append("signal"))
idle_at = time.monotonic() + float(os.environ.get("IDLE_AFTER_S", "0.5"))
first_batch_at = time.monotonic() + float(os.environ.get("BATCH_AT_S", "inf"))
while not stopped and ("joiner" not in apps or time.monotonic() < idle_at):
    if "joiner" in apps and batch_at is None and time.monotonic() >= first_batch_at:
        batch_at = time.time()
        print('{"event": "joiner.batch", "lines": 10}', flush=True)
    time.sleep(0.05)
for name in apps:
    (state_root / dc / name).mkdir(parents=True, exist_ok=True)
    summary = {"app": name, "dc": dc, "stopped_by": stopped[0] if stopped else "idle",
               "started_at": started_at, "batch_at": batch_at, "stopped_at": time.time(),
               "orphan_wrote_meanwhile": orphan_log.exists()
               and orphan_log.stat().st_size != orphan_at_start}
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


def settings(tmp_path: Path, one_app_per_dc: bool, **pipeline: Any) -> PhotonSettings:
    """The DCs started together unless a test staggers them (on any machine's cores)."""
    return PhotonSettings(
        logs_root=tmp_path / "logs",
        dcs=["a", "b"],
        pipeline=PipelineSettings(
            state_root=tmp_path / "state",
            one_app_per_dc=one_app_per_dc,
            **({"staggered_start": "off"} | pipeline),
        ),
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


@pytest.mark.parametrize("one_app_per_dc", [True, False])
def test_a_dc_that_dies_is_restarted_while_the_other_runs_on(
    tmp_path: Path, launched: list[list[str]], monkeypatch: pytest.MonkeyPatch,
    one_app_per_dc: bool,
) -> None:  # fmt: skip
    monkeypatch.setenv("DIES", "2")  # DC b dies twice, then runs
    monkeypatch.setenv("IDLE_AFTER_S", "2")  # DC a still runs when b dies
    restarts: list[tuple[str, int, float]] = []
    children = run_pipelines(
        settings(tmp_path, one_app_per_dc, restart_backoff_s=0.2, restart_max_backoff_s=0.3),
        ["a", "b"],
        until_idle_s=1.0,
        on_restart=lambda child, delay: restarts.append((child.name, child.restarts, delay)),
    )
    summaries = [s for c in children for s in app_summaries(c)]
    # DC a was never stopped for b: it ran until idle, once
    assert {s["stopped_by"] for s in summaries if s["dc"] == "a" and s["app"] == JOINER} == {"idle"}
    assert {s["restarts"] for s in summaries if s["dc"] == "a"} == {0}
    # b came back by itself, after a backoff that doubled up to its bound
    b = [c for c in children if c.dc == "b" and JOINER in c.apps]
    assert [(r[1], r[2]) for r in restarts if r[0] == b[0].name] == [(1, 0.2), (2, 0.3)]
    assert all(s["exit"] == 0 for s in summaries if s["app"] == JOINER)
    assert {s["restarts"] for s in summaries if s["dc"] == "b" and s["app"] == JOINER} == {2}


@pytest.mark.parametrize("one_app_per_dc", [True, False])
def test_a_restarted_dc_runs_with_nothing_left_of_its_dead_run(
    tmp_path: Path, launched: list[list[str]], monkeypatch: pytest.MonkeyPatch,
    one_app_per_dc: bool,
) -> None:  # fmt: skip
    """What outlived a dead run (its JVM: here a child writing on) is gone before the
    restart: nothing writes beside the new run."""
    monkeypatch.setenv("ORPHAN", "1")
    monkeypatch.setenv("DIES", "1")
    monkeypatch.setenv("IDLE_AFTER_S", "0.5")
    children = run_pipelines(
        settings(tmp_path, one_app_per_dc, restart_backoff_s=0.2), ["a", "b"], until_idle_s=1.0
    )
    summaries = [s for c in children for s in app_summaries(c)]
    b = [s for s in summaries if s["dc"] == "b" and s["app"] == JOINER]
    assert [s["restarts"] for s in b] == [1]
    assert not b[0]["orphan_wrote_meanwhile"]


def test_a_dc_that_keeps_dying_young_is_given_up_on_once_the_others_are_done(
    tmp_path: Path, launched: list[list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DIES", "1000")
    with pytest.raises(pipeline.PipelineError, match=r"\[b\] died 3 times in a row") as caught:
        run_pipelines(
            settings(tmp_path, True, restart_backoff_s=0.1, crash_loop_limit=3),
            ["a", "b"],
            until_idle_s=1.0,
        )
    assert "given up on" in str(caught.value)
    # DC a ran to its end meanwhile
    summary = (tmp_path / "state" / "a" / JOINER / "summary.json").read_text()
    assert '"stopped_by": "idle"' in summary
    assert [argv[5] for argv in launched].count("b") == 3  # started, then restarted twice


def test_restart_backoff_settings_are_checked() -> None:
    with pytest.raises(ValueError, match="restart_max_backoff_s"):
        PipelineSettings(restart_backoff_s=10, restart_max_backoff_s=5)


def _summary(children: list[pipeline.Child], dc: str) -> dict[str, Any]:
    return next(
        s for c in children for s in app_summaries(c) if s["dc"] == dc and s["app"] == JOINER
    )


@pytest.mark.parametrize("one_app_per_dc", [True, False])
def test_staggered_dcs_start_each_once_the_one_before_has_joined_its_first_batch(
    tmp_path: Path, launched: list[list[str]], monkeypatch: pytest.MonkeyPatch,
    one_app_per_dc: bool,
) -> None:  # fmt: skip
    monkeypatch.setenv("BATCH_AT_S", "0.6")
    monkeypatch.setenv("IDLE_AFTER_S", "4")
    children = run_pipelines(
        settings(tmp_path, one_app_per_dc, staggered_start="on"), ["a", "b"], until_idle_s=1.0
    )
    a, b = _summary(children, "a"), _summary(children, "b")
    assert a["batch_at"] is not None and b["started_at"] >= a["batch_at"]
    # ...and not once a had stopped: the DCs ran side by side after their start-ups
    assert b["started_at"] < a["stopped_at"]
    assert {(s["dc"], s["exit"]) for c in children for s in app_summaries(c)} == {
        ("a", 0), ("b", 0)
    }  # fmt: skip


def test_a_staggered_dc_waits_for_the_one_before_no_longer_than_its_bound(
    tmp_path: Path, launched: list[list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("IDLE_AFTER_S", "4")  # DC a never logs a batch, and runs 4 s
    children = run_pipelines(
        settings(tmp_path, True, staggered_start="on", stagger_max_wait_s=0.5),
        ["a", "b"],
        until_idle_s=1.0,
    )
    a, b = _summary(children, "a"), _summary(children, "b")
    assert b["started_at"] - a["started_at"] >= 0.5 and b["started_at"] < a["stopped_at"]


def test_a_staggered_dc_whose_predecessor_dies_starts_at_once(
    tmp_path: Path, launched: list[list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DIES", "1")  # DC b, started first, dies at once: a does not wait on it
    children = run_pipelines(
        settings(tmp_path, True, staggered_start="on", restart_backoff_s=3.0),
        ["b", "a"],
        until_idle_s=1.0,
    )
    assert [argv[5] for argv in launched] == ["b", "a", "b"]  # b again, after its backoff
    a, b = _summary(children, "a"), _summary(children, "b")  # b's: its run after the backoff
    assert a["started_at"] < b["started_at"]  # a did not wait out b's backoff
    assert a["exit"] == 0 and a["stopped_by"] == "idle" and b["restarts"] == 1


@pytest.mark.parametrize(
    ("setting", "cores", "staggered"),
    [("auto", 1, True), ("auto", 2, True), ("auto", 3, False), ("on", 8, True), ("off", 1, False)],
)
def test_auto_staggers_where_this_process_may_use_at_most_one_core_a_dc(
    monkeypatch: pytest.MonkeyPatch, setting: str, cores: int, staggered: bool
) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: set(range(cores)))
    configured = PipelineSettings.model_validate({"staggered_start": setting})
    assert pipeline.starts_staggered(configured, 2) is staggered


def test_stagger_settings_are_checked() -> None:
    with pytest.raises(ValueError, match="staggered_start"):
        PipelineSettings(staggered_start="sometimes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="stagger_max_wait_s"):
        PipelineSettings(stagger_max_wait_s=0)
