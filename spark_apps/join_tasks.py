"""The joiner's Spark tasks: each joins one shard group of a batch on an executor.

The driver plans a batch (decodes it, adds the due retries, splits the clicks
by registry shard) and settles it (retry store, unjoinable clicks); the groups
in between run here, one Spark task each, in parallel on the app's executor
cores (docs/join.md, "The join on executors"). An executor's Python worker
builds its :class:`~photon.join.group.GroupJoiner` once — registry session,
Redis, object store, log-file map — and keeps it for the tasks that follow
(Spark reuses its Python workers).

A task Spark runs again (``spark.task.maxFailures``: 4 on a ``spark://``
master, ``F`` at ``local[N,F]``) joins its group as a replay: its first try may
have registered clicks with the batch's token and failed before writing them,
and a first try's lookup would count those as joined by someone else (lost).

How it fails: an error in a task (the registry or the object store down past
their retries) fails the task and so the batch's job; ``foreachBatch`` raises,
the query stops and the app exits non-zero, and the batch is replayed on
restart. An injected crash (the chaos suite's faults) in a task also takes the
driver down when it runs on this host, as a crash of a one-process joiner would.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, NoReturn

from pyspark import TaskContext
from pyspark.sql import SparkSession

from photon.faults import FaultInjector
from photon.heap import collector_paused
from photon.join.dispatcher import GroupRunner, GroupSubmitter
from photon.join.group import GroupJoiner, GroupOutcome, GroupWork
from photon.join.runtime import build_group_joiner
from photon.settings import PhotonSettings
from spark_apps.worker_heap import freeze_once

#: This Python worker's group joiners, by (dc, attempt, settings): built on a worker's
#: first task of them (a reused worker may serve another app's tasks after this one's).
_JOINERS: dict[tuple[str, str, str], GroupJoiner] = {}
_CLOSERS: list[Any] = []


def _close_all() -> None:
    for closer in reversed(_CLOSERS):
        with contextlib.suppress(Exception):
            closer.close()


atexit.register(_close_all)


def _group_joiner(
    settings: PhotonSettings, settings_key: str, dc: str, attempt: str, driver_pid: int | None
) -> GroupJoiner:
    key = (dc, attempt, settings_key)
    joiner = _JOINERS.get(key)
    if joiner is None:

        def crash(code: int) -> NoReturn:
            if driver_pid is not None:  # the driver runs here: it dies with its task
                with contextlib.suppress(OSError):
                    os.kill(driver_pid, signal.SIGKILL)
            os._exit(code)

        faults = FaultInjector(settings.faults, exit=crash)
        joiner, closers = build_group_joiner(settings, dc, attempt, faults)
        _CLOSERS.extend(closers)
        _JOINERS[key] = joiner
        freeze_once(f"group joiner {dc}/{attempt}/{len(_JOINERS)}")  # its clients: not collected
    return joiner


def _join_partition(
    settings: PhotonSettings, dc: str, attempt: str, driver_pid: int | None
) -> Callable[[Iterable[GroupWork]], Iterator[GroupOutcome]]:
    settings_key = settings.model_dump_json()

    def join(works: Iterable[GroupWork]) -> Iterator[GroupOutcome]:
        joiner = _group_joiner(settings, settings_key, dc, attempt, driver_pid)
        context = TaskContext.get()
        task_attempt = context.attemptNumber() if context is not None else 0
        # No cyclic collection in the task: it makes tens of thousands of objects, few
        # of them garbage, and each young collection walked them again. The daemon
        # collects after every task (docs/join.md, "The join on executors").
        with collector_paused():
            for work in works:
                work.task_attempt = task_attempt
                yield joiner.join(work)

    return join


def spark_group_runner(
    spark: SparkSession, settings: PhotonSettings, dc: str, attempt: str
) -> GroupRunner:
    """Run a batch's groups as one Spark job, a task per group; outcomes in order."""
    context = spark.sparkContext
    local = (context.master or "").startswith("local")
    join = _join_partition(settings, dc, attempt, os.getpid() if local else None)

    def run(works: list[GroupWork]) -> list[GroupOutcome]:
        if not works:
            return []
        outcomes: list[GroupOutcome] = (
            context.parallelize(works, len(works)).mapPartitions(join).collect()
        )
        return outcomes

    return run


def spark_group_submitter(
    spark: SparkSession, settings: PhotonSettings, dc: str, attempt: str
) -> GroupSubmitter:
    """Start a batch's groups as one Spark job from a thread of its own and return at
    once: the driver reads and plans the next batch meanwhile (docs/join.md,
    "Batches that overlap"). One job at a time: the dispatcher settles a batch
    before it submits the next."""
    run = spark_group_runner(spark, settings, dc, attempt)
    jobs = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"join-groups-{dc}")
    atexit.register(jobs.shutdown, wait=False, cancel_futures=True)

    def submit(works: list[GroupWork]) -> Future[list[GroupOutcome]]:
        return jobs.submit(run, works)

    return submit


def default_groups(spark: SparkSession) -> int:
    """One group per core the app's executors have."""
    return max(1, int(spark.sparkContext.defaultParallelism))
