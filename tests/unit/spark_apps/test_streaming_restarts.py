"""A streaming query whose Python workers failed to start is started again; others fail."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from spark_apps import streaming
from spark_apps.streaming import MAX_RESTARTS, StreamOptions

pytestmark = pytest.mark.unit


class EndedQuery:
    """A query that has already ended, with ``error`` (None: it stopped cleanly)."""

    isActive = False

    def __init__(self, error: str | None) -> None:
        self.error = error
        self.status: dict[str, Any] = {}

    def exception(self) -> str | None:
        return self.error

    def stop(self) -> None:
        raise AssertionError("an ended query is not stopped")


def run_with(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, errors: list[str | None]) -> int:
    started: list[EndedQuery] = []

    def start(*_: object) -> EndedQuery:
        started.append(EndedQuery(errors[len(started)]))
        return started[-1]

    monkeypatch.setattr(streaming, "_start", start)
    monkeypatch.setattr(streaming, "RESTART_BACKOFF_S", 0.0)
    options = StreamOptions(tmp_path / "logs", tmp_path / "ck", 0.01, 1 << 20, 10)
    streaming.run(None, options, lambda *_: None, streaming.Stop())  # type: ignore[arg-type]
    return len(started)


WORKER = "org.apache.spark.SparkException: Python worker failed to connect back."


def test_a_query_whose_python_worker_did_not_connect_back_is_started_again(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    assert run_with(monkeypatch, tmp_path, [WORKER, WORKER, None]) == 3


def test_restarts_are_bounded(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="failed to connect back"):
        run_with(monkeypatch, tmp_path, [WORKER] * (MAX_RESTARTS + 2))


def test_any_other_failure_ends_the_run(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="the streaming query photon failed: boom"):
        run_with(monkeypatch, tmp_path, ["boom", None])
