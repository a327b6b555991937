"""The joiner's Spark tasks: each joins one shard group of a batch on an executor.

The driver plans a batch (decodes it, adds the due retries, splits the clicks
by registry shard) and settles it (retry store, unjoinable clicks); the groups
in between run here, one Spark task each, in parallel on the app's executor
cores (docs/join.md, "The join on executors"). An executor's Python worker
builds its :class:`~photon.join.group.GroupJoiner` once — registry session,
Redis, object store, log-file map — and keeps it for the tasks that follow
(Spark reuses its Python workers).

With batches that overlap, :class:`SparkGroupJobs` runs the jobs from threads
of its own and, with ``pipeline.prestart_groups``, starts a batch's job before
its plan: each task reads the batch's ranges and keeps its group's lines, then
asks the driver for its plan (:mod:`spark_apps.plan_channel`; docs/join.md,
"Groups started before their plan").

A task Spark runs again (``spark.task.maxFailures``: 4 on a ``spark://``
master, ``F`` at ``local[N,F]``) joins its group as a replay: its first try may
have registered clicks with the batch's token and failed before writing them,
and a first try's lookup would count those as joined by someone else (lost).

How it fails: an error in a task (the registry or the object store down past
their retries) fails the task and so the batch's job; ``foreachBatch`` raises,
the query stops and the app exits non-zero, and the batch is replayed on
restart. An injected crash (the chaos suite's faults) in a task also takes the
driver down when it runs on this host, as a crash of a one-process joiner would.
A task started before its plan that gets none within ``pipeline.plan_wait_s``
runs nothing and frees its core; the driver runs its group in a job of its own.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, NamedTuple, NoReturn, TypeVar, cast

import structlog
from pyspark import SparkContext, TaskContext
from pyspark.sql import SparkSession

from photon.faults import FaultInjector
from photon.heap import collector_paused
from photon.join.batch_lines import GroupReads, read_group
from photon.join.dispatcher import GroupRunner
from photon.join.group import GroupJoiner, GroupOutcome, GroupWork, PreRead
from photon.join.runtime import build_group_joiner
from photon.logs.ranges import FileRange
from photon.settings import PhotonSettings
from spark_apps.plan_channel import PlanAddress, PlanServer, ask_plan
from spark_apps.without_pandas import with_pandas_hidden
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

log = structlog.get_logger(__name__)
_T = TypeVar("_T")


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


def _local_driver_pid(context: SparkContext) -> int | None:
    """This driver's pid where its tasks run on this host (a ``local`` master): an
    injected crash in a task takes it down too, as a one-process joiner's would."""
    return os.getpid() if (context.master or "").startswith("local") else None


def _has_group_joiner(dc: str, attempt: str, settings_key: str) -> bool:
    # A module function: a task's closure is pickled by value, and a dict it named
    # would come as the driver's copy, not this worker's.
    return (dc, attempt, settings_key) in _JOINERS


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

    return with_pandas_hidden(join)  # pyarrow would import it (spark_apps/without_pandas.py)


def spark_group_runner(
    spark: SparkSession, settings: PhotonSettings, dc: str, attempt: str
) -> GroupRunner:
    """Run a batch's groups as one Spark job, a task per group; outcomes in order."""
    context = spark.sparkContext
    join = _join_partition(settings, dc, attempt, _local_driver_pid(context))

    def run(works: list[GroupWork]) -> list[GroupOutcome]:
        if not works:
            return []
        outcomes: list[GroupOutcome] = (
            context.parallelize(works, len(works)).mapPartitions(join).collect()
        )
        return outcomes

    return run


def _warm_partition(
    settings: PhotonSettings, dc: str, attempt: str, driver_pid: int | None
) -> Callable[[Iterable[int]], Iterator[WarmedWorker]]:
    settings_key = settings.model_dump_json()

    def warm(slots: Iterable[int]) -> Iterator[WarmedWorker]:
        built, error = not _has_group_joiner(dc, attempt, settings_key), None
        try:
            _group_joiner(settings, settings_key, dc, attempt, driver_pid)
        except Exception as exc:  # said, not raised: Spark would try the task again
            built, error = False, repr(exc)
        for _ in slots:
            yield WarmedWorker(os.getpid(), built, error)

    return with_pandas_hidden(warm)


class WarmedWorker(NamedTuple):
    """A Python worker a warm-up task ran in: whether it built its group joiner then
    (False: an earlier task had, or it failed), and why it failed."""

    pid: int
    built: bool
    error: str | None = None


