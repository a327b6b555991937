"""A running query's watch: its status is read only when the stream's quiet can decide."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from spark_apps import streaming
from spark_apps.streaming import StreamOptions

pytestmark = pytest.mark.unit


class WatchedQuery:
    """A running query whose status reads are counted; it ends after ``looks`` looks."""

    def __init__(self, looks: int, status: dict[str, Any] | None = None) -> None:
        self.looks_left = looks
        self.status_reads = 0
        self.statuses = [status or {"isTriggerActive": False, "isDataAvailable": False}]

    @property
    def isActive(self) -> bool:  # PySpark's name
        self.looks_left -= 1
        return self.looks_left >= 0

    @property
    def status(self) -> dict[str, Any]:
        self.status_reads += 1
        return self.statuses.pop(0) if len(self.statuses) > 1 else self.statuses[0]


def watch(
    query: WatchedQuery,
    tmp_path: Path,
    until_idle_s: float | None,
    *,
    stop: streaming.Stop | None = None,
    idle: Callable[[], Any] | None = None,
    settled: Callable[[], bool] = lambda: True,
) -> str:
    """Watch ``query`` as a stream whose last batch with lines has just begun."""
    options = StreamOptions(tmp_path / "logs", tmp_path / "ck", 0.001, 1 << 20, 10, until_idle_s)
    return streaming._watch(
        query,  # type: ignore[arg-type]
        options,
        stop or streaming.Stop(),
        idle,
        settled,
        [time.monotonic()],
    )


@pytest.fixture(autouse=True)
def quick_looks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(streaming, "STATUS_EVERY_S", 0.001)


def test_without_an_idle_limit_the_status_is_never_read(tmp_path: Path) -> None:
    query = WatchedQuery(looks=20)
    idles: list[int] = []
    stopped = watch(query, tmp_path, None, idle=lambda: idles.append(1))
    assert stopped == "query ended"
    assert query.status_reads == 0
    assert len(idles) == 20  # the idle callback still runs at every look


def test_while_batches_bring_lines_the_status_is_not_read(tmp_path: Path) -> None:
    query = WatchedQuery(looks=20)
    stopped = watch(query, tmp_path, 60.0)  # a batch just brought lines: 60 s to go
    assert stopped == "query ended"
    assert query.status_reads == 0


def test_a_quiet_settled_stream_is_idle_at_the_first_look_that_can_tell(tmp_path: Path) -> None:
    query = WatchedQuery(looks=20)
    stopped = watch(query, tmp_path, 0.0)
    assert stopped == "idle for 0.0 s"
    assert query.status_reads == 1


def test_a_running_trigger_or_data_waiting_or_an_unsettled_join_is_not_idle(
    tmp_path: Path,
) -> None:
    busy = {"isTriggerActive": True, "isDataAvailable": False}
    data = {"isTriggerActive": False, "isDataAvailable": True}
    quiet = {"isTriggerActive": False, "isDataAvailable": False}
    query = WatchedQuery(looks=20)
    query.statuses = [busy, data, quiet, quiet]
    settles = iter([False, True])
    stopped = watch(query, tmp_path, 0.0, settled=lambda: next(settles))
    assert stopped == "idle for 0.0 s"
    assert query.status_reads == 4  # busy, data waiting, not settled, then idle


def test_a_stream_still_starting_is_not_idle(tmp_path: Path) -> None:
    query = WatchedQuery(looks=3, status={"message": "Initializing sources"})
    stopped = watch(query, tmp_path, 0.0)
    assert stopped == "query ended"
    assert query.status_reads == 3


def test_a_stop_ends_the_watch_at_once(tmp_path: Path) -> None:
    stop = streaming.Stop()
    stop.set("another app")
    query = WatchedQuery(looks=20)
    stopped = watch(query, tmp_path, None, stop=stop)
    assert stopped == "another app"
    assert query.looks_left == 20
