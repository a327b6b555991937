"""The joiner's Spark tasks: a batch's shard groups joined on executors, as `photon join` does."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from photon.join import dispatcher
from photon.join.dispatcher import BatchReport, PrestartedGroups
from photon.join.group import GroupOutcome, GroupWork
from photon.logs.ranges import FileRange
from photon.settings import PhotonSettings
from photon.storage import ObjectStore
from photon.tooling.stack.ports import free_ports
from registry import IdRegistry
from spark_apps import join_tasks
from spark_apps.join_tasks import (
    SparkGroupJobs,
    _JobOrder,
    default_groups,
    spark_group_runner,
    warm_up_workers,
)
from tests.conftest import settings_from_env
from tests.integration.photon.join.conftest import (  # noqa: F401 (fixtures)
    FEEDS,
    M_BYTES,
    W_US,
    Clock,
    DcParts,
    MakeDc,
    click_batches,
    make_dc,
    process_clicks,
    registry,
    store,
)
from tests.integration.photon.join.test_join import (  # noqa: F401 (a fixture)
    START_US,
    check_exactly_once,
    check_unjoinable_once,
    drain,
    logs,
    read_every_query,
)

pytestmark = pytest.mark.integration


def _executor_settings(
    environment: dict[str, str],
    root: Path,
    registry: IdRegistry,  # noqa: F811
    store: ObjectStore,  # noqa: F811
    dc: DcParts,
    **extra: str,
) -> PhotonSettings:
    """What the executors build their group joiners from: this test's registry root,
    bucket, cache keys and logs."""
    return settings_from_env(
        environment
        | {
            "PHOTON_DCS": dc.joiner.dc,
            "PHOTON_LOGS_ROOT": str(root),
            "PHOTON_ZOOKEEPER__ROOT": registry.root,
            "PHOTON_S3__BUCKET": store.bucket,
            "PHOTON_REDIS__KEY_PREFIX": dc.cache_prefix,
            "PHOTON_LOG_FILE_MAP__WINDOW_S": str(W_US / 1_000_000),
            "PHOTON_LOG_FILE_MAP__MAX_BYTES": str(M_BYTES),
        }
        | extra
    )


class _LogRecorder:
    """A module's logger that also keeps what it is given at info and warning level."""

    def __init__(self, logger: Any) -> None:
        self._logger = logger
        self.events: list[dict[str, Any]] = []
        self.warnings: list[dict[str, Any]] = []

    def info(self, event: str, **fields: Any) -> None:
        self.events.append({"event": event, **fields})
        self._logger.info(event, **fields)

    def warning(self, event: str, **fields: Any) -> None:
        self.warnings.append({"event": event, **fields})
        self._logger.warning(event, **fields)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._logger, name)


def _join_every_batch(dc: DcParts, root: Path, clock: Clock, feed: str) -> list[BatchReport]:
    """The DC's queries read, then its click logs joined batch by batch and drained."""
    read_every_query(dc, root)
    reports = [process_clicks(dc.joiner, f"{n:012d}", clicks) for n, clicks in
               enumerate(click_batches(root / dc.dc / "clicks", 16 * 1024, feed))]  # fmt: skip
    dc.joiner.finish_in_flight()  # the stream's end: a batch in flight is settled
    drain(dc, clock)
    return reports


@pytest.mark.parametrize("feed", FEEDS)
def test_a_batch_split_into_shard_groups_is_joined_by_spark_tasks_exactly_once(
    make_dc: MakeDc,  # noqa: F811
    store: ObjectStore,  # noqa: F811
    registry: IdRegistry,  # noqa: F811
    logs: tuple[Path, object],  # noqa: F811
    stack_environment: dict[str, str],
    spark: SparkSession,
    feed: str,
) -> None:
    root, manifest = logs
    clock = Clock(START_US)
    a = make_dc("a", root, clock)
    settings = _executor_settings(stack_environment, root, registry, store, a)
    assert default_groups(spark) == 2
    a.joiner.join_groups = 4  # the registry's 4 shards: one task each
    ran_in: set[int] = set()
    on_executors = spark_group_runner(spark, settings, "a", a.joiner.attempt)

    def run_groups(works: list) -> list:  # type: ignore[type-arg]
        outcomes = on_executors(works)
        ran_in.update(o.pid for o in outcomes)
        assert [o.part for o in outcomes] == [w.part for w in works]
        return outcomes

    a.joiner.run_groups = run_groups
    reports = _join_every_batch(a, root, clock, feed)

    assert sum(r.joined for r in reports) > 0
    assert ran_in and os.getpid() not in ran_in  # Spark's Python workers joined, not this one
    keys = list(store.keys("joined/"))
    assert any(".g003" in k for k in keys) and all(".g00" in k for k in keys), keys
    check_exactly_once(store, manifest)  # type: ignore[arg-type]
    check_unjoinable_once(store, manifest)  # type: ignore[arg-type]