def warm_up_workers(
    spark: SparkSession, settings: PhotonSettings, dc: str, attempt: str
) -> Future[list[WarmedWorker]]:
    """Build the group joiner of each of the app's Python workers now: one task a core,
    in a job started from a thread of its own, so the first batch's tasks find their
    workers started, modules imported and clients connected (docs/join.md, "Workers
    warmed before the first batch"). The tasks register and write nothing.

    How it fails: a task that cannot build its joiner (the registry not reachable)
    returns why instead of failing, so Spark does not try it again and its core is
    free; a job that fails gives no workers. Either is logged
    (``joiner.warm_up_failed``) and costs the first batch nothing but the wait:
    each task builds its group joiner if its worker has none."""
    context = spark.sparkContext
    slots = default_groups(spark)
    warm = _warm_partition(settings, dc, attempt, _local_driver_pid(context))
    warmed: Future[list[WarmedWorker]] = Future()

    def run() -> None:
        started = time.perf_counter()
        try:
            workers: list[WarmedWorker] = (
                context.parallelize(range(slots), slots).mapPartitions(warm).collect()
            )
        except Exception as exc:  # the first batch's tasks build their own
            log.warning("joiner.warm_up_failed", dc=dc, error=repr(exc))
            warmed.set_result([])
            return
        errors = sorted({w.error for w in workers if w.error})
        if errors:
            log.warning("joiner.warm_up_failed", dc=dc, error="; ".join(errors))
        else:
            log.info("joiner.warmed_up", dc=dc, workers=len({w.pid for w in workers}),
                     seconds=round(time.perf_counter() - started, 3))  # fmt: skip
        warmed.set_result(workers)

    threading.Thread(target=run, name=f"warm-up-{dc}", daemon=True).start()
    return warmed


def _prestarted_partition(
    settings: PhotonSettings, dc: str, attempt: str, driver_pid: int | None, address: PlanAddress
) -> Callable[[Iterable[tuple[str, GroupReads]]], Iterator[GroupOutcome | None]]:
    settings_key = settings.model_dump_json()

    def join(items: Iterable[tuple[str, GroupReads]]) -> Iterator[GroupOutcome | None]:
        joiner = _group_joiner(settings, settings_key, dc, attempt, driver_pid)
        context = TaskContext.get()
        task_attempt = context.attemptNumber() if context is not None else 0
        with collector_paused():  # as _join_partition's tasks
            for batch, reads in items:
                started_at, reading = time.time(), time.perf_counter()
                lines = read_group(reads)
                read = PreRead(reads, lines, started_at, time.perf_counter() - reading)
                work = ask_plan(address, batch, reads.group)
                if work is None:
                    yield None  # not this task's to run: the driver runs the group
                    continue
                work.task_attempt = task_attempt
                work.preread = read
                yield joiner.join(work)

    return with_pandas_hidden(join)


class _Prestarted:
    """One batch's groups, started before their plan (a ``PrestartedGroups``)."""

    def __init__(
        self, batch: str, reads: list[GroupReads], server: PlanServer, run: GroupRunner
    ) -> None:
        self.batch, self.reads, self._server, self._run = batch, reads, server, run
        self._works: list[GroupWork] | None = None
        self._decided = threading.Event()
        self.outcomes: Future[list[GroupOutcome] | None] | None = None

    def publish(self, works: list[GroupWork]) -> Future[list[GroupOutcome]] | None:
        if self._decided.is_set() or [w.reads for w in works] != self.reads:
            self.cancel()
            return None
        self._works = works
        self._server.publish(self.batch, dict(enumerate(works)))
        self._decided.set()
        return cast("Future[list[GroupOutcome]]", self.outcomes)  # published: a list

    def cancel(self) -> None:
        if not self._decided.is_set():
            self._server.publish(self.batch, None)
            self._decided.set()

    def job(
        self, start_job: Callable[[], list[GroupOutcome | None]]
    ) -> Callable[[], list[GroupOutcome] | None]:
        """The job's run: the tasks, then a job of its own for any that ran nothing."""

        def run() -> list[GroupOutcome] | None:
            try:
                got = start_job()
            finally:
                self._decided.wait()
                self._server.forget(self.batch)
            works = self._works
            if works is None:
                return None  # cancelled: the tasks ran nothing
            # Groups whose task got no plan in time ran nothing: a job of their own now.
            missing = [work for work, outcome in zip(works, got, strict=True) if outcome is None]
            ran = iter(self._run(missing) if missing else [])
            return [outcome if outcome is not None else next(ran) for outcome in got]

        return run


