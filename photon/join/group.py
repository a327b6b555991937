"""One shard group of a joiner batch: the part of the join that Spark tasks run.

A batch's clicks are split into groups by their id's stable hash (the registry
shard's group: :mod:`photon.join.batch_lines`); each group is joined on its
own, in a Spark task on an executor or in the driver's thread (docs/join.md,
"The join on executors"). A group reads the batch's lines itself and keeps its
own (or, for a batch the driver decoded, is handed its clicks). For its clicks
a group:

1. holds, for a grace period, new clicks another DC prefers (DC affinity), and
   looks the rest up in the IdRegistry, skipping those already joined (by any
   DC);
2. finds each click's query: the CacheEventStore, else the LogsEventStore;
3. passes (click, query) to the adapter, which may skip the click, and checks
   each joined row against the output schema: a click whose row cannot be
   written is quarantined (``unwritable``), never registered;
4. registers the click ids with the batch's token — ``<dc>/<attempt>/<batch>``
   (the registry refuses ids stamped beyond its clock plus the maximum skew:
   such a click is held until in range, or quarantined when absurdly far ahead).
   With two DCs, steps 1 to 4 run a chunk at a time: the clicks its DC is
   preferred for oldest first, then the others newest first, so that two DCs
   on one backlog meet in the middle of each half and each finds registered
   what the other took (:meth:`GroupJoiner._chunks`);
5. only then, once its attempt's fence is still open (recovery has not taken
   the attempt's ids over), writes the clicks it registered (``COMMITTED``) as
   the group's object, ``<batch>.g<group>`` (``<batch>`` when the batch is one
   group).

It touches no retry store: what it held and what found no query go back to the
driver in its :class:`GroupOutcome`, and the driver settles them. A group's
work depends only on its clicks, the batch's ``now`` and replay flag (which the
batch journal keeps), the registry and the stores: a replayed batch splits its
clicks into the same groups, so each click goes to the same object's parts.

How it fails: registry and object store errors propagate and fail the task,
hence the batch, which Spark runs again; Redis errors never do (the cache is
best-effort). A fenced attempt's commit or write raises
:class:`registry.AttemptFencedError`: the batch fails for good, and so does
the app.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import pyarrow as pa

from photon import metrics
from photon.events.ids import EventId
from photon.events.records import (
    ClickEvent,
    QuarantineReason,
    QuarantineRecord,
    QueryEvent,
    Stream,
    decode_click,
    decode_query_of,
)
from photon.faults import NO_FAULTS, FaultInjector
from photon.heap import collector_paused
from photon.join.adapter import Adapter, schema_of
from photon.join.batch_lines import GroupLines, GroupReads, group_of_id, read_group
from photon.join.cache import CacheEventStore
from photon.join.eventstore import EventStore
from photon.join.logstore import LogsEventStore
from photon.join.output import JOINED_BASE, UNFIT, OutputWriter, check_rows, event_hour
from photon.join.retry import PendingClick, pending_click
from registry import IdRegistry, LookupResult, RegisterResult
from registry.sharding import stable_hash

#: The query reader counts as behind a batch when at least this many, and this
#: share, of the queries its new clicks ask for are in neither store; the
#: joiner then asks the cache again every step, up to ``reader_wait_s``.
_READER_BEHIND_MIN = 50
_READER_BEHIND_SHARE = 0.25
_READER_WAIT_STEP_S = 0.25

#: With two DCs, a group joins its clicks in chunks of this many, each looked up just
#: before it is joined: the other DC, on the same backlog, registers some of them
#: meanwhile, and a chunk in flight is what may be lost to it (docs/join.md, "One
#: joiner batch", step 4).
_CHUNK = 2_000

#: What a group counts, by outcome or step (summed into the batch's report).
GROUP_COUNTS = (
    "already_joined",
    "too_old",
    "from_cache",
    "from_logs",
    "cache_misses",
    "logs_skipped",
    "filtered",
    "joined",
    "wasted",
    "unwritable",
    "too_new",
    "future_stamped",
)


@dataclass(slots=True)
class JoinClick:
    event: ClickEvent
    line: PendingClick
    from_retry: bool
    ours: bool = False  # registered with this batch's token by a crashed try of it
    #: A retried click's query is searched in the logs when the cache lacks it only on
    #: the tries the joiner names (:meth:`photon.join.dispatcher.Dispatcher.logs_due`).
    search_logs: bool = True

    def __reduce__(self) -> tuple[Any, ...]:
        # Shipped to Spark tasks by the batch: its line, not the decoded event (its
        # fields again). A dataclass pickles field by field in Python; this is ~3x
        # cheaper for the driver, which pickles every click of every batch.
        return (_join_click, (self.line, self.from_retry, self.ours, self.search_logs))


def _join_click(line: PendingClick, from_retry: bool, ours: bool, search_logs: bool) -> JoinClick:
    return JoinClick(decode_click(line.raw), line, from_retry, ours, search_logs)


class _Checked(NamedTuple):
    """A group's rows checked so far: each click with its row, the schema they are
    written with (None: none checked yet, and the adapter declares none) and, when
    every row fit at once, their table."""

    candidates: list[tuple[JoinClick, dict[str, Any]]]
    schema: pa.Schema | None
    table: pa.Table | None


class _Asked(NamedTuple):
    """The queries a group asked the cache for, searched the logs for, and that its
    new clicks (first sighted) asked for, so far."""

    cache: set[str]
    logs: set[str]
    first_sight: set[str]


class Waiting(NamedTuple):
    """A click no query was found for, as the driver defers or expires it: its line,
    its query's id and the two times those decisions read. Not the decoded click: a
    group's not-found clicks are sent back to the driver by every batch, and the
    driver decoded each one again there, its ids parsed and checked (docs/join.md,
    "The join on executors")."""

    line: PendingClick
    click_ts_us: int
    query_id: str
    query_ts_us: int
    #: Whether this try searched the logs for its query: only such a try may give the
    #: click up (docs/join.md, "When a click is unjoinable").
    searched: bool = False

    @classmethod
    def of(cls, click: JoinClick, searched: bool = False) -> Waiting:
        event = click.event
        query_id = str(event.query_id)
        return cls(click.line, event.click_id.ts_us, query_id, event.query_id.ts_us, searched)


#: The progress a joiner without a query reader to wait for works with: past every time.
NO_READER = 2**62


@dataclass(frozen=True, slots=True)
class PreRead:
    """A group's lines, read and decoded by its task before its plan came: what they
    were read from, and when (wall clock) and how long the read took."""

    reads: GroupReads
    lines: GroupLines
    started_at: float
    seconds: float


@dataclass(slots=True)
class GroupWork:
    """One group of a batch, as the driver hands it to a task."""

    batch: str  # the batch: its token
    part: str  # the group's object name: the batch, or ``<batch>.g<group>``
    now_us: int
    replay: bool
    clicks: list[JoinClick]
    #: The DC's query reader had provably read every query up to this time when the
    #: batch began (recorded with it, so a replay searches as its first try did).
    reader_progress_us: int = NO_READER
    #: Which try of its Spark task this is (0: the first). A later one is a replay of
    #: the group: an earlier try may have registered clicks with the batch's token and
    #: failed before writing them (docs/join.md, "Why none is lost").
    task_attempt: int = 0
    #: The batch's file ranges, when the group reads its new clicks itself (``clicks``
    #: then holds only the driver's due retries): docs/join.md, "The join on executors".
    reads: GroupReads | None = None
    #: For the clicks it reads: a query newer than this is not searched for in the logs
    #: (the cache cannot have lost it; None: it may have lost anything).
    intact_after_us: int | None = None
    #: ``reads`` read already, in the task, before its plan came (docs/join.md, "Groups
    #: started before their plan"). Never shipped: a task sets it on the plan it got.
    preread: PreRead | None = None

    @property
    def replays(self) -> bool:
        """Whether an earlier try of this group may hold clicks under its batch's token."""
        return self.replay or self.task_attempt > 0

    def __reduce__(self) -> tuple[Any, ...]:
        # Shipped to a Spark task by every batch: its clicks as a few lists of plain
        # values, which the C pickler writes at once. Click by click, Spark's pickler
        # calls back into Python for each object: ~35 ms of the driver's time for a
        # batch of ~8,000 clicks, against ~5 ms this way (docs/join.md, "The join on
        # executors").
        lines = [click.line for click in self.clicks]
        flags = [_flags(click) for click in self.clicks]
        columns = (
            [line.click_id for line in lines],
            [line.raw for line in lines],
            [line.file for line in lines],
            [line.offset for line in lines],
            [line.first_seen_us for line in lines],
            [line.attempts for line in lines],
            flags,
        )
        head = (
            self.batch,
            self.part,
            self.now_us,
            self.replay,
            self.reader_progress_us,
            self.task_attempt,
            self.reads,
            self.intact_after_us,
        )
        return (_group_work, (head, columns))