@pytest.mark.parametrize("feed", FEEDS)
def test_a_spark_task_retried_after_its_registry_commit_joins_its_group_as_a_replay(
    make_dc: MakeDc,  # noqa: F811
    store: ObjectStore,  # noqa: F811
    registry: IdRegistry,  # noqa: F811
    logs: tuple[Path, object],  # noqa: F811
    stack_environment: dict[str, str],
    spark: SparkSession,
    feed: str,
) -> None:
    """Every group's first try registers its clicks and then fails before its write, as
    a lost executor or an object store down past its retries would fail it. Spark runs
    each task again (four tries a task, as on a cluster); the retry must join the
    clicks its first try registered, not count them as joined by someone else: the
    job succeeds, the batch closes, and nothing is left for recovery to find."""
    root, manifest = logs
    clock = Clock(START_US)
    a = make_dc("a", root, clock)
    settings = _executor_settings(
        stack_environment,
        root,
        registry,
        store,
        a,
        PHOTON_FAULTS__FAIL_TASK_AFTER_COMMIT_P="1.0",
    )
    a.joiner.join_groups = 4
    a.joiner.run_groups = spark_group_runner(spark, settings, "a", a.joiner.attempt)
    reports = _join_every_batch(a, root, clock, feed)

    joined = [r for r in reports if r.joined]
    assert joined and all(r.task_retries for r in joined)  # each joined on a task's retry
    assert all(r.already_joined == 0 for r in reports)  # none taken for another's
    assert not a.joiner.retries.unfinished_batches()
    check_exactly_once(store, manifest)  # type: ignore[arg-type]
    check_unjoinable_once(store, manifest)  # type: ignore[arg-type]


@pytest.mark.parametrize("feed", FEEDS)
def test_batches_that_overlap_on_spark_tasks_join_every_click_exactly_once(
    make_dc: MakeDc,  # noqa: F811
    store: ObjectStore,  # noqa: F811
    registry: IdRegistry,  # noqa: F811
    logs: tuple[Path, object],  # noqa: F811
    stack_environment: dict[str, str],
    spark: SparkSession,
    feed: str,
) -> None:
    """Each batch's groups submitted as a Spark job from the submitter's thread, and the
    batch handed back before they are done (``pipeline.overlap_batches``)."""
    root, manifest = logs
    clock = Clock(START_US)
    a = make_dc("a", root, clock)
    settings = _executor_settings(stack_environment, root, registry, store, a)
    a.joiner.join_groups = 4
    run = spark_group_runner(spark, settings, "a", a.joiner.attempt)
    submit = SparkGroupJobs(spark, settings, "a", a.joiner.attempt, prestart=False).submit
    ran_at_once: list[str] = []  # groups run before the batch was handed back
    submitted: list[str] = []

    def run_and_note(works: list[GroupWork]) -> list[GroupOutcome]:
        ran_at_once.append(works[0].batch)
        return run(works)

    def submit_and_note(works: list[GroupWork]) -> Future[list[GroupOutcome]]:
        submitted.append(works[0].batch)
        return submit(works)

    a.joiner.run_groups = run_and_note
    a.joiner.submit_groups = submit_and_note
    reports = _join_every_batch(a, root, clock, feed)

    # Every streaming batch's groups went in flight (once each); retry passes ran theirs.
    streaming = [b for b in submitted + ran_at_once if b.isdigit()]
    assert submitted and streaming == submitted == sorted(set(submitted))
    assert sum(r.joined for r in reports) > 0 and a.joiner.in_flight is None
    assert not a.joiner.retries.unfinished_batches()
    check_exactly_once(store, manifest)  # type: ignore[arg-type]
    check_unjoinable_once(store, manifest)  # type: ignore[arg-type]


