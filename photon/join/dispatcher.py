"""The dispatcher: one micro-batch of click lines, joined at most once (docs/join.md).

The paper's dispatcher reads clicks, sends them to the joiners, and retries
with backoff the ones whose query has not arrived. Here it runs in the joiner
app's driver: the joiners are the batch's shard groups
(:mod:`photon.join.group`), and the retries wait in its retry store
(:mod:`photon.join.retry`). For a batch of click log lines (plus the retry
store's due clicks) the dispatcher:

1. decodes the lines; bad ones are quarantined (written, counted);
2. drops clicks seen twice in the batch (log shipping duplicates lines);
3. splits the clicks by registry shard into ``pipeline.join_groups`` groups, and
   has each group joined (:mod:`photon.join.group`: affinity hold, registry
   lookup, queries from the cache or the logs, adapter, registration with the
   batch's token, then the group's output object) — in Spark tasks on the
   executors, or one after another in this thread;
4. settles what the groups left: clicks held for their preferred DC and clicks
   whose query was not found go to the retry store; those past its limits are
   written out as unjoinable, with the reason.

With ``submit_groups`` (the joiner app's Spark job) batches overlap: step 3's
groups run while Spark plans the next batch and the dispatcher decodes it;
step 4 comes when the next batch does (or the idle loop, or the stream's end).
With ``prestart_groups`` as well, a batch given as file ranges has its groups
started before the batch ahead is settled: they read their lines, then wait
for the plan step 3 hands them once the batch is begun (docs/join.md, "Groups
started before their plan").

Why no click is ever output twice: a click is written only after this batch's
token won its registration, and the registry lets one token win per id.

Why none is lost to a crash: the batch is recorded as open (with its ``now``,
the query reader's progress and its group count) before step 1 and closed
after step 4. A crash leaves it open; Spark then replays the same lines under
the same batch id (or, for a batch Spark committed while its groups still ran
— batches overlap: docs/join.md — the dispatcher reads its lines again from
Spark's offset log and replays it before any other batch), the replay splits
them into the same groups and decides with the same ``now``, and joins again
the ids that hold this batch's token (re-registering them answers
``COMMITTED``). Objects are write-once by key, so
a batch that crashed after its write keeps its first object, and rows it
lacks go to the object's next part. What a replay cannot restore (e.g. its
query vanished from both stores meanwhile) is registered but missing from the
output, with a dead attempt's token: verification finds it and recovery
re-injects it.

How it fails: registry, object store and retry store errors propagate and
fail the batch, to be replayed; Redis errors never do (the cache is
best-effort).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Protocol

import structlog

from photon import metrics
from photon.apps import JOINER
from photon.events.records import (
    QuarantineRecord,
    Stream,
    decode_click,
)
from photon.heap import collector_paused
from photon.join.batch_lines import GroupReads, decode_lines
from photon.join.group import (
    GROUP_COUNTS,
    NO_READER,
    GroupJoiner,
    GroupOutcome,
    GroupParts,
    GroupWork,
    JoinClick,
    JoinPolicy,
    Waiting,
    part_name,
    skip_searches_of_intact_queries,
    unjoinable_row,
)
from photon.join.logstore import merged_spans
from photon.join.retry import BatchStart, PendingClick, RetryStore
from photon.logs.ranges import FileRange
from photon.logs.reader import LogLine
from registry.client import RegisterCounters

log = structlog.get_logger(__name__)

RETRY_PASS_PREFIX = "retry-"  # noqa: S105 (a batch name prefix, not a secret)

#: Runs a batch's groups and returns their outcomes, in order: Spark tasks on the
#: executors (spark_apps.joiner), or :meth:`GroupJoiner.join` one after another.
GroupRunner = Callable[[list[GroupWork]], list[GroupOutcome]]

#: Starts a batch's groups and returns at once: their outcomes, in order, when done
#: (a Spark job run from a thread of its own: docs/join.md, "Batches that overlap").
GroupSubmitter = Callable[[list[GroupWork]], "Future[list[GroupOutcome]]"]


class PrestartedGroups(Protocol):
    """A batch's groups started before their plan (``GroupPrestarter``): its tasks read
    the batch's ranges, then wait for the plan :meth:`publish` hands them."""

    def publish(self, works: list[GroupWork]) -> Future[list[GroupOutcome]] | None:
        """Hand the groups their works; their outcomes, in order, when done. None: the
        works are not what the tasks read (other ranges or group count): they run
        nothing, and the works go to a job of their own."""

    def cancel(self) -> None:
        """Have the tasks run nothing (a no-op once published)."""


#: Starts a batch's groups, by its file ranges and group count, before their plan: the
#: Spark job's start and the tasks' reads run while the driver settles the batch ahead
#: (docs/join.md, "Groups started before their plan").
GroupPrestarter = Callable[[str, tuple[FileRange, ...], int], PrestartedGroups]

#: The lines (and truncation reports) of a streaming batch Spark has committed, read
#: again from its offset log; None if Spark has not committed it or its range is gone.
CommittedBatchLines = Callable[[str], "tuple[Sequence[LogLine], Sequence[QuarantineRecord]] | None"]