class _JobOrder:
    """Spark's scheduler gives cores to the jobs it was handed first (FIFO), and the
    batches' jobs are handed over from threads of their own: a later batch's job
    could reach Spark first, and its tasks, waiting for a plan that needs the job
    ahead done, would hold the cores that job waits for (until their plan wait
    ends). So each job is handed to Spark only once Spark has the one before it:
    a job group a job, and Spark's status tracker says when it has a job's. The
    groups are this order's own: another order on the same context (the joiner's
    jobs built again, a test's) would otherwise find its job ahead "handed" as soon
    as an earlier order's job of that name had been."""

    def __init__(self, spark: SparkSession, dc: str) -> None:
        self._context = spark.sparkContext
        self._dc = dc
        self._prefix = f"photon-join-{dc}-{uuid.uuid4().hex[:8]}"
        self._lock = threading.Lock()
        self._count = 0
        self._last: str | None = None
        self._over: set[str] = set()  # ended, or never reached Spark

    def ticket(self) -> tuple[str, str | None]:
        """A job's place, taken in the order the driver hands jobs over: its group,
        and the group it comes after (None: the first)."""
        with self._lock:
            self._count += 1
            group = f"{self._prefix}-{self._count}"
            after, self._last = self._last, group
        return group, after

    def run(self, ticket: tuple[str, str | None], job: Callable[[], _T]) -> _T:
        group, after = ticket
        try:
            if after is not None:
                self._await_handed(after)
            self._context.setJobGroup(group, f"the joiner's groups, DC {self._dc}")
            return job()
        finally:
            with self._lock:
                self._over.add(group)
                self._over.discard(after or "")

    def _await_handed(self, group: str, limit_s: float = 30.0) -> None:
        """Until Spark has the job of ``group`` (or it ended); at most ``limit_s``: past
        it, tasks that wait for a plan give their cores back anyway (plan_wait_s)."""
        tracker = self._context.statusTracker()
        deadline = time.monotonic() + limit_s
        while time.monotonic() < deadline:
            with self._lock:
                if group in self._over:
                    return
            if tracker.getJobIdsForGroup(group):
                return
            time.sleep(0.001)
        log.warning("join_tasks.job_order_wait_passed", dc=self._dc, after=group)


class SparkGroupJobs:
    """A DC's batches' groups as Spark jobs run from threads of their own, so the
    driver hands a batch back to Spark while its groups run (docs/join.md,
    "Batches that overlap"): :meth:`submit` a batch's planned groups, or
    :meth:`prestart` them before their plan, each task reading the batch's ranges
    and then asking the driver for its plan (:mod:`spark_apps.plan_channel`).
    The dispatcher settles a batch before it hands the next one its plan."""

    def __init__(
        self,
        spark: SparkSession,
        settings: PhotonSettings,
        dc: str,
        attempt: str,
        *,
        prestart: bool = True,
    ) -> None:
        context = spark.sparkContext
        self._context = context
        self._run = spark_group_runner(spark, settings, dc, attempt)
        # A batch's job, the next one's started before its plan, and a job of its own
        # for groups whose tasks got no plan in time.
        self._threads = ThreadPoolExecutor(max_workers=3, thread_name_prefix=f"join-groups-{dc}")
        atexit.register(self._threads.shutdown, wait=False, cancel_futures=True)
        self._order = _JobOrder(spark, dc)
        self._server: PlanServer | None = None
        if prestart:
            pipeline = settings.pipeline
            # Where the executors reach the driver (its RPC's address and name).
            self._server = PlanServer(
                pipeline.driver_bind_address, pipeline.plan_wait_s, host=pipeline.driver_host
            )
            atexit.register(self._server.close)
            self._prejoin = _prestarted_partition(
                settings, dc, attempt, _local_driver_pid(context), self._server.address
            )

    def submit(self, works: list[GroupWork]) -> Future[list[GroupOutcome]]:
        """A batch's planned groups as one job; their outcomes, in order, when done."""
        ticket = self._order.ticket()
        return self._threads.submit(self._order.run, ticket, lambda: self._run(works))

    def prestart(self, batch: str, ranges: tuple[FileRange, ...], groups: int) -> _Prestarted:
        """A batch's groups as one job, before their plan: its tasks read the ranges,
        then wait for what :meth:`_Prestarted.publish` hands them."""
        if self._server is None:
            raise RuntimeError("these group jobs were built without prestart")
        reads = [GroupReads(ranges, group, groups) for group in range(groups)]
        items = [(batch, one) for one in reads]
        prejoin, context = self._prejoin, self._context

        def start_job() -> list[GroupOutcome | None]:
            got: list[GroupOutcome | None] = (
                context.parallelize(items, len(items)).mapPartitions(prejoin).collect()
            )
            return got

        started = _Prestarted(batch, reads, self._server, self._run)
        ticket = self._order.ticket()
        started.outcomes = self._threads.submit(self._order.run, ticket, started.job(start_job))
        return started


def default_groups(spark: SparkSession) -> int:
    """One group per core the app's executors have."""
    return max(1, int(spark.sparkContext.defaultParallelism))