@pytest.mark.parametrize("plan_comes", ["at_once", "too_late"])
def test_batches_whose_groups_start_before_their_plan_join_every_click_exactly_once(
    make_dc: MakeDc,  # noqa: F811
    store: ObjectStore,  # noqa: F811
    registry: IdRegistry,  # noqa: F811
    logs: tuple[Path, object],  # noqa: F811
    stack_environment: dict[str, str],
    spark: SparkSession,
    plan_comes: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each batch's job started before the batch ahead is settled, its tasks reading
    their lines and then waiting for their plan (``pipeline.prestart_groups``). A
    plan that comes after the tasks stopped waiting has their groups run in a job of
    their own: every click still joined once."""
    root, manifest = logs
    clock = Clock(START_US)
    a = make_dc("a", root, clock)
    late = plan_comes == "too_late"
    # On time: a task waits as long as the batch ahead's slowest group (its reader
    # waits included) may take.
    wait = {"PHOTON_PIPELINE__PLAN_WAIT_S": "0.05" if late else "120"}
    settings = _executor_settings(stack_environment, root, registry, store, a, **wait)
    a.joiner.join_groups = 4
    a.joiner.run_groups = spark_group_runner(spark, settings, "a", a.joiner.attempt)
    jobs = SparkGroupJobs(spark, settings, "a", a.joiner.attempt)
    a.joiner.submit_groups, prestart = jobs.submit, jobs.prestart
    handed: list[Future[list[GroupOutcome]]] = []
    # Too late: a batch's plan is published only once its prestarted tasks have all
    # returned (each having waited its 0.05 s in vain), whenever Spark gave them a core:
    # not after a fixed sleep, which a task started late on a busy machine outlasts.
    tasks_returned: dict[str, threading.Event] = {}
    job = join_tasks._Prestarted.job

    def job_noting_its_tasks(
        started: join_tasks._Prestarted, start_job: Callable[[], list[GroupOutcome | None]]
    ) -> Callable[[], list[GroupOutcome] | None]:
        returned = tasks_returned.setdefault(started.batch, threading.Event())

        def start_and_note() -> list[GroupOutcome | None]:
            try:
                return start_job()
            finally:
                returned.set()

        return job(started, start_and_note)

    if late:
        monkeypatch.setattr(join_tasks._Prestarted, "job", job_noting_its_tasks)

    def prestart_and_note(
        batch: str, ranges: tuple[FileRange, ...], groups: int
    ) -> PrestartedGroups:
        started = prestart(batch, ranges, groups)
        publish = started.publish

        def publish_and_note(works: list[GroupWork]) -> Future[list[GroupOutcome]] | None:
            if late:
                assert tasks_returned[batch].wait(120), f"batch {batch}'s tasks never returned"
            outcomes = publish(works)
            assert outcomes is not None  # the works are the ones the tasks read
            handed.append(outcomes)
            return outcomes

        started.publish = publish_and_note  # type: ignore[method-assign]
        return started

    a.joiner.prestart_groups = prestart_and_note
    # The dispatcher's own log calls, whatever structlog's configuration is meanwhile (the
    # Spark session's start configures it again, and capture_logs' would be gone).
    logged = _LogRecorder(dispatcher.log)
    monkeypatch.setattr(dispatcher, "log", logged)
    reports = _join_every_batch(a, root, clock, "ranges")

    assert sum(r.joined for r in reports) > 0 and a.joiner.in_flight is None
    assert len(handed) == len(reports)  # every streaming batch: its groups started early
    groups = [outcome for outcomes in handed for outcome in outcomes.result()]
    assert len(groups) == 4 * len(handed)
    # On time, each group's task used the lines it had read before its plan came (its
    # read, then its join); too late, each ran in a job of its own (its join alone).
    assert {len(outcome.busy) for outcome in groups} == ({1} if late else {2})
    # Each batch's line gives its tasks' work apart (the bench's tasks running at once)
    # and merged: each task's intervals lie within the merged ones (to the ms).
    lines = [e for e in logged.events if e["event"] == "joiner.batch" and e["lines"]]
    assert len(lines) == len(handed)
    for line in lines:
        assert len(line["tasks_busy"]) == 4
        for start, end in (span for task in line["tasks_busy"] for span in task):
            assert any(s - 0.001 <= start and end <= e + 0.001 for s, e in line["busy"])
    assert not a.joiner.retries.unfinished_batches()
    check_exactly_once(store, manifest)  # type: ignore[arg-type]
    check_unjoinable_once(store, manifest)  # type: ignore[arg-type]


def test_a_batch_to_replay_first_has_no_groups_started_before_their_plan(
    make_dc: MakeDc,  # noqa: F811
    store: ObjectStore,  # noqa: F811
    registry: IdRegistry,  # noqa: F811
    logs: tuple[Path, object],  # noqa: F811
    stack_environment: dict[str, str],
    spark: SparkSession,
) -> None:
    """A crashed run left batch 0 open in the journal: Spark replays it, and its
    groups run in a job of their own (its first try's clock and group count split
    it); the batches after it have theirs started early. Every click joined once."""
    root, manifest = logs
    clock = Clock(START_US)
    a = make_dc("a", root, clock)
    settings = _executor_settings(stack_environment, root, registry, store, a)
    a.joiner.join_groups = 2
    a.joiner.run_groups = spark_group_runner(spark, settings, "a", a.joiner.attempt)
    jobs = SparkGroupJobs(spark, settings, "a", a.joiner.attempt)
    prestarted: list[str] = []

    def prestart_and_note(
        batch: str, ranges: tuple[FileRange, ...], groups: int
    ) -> PrestartedGroups:
        prestarted.append(batch)
        return jobs.prestart(batch, ranges, groups)

    a.joiner.submit_groups, a.joiner.prestart_groups = jobs.submit, prestart_and_note
    a.retries.begin_batch(f"{0:012d}", clock.now_us, 0, 3)  # the crashed run's first try
    reports = _join_every_batch(a, root, clock, "ranges")

    assert reports[0].replay and not any(r.replay for r in reports[1:])
    assert prestarted == [f"{n:012d}" for n in range(1, len(reports))]
    assert not a.joiner.retries.unfinished_batches()
    check_exactly_once(store, manifest)  # type: ignore[arg-type]
    check_unjoinable_once(store, manifest)  # type: ignore[arg-type]


def test_group_jobs_reach_spark_in_the_order_the_driver_handed_them_over(
    spark: SparkSession,
) -> None:
    """A later batch's job, run from its thread first, still reaches Spark after the
    job ahead of it: Spark gives cores to the earlier job (FIFO), whose batch the
    later one's tasks wait on."""
    context = spark.sparkContext

    def job() -> list[int]:
        return context.parallelize([1, 2], 2).map(lambda x: x + 1).collect()

    # An earlier order on the same context (the joiner's jobs built before) ran its
    # first job: the new order's first job is not taken for that one.
    earlier = _JobOrder(spark, "order-test")
    assert earlier.run(earlier.ticket(), job) == [2, 3]
    order = _JobOrder(spark, "order-test")
    first, second = order.ticket(), order.ticket()

    def late_first() -> list[int]:
        time.sleep(0.5)  # the first batch's thread is slow to hand its job over
        return order.run(first, job)

    with ThreadPoolExecutor(2) as threads:
        second_done = threads.submit(order.run, second, job)
        first_done = threads.submit(late_first)
        assert first_done.result(timeout=60) == second_done.result(timeout=60) == [2, 3]
    tracker = context.statusTracker()
    (first_id,) = tracker.getJobIdsForGroup(first[0])
    (second_id,) = tracker.getJobIdsForGroup(second[0])
    assert first_id < second_id


def test_a_warm_up_builds_each_workers_group_joiner_once_and_writes_nothing(
    make_dc: MakeDc,  # noqa: F811
    store: ObjectStore,  # noqa: F811
    registry: IdRegistry,  # noqa: F811
    logs: tuple[Path, object],  # noqa: F811
    stack_environment: dict[str, str],
    spark: SparkSession,
) -> None:
    root, manifest = logs
    clock = Clock(START_US)
    a = make_dc("a", root, clock)
    settings = _executor_settings(stack_environment, root, registry, store, a)
    attempt = a.joiner.attempt

    first = warm_up_workers(spark, settings, "a", attempt).result(timeout=120)
    assert len(first) == default_groups(spark) == 2  # a task a core
    warmed = {w.pid for w in first}
    assert os.getpid() not in warmed  # Spark's Python workers, not this process
    for pid in warmed:  # built once a worker (two tasks in one worker: by the first)
        assert [w.built for w in first if w.pid == pid].count(True) == 1
    again = warm_up_workers(spark, settings, "a", attempt).result(timeout=120)
    assert again and not any(w.built for w in again if w.pid in warmed)

    # The batches' tasks find their joiner built and join exactly once; the warm-ups
    # themselves wrote nothing.
    assert list(store.keys("")) == []
    a.joiner.run_groups = spark_group_runner(spark, settings, "a", attempt)
    reports = _join_every_batch(a, root, clock, FEEDS[0])
    assert sum(r.joined for r in reports) > 0
    check_exactly_once(store, manifest)  # type: ignore[arg-type]


def test_a_warm_up_whose_tasks_cannot_reach_the_registry_says_why_without_failing(
    make_dc: MakeDc,  # noqa: F811
    store: ObjectStore,  # noqa: F811
    registry: IdRegistry,  # noqa: F811
    logs: tuple[Path, object],  # noqa: F811
    stack_environment: dict[str, str],
    spark: SparkSession,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    root, _ = logs
    a = make_dc("a", root, Clock(START_US))
    (closed,) = free_ports(1)  # nothing listens there
    settings = _executor_settings(
        stack_environment, root, registry, store, a,
        PHOTON_ZOOKEEPER__HOSTS=f"127.0.0.1:{closed}",
        PHOTON_ZOOKEEPER__CONNECT_TIMEOUT_S="1",
    )  # fmt: skip
    recorder = _LogRecorder(join_tasks.log)
    monkeypatch.setattr(join_tasks, "log", recorder)

    workers = warm_up_workers(spark, settings, "a", a.joiner.attempt).result(timeout=120)
    # Each task said why, once, rather than fail (Spark would try it again, its core held).
    assert len(workers) == 2 and all(w.error and not w.built for w in workers), workers
    assert [e["event"] for e in recorder.warnings] == ["joiner.warm_up_failed"]
