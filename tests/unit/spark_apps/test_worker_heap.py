"""A Python worker freezes its heap once something long-lived was built, once per thing;
one Spark's daemon forked leaves its collections to the daemon."""

from __future__ import annotations

import gc
import sys
import types
from collections.abc import Iterator

import pytest

from spark_apps import worker_heap

pytestmark = pytest.mark.unit


@pytest.fixture(autouse=True)
def thawed() -> Iterator[None]:
    worker_heap._FROZEN.clear()
    gc.unfreeze()
    yield
    gc.unfreeze()
    gc.enable()
    worker_heap._FROZEN.clear()


def _main_module_run_as(monkeypatch: pytest.MonkeyPatch, module: str) -> None:
    main = types.ModuleType("__main__")
    main.__spec__ = types.SimpleNamespace(name=module)  # type: ignore[assignment]
    monkeypatch.setitem(sys.modules, "__main__", main)


def test_what_was_built_leaves_the_collections_and_what_comes_later_does_not() -> None:
    clients = [["model", n] for n in range(10_000)]  # a worker's long-lived clients
    worker_heap.freeze_once("clients")
    frozen = gc.get_freeze_count()
    assert frozen >= len(clients)
    assert not any(c is clients[0] for c in gc.get_objects())  # out of every generation

    later = [["task", n] for n in range(100)]  # a task's objects, built after the freeze
    worker_heap.freeze_once("clients")  # the next task: nothing more frozen
    assert any(c is later[0] for c in gc.get_objects())  # still collected, not frozen
    # Never more: other threads of this process may free frozen objects, never add any.
    assert gc.get_freeze_count() <= frozen

    before = gc.get_freeze_count()
    worker_heap.freeze_once("another client")  # built later in the same worker: frozen too
    assert gc.get_freeze_count() > before
    assert not any(c is later[0] for c in gc.get_objects())


@pytest.mark.parametrize("daemon", ["pyspark.daemon", "spark_apps.preloading_daemon"])
def test_a_worker_forked_by_spark_s_daemon_leaves_collecting_to_it(
    monkeypatch: pytest.MonkeyPatch, daemon: str
) -> None:
    _main_module_run_as(monkeypatch, daemon)
    assert worker_heap.under_spark_daemon()
    worker_heap.freeze_once("clients")
    # The daemon runs gc.collect() after each task: no collection inside one.
    assert not gc.isenabled()


@pytest.mark.parametrize("module", ["pytest", "spark_apps.joiner", "pyspark.worker"])
def test_any_other_process_keeps_its_collector(
    monkeypatch: pytest.MonkeyPatch, module: str
) -> None:
    _main_module_run_as(monkeypatch, module)
    assert not worker_heap.under_spark_daemon()
    worker_heap.freeze_once("clients")
    assert gc.isenabled()
