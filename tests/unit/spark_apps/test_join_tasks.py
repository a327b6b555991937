"""A group task joins its groups with the cyclic collector paused and pandas hidden from
pyarrow, and leaves both as they were."""

from __future__ import annotations

import gc
import sys
from typing import Any

import pytest

from photon.settings import PhotonSettings
from spark_apps import join_tasks, without_pandas

pytestmark = pytest.mark.unit


class _Work:
    task_attempt = -1


class _RecordingJoiner:
    """Stands in for the worker's GroupJoiner: records whether the collector ran."""

    def __init__(self) -> None:
        self.collecting: list[bool] = []
        self.pandas_hidden: list[bool] = []

    def join(self, work: _Work) -> str:
        self.collecting.append(gc.isenabled())
        self.pandas_hidden.append(without_pandas._FINDER in sys.meta_path)
        return f"outcome of try {work.task_attempt}"


@pytest.fixture
def joiner(monkeypatch: pytest.MonkeyPatch) -> _RecordingJoiner:
    recording = _RecordingJoiner()
    monkeypatch.setattr(join_tasks, "_group_joiner", lambda *args, **kwargs: recording)
    return recording


def _task(works: list[Any]) -> list[Any]:
    join = join_tasks._join_partition(PhotonSettings(), "a", "attempt-1", None)
    return list(join(works))


def test_a_task_joins_its_groups_with_the_collector_paused(
    joiner: _RecordingJoiner, collecting: None
) -> None:
    outcomes = _task([_Work(), _Work()])
    assert outcomes == ["outcome of try 0", "outcome of try 0"]  # no TaskContext: try 0
    assert joiner.collecting == [False, False]
    assert gc.isenabled()  # the daemon's collection after the task finds it on


def test_a_task_that_fails_leaves_the_collector_on(
    joiner: _RecordingJoiner, collecting: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    def fail(work: _Work) -> str:
        raise RuntimeError("registry down")

    monkeypatch.setattr(joiner, "join", fail)
    with pytest.raises(RuntimeError, match="registry down"):
        _task([_Work()])
    assert gc.isenabled()


@pytest.mark.usefixtures("collecting")
def test_a_task_leaves_a_collector_that_was_off_off(joiner: _RecordingJoiner) -> None:
    gc.disable()
    _task([_Work()])
    assert not gc.isenabled()


def test_a_task_joins_its_groups_with_pandas_hidden_from_pyarrow(
    joiner: _RecordingJoiner, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delitem(sys.modules, without_pandas.PANDAS, raising=False)  # as in a new worker
    _task([_Work(), _Work()])
    assert joiner.pandas_hidden == [True, True]
    assert without_pandas._FINDER not in sys.meta_path