@dataclass(slots=True)
class BatchReport:
    batch: str
    replay: bool = False
    lines: int = 0
    quarantined: int = 0
    duplicates_in_batch: int = 0
    retries_due: int = 0
    #: Waiting clicks made due by this batch because their query was cached since
    #: their last try (join on arrival: :meth:`Dispatcher._wake_arrived`).
    woken: int = 0
    already_joined: int = 0
    too_old: int = 0
    from_cache: int = 0
    from_logs: int = 0
    cache_misses: int = 0
    logs_skipped: int = 0
    reader_wait_s: float = 0.0
    held: int = 0
    #: Retried clicks the driver kept back without a task: their query still not
    #: cached, and this try not one that searches the logs (:meth:`Dispatcher._keep_back`).
    kept_back: int = 0
    #: Deferred clicks whose next tries would only ask the cache again, spared until
    #: their arrival window ends: the look at the cache covers them
    #: (:meth:`Dispatcher._spare_after`).
    spared: int = 0
    filtered: int = 0
    joined: int = 0
    wasted: int = 0
    #: Clicks whose joined row could not be written: quarantined before registration.
    unwritable: int = 0
    #: Clicks stamped beyond the registry's clock plus the skew: held until in range.
    too_new: int = 0
    #: Clicks stamped beyond ``shards.max_future_s``: quarantined.
    future_stamped: int = 0
    deferred: int = 0
    behind_reader: int = 0
    unjoinable: int = 0
    reader_progress_us: int = 0
    #: From its lines handed in to its settling (with batches that overlap, the wait
    #: for the batch ahead of it too).
    seconds: float = 0.0
    plan_s: float = 0.0  # decoding and splitting, in the driver (wake_s is part of it)
    wake_s: float = 0.0  # join on arrival's look for waiting clicks whose query came
    #: Groups joined by a retried Spark task (a replay of the group: docs/join.md).
    task_retries: int = 0
    groups_s: float = 0.0  # the groups, wherever they ran (a Spark job: its tasks and more)
    task_s: float = 0.0  # the slowest group's own work
    settle_s: float = 0.0  # the retry store and the batch's close, in the driver
    #: When (wall clock, from and to) any of its tasks did its own work: merged, ms.
    busy: list[tuple[float, float]] = field(default_factory=list)
    #: The same, a list per group's task: how many ran at once (the bench's scaling).
    tasks_busy: list[list[tuple[float, float]]] = field(default_factory=list)
    objects: list[str] = field(default_factory=list)
    latencies_us: list[int] = field(default_factory=list)

    def counts(self) -> dict[str, int | str | bool]:
        return {
            k: getattr(self, k)
            for k in self.__slots__
            if k
            not in (
                "objects",
                "latencies_us",
                "seconds",
                "reader_wait_s",
                "reader_progress_us",
                "plan_s",
                "wake_s",
                "groups_s",
                "task_s",
                "settle_s",
                "busy",
                "tasks_busy",
            )
        }


@dataclass(slots=True)
class _Decoded:
    """A batch's lines decoded: what needs nothing but the lines (done before the batch
    ahead of it is waited for)."""

    lines: int
    clicks: list[JoinClick]
    quarantined: list[QuarantineRecord]
    duplicates: int
    started: float  # perf_counter: when the lines were handed in
    seconds: float  # decoding them


@dataclass(slots=True)
class _Planned:
    """A batch between its plan and its settling: what its groups run on, and after."""

    batch: str
    start: BatchStart
    report: BatchReport
    started: float  # perf_counter: when its lines were handed in
    plan_s: float  # the driver's own work on it so far (decoding, planning)
    kept_back: list[Waiting]
    held: list[PendingClick]
    #: Not-found clicks whose query is newer than this are spared tries (None: none is).
    spare_after: int | None = None
    submitted: float = 0.0
    outcomes: Future[list[GroupOutcome]] | None = None


def merged_intervals(spans: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    """``spans`` as the fewest intervals that cover them, in order, to the ms."""
    return [(round(start, 3), round(end, 3)) for start, end in merged_spans(spans)]


def _settled_by(outcomes: Sequence[GroupOutcome]) -> set[str]:
    """The clicks the groups took a decision on: settled, held or left to retry."""
    taken = set()
    for outcome in outcomes:
        taken.update(outcome.resolved)
        taken.update(line.click_id for line in outcome.held)
        taken.update(waiting.line.click_id for waiting in outcome.not_found)
        taken.update(line.click_id for line, _ in outcome.too_new)
    return taken


#: A click the registry found stamped too far ahead comes back no sooner than this.
_TOO_NEW_RECHECK_US = 1_000_000

#: Latencies kept for the run's percentiles (the newest, when there are more).
_LATENCY_SAMPLE = 200_000


@dataclass(slots=True)
class JoinerTotals:
    """What a joiner did since it started: the sums of its batch reports."""

    batches: int = 0
    replays: int = 0
    counts: dict[str, int] = field(default_factory=dict)
    reader_wait_s: float = 0.0
    batch_seconds: float = 0.0  # spent in batches (joined / this: the join's own rate)
    latencies_us: list[int] = field(default_factory=list)

    def add(self, report: BatchReport) -> None:
        self.batches += 1
        self.batch_seconds += report.seconds
        self.replays += int(report.replay)
        for key, value in report.counts().items():
            if isinstance(value, int) and not isinstance(value, bool):
                self.counts[key] = self.counts.get(key, 0) + value
        self.reader_wait_s += report.reader_wait_s
        self.latencies_us.extend(report.latencies_us)
        if len(self.latencies_us) > 2 * _LATENCY_SAMPLE:
            del self.latencies_us[:-_LATENCY_SAMPLE]

    def percentile_s(self, q: float) -> float | None:
        if not self.latencies_us:
            return None
        ordered = sorted(self.latencies_us)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] / 1_000_000

    def to_dict(self) -> dict[str, Any]:
        return {
            "batches": self.batches,
            "replays": self.replays,
            **self.counts,
            "reader_wait_s": round(self.reader_wait_s, 2),
            "batch_seconds": round(self.batch_seconds, 2),
            "latency_p50_s": self.percentile_s(0.5),
            "latency_p90_s": self.percentile_s(0.9),
        }


@dataclass(frozen=True, slots=True)
class DispatchPolicy:
    """How the dispatcher plans batches: how many retries a batch takes at most, the
    log-file map's window W (a cache loss counts W past it), how many shard groups a
    batch splits into, and how quiet the stream must be before a retry pass runs."""

    max_retries_per_batch: int = 5_000
    query_window_us: int = 0
    join_groups: int = 1
    retry_pass_quiet_s: float = 0.0
    #: Waiting clicks first seen this recently are checked against the cache every
    #: batch and joined once their query is there (0: off; only their timers wake them).
    arrival_window_s: float = 0.0

    def __post_init__(self) -> None:
        if self.max_retries_per_batch < 0:
            raise ValueError(
                f"max_retries_per_batch must not be negative, not {self.max_retries_per_batch}"
            )
        if self.query_window_us < 0:
            raise ValueError(f"query_window_us must not be negative, not {self.query_window_us}")
        if self.join_groups < 1:
            raise ValueError(f"join_groups must be at least 1, not {self.join_groups}")
        if self.retry_pass_quiet_s < 0:
            raise ValueError(
                f"retry_pass_quiet_s must not be negative, not {self.retry_pass_quiet_s}"
            )
        if self.arrival_window_s < 0:
            raise ValueError(f"arrival_window_s must not be negative, not {self.arrival_window_s}")


