"""A running query's watch: when a stream that stops once idle is idle, and when not."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from spark_apps import streaming
from spark_apps.streaming import StreamOptions

pytestmark = pytest.mark.unit

BUSY = {"isTriggerActive": True, "isDataAvailable": False}
DATA = {"isTriggerActive": False, "isDataAvailable": True}
QUIET = {"isTriggerActive": False, "isDataAvailable": False}
STARTING = {"message": "Initializing sources"}


class WatchedQuery:
    """A running query that ends after ``looks`` looks; its statuses in turn (the last
    one again and again), each read counted."""

    def __init__(self, looks: int, *statuses: dict[str, Any]) -> None:
        self.looks_left = looks
        self.status_reads = 0
        self.statuses = list(statuses) or [QUIET]

    @property
    def isActive(self) -> bool:  # PySpark's name
        self.looks_left -= 1
        return self.looks_left >= 0

    @property
    def status(self) -> dict[str, Any]:
        self.status_reads += 1
        return self.statuses.pop(0) if len(self.statuses) > 1 else self.statuses[0]


@pytest.fixture(autouse=True)
def clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """Looks a millisecond apart, on a clock that moves a second each time it is read:
    how long a stream was quiet does not depend on how fast this machine is."""
    monkeypatch.setattr(streaming, "STATUS_EVERY_S", 0.001)
    seconds = itertools.count()
    monkeypatch.setattr(streaming, "time", SimpleNamespace(monotonic=lambda: next(seconds)))


def watch(
    query: WatchedQuery,
    tmp_path: Path,
    until_idle_s: float | None,
    *,
    stop: streaming.Stop | None = None,
    idle: Callable[[], Any] | None = None,
    settled: Callable[[], bool] = lambda: True,
) -> str:
    """Watch ``query`` as a stream whose last batch with lines began as the clock
    started (at 0)."""
    options = StreamOptions(tmp_path / "logs", tmp_path / "ck", 0.001, 1 << 20, 10, until_idle_s)
    return streaming._watch(
        query,  # type: ignore[arg-type]
        options,
        stop or streaming.Stop(),
        idle,
        settled,
        [0.0],
    )


def test_without_an_idle_limit_the_status_is_never_read(tmp_path: Path) -> None:
    query = WatchedQuery(20)
    idles: list[int] = []
    assert watch(query, tmp_path, None, idle=lambda: idles.append(1)) == "query ended"
    assert query.status_reads == 0
    assert len(idles) == 20  # the idle callback still runs at every look


def test_a_quiet_settled_stream_is_idle_once_quiet_for_the_limit(tmp_path: Path) -> None:
    query = WatchedQuery(20)
    assert watch(query, tmp_path, 5.0) == "idle for 5.0 s"
    assert 1 < query.status_reads < 20


def test_triggers_seen_running_keep_a_stream_without_lines_from_idling(tmp_path: Path) -> None:
    # A joiner whose source holds its clicks back until its query reader catches up:
    # no batch brings lines for longer than the idle limit, while its triggers run.
    query = WatchedQuery(150, *[BUSY, QUIET] * 75)
    assert watch(query, tmp_path, 2.5) == "query ended"
    assert query.status_reads == 150  # at every look: a trigger between two is missed


def test_data_waiting_or_an_unsettled_join_is_not_idle(tmp_path: Path) -> None:
    query = WatchedQuery(20, DATA, QUIET, QUIET)
    settles = iter([False, True])
    assert watch(query, tmp_path, 0.0, settled=lambda: next(settles)) == "idle for 0.0 s"
    assert query.status_reads == 3  # data waiting, not settled, then idle


def test_a_stream_still_starting_is_not_idle(tmp_path: Path) -> None:
    query = WatchedQuery(30, STARTING)
    assert watch(query, tmp_path, 1.5) == "query ended"
    assert query.status_reads == 30


def test_a_stop_ends_the_watch_at_once(tmp_path: Path) -> None:
    stop = streaming.Stop()
    stop.set("another app")
    query = WatchedQuery(20)
    assert watch(query, tmp_path, None, stop=stop) == "another app"
    assert query.looks_left == 20
