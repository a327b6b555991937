"""The apps' Python worker daemon: what it loads for each kind of worker, that loading it
all leaves one thread, and that it becomes PySpark's own daemon when it cannot be sure
(spark_apps/preloading_daemon.py). A Spark task forked by it: tests/integration/spark_apps/
test_session.py."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from spark_apps import preloading_daemon

pytestmark = pytest.mark.unit

PRELOADED = ["spark_apps.join_tasks", "pyarrow.dataset"]  # for a task worker


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["d", "pyspark.worker"], ["pyspark.worker", *PRELOADED]),
        (["d"], ["pyspark.worker", *PRELOADED]),  # Spark passed no module
        (["d", "pyspark.sql.worker.analyze_udtf"], ["pyspark.sql.worker.analyze_udtf"]),
        # Not PySpark's: PySpark's daemon would not import it either, nor will this one.
        (["d", "somebody.worker"], ["pyspark.worker", *PRELOADED]),
    ],
)  # fmt: skip
def test_each_kind_of_worker_gets_its_module_and_what_it_unpickles(
    argv: list[str], expected: list[str]
) -> None:
    assert preloading_daemon.modules_for(argv) == expected


def test_a_module_that_cannot_be_imported_is_reported_and_skipped(
    capsys: pytest.CaptureFixture[str],
) -> None:
    failed = preloading_daemon.preload(["no_such_module_here", "json"])
    assert failed == ["no_such_module_here"]
    assert "no_such_module_here not preloaded" in capsys.readouterr().err


def test_everything_it_preloads_leaves_the_daemon_one_thread() -> None:
    """What makes forking safe: run in a fresh interpreter, as the daemon is."""
    modules = sorted(
        {m for worker in preloading_daemon.PRELOADS for m in preloading_daemon.modules_for(
            ["d", worker])}
    )  # fmt: skip
    script = (
        "import json, os, sys\n"
        "from spark_apps import preloading_daemon as d\n"
        "os.environ.update(d.SINGLE_THREADED_ENV)\n"
        f"failed = d.preload({modules!r})\n"
        "print(json.dumps([failed, d.threads(), sorted(set(sys.modules) & set("
        f"{modules!r}))]))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], check=True, capture_output=True, text=True
    ).stdout
    failed, threads, loaded = json.loads(out)
    assert failed == []
    assert loaded == modules
    assert threads == 1


@pytest.mark.parametrize("threads", [2, None])
def test_a_daemon_that_cannot_be_sure_becomes_pyspark_s_own(
    monkeypatch: pytest.MonkeyPatch, threads: int | None
) -> None:
    became: list[list[str]] = []

    def execv(path: str, argv: list[str]) -> None:
        became.append(argv)
        raise SystemExit(0)  # exec does not return

    monkeypatch.setattr("os.execv", execv)
    monkeypatch.setattr(preloading_daemon, "threads", lambda: threads)
    monkeypatch.setattr(preloading_daemon, "preload", lambda modules: [])
    monkeypatch.setattr(sys, "argv", ["preloading_daemon", "pyspark.worker"])
    with pytest.raises(SystemExit):
        preloading_daemon.main()
    assert became == [[sys.executable, "-m", "pyspark.daemon", "pyspark.worker"]]