_FROM_RETRY, _OURS, _SEARCH_LOGS, _BEHIND_READER = 1, 2, 4, 8


def _flags(click: JoinClick) -> int:
    return (
        _FROM_RETRY * click.from_retry
        | _OURS * click.ours
        | _SEARCH_LOGS * click.search_logs
        | _BEHIND_READER * click.line.behind_reader
    )


def _group_work(
    head: tuple[str, str, int, bool, int, int, GroupReads | None, int | None],
    columns: tuple[list[Any], ...],
) -> GroupWork:
    """A :class:`GroupWork` again, in the task: each click decoded from its line."""
    batch, part, now_us, replay, reader_progress_us, task_attempt = head[:6]
    reads, intact_after_us = head[6:]
    with collector_paused():  # thousands of new objects, none of them garbage
        clicks = [_unpacked_click(*fields) for fields in zip(*columns, strict=True)]
    return GroupWork(
        batch, part, now_us, replay, clicks, reader_progress_us, task_attempt,
        reads, intact_after_us,
    )  # fmt: skip


def _unpacked_click(
    click_id: str, raw: bytes, file: str, offset: int, first_seen_us: int, attempts: int, flags: int
) -> JoinClick:
    behind_reader = bool(flags & _BEHIND_READER)
    line = pending_click(click_id, raw, file, offset, first_seen_us, attempts, behind_reader)
    return JoinClick(
        decode_click(raw),
        line,
        from_retry=bool(flags & _FROM_RETRY),
        ours=bool(flags & _OURS),
        search_logs=bool(flags & _SEARCH_LOGS),
    )


