"""An app process's streams, with stand-in streams in place of Spark's queries: who stops
whom, what each app's summary says, a failure ending the process, and pandas hidden
from pyarrow while they run."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from photon.apps import JOINER, QUERY_READER
from photon.join.runtime import AppParts
from photon.settings import PhotonSettings, PipelineSettings
from photon.tooling.runs import wait_until
from spark_apps import app as app_module
from spark_apps import streaming, without_pandas
from spark_apps.app import AppStream, run_apps

pytestmark = pytest.mark.unit

NO_METRICS = PhotonSettings(dcs=["a"], pipeline=PipelineSettings(metrics_base_port=0))


class StandInSession:
    stopped = False

    def stop(self) -> None:
        self.stopped = True


@pytest.fixture
def session(monkeypatch: pytest.MonkeyPatch) -> StandInSession:
    spark = StandInSession()
    monkeypatch.setattr(app_module, "dc_session", lambda *_, **__: spark)
    return spark


def stream(tmp_path: Path, app: str, **options: Any) -> AppStream:
    parts = AppParts("a", tmp_path / app, "a-0000", tmp_path / "logs" / app)
    return AppStream(app, parts, lambda *_: None, totals=lambda: {"lines": 3}, **options)


def stand_in_runs(monkeypatch: pytest.MonkeyPatch, behaviour: dict[str, str]) -> None:
    """``streaming.run`` that, per query, returns at once ("idle"), raises ("fail"), or
    waits for its stop ("wait")."""

    def run(_spark: object, _options: object, _handle: object, stop: streaming.Stop,
            *, query_name: str, **_: object) -> streaming.RunSummary:  # fmt: skip
        what = behaviour[query_name.removesuffix("-a")]
        if what == "fail":
            raise RuntimeError(f"{query_name} broke")
        if what == "wait":
            assert stop.wait(20), "never told to stop"
            return streaming.RunSummary(stopped_by=stop.reason)
        return streaming.RunSummary(stopped_by="idle for 1.0 s")

    monkeypatch.setattr(streaming, "run", run)


def test_a_query_reader_told_to_follow_its_joiner_stops_when_the_joiner_is_idle(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, session: StandInSession
) -> None:
    stand_in_runs(monkeypatch, {QUERY_READER: "wait", JOINER: "idle"})
    streams = [stream(tmp_path, QUERY_READER, stops_with=JOINER), stream(tmp_path, JOINER)]
    summaries = run_apps(NO_METRICS, "photon-pipeline-a", streams)
    assert [(s["app"], s["stopped_by"], s["lines"]) for s in summaries] == [
        (QUERY_READER, "joiner stopped", 3),
        (JOINER, "idle for 1.0 s", 3),
    ]
    for app in (QUERY_READER, JOINER):  # each app's summary in its own state directory
        assert json.loads((tmp_path / app / "summary.json").read_text())["app"] == app
    assert session.stopped


def test_a_failed_stream_stops_the_others_and_the_process_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, session: StandInSession
) -> None:
    stand_in_runs(monkeypatch, {QUERY_READER: "wait", JOINER: "fail"})
    streams = [stream(tmp_path, QUERY_READER), stream(tmp_path, JOINER)]
    with pytest.raises(RuntimeError, match="joiner-a broke"):
        run_apps(NO_METRICS, "photon-pipeline-a", streams)
    assert streams[0].stop.reason == "joiner failed"
    assert not (tmp_path / QUERY_READER / "summary.json").exists()
    assert session.stopped


def test_a_signal_stops_every_stream(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, session: StandInSession
) -> None:
    stand_in_runs(monkeypatch, {QUERY_READER: "wait", JOINER: "wait"})
    streams = [stream(tmp_path, QUERY_READER), stream(tmp_path, JOINER)]
    # As `photon run` stops its children: the main thread's handler stops both streams.
    # Sent once the handler is in place: sent earlier (a slow machine, a long collection
    # in freeze_once), SIGTERM's default action killed the test's worker process.
    unhandled = signal.getsignal(signal.SIGTERM)

    def terminate_once_handled() -> None:
        # Never handled in 60 s: no signal, and the test's time-out names the hang.
        if wait_until(lambda: signal.getsignal(signal.SIGTERM) != unhandled, 60.0, 0.01):
            os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=terminate_once_handled, daemon=True).start()
    summaries = run_apps(NO_METRICS, "photon-pipeline-a", streams)
    assert [s["stopped_by"] for s in summaries] == ["signal", "signal"]


def test_the_streams_run_with_pandas_hidden_from_pyarrow(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, session: StandInSession
) -> None:
    monkeypatch.delitem(sys.modules, without_pandas.PANDAS, raising=False)  # a new driver
    hidden: list[bool] = []

    def run(_spark: object, _options: object, _handle: object, stop: streaming.Stop,
            *, query_name: str, **_: object) -> streaming.RunSummary:  # fmt: skip
        hidden.append(without_pandas._FINDER in sys.meta_path)
        return streaming.RunSummary(stopped_by="idle for 1.0 s")

    monkeypatch.setattr(streaming, "run", run)
    run_apps(NO_METRICS, "photon-pipeline-a", [stream(tmp_path, QUERY_READER)])
    assert hidden == [True]  # the reader's first batch converts its lines without it
    assert without_pandas._FINDER not in sys.meta_path
    assert session.stopped


def test_each_stream_takes_its_own_apps_batch_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, session: StandInSession
) -> None:
    # The joiner's batches are twice the reader's by default (PipelineSettings.batch_bytes).
    bounds: dict[str, int] = {}

    def run(_spark: object, options: streaming.StreamOptions, *_: object,
            query_name: str, **__: object) -> streaming.RunSummary:  # fmt: skip
        bounds[query_name] = options.max_bytes_per_batch
        return streaming.RunSummary(stopped_by="idle for 1.0 s")

    monkeypatch.setattr(streaming, "run", run)
    settings = NO_METRICS.model_copy(
        update={"pipeline": PipelineSettings(metrics_base_port=0, max_bytes_per_batch=4096)}
    )
    streams = [stream(tmp_path, QUERY_READER), stream(tmp_path, JOINER)]
    run_apps(settings, "photon-pipeline-a", streams)
    assert bounds == {f"{QUERY_READER}-a": 4096, f"{JOINER}-a": 8192}
