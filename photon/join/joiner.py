"""The joiner: one micro-batch of click lines, joined at most once (DESIGN §4).

For a batch of click log lines (plus the retry store's due clicks) it:

1. decodes the lines; bad ones are quarantined (written, counted);
2. drops clicks seen twice in the batch (log shipping duplicates lines);
3. holds, for a grace period, new clicks another DC prefers (DC affinity), and
   looks the rest up in the IdRegistry, skipping those already joined (by any
   DC): both keep wasted joins low when several DCs run;
4. finds each click's query: the CacheEventStore, else the LogsEventStore;
5. passes (click, query) to the adapter, which may skip the click;
6. registers the click ids with the batch's token — ``<dc>/<attempt>/<batch>``;
7. only then writes the clicks it registered (``COMMITTED``) as one object;
8. defers clicks whose query was not found to the retry store; those past
   its limits are written out as unjoinable, with the reason.

Why no click is ever output twice: a click is written only after this batch's
token won its registration, and the registry lets one token win per id.

Why none is lost to a crash: the batch is recorded as open before step 3 and
closed after step 8. A crash leaves it open; Spark then replays the same
lines under the same batch id, and the replay joins again the ids that hold
this batch's token (re-registering them answers ``COMMITTED``). Objects are
write-once by key, so a batch that crashed after its write keeps its first
object. What a replay cannot restore (e.g. its query vanished from both
stores meanwhile) is registered but missing from the output, with a dead
attempt's token: verification finds it and recovery re-injects it.

How it fails: registry, object store and retry store errors propagate and
fail the batch, to be replayed; Redis errors never do (the cache is
best-effort).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import structlog

from photon import metrics
from photon.events.records import (
    ClickEvent,
    QuarantineRecord,
    QueryEvent,
    Stream,
    decode_click,
    decode_line,
    decode_query,
)
from photon.faults import NO_FAULTS, FaultInjector
from photon.join.adapter import Adapter, schema_of
from photon.join.cache import CacheEventStore
from photon.join.logstore import LogsEventStore
from photon.join.output import JOINED_BASE, OutputWriter
from photon.join.retry import PendingClick, RetryStore
from photon.logs.reader import LogLine
from registry import IdRegistry, LookupResult, RegisterResult
from registry.sharding import stable_hash

log = structlog.get_logger(__name__)

#: The query reader counts as behind a batch when at least this many, and this
#: share, of the queries its new clicks ask for are in neither store; the
#: joiner then asks the cache again every step, up to ``reader_wait_s``.
_READER_BEHIND_MIN = 50
_READER_BEHIND_SHARE = 0.25
_READER_WAIT_STEP_S = 0.25

RETRY_PASS_PREFIX = "retry-"  # noqa: S105 (a batch name prefix, not a secret)


@dataclass(slots=True)
class BatchReport:
    batch: str
    replay: bool = False
    lines: int = 0
    quarantined: int = 0
    duplicates_in_batch: int = 0
    retries_due: int = 0
    already_joined: int = 0
    too_old: int = 0
    from_cache: int = 0
    from_logs: int = 0
    cache_misses: int = 0
    logs_skipped: int = 0
    reader_wait_s: float = 0.0
    held: int = 0
    filtered: int = 0
    joined: int = 0
    wasted: int = 0
    deferred: int = 0
    behind_reader: int = 0
    unjoinable: int = 0
    reader_progress_us: int = 0
    seconds: float = 0.0
    objects: list[str] = field(default_factory=list)
    latencies_us: list[int] = field(default_factory=list)

    def counts(self) -> dict[str, int | str | bool]:
        return {
            k: getattr(self, k)
            for k in self.__slots__
            if k
            not in ("objects", "latencies_us", "seconds", "reader_wait_s", "reader_progress_us")
        }


#: The progress a joiner without a query reader to wait for works with: past every time.
NO_READER = 2**62

#: Latencies kept for the run's percentiles (the newest, when there are more).
_LATENCY_SAMPLE = 200_000


@dataclass(slots=True)
class JoinerTotals:
    """What a joiner did since it started: the sums of its batch reports."""

    batches: int = 0
    replays: int = 0
    counts: dict[str, int] = field(default_factory=dict)
    reader_wait_s: float = 0.0
    latencies_us: list[int] = field(default_factory=list)

    def add(self, report: BatchReport) -> None:
        self.batches += 1
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
            "latency_p50_s": self.percentile_s(0.5),
            "latency_p90_s": self.percentile_s(0.9),
        }


@dataclass(slots=True)
class _Click:
    event: ClickEvent
    line: PendingClick
    from_retry: bool
    ours: bool = False  # registered with this batch's token by a crashed try of it


class Joiner:
    """Joins one DC's click batches; one batch at a time (a lock guards it)."""

    def __init__(
        self,
        *,
        dc: str,
        attempt: str,
        registry: IdRegistry,
        cache: CacheEventStore,
        logs: LogsEventStore,
        retries: RetryStore,
        output: OutputWriter,
        adapter: Adapter,
        max_retries_per_batch: int = 5_000,
        dcs: Sequence[str] = (),
        affinity_grace_s: float = 0.0,
        affinity_max_age_s: float = 0.0,
        skip_fresh_logs_s: float = 0.0,
        reader_wait_s: float = 0.0,
        logmap_refresh_s: float = 1.0,
        clock: Callable[[], int] = lambda: time.time_ns() // 1000,
        sleep: Callable[[float], None] = time.sleep,
        reader_progress: Callable[[], int] | None = None,
        query_window_us: int = 0,
        faults: FaultInjector = NO_FAULTS,
    ) -> None:
        if "/" in attempt or not attempt:
            raise ValueError(f"attempt {attempt!r} must be a non-empty name without '/'")
        self.dc = dc
        self.attempt = attempt
        self.registry = registry
        self.cache = cache
        self.logs = logs
        self.retries = retries
        self.output = output
        self.adapter = adapter
        self.max_retries_per_batch = max_retries_per_batch
        if affinity_grace_s < 0:
            raise ValueError(f"affinity_grace_s must not be negative, not {affinity_grace_s}")
        # Affinity needs every DC's name, this one's among them; else it is off.
        self.dcs = tuple(dcs) if dc in dcs and len(dcs) > 1 else ()
        self.affinity_grace_us = int(affinity_grace_s * 1_000_000) if self.dcs else 0
        if affinity_max_age_s < 0:
            raise ValueError(f"affinity_max_age_s must not be negative, not {affinity_max_age_s}")
        self.affinity_max_age_us = int(affinity_max_age_s * 1_000_000)
        if skip_fresh_logs_s < 0:
            raise ValueError(f"skip_fresh_logs_s must not be negative, not {skip_fresh_logs_s}")
        self.skip_fresh_logs_us = int(skip_fresh_logs_s * 1_000_000)
        if reader_wait_s < 0:
            raise ValueError(f"reader_wait_s must not be negative, not {reader_wait_s}")
        self.reader_wait_s = reader_wait_s
        self.sleep = sleep
        self.faults = faults
        self.logmap_refresh_s = logmap_refresh_s
        self.clock = clock
        # The DC query reader's published progress (photon.join.progress); None: no
        # reader to wait for (every click may expire once past the retry limits).
        self.reader_progress = reader_progress
        if query_window_us < 0:
            raise ValueError(f"query_window_us must not be negative, not {query_window_us}")
        self.query_window_us = query_window_us
        adapter_schema = schema_of(adapter)
        self._schema: pa.Schema | None = (
            None if adapter_schema is None else pa.schema([*JOINED_BASE, *adapter_schema])
        )
        self._lock = threading.Lock()
        self._logmap_loaded_at = float("-inf")
        self.totals = JoinerTotals()

    def token(self, batch: str) -> str:
        return f"{self.dc}/{self.attempt}/{batch}"

    # -- entry points -----------------------------------------------------------

    def process(
        self,
        batch: str,
        lines: Sequence[LogLine],
        truncations: Sequence[QuarantineRecord] = (),
    ) -> BatchReport:
        """One streaming micro-batch (``batch`` is Spark's batch id), plus due retries.

        ``truncations`` are the reader's reports of files that shrank: quarantined.
        """
        with self._lock:
            self._settle_open_batches(current=batch)
            return self._process(batch, lines, with_retries=True, truncations=truncations)

    def process_retries(self) -> BatchReport | None:
        """A pass over due retries alone (when no new clicks arrive); None if none are due.

        A pass left open by a crash is run again under its own name first.
        """
        with self._lock:
            unfinished = self.retries.unfinished_batches()
            if any(not b.startswith(RETRY_PASS_PREFIX) for b in unfinished):
                return None  # a crashed streaming batch: Spark replays it first
            if unfinished:
                return self._process(unfinished[0], [], with_retries=True)
            if not self.retries.due(self.clock(), 1):
                return None
            batch = f"{RETRY_PASS_PREFIX}{self.retries.next_sequence('retry_pass'):012d}"
            return self._process(batch, [], with_retries=True)

    def _settle_open_batches(self, current: str) -> None:
        """Before a streaming batch: replay a crashed retry pass; drop abandoned batches.

        After a crash exactly one batch is open. Its registrations hold its token,
        so it must run again before any other batch takes its clicks from the
        retry store (they would find them registered by another token and drop
        them). Spark replays a crashed streaming batch under the same id; a
        streaming batch other than ``current`` will never be replayed (its
        checkpoint was reset): what it registered and did not write is left to
        verification and recovery.
        """
        for batch in self.retries.unfinished_batches():
            if batch == current:
                continue
            if batch.startswith(RETRY_PASS_PREFIX):
                self._process(batch, [], with_retries=True)
            else:
                log.warning("joiner.abandoned_batch", dc=self.dc, batch=batch, current=current)
                self.retries.finish_batch(batch)

    # -- the batch ----------------------------------------------------------------

    def _process(
        self,
        batch: str,
        lines: Sequence[LogLine],
        *,
        with_retries: bool,
        truncations: Sequence[QuarantineRecord] = (),
    ) -> BatchReport:
        started = time.perf_counter()
        start = self.retries.begin_batch(
            batch,
            self.clock(),
            self.reader_progress() if self.reader_progress is not None else NO_READER,
        )
        now = start.now_us  # a replay decides with its first try's clock and reader progress
        report = BatchReport(batch=batch, lines=len(lines))
        report.replay = start.replay
        report.reader_progress_us = start.reader_progress_us
        metrics.LINES_READ.labels(self.dc, Stream.CLICKS.value).inc(len(lines))
        clicks, quarantined = self._decode(lines, report)
        quarantined += truncations
        report.quarantined = len(quarantined)
        for record in quarantined:
            metrics.QUARANTINED_LINES.labels(self.dc, Stream.CLICKS.value, str(record.reason)).inc()
        if quarantined:
            key = self.output.quarantine(batch, Stream.CLICKS.value, quarantined)
            report.objects.append(key or "")
        if with_retries:
            self._add_due_retries(clicks, now, report)
        resolved: list[str] = []  # retry-store clicks settled by this batch

        if report.replay:  # a crashed try may hold clicks under this token: find them first
            pending, too_old = self._skip_registered(batch, clicks, report, resolved)
            pending = self._hold_for_preferred_dc(pending, now, report)
        else:  # a held click is looked up when it comes back, not now
            pending = self._hold_for_preferred_dc(clicks, now, report)
            pending, too_old = self._skip_registered(batch, pending, report, resolved)
        found = self._find_queries(pending, now, report)

        rows: list[dict[str, Any]] = []
        to_register: list[tuple[_Click, dict[str, Any]]] = []
        not_found: list[_Click] = []
        for click in pending:
            query = found.get(str(click.event.query_id))
            if query is None:
                not_found.append(click)
                continue
            fields = self.adapter.adapt(click.event, query)
            if fields is None:
                report.filtered += 1
                resolved.append(click.line.click_id)
                continue
            to_register.append((click, dict(fields)))

        token = self.token(batch)
        too_old_rows: list[dict[str, Any]] = []
        if to_register:
            register_started = time.perf_counter()
            self.faults.before_registry_call()
            results = self.registry.register(
                (click.event.click_id, token) for click, _ in to_register
            )
            if RegisterResult.COMMITTED in results.values():
                self.faults.after_commit(batch)  # chaos: a crash here loses the write, not the ids
            metrics.REGISTRY_CALL_SECONDS.labels(self.dc, "register").observe(
                time.perf_counter() - register_started
            )
            metrics.REGISTRY_BATCH_IDS.labels(self.dc).observe(len(to_register))
            for click, fields in to_register:
                outcome = results[click.line.click_id]
                resolved.append(click.line.click_id)
                if outcome is RegisterResult.COMMITTED:
                    rows.append(
                        {
                            **fields,
                            "click_id": click.line.click_id,
                            "query_id": str(click.event.query_id),
                            "dc": self.dc,
                            "joined_at_us": now,
                            "token": token,
                        }
                    )
                    report.latencies_us.append(max(0, now - click.event.click_id.ts_us))
                elif outcome is RegisterResult.ALREADY_REGISTERED:
                    report.wasted += 1
                else:
                    report.too_old += 1
                    too_old_rows.append(self._unjoinable_row(click.line, "too_old", now))
        if rows:
            report.objects.append(self.output.joined(batch, rows, self._schema) or "")
            report.joined = len(rows)

        too_old_rows += [self._unjoinable_row(c.line, "too_old", now) for c in too_old]
        if too_old_rows:
            report.objects.append(self.output.unjoinable(batch, too_old_rows, too_old=True) or "")

        read_past = self._read_past(not_found, start.reader_progress_us)
        deferred, expired = self.retries.defer(
            (c.line for c in not_found), now, may_expire=read_past.__contains__
        )
        report.behind_reader = sum(
            1 for c in deferred if c.click_id not in read_past and self.retries.past_limits(c, now)
        )
        report.deferred = len(deferred)
        report.unjoinable = len(expired)
        if expired:  # written before they leave the retry store: a crash loses none
            unjoinable = [self._unjoinable_row(c, "query_not_found", now) for c in expired]
            report.objects.append(self.output.unjoinable(batch, unjoinable) or "")
            resolved += [c.click_id for c in expired]

        self.retries.remove(resolved)
        self.retries.finish_batch(batch)
        report.seconds = round(time.perf_counter() - started, 3)
        metrics.BATCH_SECONDS.labels(self.dc, "joiner").observe(report.seconds)
        self._count(report)
        return report

    def _read_past(self, clicks: list[_Click], progress_us: int) -> set[str]:
        """The clicks the DC's query reader has read far enough past to give up on.

        A click may be declared unjoinable only once the reader has provably read
        every query up to the click's own time plus ``retry.max_age_s`` (at least W):
        the age limit runs on the query stream's clock, not the wall clock, so a
        reader that is stopped, slow or behind never turns a joinable click
        unjoinable, and a query shipped up to that long after its click is found.
        """
        margin_us = max(self.query_window_us, int(self.retries.policy.max_age_s * 1_000_000))
        return {
            c.line.click_id for c in clicks if c.event.click_id.ts_us + margin_us <= progress_us
        }

    def _decode(
        self, lines: Sequence[LogLine], report: BatchReport
    ) -> tuple[list[_Click], list[QuarantineRecord]]:
        clicks: dict[str, _Click] = {}
        quarantined: list[QuarantineRecord] = []
        for line in lines:
            decoded = decode_line(Stream.CLICKS, line.file, line.offset, line.raw)
            if isinstance(decoded, QuarantineRecord):
                quarantined.append(decoded)
                continue
            assert isinstance(decoded, ClickEvent)
            key = str(decoded.click_id)
            if key in clicks:
                report.duplicates_in_batch += 1
                continue
            clicks[key] = _Click(
                decoded, PendingClick(key, line.raw, line.file, line.offset), False
            )
        return list(clicks.values()), quarantined

    def _add_due_retries(self, clicks: list[_Click], now: int, report: BatchReport) -> None:
        present = {c.line.click_id for c in clicks}
        for item in self.retries.due(now, self.max_retries_per_batch):
            if item.click_id in present:
                continue  # the same click came again in this batch's lines
            clicks.append(_Click(decode_click(item.raw), item, True))
            report.retries_due += 1

    def _skip_registered(
        self, batch: str, clicks: list[_Click], report: BatchReport, resolved: list[str]
    ) -> tuple[list[_Click], list[_Click]]:
        """(clicks to join, clicks too old): those not yet in the registry, and,
        in a replay, those this batch's token holds."""
        if not clicks:
            return [], []
        lookup_started = time.perf_counter()
        self.faults.before_registry_call()
        found = self.registry.lookup(c.event.click_id for c in clicks)
        metrics.REGISTRY_CALL_SECONDS.labels(self.dc, "lookup").observe(
            time.perf_counter() - lookup_started
        )
        token = self.token(batch)
        pending: list[_Click] = []
        too_old: list[_Click] = []
        for click in clicks:
            state = found[click.line.click_id]
            if state is LookupResult.ABSENT:
                pending.append(click)
            elif state is LookupResult.TOO_OLD:
                report.too_old += 1
                resolved.append(click.line.click_id)
                too_old.append(click)
            elif report.replay and self.registry.read_token(click.event.click_id) == token:
                click.ours = True  # from the crashed try of this batch
                pending.append(click)
            else:
                report.already_joined += 1
                resolved.append(click.line.click_id)
        return pending, too_old

    def preferred_dc(self, click_id: str) -> str:
        """The DC that joins ``click_id`` when every DC is up (a stable hash of the id)."""
        return self.dcs[stable_hash(click_id) % len(self.dcs)] if self.dcs else self.dc

    def _hold_for_preferred_dc(
        self, clicks: list[_Click], now: int, report: BatchReport
    ) -> list[_Click]:
        """Hold a click another DC prefers for the grace period; the rest go on.

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
            return clicks
        go_on: list[_Click] = []
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
        if held:
            report.held = self.retries.hold(held, now, now + self.affinity_grace_us)
        return go_on

    def _past_affinity(self, click: _Click, now: int) -> bool:
        if not self.affinity_max_age_us:
            return False
        return now - click.event.click_id.ts_us >= self.affinity_max_age_us

    def _find_queries(
        self, clicks: list[_Click], now: int, report: BatchReport
    ) -> dict[str, QueryEvent]:
        wanted = {str(c.event.query_id): c.event.query_id for c in clicks}
        if not wanted:
            return {}
        found: dict[str, QueryEvent] = {}
        self._from_cache(wanted, found)
        missing = [q for q in wanted if q not in found]
        fresh = self._fresh_on_first_sight(clicks, now)
        # A fresh query a healthy cache lacks was not read yet: the logs cannot
        # have it either (the query reader caches every query before it maps it).
        searched = missing if not self.cache.available else [q for q in missing if q not in fresh]
        report.logs_skipped = len(missing) - len(searched)
        if report.logs_skipped:
            metrics.LOGMAP_LOOKUPS.labels(self.dc, "skipped_fresh").inc(report.logs_skipped)
        if searched:
            if time.monotonic() - self._logmap_loaded_at >= self.logmap_refresh_s:
                self.logs.logmap.refresh()
                self._logmap_loaded_at = time.monotonic()
            for query_id, raw in self.logs.find_many(wanted[q] for q in searched).items():
                query = _decode_query(raw, query_id)
                if query is not None:
                    found[query_id] = query
                    report.from_logs += 1
        first_sight = {str(c.event.query_id) for c in clicks if not c.from_retry}
        report.reader_wait_s = self._wait_for_reader(first_sight, found)
        report.from_cache = len(found) - report.from_logs
        report.cache_misses = len(wanted) - report.from_cache
        return found

    def _from_cache(self, query_ids: Iterable[str], found: dict[str, QueryEvent]) -> None:
        for query_id, raw in self.cache.get_many(query_ids).items():
            query = _decode_query(raw, query_id)
            if query is not None:
                found[query_id] = query

    def _fresh_on_first_sight(self, clicks: list[_Click], now: int) -> set[str]:
        """Queries younger than ``skip_fresh_logs_s`` asked for only on clicks' first sight.

        If the cache lacks one, the query reader has not read it yet: the logs
        need not be searched, and the click retries (its retry searches them).
        """
        if not self.skip_fresh_logs_us:
            return set()
        fresh: set[str] = set()
        searched: set[str] = set()
        for click in clicks:
            query_id = click.event.query_id
            if click.from_retry or now - query_id.ts_us >= self.skip_fresh_logs_us:
                searched.add(str(query_id))
            else:
                fresh.add(str(query_id))
        return fresh - searched

    def _wait_for_reader(self, first_sight: set[str], found: dict[str, QueryEvent]) -> float:
        """Wait (at most ``reader_wait_s``) while the query reader is behind this batch.

        When a good share of the queries this batch's new clicks ask for is in
        neither store — a backlog, both apps just started, a slow reader — the
        reader has not got that far yet: waiting a little and asking the cache
        again costs less than deferring those clicks to the retry store and
        reading them all again later.
        """
        waited = 0.0
        while waited < self.reader_wait_s and self.cache.available:
            lacking = [q for q in first_sight if q not in found]
            if len(lacking) < max(_READER_BEHIND_MIN, _READER_BEHIND_SHARE * len(first_sight)):
                break
            self.sleep(_READER_WAIT_STEP_S)
            waited += _READER_WAIT_STEP_S
            self._from_cache(lacking, found)
        return waited

    def _unjoinable_row(self, click: PendingClick, reason: str, now: int) -> dict[str, Any]:
        event = decode_click(click.raw)
        return {
            "click_id": click.click_id,
            "query_id": str(event.query_id),
            "dc": self.dc,
            "reason": reason,
            "attempts": click.attempts,
            "first_seen_us": click.first_seen_us or now,
            "decided_at_us": now,
            "file": click.file,
            "offset": click.offset,
            "raw": click.raw.decode("utf-8"),
        }

    def _count(self, report: BatchReport) -> None:
        for outcome in (
            "held",
            "already_joined",
            "too_old",
            "filtered",
            "joined",
            "wasted",
            "deferred",
            "behind_reader",
            "unjoinable",
        ):
            value = getattr(report, outcome)
            if value:
                metrics.CLICKS.labels(self.dc, outcome).inc(value)
        latency = metrics.JOIN_LATENCY.labels(self.dc)
        for us in report.latencies_us:
            latency.observe(us / 1_000_000)
        self.totals.add(report)
        metrics.RETRIES_PENDING.labels(self.dc).set(self.retries.pending())
        metrics.BEHIND_READER.labels(self.dc).set(report.behind_reader)
        log.info(
            "joiner.batch",
            dc=self.dc,
            seconds=report.seconds,
            reader_wait_s=report.reader_wait_s,
            **report.counts(),
        )


def _decode_query(raw: bytes, query_id: str) -> QueryEvent | None:
    try:
        query = decode_query(raw)
    except ValueError:
        return None
    return query if str(query.query_id) == query_id else None
