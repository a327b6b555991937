"""The retry store: clicks whose query has not been found yet, due again later.

The paper's dispatcher keeps such clicks and tries them again with
exponential backoff; a click whose query never comes ends, after both
``max_attempts`` tries and ``max_age_s`` since it was first seen, as
*unjoinable*. The store is a SQLite file on the DC's local storage (next to
the Spark checkpoint, never on S3), keyed by ``click_id``: deferring the same
click twice (a replayed micro-batch, a duplicated log line) keeps one row.

Backoff is ``initial * multiplier ** (attempts - 1)``, capped at
``max_backoff``, with a jitter of ``± jitter`` of it drawn from a stable hash
of the click id and attempt, so a replay computes the same due time.

How it fails: SQLite errors propagate and fail the batch (Spark retries it);
the store is transactional, so a failed call changes nothing.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import zlib
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from photon.settings import RetrySettings

_US = 1_000_000

_SCHEMA = """
CREATE TABLE IF NOT EXISTS retries (
    click_id TEXT PRIMARY KEY,
    raw BLOB NOT NULL,
    file TEXT NOT NULL,
    offset INTEGER NOT NULL,
    first_seen_us INTEGER NOT NULL,
    attempts INTEGER NOT NULL,
    due_us INTEGER NOT NULL,
    wake_progress_us INTEGER
);
CREATE INDEX IF NOT EXISTS retries_due_order ON retries (due_us, click_id);
CREATE TABLE IF NOT EXISTS counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS open_batches (
    batch TEXT PRIMARY KEY,
    now_us INTEGER,
    reader_progress_us INTEGER,
    shard_groups INTEGER
);
"""


@dataclass(frozen=True, slots=True)
class BatchStart:
    """A batch as it starts: a replay of an unfinished try, and what its first try saw.

    A replay reuses its first try's clock and query-reader progress, so it makes the
    same decisions (docs/join.md, "Why no click is lost to a crash: replays").
    """

    replay: bool
    now_us: int
    reader_progress_us: int
    groups: int = 1  # the shard groups its clicks were split into (their output parts)


@dataclass(frozen=True, slots=True)
class PendingClick:
    """A click line waiting for its query, with where it was read."""

    click_id: str
    raw: bytes
    file: str
    offset: int
    first_seen_us: int = 0
    attempts: int = 0
    #: Its last try came before the DC's query reader had read as far as its query's
    #: time (it was deferred to wake at the reader's progress, :meth:`RetryStore.defer`).
    behind_reader: bool = False
    #: The query its last try looked for, as the store holds it (:meth:`RetryStore.due`);
    #: None for a click not tried yet (new, held, put back by a recovery).
    query_id: str | None = None

    def __reduce__(self) -> tuple[Any, ...]:
        # As a constructor call: pickled by the C pickler, not field by field (shipped
        # to and from Spark tasks by every batch).
        where = (self.file, self.offset, self.first_seen_us, self.attempts, self.behind_reader)
        return (pending_click, (self.click_id, self.raw, *where, self.query_id))


_NEW = object.__new__
_SET_CLICK_ID, _SET_RAW, _SET_FILE, _SET_OFFSET = (
    vars(PendingClick)[name].__set__ for name in ("click_id", "raw", "file", "offset")
)
_SET_FIRST_SEEN, _SET_ATTEMPTS, _SET_BEHIND, _SET_QUERY_ID = (
    vars(PendingClick)[name].__set__
    for name in ("first_seen_us", "attempts", "behind_reader", "query_id")
)


def pending_click(
    click_id: str,
    raw: bytes,
    file: str,
    offset: int,
    first_seen_us: int = 0,
    attempts: int = 0,
    behind_reader: bool = False,
    query_id: str | None = None,
) -> PendingClick:
    """``PendingClick(...)``, built through the slots' descriptors: the frozen
    dataclass's ``__init__`` sets each of its eight fields by name through
    ``object.__setattr__``, and a click is built once a line read, a retry taken and
    a pickle crossed (about half the cost)."""
    click: PendingClick = _NEW(PendingClick)
    _SET_CLICK_ID(click, click_id)
    _SET_RAW(click, raw)
    _SET_FILE(click, file)
    _SET_OFFSET(click, offset)
    _SET_FIRST_SEEN(click, first_seen_us)
    _SET_ATTEMPTS(click, attempts)
    _SET_BEHIND(click, behind_reader)
    _SET_QUERY_ID(click, query_id)
    return click


class RetryStore:
    def __init__(self, path: Path, policy: RetrySettings) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.policy = policy
        self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.executescript(_SCHEMA)
        # a store made before these columns existed
        self._add_columns("open_batches", ("now_us", "reader_progress_us", "shard_groups"))
        self._add_columns(
            "retries", ("wake_progress_us", "too_new_until_us", "query_id TEXT", "timer_due_us")
        )
        self._db.execute(
            "CREATE INDEX IF NOT EXISTS retries_wake ON retries (wake_progress_us) "
            "WHERE wake_progress_us IS NOT NULL"
        )
        self._db.execute(
            "CREATE INDEX IF NOT EXISTS retries_seen ON retries (first_seen_us) "
            "WHERE query_id IS NOT NULL"
        )
        self._db.execute(
            "CREATE INDEX IF NOT EXISTS retries_spared ON retries (timer_due_us) "
            "WHERE timer_due_us IS NOT NULL"
        )
        # a store made before the due order's index held the click id: one index to keep
        self._db.execute("DROP INDEX IF EXISTS retries_due")
        # The backoff before the jitter, by attempt (the policy is frozen): the driver
        # draws one for every click it defers, ~1,000 a batch on a backlog.
        self._backoff_base_s: dict[int, float] = {}
        self.max_age_us = int(policy.max_age_s * _US)

    def _add_columns(self, table: str, columns: Sequence[str]) -> None:
        """Add each of ``columns`` (``name`` for a nullable integer, or ``name TYPE``)
        that ``table`` lacks."""
        present = {r[1] for r in self._db.execute(f"PRAGMA table_info({table})")}
        for column in columns:
            name, _, kind = column.partition(" ")
            if name not in present:
                self._db.execute(f"ALTER TABLE {table} ADD COLUMN {name} {kind or 'INTEGER'}")

    def close(self) -> None:
        self._db.close()

    def backoff_us(self, click_id: str, attempts: int) -> int:
        p = self.policy
        base = self._backoff_base_s.get(attempts)
        if base is None:
            base = min(p.initial_backoff_s * p.multiplier ** max(0, attempts - 1), p.max_backoff_s)
            self._backoff_base_s[attempts] = base
        if not p.jitter:
            return max(1, int(base * _US))
        # CRC-32, not the shards' hash: the driver draws one for every click it defers,
        # and a jitter needs spread and stability, not a cryptographic digest.
        unit = (zlib.crc32(f"{click_id}#{attempts}".encode()) % 2_000_001) / 1_000_000 - 1.0
        return max(1, int(base * (1.0 + p.jitter * unit) * _US))  # unit in [-1, 1]

    @staticmethod
    def spared_due_us(first_seen_us: int, spare_us: int, timer_due_us: int) -> int | None:
        """When a spared click is due (the end of its window from its first sighting),
        or None where its backoff's timer ends first: sparing would not move it."""
        window_end = first_seen_us + spare_us
        return window_end if window_end > timer_due_us else None

    def defer(
        self,
        clicks: Iterable[PendingClick],
        now_us: int,
        may_expire: Callable[[str], bool] = lambda click_id: True,
        wake_at_progress: Mapping[str, int] | None = None,
        query_ids: Mapping[str, str] | None = None,
        spared: Collection[str] = (),
        spare_us: int = 0,
    ) -> tuple[list[PendingClick], list[PendingClick]]:
        """Schedule each click again; returns (deferred, expired).

        A click is due at its backoff's end, or, when ``wake_at_progress`` names it,
        as soon as the DC's query reader has read that far (its query's time): a click
        tried before its reader read its query is tried again once it has, not when a
        timer that knows nothing of the reader runs out (:meth:`due`).

        Expired clicks, past both the attempt and the age limits and allowed by
        ``may_expire`` (the DC's query reader has read far enough past them), are left as
        they are: the caller writes them out as unjoinable and only then removes
        them (:meth:`finish_batch`, as settled), so a crash in between loses none. A
        click past the limits that may not expire yet is deferred like any other.

        ``query_ids`` names the query each click waits for: such a click is woken
        as soon as its query is cached (:meth:`waiting_for_queries`, :meth:`wake`).
        ``spared`` names clicks whose tries within ``spare_us`` of their first sighting
        would only ask the cache again, which the joiner's look at the cache does for
        them (join on arrival): such a click is due no sooner, its backoff's due time
        kept for :meth:`restore_spared`.
        """
        wake = wake_at_progress or {}
        queries = query_ids or {}
        pending = list(clicks)
        deferred: list[PendingClick] = []
        expired: list[PendingClick] = []
        inserts: list[tuple[object, ...]] = []  # new rows, or a row's query named anew
        updates: list[tuple[object, ...]] = []  # the row's schedule alone
        ids = [c.click_id for c in pending]
        twice = len(set(ids)) != len(ids)  # in order, through the one statement that does all
        with self._transaction():
            # One read and one executemany a kind, not two statements a click: a backlog's
            # never-joinable clicks come back batch after batch (docs/join.md, "Local
            # state"). ``known`` follows the writes, so a click given twice counts twice.
            known = self._sightings(ids)
            over_limits, backoff_us = self._over_limits, self.backoff_us
            for click in pending:
                click_id = click.click_id
                stored = known.get(click_id)
                first_seen, attempts, stored_query = stored or (now_us, 0, None)
                attempts += 1
                current = pending_click(
                    click_id, click.raw, click.file, click.offset, first_seen, attempts
                )
                if over_limits(attempts, first_seen, now_us) and may_expire(click_id):
                    expired.append(current)
                    continue
                query_id = queries.get(click_id)
                known[click_id] = (first_seen, attempts, query_id or stored_query)
                due = now_us + backoff_us(click_id, attempts)
                timer_due = None
                if click_id in spared:
                    window_end = self.spared_due_us(first_seen, spare_us, due)
                    if window_end is not None:
                        due, timer_due = window_end, due
                if stored is not None and not twice and query_id in (None, stored_query):
                    # Only its schedule changes: the narrow statement leaves the row's
                    # query (and the index over it) alone, a third cheaper.
                    updates.append((attempts, due, wake.get(click_id), timer_due, click_id))
                else:
                    inserts.append(
                        (
                            click_id,
                            click.raw,
                            click.file,
                            click.offset,
                            first_seen,
                            attempts,
                            due,
                            wake.get(click_id),
                            query_id,
                            timer_due,
                        )
                    )
                deferred.append(current)
            self._db.executemany(
                "INSERT INTO retries (click_id, raw, file, offset, first_seen_us, attempts, "
                "due_us, wake_progress_us, query_id, timer_due_us) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
                "ON CONFLICT (click_id) DO UPDATE SET attempts = excluded.attempts, "
                "due_us = excluded.due_us, wake_progress_us = excluded.wake_progress_us, "
                "too_new_until_us = NULL, query_id = coalesce(excluded.query_id, query_id), "
                "timer_due_us = excluded.timer_due_us",
                inserts,
            )
            self._db.executemany(
                "UPDATE retries SET attempts = ?, due_us = ?, wake_progress_us = ?, "
                "too_new_until_us = NULL, timer_due_us = ? WHERE click_id = ?",
                updates,
            )
        return deferred, expired

    def _sightings(self, click_ids: Sequence[str]) -> dict[str, tuple[int, int, str | None]]:
        """(first sighting, attempts, query) of those of ``click_ids`` the store holds."""
        if not click_ids:
            return {}
        rows = self._db.execute(
            "SELECT click_id, first_seen_us, attempts, query_id FROM retries "
            "WHERE click_id IN (SELECT value FROM json_each(?))",
            (json.dumps(list(click_ids)),),
        ).fetchall()
        return {str(r[0]): (int(r[1]), int(r[2]), r[3]) for r in rows}

    def past_limits(self, click: PendingClick, now_us: int, tries: int = 0) -> bool:
        """Past both ``max_attempts`` and ``max_age_s`` since it was first seen, once
        ``tries`` more tries are counted."""
        return self._over_limits(click.attempts + tries, click.first_seen_us, now_us)

    def _over_limits(self, attempts: int, first_seen_us: int, now_us: int) -> bool:
        # On fields, not a click: defer asks it of every click before it builds one.
        return attempts >= self.policy.max_attempts and now_us - first_seen_us >= self.max_age_us

    def hold(
        self,
        clicks: Iterable[PendingClick],
        now_us: int,
        until_us: int,
        *,
        too_new: bool = False,
    ) -> int:
        """Keep clicks until ``until_us`` without counting an attempt (DC affinity).

        A click already in the store keeps its attempts and first sighting; it
        is due no earlier than ``until_us``. ``too_new``: held because the registry
        found it stamped too far ahead of its clock, until its time less the skew;
        marked, so that :meth:`settleable` leaves it out (no run can settle it
        before then).
        """
        marked = until_us if too_new else None
        rows = [
            (click.click_id, click.raw, click.file, click.offset, now_us, until_us, marked)
            for click in clicks
        ]
        with self._transaction():
            # held: the reader's progress wakes it no earlier
            self._db.executemany(
                "INSERT INTO retries (click_id, raw, file, offset, first_seen_us, attempts, "
                "due_us, wake_progress_us, too_new_until_us) "
                "VALUES (?, ?, ?, ?, ?, 0, ?, NULL, ?) "
                "ON CONFLICT (click_id) DO UPDATE SET due_us = max(due_us, excluded.due_us), "
                "wake_progress_us = NULL, too_new_until_us = excluded.too_new_until_us, "
                "timer_due_us = max(timer_due_us, excluded.due_us)",  # NULL: none spared
                rows,
            )
        return len(rows)

    def too_new(self, now_us: int) -> int:
        """Clicks held as stamped too far ahead whose time less the skew is still to come."""
        row = self._db.execute(
            "SELECT count(*) FROM retries WHERE too_new_until_us > ?", (now_us,)
        ).fetchone()
        return int(row[0])

    def settleable(self, now_us: int) -> int:
        """Pending clicks a run can settle now: all but those held as stamped ahead of the
        registry's clock whose time is still to come (a later run joins them)."""
        row = self._db.execute(
            "SELECT count(*) FROM retries WHERE too_new_until_us IS NULL OR too_new_until_us <= ?",
            (now_us,),
        ).fetchone()
        return int(row[0])

    def inject(self, clicks: Iterable[PendingClick], due_us: int) -> int:
        """Put clicks back for the joiner (recovery), due at ``due_us``, attempts from 0.

        A click already waiting keeps its row and becomes due no later than ``due_us``.
        """
        injected = 0
        with self._transaction():
            for click in clicks:
                self._db.execute(
                    "INSERT INTO retries (click_id, raw, file, offset, first_seen_us, attempts, "
                    "due_us, wake_progress_us) VALUES (?, ?, ?, ?, ?, 0, ?, NULL) "
                    "ON CONFLICT (click_id) DO UPDATE SET due_us = min(due_us, excluded.due_us), "
                    "timer_due_us = NULL",
                    (
                        click.click_id,
                        click.raw,
                        click.file,
                        click.offset,
                        click.first_seen_us,
                        due_us,
                    ),
                )
                injected += 1
        return injected

    def click_ids(self) -> list[str]:
        return [r[0] for r in self._db.execute("SELECT click_id FROM retries").fetchall()]

    def due(self, now_us: int, limit: int, reader_progress_us: int = -1) -> list[PendingClick]:
        """Up to ``limit`` clicks due at ``now_us`` or woken by the query reader's progress
        (:meth:`defer`), the longest-waiting first. A replay passes its first try's clock
        and progress, and so takes the same clicks."""
        # Two searches, each on its own index: the first ``limit`` clicks due by their
        # timer (``retries_due_order`` holds their order), and those not due yet that
        # the reader's progress wakes; the first ``limit`` of both are read. One WHERE
        # with an OR walked every row of the store, a table read each: a batch cost what
        # the store held (a DC back from an outage holds its backlog's clicks), not
        # what was due.
        rows = self._db.execute(
            "SELECT r.click_id, r.raw, r.file, r.offset, r.first_seen_us, r.attempts, "
            "r.wake_progress_us IS NOT NULL, r.query_id FROM ("
            "SELECT * FROM (SELECT rowid AS id, due_us, click_id FROM retries "
            "WHERE due_us <= :now ORDER BY due_us, click_id LIMIT :limit) UNION ALL "
            "SELECT rowid AS id, due_us, click_id FROM retries INDEXED BY retries_wake "
            "WHERE wake_progress_us <= :progress AND due_us > :now "
            "ORDER BY due_us, click_id LIMIT :limit"
            ") AS d JOIN retries AS r ON r.rowid = d.id ORDER BY d.due_us, d.click_id",
            {"now": now_us, "progress": reader_progress_us, "limit": limit},
        ).fetchall()
        return [
            pending_click(r[0], bytes(r[1]), r[2], r[3], r[4], r[5], bool(r[6]), r[7]) for r in rows
        ]

    def waiting_for_queries(
        self, now_us: int, seen_from_us: int, seen_until_us: int, limit: int
    ) -> list[tuple[str, str]]:
        """(click, query) of up to ``limit`` tried clicks not due at ``now_us``, first
        seen from ``seen_from_us`` to ``seen_until_us``: those a batch may wake when
        their query has been cached since (join on arrival). Not a click held without
        a try (affinity) or as stamped too far ahead: their wait is not for a query."""
        rows = self._db.execute(
            "SELECT click_id, query_id FROM retries WHERE query_id IS NOT NULL "
            "AND first_seen_us BETWEEN ? AND ? AND due_us > ? AND attempts >= 1 "
            "AND too_new_until_us IS NULL ORDER BY first_seen_us DESC LIMIT ?",
            (seen_from_us, seen_until_us, now_us, limit),
        ).fetchall()
        return [(str(r[0]), str(r[1])) for r in rows]

    def wake(self, click_ids: Sequence[str], now_us: int) -> int:
        """Make ``click_ids`` due at ``now_us`` (their query has come); how many were.

        Written before the batch takes its due clicks, so a replay of that batch,
        which takes the clicks due at its first try's clock, takes these as well."""
        with self._transaction():
            woken = 0
            for click_id in click_ids:
                woken += self._db.execute(
                    "UPDATE retries SET due_us = ?, timer_due_us = NULL "
                    "WHERE click_id = ? AND due_us > ?",
                    (now_us, click_id, now_us),
                ).rowcount
        return woken

    def restore_spared(self) -> int:
        """Give every click :meth:`defer` spared tries to its backoff's due time again;
        how many were spared. For when the joiner's look at the cache no longer covers
        them (the cache down or its keys lost, a look cut short by its limit)."""
        with self._transaction():
            return self._db.execute(
                "UPDATE retries SET due_us = min(due_us, timer_due_us), timer_due_us = NULL "
                "WHERE timer_due_us IS NOT NULL"
            ).rowcount

    def remove(self, click_ids: Sequence[str]) -> None:
        """Drop these clicks (those not waiting here are no error).

        A batch settles every click it joined (thousands, most never here). While the
        store holds no more than twice as many rows, its ids are read and only those given
        are deleted: a row read costs SQLite about a third of an index probe (docs/join.md,
        "Local state"). A larger store is probed, one statement over a JSON array (no
        Python call a click). Either way the cost is bounded by the ids given, not by
        a store that grows during an outage."""
        with self._transaction():
            self._remove(click_ids)

    def _remove(self, click_ids: Sequence[str]) -> None:
        if not click_ids:
            return
        wanted = list(click_ids)
        scan_below = 2 * len(wanted)
        (rows,) = self._db.execute(
            "SELECT count(*) FROM (SELECT 1 FROM retries LIMIT ?)", (scan_below + 1,)
        ).fetchone()
        if rows <= scan_below:
            given = set(wanted)
            wanted = [click_id for click_id in self.click_ids() if click_id in given]
            if not wanted:
                return
        self._db.execute(
            "DELETE FROM retries WHERE click_id IN (SELECT value FROM json_each(?))",
            (json.dumps(wanted),),
        )

    def pending(self) -> int:
        row = self._db.execute("SELECT count(*) FROM retries").fetchone()
        return int(row[0])

    def contains(self, click_id: str) -> bool:
        row = self._db.execute("SELECT 1 FROM retries WHERE click_id = ?", (click_id,)).fetchone()
        return row is not None

    def next_sequence(self, name: str) -> int:
        """A counter that survives restarts: numbers the retry-only passes."""
        with self._transaction():
            self._db.execute(
                "INSERT INTO counters VALUES (?, 1) "
                "ON CONFLICT (name) DO UPDATE SET value = value + 1",
                (name,),
            )
            row = self._db.execute("SELECT value FROM counters WHERE name = ?", (name,)).fetchone()
        return int(row[0])

    def begin_batch(
        self, batch: str, now_us: int, reader_progress_us: int, groups: int = 1
    ) -> BatchStart:
        """Record that ``batch`` starts at ``now_us`` with the query reader at
        ``reader_progress_us``, its clicks split into ``groups`` shard groups; a replay
        gets its first try's values back.

        A batch that started and never finished may have registered ids without
        writing them: its replay must join again the ids that hold its token, in the
        same groups (each group writes its own output parts), and decide what to
        defer and expire as the first try did.
        """
        if groups < 1:
            raise ValueError(f"groups must be at least 1, not {groups}")
        with self._transaction():
            row = self._db.execute(
                "SELECT now_us, reader_progress_us, shard_groups FROM open_batches WHERE batch = ?",
                (batch,),
            ).fetchone()
            if row is None:
                self._db.execute(
                    "INSERT INTO open_batches (batch, now_us, reader_progress_us, shard_groups) "
                    "VALUES (?, ?, ?, ?)",
                    (batch, now_us, reader_progress_us, groups),
                )
                return BatchStart(False, now_us, reader_progress_us, groups)
        first_now, first_progress, first_groups = row
        return BatchStart(
            True,
            now_us if first_now is None else int(first_now),
            reader_progress_us if first_progress is None else int(first_progress),
            1 if first_groups is None else int(first_groups),  # opened before groups existed
        )

    def finish_batch(self, batch: str, settled: Sequence[str] = ()) -> None:
        """Close ``batch``, dropping the clicks it ``settled`` (:meth:`remove`) in the same
        transaction: one commit, and no state in which they left and it is still open."""
        with self._transaction():
            self._remove(settled)
            self._db.execute("DELETE FROM open_batches WHERE batch = ?", (batch,))

    def unfinished_batches(self, prefix: str = "") -> list[str]:
        rows = self._db.execute(
            "SELECT batch FROM open_batches WHERE batch LIKE ? ORDER BY batch",
            (prefix.replace("%", "") + "%",),
        ).fetchall()
        return [r[0] for r in rows]

    def _transaction(self) -> _Transaction:
        return _Transaction(self._db)


class _Transaction:
    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db

    def __enter__(self) -> None:
        self._db.execute("BEGIN IMMEDIATE")

    def __exit__(self, exc_type: object, *_: object) -> None:
        self._db.execute("COMMIT" if exc_type is None else "ROLLBACK")


#: The retry store's file name in a joiner's state directory.
RETRY_STORE = "retry.sqlite"


def open_streaming_batches(path: Path) -> set[int]:
    """The streaming batches (Spark's ids) the retry store at ``path`` holds open, read
    from another process without writing: a batch Spark committed while its groups
    ran is not done until the joiner settles it (docs/join.md, "Batches that
    overlap"). Empty when there is no store yet or it cannot be read now."""
    if not path.is_file():
        return set()
    try:
        with contextlib.closing(
            sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=1.0)
        ) as db:
            rows = db.execute("SELECT batch FROM open_batches").fetchall()
    except sqlite3.Error:  # being made, or locked past the timeout: as if none were open
        return set()
    return {int(row[0]) for row in rows if str(row[0]).isdigit()}
