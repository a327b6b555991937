"""A process's long-lived objects, kept out of the cyclic collector's way.

Spark reuses a Python worker for task after task, and its daemon runs a full
``gc.collect()`` after each one. A worker that holds the joiner's clients
(botocore's service models, kazoo, the log-file map) tracks hundreds of
thousands of objects, and every collection walked them all: in a joiner at
~15 clicks/s, twice the CPU of the tasks themselves. :func:`freeze_once` moves
what the worker holds once something long-lived was built into the permanent
generation (``gc.freeze``), so that later collections walk only what the tasks
made since (docs/deploy.md, "Start-up"). An app's driver does the same once its
session and clients are up (``spark_apps.app``): its batches make thousands of
objects each, and the collections they set off walked the session's too.

In a worker Spark's daemon forked, that collection after each task is the only
one: the automatic collector is turned off for good there. A task makes tens
of thousands of objects, few of them garbage; with the collector on, a young
collection walked them again each 700 objects, and turning it back on at a
task's end set off one more collection of everything the task had made, just
before the daemon's own (a few ms a task: docs/join.md, "Where a group task's
time goes").

How it fails: it cannot. Frozen objects are still freed by reference counting;
only reference cycles among them stay, and those belong to clients that live as
long as the worker. A cycle a task leaves is collected by the daemon when the
task ends; a process not forked by the daemon (a test, the driver) keeps its
collector as it was.
"""

from __future__ import annotations

import gc
import sys

from spark_apps import preloading_daemon

_FROZEN: set[str] = set()

#: The modules Spark runs its Python workers' daemon as (``python -m pyspark.daemon``,
#: or the apps' own, ``spark.python.daemon.module``: spark_apps/preloading_daemon.py).
SPARK_DAEMONS = (preloading_daemon.FALLBACK_DAEMON, preloading_daemon.MODULE)


def under_spark_daemon() -> bool:
    """Whether this process is a Python worker forked by Spark's daemon, which runs
    ``gc.collect()`` after each of its tasks."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    return getattr(spec, "name", None) in SPARK_DAEMONS


def freeze_once(what: str) -> None:
    """After ``what`` was built in this process (the first time only): collect, then
    freeze; under Spark's daemon, leave the collections to it (the module's docstring)."""
    if what in _FROZEN:
        return
    _FROZEN.add(what)
    gc.collect()
    gc.freeze()
    if under_spark_daemon():
        gc.disable()
