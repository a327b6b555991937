"""The joiner app's stream: when a run until idle may take its joiner for idle."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from photon.join.runtime import query_reader_dir
from photon.settings import PhotonSettings
from spark_apps.joiner import joiner_stream
from tests.conftest import settings_from_env
from tests.unit.photon.join.test_pacing import commit

pytestmark = pytest.mark.unit


class _Joiner:
    """The dispatcher as the stream's callbacks see it: nothing in flight, no retries."""

    in_flight = None
    committed_batch_lines = None

    def __init__(self) -> None:
        self.passes = 0
        self.totals = self.register_counters = SimpleNamespace(to_dict=dict)

    def process(self, *_: object) -> None:
        raise AssertionError("no batch in these tests")

    process_ranges = finish_in_flight = process

    def clock(self) -> int:
        return 0

    def process_retry_passes(self) -> int:
        self.passes += 1
        return 0


def _joiner_app(settings: PhotonSettings, tmp_path: Path) -> Any:
    retries = SimpleNamespace(settleable=lambda now_us: 0, pending=lambda: 0)
    return SimpleNamespace(
        dc="a", joiner=_Joiner(), retries=retries, attempt="a-test",
        logs_dir=tmp_path / "logs" / "a" / "clicks", checkpoint=tmp_path / "checkpoint",
    )  # fmt: skip


def _settings(tmp_path: Path) -> PhotonSettings:
    return settings_from_env(
        {
            "PHOTON_LOGS_ROOT": str(tmp_path / "logs"),
            "PHOTON_PIPELINE__STATE_ROOT": str(tmp_path / "state"),
            "PHOTON_PIPELINE__READER_PACING_BYTES": "100",
        }
    )


def test_a_run_until_idle_is_not_idle_just_after_its_reader_caught_up(tmp_path: Path) -> None:
    """The reader read its backlog while the paced joiner read nothing; the joiner's
    quiet passed its bound just after the reader caught up, before the source's next
    trigger read the clicks it let through. A look made while the reader was behind
    keeps the run going for the source to read them."""
    settings = _settings(tmp_path)
    assert settings.pipeline.pace_to_reader
    queries = settings.dc_logs("a") / "queries"
    queries.mkdir(parents=True)
    (queries / "q.000000.log").write_bytes(b"x" * 1_000)  # the reader's backlog
    reader = query_reader_dir(settings, "a")
    reader.mkdir(parents=True)
    app = _joiner_app(settings, tmp_path)
    stream = joiner_stream(settings, app, until_idle=5.0)
    assert stream.idle is not None and stream.settled is not None

    stream.idle()  # a look while the reader reads its backlog
    commit(reader, 0, {"q.000000.log": 1_000})  # it caught up
    assert not stream.settled()
    assert app.joiner.passes == 1  # the look ran the retry passes as before


def test_a_run_with_a_reader_caught_up_all_along_may_be_idle(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    queries = settings.dc_logs("a") / "queries"
    queries.mkdir(parents=True)
    (queries / "q.000000.log").write_bytes(b"x" * 1_000)
    reader = query_reader_dir(settings, "a")
    commit(reader, 0, {"q.000000.log": 1_000})
    stream = joiner_stream(settings, _joiner_app(settings, tmp_path), until_idle=5.0)
    assert stream.idle is not None and stream.settled is not None

    stream.idle()
    assert stream.settled()