@dataclass(slots=True)
class GroupOutcome:
    """What a group did, for the driver to settle and count."""

    part: str
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(GROUP_COUNTS, 0))
    resolved: list[str] = field(default_factory=list)  # settled: leave the retry store
    held: list[PendingClick] = field(default_factory=list)  # another DC's, for the grace
    not_found: list[Waiting] = field(default_factory=list)  # no query yet: defer or expire
    #: Clicks quarantined by the group, never registered: their joined row cannot be
    #: written, or they are stamped beyond any sane clock (``future_stamped``), and the
    #: group's bad lines. Written by the group (its part's quarantine object); the driver
    #: counts them.
    quarantined: list[QuarantineRecord] = field(default_factory=list)
    #: Clicks stamped ahead of the registry's clock by more than its skew, each with the
    #: time (on the clicks' clock) from which it may be in range: held until then.
    too_new: list[tuple[PendingClick, int]] = field(default_factory=list)
    too_old_rows: int = 0
    objects: list[str] = field(default_factory=list)
    latencies_us: list[int] = field(default_factory=list)
    reader_wait_s: float = 0.0
    lookup_s: float = 0.0
    register_s: float = 0.0
    registered: int = 0
    register_calls: int = 0
    register_transactions: int = 0
    seconds: float = 0.0  # its own work, in the task
    #: When (wall clock, from and to) it did that work: a read before its plan came, then
    #: the join. No wait in between: what the serial share of a batch counts as task time.
    busy: list[tuple[float, float]] = field(default_factory=list)
    #: A group that read its clicks itself (``GroupWork.reads``): its lines, those whose
    #: click came earlier in the batch, and due retries it dropped for a new line of
    #: the same click; and what its reads found lost (every group reports what it saw).
    lines: int = 0
    duplicates: int = 0
    retries_dropped: int = 0
    reports: list[QuarantineRecord] = field(default_factory=list)
    pid: int = field(default_factory=os.getpid)  # the process that joined it (an executor's)
    task_attempt: int = 0  # the try of its Spark task that joined it (0: the first)


def preferred_dc(click_id: str, dcs: Sequence[str]) -> str:
    """The DC of ``dcs`` that joins ``click_id`` when every DC is up: a stable hash.

    Not the hash the registry shards by (:func:`registry.sharding.stable_hash` of
    the bare id): with it, shard parity would be preferred-DC parity, so with two
    DCs and an even shard count each of a DC's two shard groups would hold only
    its own clicks or only the other DC's, and one of its tasks would do all
    the work of a batch.
    """
    return dcs[stable_hash(f"{click_id}#preferred-dc") % len(dcs)]


def skip_searches_of_intact_queries(clicks: Iterable[JoinClick], intact_after_us: int) -> None:
    """New clicks whose query the cache cannot have lost skip the log search.

    The reader caches every query it reads before its progress passes it, and the
    cache has lost nothing put after ``intact_after_us``: such a query missing from
    the cache is not in the logs the reader has read either (a search would be in
    vain: most are never-joinable clicks). However far the reader is past the click
    (a backlog): a click is declared unjoinable only on a try that searched
    (:attr:`Waiting.searched`), and the try that may give it up searches.
    """
    for click in clicks:
        if click.event.query_id.ts_us > intact_after_us:
            click.search_logs = False


def part_name(batch: str, group: int, groups: int) -> str:
    """The object name of a batch's group (the batch's own when it is one group)."""
    return batch if groups == 1 else f"{batch}.g{group:03d}"


@dataclass(frozen=True, slots=True)
class GroupParts:
    """What a group joiner works with: its DC and attempt, and the services it calls."""

    dc: str
    attempt: str
    registry: IdRegistry
    cache: CacheEventStore
    logs: LogsEventStore
    output: OutputWriter
    adapter: Adapter
    faults: FaultInjector = NO_FAULTS

    def __post_init__(self) -> None:
        if "/" in self.attempt or not self.attempt:
            raise ValueError(f"attempt {self.attempt!r} must be a non-empty name without '/'")


@dataclass(frozen=True, slots=True)
class JoinPolicy:
    """How a group decides (docs/join.md): which clicks it holds for their preferred DC
    (``dcs``, ``affinity_*``), which queries it does not search the logs for
    (``skip_fresh_logs_s``), how long it waits for a query reader that is behind
    (``reader_wait_s``), and how often it reloads the log-file map."""

    dcs: Sequence[str] = ()
    affinity_grace_s: float = 0.0
    affinity_max_age_s: float = 0.0
    skip_fresh_logs_s: float = 0.0
    reader_wait_s: float = 0.0
    logmap_refresh_s: float = 1.0
    #: A click stamped further ahead of the registry's clock is quarantined, not held.
    max_future_s: float = 86_400.0

    def __post_init__(self) -> None:
        for name in (
            "affinity_grace_s",
            "affinity_max_age_s",
            "skip_fresh_logs_s",
            "reader_wait_s",
            "logmap_refresh_s",
            "max_future_s",
        ):
            value = getattr(self, name)
            if value < 0:
                raise ValueError(f"{name} must not be negative, not {value}")


