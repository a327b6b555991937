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


def test_an_app_on_a_read_only_logs_mount_waits_for_its_writer_to_make_the_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In compose a DC's apps mount its logs read-only and may start before the ad
    servers wrote anything: the stream waits for the directory instead of crashing."""
    import errno
    import os
    import threading

    from spark_apps.streaming import Stop, await_directory

    clicks = tmp_path / "a" / "clicks"
    real_mkdir = Path.mkdir

    def read_only(self: Path, *args: object, **kwargs: object) -> None:
        if self.name == "clicks":  # the read-only mount's directories
            raise OSError(errno.EROFS, "Read-only file system", str(self))
        real_mkdir(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Path, "mkdir", read_only)
    threading.Timer(0.3, os.makedirs, args=(clicks,)).start()  # the ad server, later
    assert await_directory(clicks, Stop(), poll_s=0.05)
    assert clicks.is_dir()

    stopped = Stop()
    threading.Timer(0.2, stopped.set).start()
    assert not await_directory(tmp_path / "b" / "clicks", stopped, poll_s=0.05)  # never made


def test_a_batch_is_handled_with_the_collector_paused_until_its_lines_are_dropped(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A batch's lines and what its handler makes of them are none of them garbage: the
    cyclic collector stays off from the read until they are dropped, and runs again
    after the batch (as it was before it)."""
    import gc

    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "q.1.log").write_bytes(b'{"query_id": "a"}\n{"query_id": "b"}\n')
    seen: list[tuple[int, bool]] = []

    def handle(_batch: str, lines: Any, _truncations: Any) -> None:
        seen.append((len(lines), gc.isenabled()))

    def start(_spark: object, _options: object, on_batch: Any, _name: str) -> EndedQuery:
        on_batch(None, 0)
        return EndedQuery(None)

    monkeypatch.setattr(streaming, "_start", start)
    monkeypatch.setattr(
        streaming,
        "batch_offsets",
        lambda *_: ({"files": {}, "heads": {}}, {"files": {"q.1.log": 36}, "heads": {}}),
    )
    options = StreamOptions(logs, tmp_path / "ck", 0.01, 1 << 20, 10)
    assert gc.isenabled()
    summary = streaming.run(None, options, handle, streaming.Stop())  # type: ignore[arg-type]
    assert seen == [(2, False)]
    assert gc.isenabled()
    assert (summary.batches, summary.lines) == (1, 2)