class Dispatcher(GroupJoiner):
    """Dispatches one DC's click batches to their shard groups; one batch at a time (a
    lock guards it).

    The driver's side: the batch journal and the retry store are its own; the
    groups run where ``run_groups`` sends them (this thread by default, as the
    group joiner it also is).
    """

    def __init__(
        self,
        parts: GroupParts,
        retries: RetryStore,
        policy: JoinPolicy = JoinPolicy(),  # noqa: B008 (frozen: one shared default is safe)
        dispatch: DispatchPolicy = DispatchPolicy(),
        *,
        reader_progress: Callable[[], int] | None = None,
        reader_mark: Callable[[], bytes | None] | None = None,
        cache_lost_at: Callable[[int], int] | None = None,
        run_groups: GroupRunner | None = None,
        submit_groups: GroupSubmitter | None = None,
        prestart_groups: GroupPrestarter | None = None,
        committed_batch_lines: CommittedBatchLines | None = None,
        clock: Callable[[], int] = lambda: time.time_ns() // 1000,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        super().__init__(parts, policy, sleep=sleep)
        self.retries = retries
        self.max_retries_per_batch = dispatch.max_retries_per_batch
        self.clock = clock
        # The DC query reader's published progress (photon.join.progress); None: no
        # reader to wait for (every click may expire once past the retry limits).
        self.reader_progress = reader_progress
        # What the reader last published, as written (photon.join.progress.published_mark);
        # None: unknown (every wake look then looks at the whole window).
        self.reader_mark = reader_mark
        # The last whole wake look: the reader's mark before it, and the newest first
        # sighting it covered (:meth:`_wake_arrived`).
        self._last_wake_look: tuple[bytes, int] | None = None
        # The terms not-found clicks were last spared tries under (:meth:`_spare_after`);
        # unknown until the first batch looks (a restart: the store may hold some).
        self._spared_after: int | None = None
        self._spares_known = False
        # The last time (given the batch's ``now``) the cache may have lost a query
        # (photon.join.cache.CacheLossWatch); None: it may always have.
        self.cache_lost_at = cache_lost_at
        self.query_window_us = dispatch.query_window_us
        self.join_groups = dispatch.join_groups
        self.run_groups: GroupRunner = run_groups or self._run_here
        #: Set: a streaming batch's groups run while Spark plans the next batch and the
        #: driver reads and decodes it; the batch is settled when the next one comes
        #: (or a retry pass, or the stream's end: :meth:`finish_in_flight`).
        self.submit_groups = submit_groups
        #: Set (with ``submit_groups``): a batch given as ranges has its groups started
        #: before the batch ahead is settled; they wait for their plan.
        self.prestart_groups = prestart_groups
        #: How a streaming batch Spark committed while its groups ran, and that a crash
        #: left open, is read again for its replay (its offset log).
        self.committed_batch_lines = committed_batch_lines
        self._in_flight: _Planned | None = None
        #: What settling a batch in flight raised where no caller could see it
        #: (:meth:`_settle_if_free`): raised to the next that settles one.
        self._settle_error: BaseException | None = None
        #: A retry pass runs only once no streaming batch has brought lines for this
        #: long, or the last one took as many retries as it may (see process_retries).
        self.retry_pass_quiet_us = int(dispatch.retry_pass_quiet_s * 1_000_000)
        self.arrival_window_us = int(dispatch.arrival_window_s * 1_000_000)
        self._last_stream_batch: tuple[int, bool] | None = None  # (its clock, retries capped)
        self._lock = threading.RLock()  # finish_in_flight takes it inside process too
        self.totals = JoinerTotals()
        #: The registrations of this joiner's groups, wherever they ran (the driver's own
        #: registry client registers nothing when the groups run on executors).
        self.register_counters = RegisterCounters()

    def _run_here(self, works: list[GroupWork]) -> list[GroupOutcome]:
        return [self.join(work) for work in works]

    # -- entry points -----------------------------------------------------------

    def process(
        self,
        batch: str,
        lines: Sequence[LogLine],
        truncations: Sequence[QuarantineRecord] = (),
    ) -> BatchReport:
        """One streaming micro-batch (``batch`` is Spark's batch id), plus due retries.

        ``truncations`` are the reader's reports of files that shrank: quarantined.
        With ``submit_groups`` the report returned is the plan's: the groups' counts
        come in the batch's ``joiner.batch`` line once it is settled.
        """
        with self._lock:
            # Nothing here depends on the batch ahead: done while its groups still run.
            decoded = self._decode(lines)
            self.finish_in_flight()
            self._settle_open_batches(current=batch)
            return self._process(
                batch,
                lines,
                with_retries=True,
                truncations=truncations,
                decoded=decoded,
                overlap=self.submit_groups is not None,
            )

    def process_ranges(self, batch: str, ranges: Sequence[FileRange]) -> BatchReport:
        """One streaming micro-batch given as its file ranges, plus due retries: each
        shard group's task reads the ranges and takes its own lines (docs/join.md,
        "The join on executors"), so the driver never reads or decodes them. The
        report's line counts come from the groups."""
        with self._lock:
            overlap = self.submit_groups is not None
            prestarted = (
                self.prestart_groups(batch, tuple(ranges), self.join_groups)
                if overlap and self.prestart_groups is not None and ranges and self._only_ahead()
                else None
            )
            try:
                self.finish_in_flight()
                self._settle_open_batches(current=batch)
                return self._process(
                    batch,
                    [],
                    with_retries=True,
                    ranges=ranges,
                    overlap=overlap,
                    prestarted=prestarted,
                )
            finally:
                if prestarted is not None:  # not handed its plan: its tasks run nothing
                    prestarted.cancel()

    def _only_ahead(self) -> bool:
        """Whether the journal's one open batch, if any, is the one in flight: nothing
        to replay first (a replay's job would queue behind tasks waiting for a plan,
        until their wait ends), and this batch not a replay (its first try's group
        count, not this run's, splits it)."""
        in_flight = self.in_flight
        return all(batch == in_flight for batch in self.retries.unfinished_batches())

    def process_retries(self) -> BatchReport | None:
        """A pass over due retries alone (when no new clicks arrive); None if none are due.

        Not while a streaming batch's groups run (its settling comes first, here once
        they are done); a pass left open by a crash is run again under its own name.
        While streaming batches bring lines, they take the due retries themselves, so
        a pass waits until none has for ``retry_pass_quiet_s``, unless the last one
        took as many retries as it may (more are due than batches take): a pass
        between batches would hold the next batch back, and the new clicks with it.
        """
        with self._lock:
            self._raise_settle_error()
            planned = self._in_flight
            if planned is not None and planned.outcomes is not None:
                if not planned.outcomes.done():
                    return None  # the stream is busy: its next batch takes the due retries
                self.finish_in_flight()
            unfinished = self.retries.unfinished_batches()
            streaming = [b for b in unfinished if not b.startswith(RETRY_PASS_PREFIX)]
            for batch in streaming:
                # One Spark committed while its groups ran: Spark will not replay it.
                if not self._replay_committed(batch):
                    return None  # a crashed streaming batch: Spark replays it first
            unfinished = self.retries.unfinished_batches()
            if unfinished:
                return self._process(unfinished[0], [], with_retries=True)
            if self._streaming():
                return None
            now = self.clock()
            woken = self._wake_arrived(now)  # a late query read while the stream is quiet
            if self._spared_after is not None or not self._spares_known:
                # Spared clicks may need their timers back though none is due (a loss).
                self._spare_after(self._lost_at(now), replay=False)
            if not self.retries.due(now, 1, self._reader_progress_now()):
                return None
            batch = f"{RETRY_PASS_PREFIX}{self.retries.next_sequence('retry_pass'):012d}"
            return self._process(batch, [], with_retries=True, woken=woken)

    def process_retry_passes(self, most: int = 8) -> int:
        """Retry passes back to back while each takes as many due retries as a batch
        may (more are due than one pass takes: a backlog's deferred clicks), at most
        ``most`` of them; how many ran. Between two looks of the app's watch, a pass
        whose Spark job was done in a third of a second otherwise left the next
        waiting for the rest of the trigger interval."""
        if most < 1:
            raise ValueError(f"most must be at least 1, not {most}")
        ran = 0
        while ran < most:
            report = self.process_retries()
            if report is None:
                break
            ran += 1
            if report.retries_due < self.max_retries_per_batch:
                break
        return ran

    @property
    def in_flight(self) -> str | None:
        """The streaming batch whose groups run (or ran) and that is not settled yet."""
        planned = self._in_flight
        return planned.batch if planned is not None else None

    def finish_in_flight(self) -> BatchReport | None:
        """Wait for the streaming batch in flight and settle it; its report (None: none).

        Its groups' error (a task failed past Spark's retries) is raised here, with the
        batch left open in the journal: its replay, from Spark's offset log, joins it."""
        with self._lock:
            self._raise_settle_error()
            planned, self._in_flight = self._in_flight, None
            if planned is None or planned.outcomes is None:
                return None
            outcomes = planned.outcomes.result()
            waited = time.perf_counter() - planned.submitted
            return self._finish(planned, outcomes, waited=waited)

    def _settle_when_done(self, outcomes: Future[list[GroupOutcome]]) -> None:
        """Settle the batch in flight as soon as its groups are done, if nothing else
        does: not up to an idle look (``STATUS_EVERY_S``) or a trigger later. From a
        thread of its own (this is called in the thread that ran the job)."""
        threading.Thread(
            target=self._settle_if_free, args=(outcomes,), name="settle", daemon=True
        ).start()

    def _settle_if_free(self, outcomes: Future[list[GroupOutcome]]) -> None:
        """Settle the batch whose groups gave ``outcomes`` if it is still in flight and
        no batch or pass runs: one that runs settles it itself, before anything else.
        Groups that failed are left to them, so their error reaches the stream; an
        error settling is raised to the next batch, pass or drain."""
        if outcomes.cancelled() or outcomes.exception() is not None:
            return
        if not self._lock.acquire(blocking=False):
            return
        try:
            planned = self._in_flight
            if planned is not None and planned.outcomes is outcomes:
                self.finish_in_flight()
        except BaseException as exc:  # a crash's too: the batch stays open, to replay
            self._settle_error = exc
        finally:
            self._lock.release()

    def _raise_settle_error(self) -> None:
        error, self._settle_error = self._settle_error, None
        if error is not None:
            raise error

    def _streaming(self) -> bool:
        """Whether streaming batches bring lines and take the due retries themselves."""
        if self._last_stream_batch is None or not self.retry_pass_quiet_us:
            return False
        at, capped = self._last_stream_batch
        return not capped and self.clock() - at < self.retry_pass_quiet_us

    def _settle_open_batches(self, current: str) -> None:
        """Before a streaming batch: replay a crashed retry pass, or a crashed streaming
        batch Spark had committed; drop abandoned batches.

        After a crash exactly one batch is open. Its registrations hold its token,
        so it must run again before any other batch takes its clicks from the
        retry store (they would find them registered by another token and drop
        them). Spark replays a crashed streaming batch under the same id unless it
        had committed it: a batch whose groups still ran when Spark went on to the
        next (``submit_groups``) is read again from Spark's offset log and replayed
        here. A streaming batch other than ``current`` that Spark has no record
        of will never be replayed (its checkpoint was reset): what it registered
        and did not write is left to verification and recovery.
        """
        for batch in self.retries.unfinished_batches():
            if batch == current:
                continue
            if batch.startswith(RETRY_PASS_PREFIX):
                self._process(batch, [], with_retries=True)
            elif not self._replay_committed(batch):
                log.warning("joiner.abandoned_batch", dc=self.dc, batch=batch, current=current)
                self.retries.finish_batch(batch)

    def _replay_committed(self, batch: str) -> bool:
        """Replay open streaming ``batch`` if Spark committed it (its lines read again
        from the offset log); whether it did."""
        source = self.committed_batch_lines(batch) if self.committed_batch_lines else None
        if source is None:
            return False
        lines, truncations = source
        log.warning("joiner.replay_committed_batch", dc=self.dc, batch=batch, lines=len(lines))
        self._process(batch, lines, with_retries=True, truncations=truncations)
        return True

    # -- the batch ----------------------------------------------------------------

    def _process(
        self,
        batch: str,
        lines: Sequence[LogLine],
        *,
        with_retries: bool,
        truncations: Sequence[QuarantineRecord] = (),
        woken: int | None = None,
        decoded: _Decoded | None = None,
        overlap: bool = False,
        ranges: Sequence[FileRange] | None = None,
        prestarted: PrestartedGroups | None = None,
    ) -> BatchReport:
        """``woken``: clicks the caller made due just before (a retry pass's look, made
        at almost this clock: not made again); None: this batch looks itself.
        ``decoded``: ``lines`` decoded already. ``overlap``: a first try's groups are
        submitted and the batch left in flight (settled by :meth:`finish_in_flight`).
        ``ranges``: the batch's lines are read by its groups, from these file ranges
        (``lines`` is then empty). ``prestarted``: its groups, started already, waiting
        for their plan (a first try's, with ``overlap``)."""
        decoded = decoded or self._decode(lines)
        planning = time.perf_counter()
        start = self.retries.begin_batch(
            batch, self.clock(), self._reader_progress_now(), self.join_groups
        )
        now = start.now_us  # a replay decides with its first try's clock and reader progress
        report = BatchReport(batch=batch, lines=decoded.lines)
        report.replay = start.replay
        report.reader_progress_us = start.reader_progress_us
        report.duplicates_in_batch = decoded.duplicates
        metrics.LINES_READ.labels(self.dc, Stream.CLICKS.value).inc(decoded.lines)
        clicks = decoded.clicks
        quarantined = decoded.quarantined + list(truncations)
        if quarantined:
            self._quarantine(batch, quarantined, report)
        # None: the cache may have lost anything. So in a replay, which must search no
        # less than its first try did (what that found, this must find again). W past
        # the loss: a query's time is its ad server's clock, a loss's the hosts'.
        lost_at = None if start.replay else self._lost_at(now)
        if lost_at is not None:
            skip_searches_of_intact_queries(clicks, lost_at)
        kept_back: list[Waiting] = []
        if with_retries and not start.replay:
            # Before the due clicks are taken: a replay, at this clock, takes these too.
            waking = time.perf_counter()
            report.woken = self._wake_arrived(now) if woken is None else woken
            report.wake_s = round(time.perf_counter() - waking, 3)
        # After the look, before the due clicks are taken: a restore makes them due now.
        spare_after = self._spare_after(lost_at, replay=start.replay) if with_retries else None
        if with_retries:
            # A replay decodes every due click: its groups see each (_keep_back).
            unread = self._add_due_retries(
                clicks, now, start.reader_progress_us, lost_at, report, decode_all=start.replay
            )
            if not start.replay:
                clicks, kept_back = self._keep_back(clicks, unread, report)
        held: list[PendingClick] = []
        if not start.replay:
            # A group holds these before it looks anything up, on nothing a task has:
            # held here, they skip the trip to a task and back (half of a batch's new
            # clicks when two DCs run). A replay's groups hold them after the lookup.
            clicks, held = self.hold_for_preferred_dc(clicks, now)
        planned = _Planned(
            batch,
            start,
            report,
            decoded.started,
            decoded.seconds + time.perf_counter() - planning,
            kept_back,
            held,
            spare_after,
        )
        if clicks or ranges:
            self.faults.at_step("planned", batch)  # chaos: a crash with the journal written
        works = self._split(batch, start, clicks, ranges, lost_at) if clicks or ranges else []
        planned.submitted = time.perf_counter()
        if works and overlap and not start.replay and self.submit_groups is not None:
            handed = prestarted.publish(works) if prestarted is not None else None
            planned.outcomes = handed if handed is not None else self.submit_groups(works)
            self._in_flight = planned
            planned.outcomes.add_done_callback(self._settle_when_done)
            # chaos: a crash once handed back to Spark, its groups running: Spark may
            # commit it first, and then its replay reads it from the offset log.
            self.faults.at_step("returned", batch)
            return report
        outcomes = self.run_groups(works) if works else []
        return self._finish(planned, outcomes, waited=time.perf_counter() - planned.submitted)

    def _finish(
        self, planned: _Planned, outcomes: list[GroupOutcome], *, waited: float
    ) -> BatchReport:
        """Settle a batch whose groups are done; its report, counted and logged."""
        report = planned.report
        settling = time.perf_counter()
        self._settle(
            planned.batch,
            planned.start,
            report,
            outcomes,
            planned.kept_back,
            planned.held,
            planned.spare_after,
        )
        report.settle_s = round(time.perf_counter() - settling, 3)
        if report.lines:  # a batch of log lines, settled: quiet from here (process_retries)
            capped = report.retries_due >= self.max_retries_per_batch
            self._last_stream_batch = (self.clock(), capped)
        if outcomes:  # chaos: a crash once the batch is closed, or handed back to Spark
            self.faults.at_step("settled", planned.batch)
            if planned.outcomes is None:  # in flight, it was handed back before
                self.faults.at_step("returned", planned.batch)
        report.plan_s = round(planned.plan_s, 3)
        report.groups_s = round(waited, 3)
        report.task_s = round(max((o.seconds for o in outcomes), default=0.0), 3)
        report.busy = merged_intervals(span for o in outcomes for span in o.busy)
        report.tasks_busy = [merged_intervals(o.busy) for o in outcomes]
        report.seconds = round(time.perf_counter() - planned.started, 3)
        metrics.BATCH_SECONDS.labels(self.dc, JOINER).observe(report.seconds)
        self._count(report)
        return report

    def _split(
        self,
        batch: str,
        start: BatchStart,
        clicks: list[JoinClick],
        ranges: Sequence[FileRange] | None = None,
        lost_at: int | None = None,
    ) -> list[GroupWork]:
        """The batch's clicks by shard group (in the groups its first try used); with
        ``ranges``, every group, each to read the ranges and take its own lines."""
        groups: list[list[JoinClick]] = [[] for _ in range(start.groups)]
        for click in clicks:
            groups[self.group_of(click, start.groups)].append(click)
        shared = tuple(ranges) if ranges else ()
        return [
            GroupWork(
                batch,
                part_name(batch, n, start.groups),
                start.now_us,
                start.replay,
                group,
                start.reader_progress_us,
                reads=GroupReads(shared, n, start.groups) if shared else None,
                intact_after_us=lost_at,
            )
            for n, group in enumerate(groups)
            if group or shared
        ]

    def _wake_arrived(self, now: int) -> int:
        """Make due the waiting clicks whose query the cache has now; how many.

        Join on arrival: a click whose query had not come at its last try waits for
        its backoff (up to ``retry.max_backoff_s``), though the DC's reader caches
        the query the moment it reads it. One ``MGET`` of the queries of the clicks
        first seen within ``arrival_window_s`` (tried at least once: not one held for
        another DC, however recent) finds those that came; they go to this batch's
        groups. From the batch after the click's first try: its tries spared
        (:meth:`_spare_after`), the look is what finds a query that comes seconds
        late. A
        query that comes later than the window after its click is found by the
        click's timer, as before. Not while the cache is down (nothing to ask), and
        not in a replay (:meth:`RetryStore.wake`: its first try's wake is in the
        store already). While the reader has published nothing since the last whole
        look (``reader_mark``), only the clicks first seen since that look's window
        are looked at: a skipped click is only ever found later (by the next look
        after the reader publishes, or its timer), never lost.
        """
        if not self.arrival_window_us or not self.cache.available:
            return 0
        seen_from, seen_until = now - self.arrival_window_us, now
        # Read before the look: a query the reader caches after this is published after.
        mark = self.reader_mark() if self.reader_mark is not None else None
        last, self._last_wake_look = self._last_wake_look, None
        if mark is not None and last is not None and last[0] == mark:
            # The reader published nothing since the last whole look, so it cached no
            # query since but ones it will publish: the clicks that look covered, or
            # that a try since asked the cache for, would find nothing new. Only the
            # clicks that became old enough since are looked at (the bench's backlog:
            # thousands of never-joinable clicks, one MGET each a batch, otherwise).
            seen_from = max(seen_from, last[1] + 1)
        limit = self.max_retries_per_batch
        waiting = self.retries.waiting_for_queries(now, seen_from, seen_until, limit=limit)
        whole = None if mark is None or len(waiting) >= limit else (mark, seen_until)
        if not waiting:
            self._last_wake_look = whole
            return 0
        cache = self.cache
        cached = cache.find_many((query for _, query in waiting), count=False)
        if not cache.available:  # Redis failed during the MGET: the look found nothing
            return 0
        self._last_wake_look = whole
        if not cached:
            return 0
        return self.retries.wake([click for click, query in waiting if query in cached], now)

    def _lost_at(self, now: int) -> int | None:
        """The query time after which the cache has lost nothing put, at ``now``
        (None: it may have lost anything): a query newer was put after any loss."""
        if self.cache_lost_at is None:
            return None
        return self.cache_lost_at(now) + self.query_window_us

    def _spare_after(self, lost_at: int | None, *, replay: bool) -> int | None:
        """The query time after which a click this batch does not find has its tries
        spared until its arrival window ends; None: no click's are.

        Where a click's query is newer than ``lost_at``, the cache has lost nothing
        put since, so a query it lacks has not been read yet, and the click's next
        tries until one searches the logs (:meth:`logs_due`) would only ask the cache
        again. Once the reader caches the query, the look at the cache
        (:meth:`_wake_arrived`) wakes the click, for as long as the click is within
        ``arrival_window_s`` and the look is whole: those tries would find nothing
        the look does not. Spared, a never-joinable click costs the driver no try
        within its window (docs/join.md, "One joiner batch").

        Only while the look covers them: the cache up, the last look whole, the
        terms (``lost_at``) the same as those clicks were spared under. Otherwise
        every spared click gets its backoff's due time back, once
        (:meth:`RetryStore.restore_spared`), and a later batch spares again.
        """
        covered = self.arrival_window_us > 0 and self.cache.available
        spare_after = (
            lost_at if covered and not replay and self._last_wake_look is not None else None
        )
        if spare_after != self._spared_after or not self._spares_known:
            restored = self.retries.restore_spared()
            if restored:
                log.info("joiner.spared_restored", dc=self.dc, clicks=restored)
            self._spared_after, self._spares_known = spare_after, True
        return spare_after

    def _keep_back(
        self, clicks: list[JoinClick], unread: list[Waiting], report: BatchReport
    ) -> tuple[list[JoinClick], list[Waiting]]:
        """(clicks for the groups, retried clicks kept back in the retry store).

        ``unread``: due clicks not decoded yet (:meth:`_add_due_retries`), each on a
        try that would not search the logs; those whose query the cache has are
        decoded here and go to the groups.

        A retried click whose query the cache still lacks, on a try that would not
        search the logs (:meth:`logs_due`), would only be deferred again by its
        group: the task's registry lookup and ``MGET`` would change nothing but the
        registry's answer for a click another DC joined meanwhile, which a later try
        reads. So one ``MGET`` here decides, and such clicks are deferred without a
        task: a never-joinable click's tries until it may be given up on cost the
        driver a cache key, not a Spark task each. A try that may expire the click
        always searches the logs, so a kept-back click never expires here. Not in a
        replay (a crashed try may have registered it: its group must see it), nor
        while the cache is down (then every group searches the logs).
        """
        waiting = [Waiting.of(c) for c in clicks if c.from_retry and not c.search_logs]
        if not waiting and not unread:
            return clicks, []
        # Redis down, before or during the MGET: the groups search the logs instead.
        cache = self.cache
        asked = [w.query_id for w in waiting] + [w.query_id for w in unread]
        cached = cache.find_many(asked) if cache.available else None
        if cached is None or not cache.available:
            return clicks + _decoded(unread), []
        kept = [w for w in waiting if w.query_id not in cached]
        kept_ids = {w.line.click_id for w in kept}
        go_on = [c for c in clicks if c.line.click_id not in kept_ids] if kept_ids else clicks
        go_on += _decoded([w for w in unread if w.query_id in cached])
        kept += [w for w in unread if w.query_id not in cached]
        if kept:
            report.kept_back = len(kept)
            report.cache_misses += len(kept)
            report.logs_skipped += len(kept)
            metrics.LOGMAP_LOOKUPS.labels(self.dc, "skipped").inc(len(kept))
        return go_on, kept

    def _settle(
        self,
        batch: str,
        start: BatchStart,
        report: BatchReport,
        outcomes: list[GroupOutcome],
        kept_back: list[Waiting],
        held: list[PendingClick],
        spare_after: int | None = None,
    ) -> None:
        """What the groups left: held and not-found clicks to the retry store, those
        past its limits written as unjoinable first; then the batch is closed.
        Clicks the driver kept back are deferred like the groups' not-found ones (their
        tries spared where ``spare_after`` allows: :meth:`_spare_after`), and those it
        held are held like the groups' held ones."""
        now = start.now_us
        resolved: list[str] = []  # retry-store clicks settled by this batch
        held = list(held)
        not_found: list[Waiting] = []
        quarantined: list[QuarantineRecord] = []
        too_new: list[tuple[PendingClick, int]] = []
        reports: dict[tuple[str, int, str], QuarantineRecord] = {}
        for outcome in outcomes:
            for name in GROUP_COUNTS:
                setattr(report, name, getattr(report, name) + outcome.counts[name])
            # Groups that read their lines themselves: their share of the batch's lines.
            report.lines += outcome.lines
            report.duplicates_in_batch += outcome.duplicates
            report.retries_due -= outcome.retries_dropped
            for record in outcome.reports:  # each group says what its reads lost: once
                reports.setdefault((record.file, record.offset, str(record.reason)), record)
            resolved += outcome.resolved
            held += outcome.held
            not_found += outcome.not_found
            quarantined += outcome.quarantined
            too_new += outcome.too_new
            report.objects += outcome.objects
            report.latencies_us += outcome.latencies_us
            report.reader_wait_s = max(report.reader_wait_s, outcome.reader_wait_s)
            if outcome.task_attempt:
                report.task_retries += 1
                log.warning(
                    "joiner.task_retried",
                    dc=self.dc,
                    batch=batch,
                    part=outcome.part,
                    task_attempt=outcome.task_attempt,
                )
            if outcome.pid != os.getpid():  # its own counters stayed in a Spark worker
                counts = outcome.counts
                metrics.CACHE_LOOKUPS.labels(self.dc, "hit").inc(counts["from_cache"])
                metrics.CACHE_LOOKUPS.labels(self.dc, "miss").inc(counts["cache_misses"])
                # What the hit ratio is over: the queries found, in the cache or the logs.
                metrics.LOGMAP_LOOKUPS.labels(self.dc, "found").inc(counts["from_logs"])
                metrics.LOGMAP_LOOKUPS.labels(self.dc, "skipped").inc(counts["logs_skipped"])
            if outcome.lookup_s:
                metrics.REGISTRY_CALL_SECONDS.labels(self.dc, "lookup").observe(outcome.lookup_s)
            if outcome.registered:
                metrics.REGISTRY_CALL_SECONDS.labels(self.dc, "register").observe(
                    outcome.register_s
                )
                metrics.REGISTRY_BATCH_IDS.labels(self.dc).observe(outcome.registered)
                self.register_counters.calls += outcome.register_calls
                self.register_counters.ids += outcome.registered
                self.register_counters.transactions += outcome.register_transactions
        read_by_groups = sum(o.lines for o in outcomes)
        if read_by_groups:
            metrics.LINES_READ.labels(self.dc, Stream.CLICKS.value).inc(read_by_groups)
        self._count_quarantined(quarantined, report)  # the groups wrote these themselves
        quarantined = list(reports.values())
        if kept_back:
            # A click kept back whose line came again in the batch: its group settled it.
            taken = _settled_by(outcomes)
            kept_back = [w for w in kept_back if w.line.click_id not in taken]
        if held:
            report.held = self.retries.hold(held, now, now + self.affinity_grace_us)
        if start.replay and report.too_old:
            # Left open past the GC retention (a DC down that long): what its crashed try
            # registered was collected since, and no one joins it now. Said, and listed.
            log.warning(
                "joiner.replay_past_gc",
                dc=self.dc,
                batch=batch,
                too_old=report.too_old,
                listed=f"too_old/dc={self.dc}/ (reason too_old)",
            )
        if quarantined:  # what the groups' reads lost, once (each group reports it)
            self._quarantine(batch, quarantined, report)
        for line, in_range_us in too_new:  # held until in range, without counting a try
            until = max(in_range_us, now + _TOO_NEW_RECHECK_US)
            self.retries.hold([line], now, until, too_new=True)

        read_past = self._read_past(not_found, start.reader_progress_us)
        # Only a click whose try searched the logs may expire: not one kept back, nor a
        # new click whose query the cache cannot have lost (its next try searches).
        may_expire = {w.line.click_id for w in not_found if w.searched} & read_past
        not_found += kept_back
        spared: set[str] = set()
        # Not past the age a click may be given up at: a short max_age_s (the demo's) is
        # not stretched to the window.
        spare_us = min(self.arrival_window_us, self.retries.max_age_us)
        if spare_after is not None and spare_after == self._spared_after:
            # Still the terms the batch was planned under (one in flight settles later).
            spared = {w.line.click_id for w in not_found if w.query_ts_us > spare_after}
        # A click whose query the reader had not read yet is tried again once it has.
        wake = {
            w.line.click_id: w.query_ts_us
            for w in not_found
            if w.query_ts_us > start.reader_progress_us
        }
        deferred, expired = self.retries.defer(
            (w.line for w in not_found), now, may_expire=may_expire.__contains__,
            wake_at_progress=wake,
            query_ids={w.line.click_id: w.query_id for w in not_found},
            spared=spared, spare_us=spare_us,
        )  # fmt: skip
        report.behind_reader = sum(
            1 for c in deferred if c.click_id not in read_past and self.retries.past_limits(c, now)
        )
        report.deferred = len(deferred)
        if spared:  # those whose backoff ends before their window does
            backoff_us, spared_due_us = self.retries.backoff_us, self.retries.spared_due_us
            report.spared = sum(
                1
                for c in deferred
                if c.click_id in spared
                and spared_due_us(
                    c.first_seen_us, spare_us, now + backoff_us(c.click_id, c.attempts)
                )
                is not None
            )
        report.unjoinable = len(expired)
        if expired:  # written before they leave the retry store: a crash loses none
            self.registry.check_fence(batch)  # a fenced attempt's clicks are the new one's
            unjoinable = [unjoinable_row(self.dc, c, "query_not_found", now) for c in expired]
            report.objects += self.output.unjoinable(batch, unjoinable)
            resolved += [c.click_id for c in expired]

        self.retries.finish_batch(batch, settled=resolved)

    def _quarantine(
        self, batch: str, records: Sequence[QuarantineRecord], report: BatchReport
    ) -> None:
        """Write a batch's quarantine records (those its object lacks: a replay's go to
        the object's next part) and count them."""
        self._count_quarantined(records, report)
        key = self.output.quarantine(batch, Stream.CLICKS.value, records)
        report.objects.append(key or "")

    def _count_quarantined(self, records: Sequence[QuarantineRecord], report: BatchReport) -> None:
        report.quarantined += len(records)
        for record in records:
            metrics.QUARANTINED_LINES.labels(self.dc, Stream.CLICKS.value, str(record.reason)).inc()

    def _read_past(self, clicks: list[Waiting], progress_us: int) -> set[str]:
        """The clicks the DC's query reader has read far enough past to give up on.

        A click may be declared unjoinable only once the reader has provably read
        every query up to the click's own time plus ``retry.max_age_s`` (at least W):
        the age limit runs on the query stream's clock, not the wall clock, so a
        reader that is stopped, slow or behind never turns a joinable click
        unjoinable, and a query shipped up to that long after its click is found.
        """
        margin = self.give_up_margin_us
        return {c.line.click_id for c in clicks if c.click_ts_us + margin <= progress_us}

    @property
    def give_up_margin_us(self) -> int:
        """How far past a click's time the reader must have read before it may be given
        up on: ``retry.max_age_s``, and at least W."""
        return max(self.query_window_us, int(self.retries.policy.max_age_s * 1_000_000))

    def _reader_past(self, click_ts_us: int, progress_us: int) -> bool:
        """Whether the reader has read far enough past a click of this time to give up on it."""
        return click_ts_us + self.give_up_margin_us <= progress_us

    def _decode(self, lines: Sequence[LogLine]) -> _Decoded:
        """The batch's clicks, once each (log shipping duplicates lines), and its bad lines
        (a batch the driver reads itself: ``pipeline.tasks_read_lines`` off)."""
        decoding = time.perf_counter()
        with collector_paused():  # three new objects a line (docs/join.md, "The join on executors")
            got = decode_lines(lines)
            clicks = [JoinClick(event, line, False) for event, line in got.clicks]
        return _Decoded(
            got.lines, clicks, got.quarantined, got.duplicates,
            decoding, time.perf_counter() - decoding,
        )  # fmt: skip

    def _reader_progress_now(self) -> int:
        return self.reader_progress() if self.reader_progress is not None else NO_READER

    def _add_due_retries(
        self,
        clicks: list[JoinClick],
        now: int,
        progress_us: int,
        lost_at: int | None,
        report: BatchReport,
        *,
        decode_all: bool,
    ) -> list[Waiting]:
        """Add the due clicks to ``clicks``, decoded, but for those (returned, unless
        ``decode_all``) the store knows the query of and whose try would not search
        the logs: most are kept back on the cache's word alone (:meth:`_keep_back`),
        and their times are in their ids (docs/join.md, "One joiner batch")."""
        present = {c.line.click_id for c in clicks}
        unread: list[Waiting] = []
        for item in self.retries.due(now, self.max_retries_per_batch, progress_us):
            if item.click_id in present:
                continue  # the same click came again in this batch's lines
            report.retries_due += 1
            if item.query_id is not None and not decode_all:
                click_ts_us, query_ts_us = _id_ts_us(item.click_id), _id_ts_us(item.query_id)
                if not self.logs_due(item, click_ts_us, query_ts_us, now, progress_us, lost_at):
                    unread.append(Waiting(item, click_ts_us, item.query_id, query_ts_us))
                    continue
            event = decode_click(item.raw)
            search_logs = self.logs_due(
                item, event.click_id.ts_us, event.query_id.ts_us, now, progress_us, lost_at
            )
            clicks.append(JoinClick(event, item, True, search_logs=search_logs))
        return unread

    def logs_due(
        self,
        click: PendingClick,
        click_ts_us: int,
        query_ts_us: int,
        now: int,
        progress_us: int,
        lost_at: int | None,
    ) -> bool:
        """Whether this try of a retried click searches the logs if the cache lacks its query.

        Never while the reader has not provably read the query's time (the group
        would skip the search: the query is not in the log-file map yet). Else on
        the first try since the reader got that far, after its 1st, 4th, 16th,
        64th… try, and on the try that may declare it unjoinable. A late query is
        cached when the reader reads it, so most tries need only the cache (one
        ``MGET``); the searches find a query the cache lost (a Redis restart, an
        eviction) within a few times the click's wait so far, and no click is
        given up on before its logs were searched. Not on a try before the first
        (a click back from a hold or a recovery): the search is in vain for most
        such clicks, whose query is late or never comes, and the next try, one
        backoff later, searches. Only the try that may declare it unjoinable searches
        for a query newer than ``lost_at``: the cache has lost nothing put since
        (:meth:`_skip_searches_of_intact_queries`; None: it may have lost anything).
        """
        if not self.reader_has_read(query_ts_us, progress_us):
            return False
        tried = click.attempts
        # with this try, as the retry store will count it
        if self.retries.past_limits(click, now, tries=1) and self._reader_past(
            click_ts_us, progress_us
        ):
            return True
        if lost_at is not None and query_ts_us > lost_at:
            return False
        if click.behind_reader:  # the reader has read its query's time since its last try
            return True
        return tried & (tried - 1) == 0 and tried.bit_length() % 2 == 1  # a power of four

    def _count(self, report: BatchReport) -> None:
        for outcome in (
            "held",
            "already_joined",
            "too_old",
            "filtered",
            "joined",
            "wasted",
            "unwritable",
            "too_new",
            "future_stamped",
            "deferred",
            "behind_reader",
            "unjoinable",
        ):
            value = getattr(report, outcome)
            if value:
                metrics.CLICKS.labels(self.dc, outcome).inc(value)
        metrics.observe_many(
            metrics.JOIN_LATENCY.labels(self.dc), report.latencies_us, per_unit=1_000_000
        )
        self.totals.add(report)
        metrics.RETRIES_PENDING.labels(self.dc).set(self.retries.pending())
        metrics.BEHIND_READER.labels(self.dc).set(report.behind_reader)
        log.info(
            "joiner.batch",
            dc=self.dc,
            seconds=report.seconds,
            plan_s=report.plan_s,
            wake_s=report.wake_s,
            groups_s=report.groups_s,
            task_s=report.task_s,
            settle_s=report.settle_s,
            busy=report.busy,
            tasks_busy=report.tasks_busy,
            reader_wait_s=report.reader_wait_s,
            **report.counts(),
        )


def _id_ts_us(event_id: str) -> int:
    """The time in a canonical event id (``<ipv4>:<pid>:<ts_us>``): the retry store
    holds only ids of clicks it decoded, so no parse checks them again."""
    return int(event_id.rpartition(":")[2])


def _decoded(waiting: Sequence[Waiting]) -> list[JoinClick]:
    """Due clicks :meth:`Dispatcher._add_due_retries` left undecoded, decoded for their
    groups (on a try that does not search the logs)."""
    return [JoinClick(decode_click(w.line.raw), w.line, True, search_logs=False) for w in waiting]