class GroupJoiner:
    """Joins shard groups of one DC's batches; holds no retry state of its own."""

    def __init__(
        self,
        parts: GroupParts,
        policy: JoinPolicy = JoinPolicy(),
        *,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.dc = parts.dc
        self.attempt = parts.attempt
        self.registry = parts.registry
        self.cache = parts.cache
        self.logs = parts.logs
        self.output = parts.output
        self.adapter = parts.adapter
        self.faults = parts.faults
        # Affinity needs every DC's name, this one's among them; else it is off.
        dcs = policy.dcs
        self.dcs = tuple(dcs) if parts.dc in dcs and len(dcs) > 1 else ()
        self.affinity_grace_us = int(policy.affinity_grace_s * 1_000_000) if self.dcs else 0
        self.affinity_max_age_us = int(policy.affinity_max_age_s * 1_000_000)
        self.skip_fresh_logs_us = int(policy.skip_fresh_logs_s * 1_000_000)
        self.reader_wait_s = policy.reader_wait_s
        self.logmap_refresh_s = policy.logmap_refresh_s
        self.max_future_us = int(policy.max_future_s * 1_000_000)
        self.sleep = sleep
        adapter_schema = schema_of(parts.adapter)
        self._schema: pa.Schema | None = (
            None if adapter_schema is None else pa.schema([*JOINED_BASE, *adapter_schema])
        )
        self._logmap_loaded_at = float("-inf")

    def token(self, batch: str) -> str:
        return f"{self.dc}/{self.attempt}/{batch}"

    def group_of(self, click: JoinClick, groups: int) -> int:
        """The group a click joins in: its registry shard's whenever the group count
        divides the shard count, so a task's registry calls go to its own shards; the
        same as the group a task that reads the line gives it
        (:func:`photon.join.batch_lines.line_group`)."""
        return group_of_id(click.line.click_id, groups)

    def join(self, work: GroupWork) -> GroupOutcome:
        """Join one group's clicks; what is left to settle comes back."""
        started = time.perf_counter()
        out = GroupOutcome(part=work.part, task_attempt=work.task_attempt)
        began_at = time.time()
        now = work.now_us
        replay = work.replays
        # Read before its plan came (a task started early): used if it read what it joins.
        preread = work.preread if work.preread and work.preread.reads == work.reads else None
        clicks = work.clicks if work.reads is None else self._read_clicks(work, out, preread)
        token = self.token(work.batch)
        found: dict[str, QueryEvent] = {}
        asked = _Asked(set(), set(), set())
        checked = _Checked([], self._schema, None)
        results: dict[str, RegisterResult] = {}
        too_old: list[JoinClick] = []
        counters = self.registry.counters
        calls, transactions = counters.calls, counters.transactions
        # With two DCs, a chunk at a time: its own clicks oldest first, then the other
        # DC's newest first, each chunk looked up just before it is joined. Two DCs on
        # one backlog meet in the middle of each half; each finds what the other
        # registered meanwhile and searches no query for it (docs/join.md, "One joiner
        # batch", step 4: "Two DCs on one backlog").
        for n, chunk in enumerate(self._chunks(clicks)):
            if replay:  # a crashed try may hold clicks under this token: find them first
                pending, chunk_too_old = self._skip_registered(work.batch, chunk, True, out)
                pending, held = self.hold_for_preferred_dc(pending, now)
                out.held += held
            else:  # held already: by the driver, or here as they were read (_read_clicks)
                pending, chunk_too_old = self._skip_registered(work.batch, chunk, False, out)
            too_old += chunk_too_old
            if n == 0:
                self.faults.at_step("looked_up", work.batch)  # chaos: a crash after the lookup
            # Stamped beyond the registry's clock plus the skew: held (or quarantined)
            # before any query search, which a query as far ahead would wait on as long.
            ahead = self.registry.too_new(c.event.click_id for c in pending) if pending else set()
            if ahead:
                for click in pending:
                    if click.line.click_id in ahead:
                        self._too_new(click, out)
                pending = [c for c in pending if c.line.click_id not in ahead]
            if not pending:
                continue
            self._find_queries(pending, now, work.reader_progress_us, out, found, asked)
            joinable = self._rows(pending, found, now, token, out, asked.logs)
            # Nothing that can fail the same way twice runs after the commit: a row that
            # cannot be written is quarantined now, never registered (docs/join.md).
            new = len(checked.candidates)
            checked = self._writable(checked, joinable, out)
            if len(checked.candidates) > new:
                register_started = time.perf_counter()
                self.faults.before_registry_call()
                results |= self.registry.register(
                    (click.event.click_id, token) for click, _ in checked.candidates[new:]
                )
                out.register_s += time.perf_counter() - register_started
        out.register_calls = counters.calls - calls
        out.register_transactions = counters.transactions - transactions
        to_register, schema, table = checked
        written: list[int] = []  # the indices in to_register (rows of ``table``) it won
        too_old_rows = [unjoinable_row(self.dc, c.line, "too_old", now) for c in too_old]
        if to_register:
            if RegisterResult.COMMITTED in results.values():
                # chaos: a crash or a failed task loses the write, not the ids
                self.faults.after_commit(work.batch, first_try=not replay)
            out.registered = len(results)
            for index, (click, _) in enumerate(to_register):
                outcome = results.get(click.line.click_id)
                if outcome is RegisterResult.TOO_NEW:  # held, or quarantined
                    self._too_new(click, out)
                    continue
                out.resolved.append(click.line.click_id)
                if outcome is None:  # never: the registry answers for every id it is given
                    out.counts["already_joined"] += 1
                elif outcome is RegisterResult.COMMITTED:
                    written.append(index)
                    out.latencies_us.append(max(0, now - click.event.click_id.ts_us))
                elif outcome is RegisterResult.ALREADY_REGISTERED:
                    out.counts["wasted"] += 1
                else:
                    out.counts["too_old"] += 1
                    too_old_rows.append(unjoinable_row(self.dc, click.line, "too_old", now))
        rows = [to_register[n][1] for n in written]
        if replay:  # what the crashed try wrote stands, in whichever of its objects
            rows = _unwritten(rows, self.output.written_ids(work.batch, _hours(rows)))
            table = None  # of rows that may be gone now
            too_old_rows = _unwritten(
                too_old_rows,
                self.output.written_ids(work.batch, _hours(too_old_rows), kind="too_old"),
            )
        if rows or too_old_rows:
            # A zombie of a fenced attempt or batch (recovery took its ids over) writes
            # nothing: a lost executor's task that outlived its batch, say.
            self.registry.check_fence(work.batch)
        if rows:
            if table is not None and len(written) < table.num_rows:
                table = table.take(written)
            out.objects += self.output.joined(work.part, rows, schema, table)
        out.counts["joined"] = len(rows)
        if too_old_rows:
            out.objects += self.output.unjoinable(work.part, too_old_rows, too_old=True)
        if out.registered and out.latencies_us:  # chaos: a crash after a write it won
            self.faults.at_step("written", work.batch)
        if out.quarantined:
            # Written here, in the task, as its joined rows are (the driver only counts
            # them): before the driver settles the batch, so a retried click quarantined
            # leaves the retry store only once its record is in (a replay's go to the
            # object's next part).
            key = self.output.quarantine(
                work.part,
                Stream.CLICKS.value,
                out.quarantined,
                replay_of=work.batch if replay else None,
            )
            out.objects.append(key or "")
        out.seconds = time.perf_counter() - started
        if preread is not None:
            out.busy.append((preread.started_at, preread.started_at + preread.seconds))
            out.seconds += preread.seconds
        out.busy.append((began_at, time.time()))
        return out

    def _read_clicks(
        self, work: GroupWork, out: GroupOutcome, preread: PreRead | None = None
    ) -> list[JoinClick]:
        """The group's new clicks, read from the batch's ranges, then its due retries:
        what the driver does for a batch it decodes (Dispatcher._process), done here.

        A due retry whose click came again in the batch's lines is dropped (the line
        goes on). Not in a replay, the new clicks another DC prefers are held before
        any lookup, as the driver holds its retries."""
        assert work.reads is not None
        got = preread.lines if preread is not None else read_group(work.reads)
        out.lines, out.duplicates, out.reports = got.lines, got.duplicates, got.reports
        out.quarantined += got.quarantined
        new = [JoinClick(event, line, False) for event, line in got.clicks]
        if work.intact_after_us is not None:
            skip_searches_of_intact_queries(new, work.intact_after_us)
        seen = {click.line.click_id for click in new}
        retries = [click for click in work.clicks if click.line.click_id not in seen]
        out.retries_dropped = len(work.clicks) - len(retries)
        if not work.replays:
            new, out.held = self.hold_for_preferred_dc(new, work.now_us)
        return new + retries

    def _too_new(self, click: JoinClick, out: GroupOutcome) -> None:
        """A click the registry found stamped too far ahead of its clock (beyond
        ``shards.max_clock_skew_s``): held until it is in range, or quarantined
        (``future_stamped``) when beyond ``shards.max_future_s`` (docs/join.md, "Time")."""
        ts_us = click.event.click_id.ts_us
        skew_us = self.registry.max_clock_skew_us or 0
        if ts_us - self.registry.zk_now_seen_us > self.max_future_us:
            ahead_s = (ts_us - self.registry.zk_now_seen_us) / 1_000_000
            line = click.line
            out.quarantined.append(
                QuarantineRecord(
                    line.file,
                    line.offset,
                    QuarantineReason.FUTURE_STAMPED,
                    f"stamped {ahead_s:.0f} s ahead of the registry's clock, beyond "
                    f"shards.max_future_s ({self.max_future_us / 1_000_000:.0f} s)",
                    line.raw,
                )
            )
            out.resolved.append(line.click_id)
            out.counts["future_stamped"] += 1
        else:
            out.too_new.append((click.line, ts_us - skew_us))
            out.counts["too_new"] += 1

    def _rows(
        self,
        clicks: list[JoinClick],
        found: dict[str, QueryEvent],
        now: int,
        token: str,
        out: GroupOutcome,
        searched: set[str],
    ) -> list[tuple[JoinClick, dict[str, Any]]]:
        """Each click whose query was found, with its joined row (the adapter's fields
        and Photon's); the others go back to the driver (no query yet; ``searched``: the
        queries the group searched the logs for) or are settled (the adapter skipped
        them)."""
        rows: list[tuple[JoinClick, dict[str, Any]]] = []
        for click in clicks:
            query_id = str(click.event.query_id)
            query = found.get(query_id)
            if query is None:
                out.not_found.append(Waiting.of(click, query_id in searched))
                continue
            fields = self.adapter.adapt(click.event, query)
            if fields is None:
                out.counts["filtered"] += 1
                out.resolved.append(click.line.click_id)
                continue
            row = {
                **fields,
                "click_id": click.line.click_id,
                "query_id": query_id,
                "dc": self.dc,
                "joined_at_us": now,
                "token": token,
            }
            rows.append((click, row))
        return rows

    def _writable(
        self,
        checked: _Checked,
        candidates: list[tuple[JoinClick, dict[str, Any]]],
        out: GroupOutcome,
    ) -> _Checked:
        """``checked``, extended with those of ``candidates`` whose rows the output can
        hold, with the schema all are written with and, when every row fit at once,
        their table (not built twice); the others are quarantined (``unwritable``, with
        the reason) and settled. A group's part is written once, so a later chunk's rows are
        checked with the earlier chunks' (registered already: they stay): under the
        adapter's schema each chunk's rows on their own, else each row against the
        types the rows before it set (:func:`photon.join.output.check_rows`)."""
        if not candidates:
            return checked
        if self._schema is not None:
            bad, schema, table = check_rows([row for _, row in candidates], self._schema)
            if checked.candidates:
                tables = (checked.table, table)
                table = None if None in tables else pa.concat_tables(tables)
        else:
            bad, schema, table = check_rows([row for _, row in candidates], None)
            if checked.candidates:
                bad, schema, table = self._with_earlier(checked, candidates, bad, schema, table)
        for index, reason in sorted(bad.items()):
            line = candidates[index][0].line
            out.quarantined.append(
                QuarantineRecord(
                    line.file, line.offset, QuarantineReason.UNWRITABLE, reason, line.raw
                )
            )
            out.resolved.append(line.click_id)
        out.counts["unwritable"] += len(bad)
        kept = [c for n, c in enumerate(candidates) if n not in bad]
        checked.candidates.extend(kept)  # one list for the group: not copied per chunk
        return _Checked(checked.candidates, schema, table)

    @staticmethod
    def _with_earlier(
        checked: _Checked,
        candidates: list[tuple[JoinClick, dict[str, Any]]],
        bad: dict[int, str],
        schema: pa.Schema,
        table: pa.Table | None,
    ) -> tuple[dict[int, str], pa.Schema, pa.Table | None]:
        """Without the adapter's schema: a later chunk's rows, checked on their own
        (``bad``, ``schema``, ``table``), checked with the earlier chunks' rows too.
        Where the two schemas unify, each side's rows fit the union (a column one side
        left all null takes the other's type, a field one side lacks is null there), as
        they would have in order; only where they do not is every row checked again, in
        order, so the check of a group's many chunks is not quadratic."""
        try:
            unified = pa.unify_schemas([checked.schema, schema])
        except UNFIT:  # a field's type differs: every row again, in order
            unified = None
        if unified is not None:
            return bad, unified, None
        earlier = [row for _, row in checked.candidates]
        bad, schema, table = check_rows([*earlier, *(row for _, row in candidates)], None)
        if any(n < len(earlier) for n in bad):  # never seen: those fit on their own
            return (
                dict.fromkeys(range(len(candidates)), next(iter(bad.values()))),
                checked.schema,
                checked.table,
            )
        return {n - len(earlier): reason for n, reason in bad.items()}, schema, table

    def _skip_registered(
        self, batch: str, clicks: list[JoinClick], replay: bool, out: GroupOutcome
    ) -> tuple[list[JoinClick], list[JoinClick]]:
        """(clicks to join, clicks too old): those not yet in the registry, and,
        in a replay, those this batch's token holds."""
        if not clicks:
            return [], []
        lookup_started = time.perf_counter()
        self.faults.before_registry_call()
        found = self.registry.lookup(c.event.click_id for c in clicks)
        out.lookup_s += time.perf_counter() - lookup_started
        token = self.token(batch)
        pending: list[JoinClick] = []
        too_old: list[JoinClick] = []
        for click in clicks:
            state = found[click.line.click_id]
            if state is LookupResult.ABSENT:
                pending.append(click)
            elif state is LookupResult.TOO_OLD:
                out.counts["too_old"] += 1
                out.resolved.append(click.line.click_id)
                too_old.append(click)
            elif replay and self.registry.read_token(click.event.click_id) == token:
                click.ours = True  # from the crashed try of this batch
                pending.append(click)
            else:
                out.counts["already_joined"] += 1
                out.resolved.append(click.line.click_id)
        return pending, too_old

    def _chunks(self, clicks: list[JoinClick]) -> list[list[JoinClick]]:
        """The group's clicks in the order it joins them: with two DCs or more, those
        its DC is preferred for by their time, oldest first, then the others newest
        first, in chunks of at most :data:`_CHUNK` (none holds both); with one DC,
        all at once.

        Two DCs that meet one backlog at once (old clicks are not held for their
        preferred DC, ``affinity_max_age_s``) would each look every click up as
        absent, search every query, build every row and race to register every
        click; the loser's work would be lost, and a lost race costs more than the
        join (its transactions fail and shrink). Chunk by chunk, each looked up just
        before it is joined, DC a goes through its half from the oldest click as DC b
        goes through it from the newest, and each finds the clicks the other took
        registered: they meet in the middle, where a chunk in flight is what either
        can lose.
        """
        if not self.dcs:
            return [clicks] if clicks else []
        own: list[JoinClick] = []
        others: list[JoinClick] = []
        for click in clicks:
            (own if self.preferred_dc(click.line.click_id) == self.dc else others).append(click)
        own.sort(key=_click_us)
        others.sort(key=_click_us, reverse=True)
        return [part[n : n + _CHUNK] for part in (own, others) for n in range(0, len(part), _CHUNK)]

    @staticmethod
    def reader_has_read(query_ts_us: int, progress_us: int) -> bool:
        """Whether the DC's query reader had provably read every query up to a query
        of this time: only then can the log-file map hold it."""
        return query_ts_us <= progress_us

    def preferred_dc(self, click_id: str) -> str:
        """The DC that joins ``click_id`` when every DC is up (:func:`preferred_dc`)."""
        return preferred_dc(click_id, self.dcs) if self.dcs else self.dc

    def hold_for_preferred_dc(
        self, clicks: list[JoinClick], now: int
    ) -> tuple[list[JoinClick], list[PendingClick]]:
        """(clicks that go on, clicks held): hold a click another DC prefers for the
        grace period.

        Every DC reads every click. Were all to join each at once, all but one
        would waste the work (the registry lets one win). So a click waits here
        ``affinity_grace_s`` from its first sighting unless this DC is its
        preferred one; by then the preferred DC has usually joined it and the
        lookup skips it. If that DC is down, the click is joined after the
        grace. A click this batch already holds in the registry (a replay) is
        never held, nor one older than ``affinity_max_age_s`` by its id's time
        (when set): its preferred DC has had its chance, so this DC is catching
        up on a backlog, mostly joined already, and the lookup settles it now.
        """
        if not self.affinity_grace_us:
            return clicks, []
        go_on: list[JoinClick] = []
        held: list[PendingClick] = []
        for click in clicks:
            first_seen = click.line.first_seen_us if click.from_retry else now
            if (
                click.ours
                or self.preferred_dc(click.line.click_id) == self.dc
                or now - first_seen >= self.affinity_grace_us
                or self._past_affinity(click, now)
            ):
                go_on.append(click)
            else:
                held.append(click.line)
        return go_on, held

    def _past_affinity(self, click: JoinClick, now: int) -> bool:
        if not self.affinity_max_age_us:
            return False
        return now - click.event.click_id.ts_us >= self.affinity_max_age_us

    def _find_queries(
        self,
        clicks: list[JoinClick],
        now: int,
        reader_progress_us: int,
        out: GroupOutcome,
        found: dict[str, QueryEvent],
        asked: _Asked,
    ) -> None:
        """Adds to ``found`` the queries of ``clicks`` the stores have. A query an
        earlier chunk of the group asked the cache for, or searched the logs for, is
        not asked of that store again; one it did not search the logs for is searched
        now if a click of this chunk is due a search (:meth:`_logs_skipped`)."""
        wanted = {
            key: c.event.query_id for c in clicks if (key := str(c.event.query_id)) not in found
        }
        if not wanted:
            return
        fresh = [q for q in wanted if q not in asked.cache]
        asked.cache.update(fresh)
        had = len(found)
        if fresh:
            self._found_in(self.cache, (wanted[q] for q in fresh), found)
        missing = [q for q in wanted if q not in found]
        skipped = self._logs_skipped(clicks, now, reader_progress_us)
        due = missing if not self.cache.available else [q for q in missing if q not in skipped]
        logs_skipped = len(set(missing).intersection(fresh)) - len(set(due).intersection(fresh))
        out.counts["logs_skipped"] += logs_skipped
        if logs_skipped:
            metrics.LOGMAP_LOOKUPS.labels(self.dc, "skipped").inc(logs_skipped)
        searched = [q for q in due if q not in asked.logs]
        asked.logs.update(searched)
        from_logs = 0
        if searched:
            if time.monotonic() - self._logmap_loaded_at >= self.logmap_refresh_s:
                self.logs.logmap.refresh()
                self._logmap_loaded_at = time.monotonic()
            from_logs = self._found_in(self.logs, (wanted[q] for q in searched), found)
        first_sight = {str(c.event.query_id) for c in clicks if not c.from_retry}
        asked.first_sight.update(first_sight)
        out.reader_wait_s += self._wait_for_reader(
            {q: wanted[q] for q in first_sight if q in wanted},
            len(asked.first_sight),
            found,
            self.reader_wait_s - out.reader_wait_s,
        )
        from_cache = len(found) - had - from_logs
        out.counts["from_logs"] += from_logs
        out.counts["from_cache"] += from_cache
        out.counts["cache_misses"] += max(0, len(fresh) - from_cache)

    @staticmethod
    def _found_in(
        store: EventStore, query_ids: Iterable[EventId], found: dict[str, QueryEvent]
    ) -> int:
        """Adds to ``found`` the queries ``store`` has (and that decode); how many."""
        asked = {str(query_id): query_id for query_id in query_ids}
        added = 0
        for key, raw in store.find_many(asked.values()).items():
            query = decode_query_of(raw, asked[key])
            if query is not None:
                found[key] = query
                added += 1
        return added

    def _logs_skipped(self, clicks: list[JoinClick], now: int, reader_progress_us: int) -> set[str]:
        """Queries not to search in the logs if the cache lacks them.

        * Past the query reader's progress: it has not provably read every query
          that old, and it caches a query before it maps it.
        * Younger than ``skip_fresh_logs_s``, asked for only on clicks' first
          sight (without a reader's progress, the one sign there is).
        * Asked for only by clicks the joiner did not name for a search: a retry's
          query is late (the reader is past its time), and when it comes the
          reader caches it; the logs only matter if the cache lost it since. A
          new click's query the cache cannot have lost (Dispatcher's
          ``_skip_searches_of_intact_queries``).

        The click retries, and a later retry searches the logs. Never skipped: a
        replay's click its crashed try registered (that try found the query; the
        cache may have lost it since).
        """
        skipped: set[str] = set()
        searched: set[str] = set()
        for click in clicks:
            query_id = click.event.query_id
            fresh = (
                self.skip_fresh_logs_us
                and not click.from_retry
                and now - query_id.ts_us < self.skip_fresh_logs_us
            )
            readable = self.reader_has_read(query_id.ts_us, reader_progress_us)
            if click.ours:  # registered by this batch's crashed try, which found its query
                searched.add(str(query_id))
            elif fresh or not readable or not click.search_logs:
                skipped.add(str(query_id))
            else:
                searched.add(str(query_id))
        return skipped - searched

    def _wait_for_reader(
        self,
        first_sight: dict[str, EventId],
        of_group: int,
        found: dict[str, QueryEvent],
        budget_s: float,
    ) -> float:
        """Wait (at most ``budget_s``: what is left of the group's ``reader_wait_s``)
        while the query reader is behind this batch.

        When a good share of the queries this batch's new clicks ask for is in
        neither store — a backlog, both apps just started, a slow reader — the
        reader has not got that far yet: waiting a little and asking the cache
        again costs less than deferring those clicks to the retry store and
        reading them all again later. ``first_sight``: the queries this chunk's new
        clicks ask for that no earlier chunk found; the share is of the ``of_group``
        queries the group's new clicks asked for so far, so that one chunk of a
        backlog's late queries does not take the group's wait.
        """
        waited = 0.0
        while waited < budget_s and self.cache.available:
            lacking = [q for q in first_sight if q not in found]
            if len(lacking) < max(_READER_BEHIND_MIN, _READER_BEHIND_SHARE * of_group):
                break
            self.sleep(_READER_WAIT_STEP_S)
            waited += _READER_WAIT_STEP_S
            self._found_in(self.cache, (first_sight[q] for q in lacking), found)
        return waited


def unjoinable_row(dc: str, click: PendingClick, reason: str, now: int) -> dict[str, Any]:
    """A click's row in ``unjoinable/`` (or ``too_old/``), decided at ``now``."""
    event = decode_click(click.raw)
    return {
        "click_id": click.click_id,
        "query_id": str(event.query_id),
        "dc": dc,
        "reason": reason,
        "attempts": click.attempts,
        "first_seen_us": click.first_seen_us or now,
        "decided_at_us": now,
        "file": click.file,
        "offset": click.offset,
        "raw": click.raw.decode("utf-8"),
    }


def _click_us(click: JoinClick) -> int:
    return click.event.click_id.ts_us


def _unwritten(rows: list[dict[str, Any]], written: set[str]) -> list[dict[str, Any]]:
    return [r for r in rows if r["click_id"] not in written]


def _hours(rows: list[dict[str, Any]]) -> set[str]:
    return {event_hour(r["click_id"]) for r in rows}
