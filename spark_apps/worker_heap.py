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

How it fails: it cannot. Frozen objects are still freed by reference counting;
only reference cycles among them stay, and those belong to clients that live as
long as the worker.
"""

from __future__ import annotations

import gc

_FROZEN: set[str] = set()


def freeze_once(what: str) -> None:
    """After ``what`` was built in this process (the first time only): collect, then freeze."""
    if what in _FROZEN:
        return
    _FROZEN.add(what)
    gc.collect()
    gc.freeze()
