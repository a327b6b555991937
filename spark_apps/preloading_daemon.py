"""PySpark's worker daemon, with the modules its workers import loaded before it forks them.

Spark forks an app's Python task workers from a daemon
(``python -m <daemon module> pyspark.worker``; ``spark.python.daemon.module``
names the module). PySpark's own daemon (``pyspark.daemon``) imports nothing
of the worker's, so every forked worker imported its worker module and then
what its task's pickle names: for a joiner's task, ``spark_apps.join_tasks``
and its chain, ~0.56 CPU-s on this project's 2-core machine. An app forks one
worker per executor core as it starts (the warm-up), each paying those
imports while the app was starting. This daemon imports them once, before it
serves, and every worker it forks has them (docs/deploy.md, "Start-up").
Spark 4.2 starts the processes that create and plan a Python data source
from ``pyspark.daemon`` whatever the setting, so only task workers come from
here.

PySpark's daemon imports after the fork because a module that starts a thread
when imported would leave the forked worker without that thread and perhaps
with a lock it held. Of what is loaded here, two libraries do: numpy's OpenBLAS
starts its thread pool (the workers do no linear algebra: one thread,
``OPENBLAS_NUM_THREADS=1``), and Arrow's bundled jemalloc its background purging
thread as the library loads (``JE_ARROW_MALLOC_CONF=background_thread:false``).
That jemalloc is only loaded: Arrow's buffers come from its default pool, mimalloc
(pyarrow 26), unless ``ARROW_DEFAULT_MEMORY_POOL`` names jemalloc. Both are set
before anything is imported.

How it fails: a module that cannot be imported is skipped (a line on stderr,
which Spark keeps in the app's log); the worker then imports it itself, as
under PySpark's daemon. If this process runs more than one thread once its
modules are loaded (a library that started one anyway), or it cannot count
its threads (no ``/proc``: not Linux), it replaces itself with PySpark's daemon
(``exec``: the same process, before it has served anything), so nothing is
ever forked beside a thread.
"""

from __future__ import annotations

import gc
import importlib
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from spark_apps import SINGLE_THREADED_ENV

#: What a kind of worker imports besides its worker module; the key is the worker
#: module Spark passes (``pyspark.worker`` for tasks, when it passes none).
#: A task's first Parquet read of a log-file map run (``pq.read_table``) imports
#: ``pyarrow.dataset`` and with it ``pyarrow.compute``: ~0.2 CPU-s a worker, in its first
#: batch, where the daemon pays it once an app.
PRELOADS: dict[str, tuple[str, ...]] = {
    "pyspark.worker": ("spark_apps.join_tasks", "pyarrow.dataset"),
}


#: This module, as ``spark.python.daemon.module`` names it.
MODULE = "spark_apps.preloading_daemon"
FALLBACK_DAEMON = "pyspark.daemon"


def modules_for(argv: Sequence[str]) -> list[str]:
    """The modules to load for the worker module in ``argv`` (``sys.argv``): the worker
    module itself when it is PySpark's (PySpark's daemon imports only those), then
    what :data:`PRELOADS` names for it."""
    worker_module = argv[1] if len(argv) > 1 and argv[1].startswith("pyspark") else None
    modules = [worker_module or "pyspark.worker"]
    return modules + list(PRELOADS.get(worker_module or "pyspark.worker", ()))


def preload(modules: Sequence[str]) -> list[str]:
    """Import ``modules``; return those that failed (each reported on stderr)."""
    failed = []
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception as exc:  # the worker imports it itself, later
            print(f"preloading_daemon: {name} not preloaded: {exc!r}", file=sys.stderr)
            failed.append(name)
    return failed


def threads() -> int | None:
    """The threads of this process, native ones included (``threading`` sees only its
    own); None where the system does not tell (no ``/proc``)."""
    try:
        return sum(1 for _ in Path("/proc/self/task").iterdir())
    except OSError:
        return None


def run_pyspark_daemon(why: str) -> None:
    """Become PySpark's own daemon: same process, same pipes, nothing served yet."""
    print(f"preloading_daemon: {why}; running {FALLBACK_DAEMON} instead", file=sys.stderr)
    os.execv(sys.executable, [sys.executable, "-m", FALLBACK_DAEMON, *sys.argv[1:]])  # noqa: S606


def main() -> None:
    if threads() is None:
        run_pyspark_daemon("this system does not list a process's threads")
    os.environ.update(SINGLE_THREADED_ENV)
    preload(modules_for(sys.argv))
    if threads() != 1:
        run_pyspark_daemon("a preloaded module started a thread")
    # What the daemon holds now lives as long as its workers: out of the collector's
    # way, so that no collection in a worker touches (and copies) those pages.
    gc.collect()
    gc.freeze()
    from pyspark.daemon import manager

    manager()


if __name__ == "__main__":
    main()
