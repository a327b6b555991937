"""The query reader's progress: the event time up to which it has provably read every query.

A joiner may declare a click unjoinable only once its DC's query reader has
read past the click's query (docs/join.md, "When a click is unjoinable"): a
reader that is stopped, slow or behind must never turn a joinable click
into an unjoinable one. This module is that rule's two halves.

:class:`ReaderProgress` runs in the query reader. After each batch it knows,
for every query file, how far it has read (``read_end``) and the newest
event time among the lines it read there (``max_ts_us``). Lines in one file
are sorted by event time only within ``order_bound`` (late shipping), so
having read a file up to event time ``T`` proves it holds no unread query
older than ``T - order_bound``. The progress is the minimum of that over the
files that still matter:

* a file with unread bytes (the reader is behind on it): ``T - order_bound``,
  or no progress at all while nothing of it was read yet;
* a file read to its end that grew within ``idle`` (by its mtime: its writer
  is live and may append): ``T - order_bound``;
* a file read to its end and idle for longer: nothing more is coming from
  it; it does not hold the progress back.

A query stamped further ahead of the reader's clock (when read) than
``max_ahead_us`` (``shards.max_clock_skew_s``) counts as stamped that far ahead,
and the progress never passes the reader's clock plus that: one query from an ad
server whose clock runs a day ahead would otherwise move the progress a day
ahead for good, and let a stopped or lagging reader's clicks expire as
unjoinable.

With every file read and idle, everything written so far was read: the
progress is the newest event time read, or the reader's clock less
``idle``, whichever is later — unless the DC's click files grew within
``idle``: ad servers that still log clicks still log queries, so silent
query files then mean a stalled shipper, not stopped writers, and the clock
does not run (the progress stays at the newest event time read). Click files
are looked at as query files are (a file's first sight counts as growth at
``min(mtime, now)``); recovery's files (``recovery-*``) are not the ad
servers' and do not count. The published progress never goes back.

With the progress it publishes the last time it failed to cache queries it
read (``cache_lost_at_us``; 0: never): the joiner skips a log search only for
a query the cache cannot have lost (photon.join.cache.CacheLossWatch). It also
looks at the cache before caching each batch (:meth:`ReaderProgress.looked_at_cache`)
and publishes what that look found (``cache_signs``) and, in query time, how
far it had read when a look last found a loss or a put failed
(``cache_intact_after_us``): every query it read since is newer than that, so
a joiner whose own look finds the same signs knows each such query is cached,
however old, such as a backlog's read before the joiner started.

A view follows its file, not its name (:meth:`ReaderProgress.follow` takes the
log reader's reports of renamed, replaced and shrunk files and torn last lines;
each look matches views to files by their heads): a file rotated to another
name keeps what was read of it, and a new file under a rotated file's name is
new (nothing of it read), never the old file read far past its end. A torn last
line counts as read: its bytes will never be a line.

The reader keeps its per-file view in ``progress-state.json`` and publishes
``progress.json`` (both written whole, then renamed) in its state directory,
next to its checkpoint; the DC's joiner reads the latter
(:func:`read_progress`) when it plans a batch and records the value with
the batch, so a replay decides as its first try did.

How it fails: a reader that stops publishes nothing more; its last progress
stays, and the joiner keeps the clicks behind it pending (never unjoinable).
A missing or unreadable ``progress.json`` reads as "nothing read yet".
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, NamedTuple

from photon.events.records import QuarantineReason, QuarantineRecord
from photon.join.cache_signs import CacheSigns
from photon.localfiles import write_whole
from photon.logs.reader import HEAD_BYTES, head_of, is_log_name

PROGRESS_FILE = "progress.json"
STATE_FILE = "progress-state.json"
#: "Nothing provably read": below every event time.
NOTHING_READ = 0


@dataclass(slots=True)
class FileView:
    """What the reader knows of one query file."""

    read_end: int = 0  # bytes read (the end of the last line read)
    max_ts_us: int | None = None  # newest event time among the lines read (None: none valid)
    size: int = 0  # the file's size when last looked at
    grown_at_us: int = 0  # when it last grew: its mtime, or the look that saw it grow
    #: The fingerprint of the file's head once it has one (photon.logs.reader.head_of):
    #: the view follows the file, not its name, through rotation and replacement.
    head: str | None = None


class FileStat(NamedTuple):
    """A query file as the reader looks at it."""

    size: int
    mtime_us: int
    head: str | None = None  # the fingerprint of its first bytes (None: too few, unknown)


@dataclass(frozen=True, slots=True)
class ReadLine:
    """One query line the reader read: its file, where it ends, its event time (if valid)."""

    file: str
    end: int
    ts_us: int | None


class ReaderProgress:
    """The query reader's side: per-file views in, a monotone progress out."""

    def __init__(
        self,
        state_dir: Path,
        *,
        order_bound_us: int,
        idle_us: int,
        max_ahead_us: int | None = None,
    ) -> None:
        if order_bound_us < 0 or idle_us <= 0:
            raise ValueError("order_bound_us must be >= 0 and idle_us > 0")
        if max_ahead_us is not None and max_ahead_us <= 0:
            raise ValueError("max_ahead_us must be > 0")
        self.state_dir = state_dir
        self.order_bound_us = order_bound_us
        self.idle_us = idle_us
        #: A query counts as stamped at most this far ahead of the reader's clock when
        #: it was read (``shards.max_clock_skew_s``; None: as stamped).
        self.max_ahead_us = max_ahead_us
        self.files: dict[str, FileView] = {}
        #: The DC's click files, by name: only ``size`` and ``grown_at_us`` are used.
        self.click_files: dict[str, FileView] = {}
        self.progress_us = NOTHING_READ
        #: When it last failed to cache queries it read (0: never).
        self.cache_lost_at_us = 0
        #: The newest event time among all queries read (as stamped, not capped).
        self.max_read_us = NOTHING_READ
        #: What its last look at the cache found (None: no look, or no answer).
        self.cache_signs: CacheSigns | None = None
        #: Every query read since its last look that found a loss (or a failed put) is
        #: newer than this (None: no look yet).
        self.cache_intact_after_us: int | None = None
        #: The last batch whose queries it published (None: none since it started
        #: publishing): every publish names it, a look between batches too (:meth:`save`).
        self.last_batch: str | None = None
        self._saved: dict[str, object] | None = None  # what the state file holds
        self._load()

    def observe(self, lines: Iterable[ReadLine], now_us: int | None = None) -> None:
        """Take a batch's lines, read at ``now_us``, into the per-file views (a replay
        changes nothing). A line stamped further ahead of ``now_us`` than
        ``max_ahead_us`` counts as stamped that far ahead: an ad server whose clock
        runs a day ahead must not prove that every query up to tomorrow was read."""
        ceiling = (
            None if now_us is None or self.max_ahead_us is None else now_us + self.max_ahead_us
        )
        for line in lines:
            view = self.files.setdefault(line.file, FileView())
            view.read_end = max(view.read_end, line.end)
            if line.ts_us is not None:
                self.max_read_us = max(self.max_read_us, line.ts_us)
                ts_us = line.ts_us if ceiling is None else min(line.ts_us, ceiling)
                view.max_ts_us = max(view.max_ts_us or ts_us, ts_us)

    def follow(self, reports: Iterable[QuarantineRecord]) -> None:
        """Take the log reader's reports of a batch (before its lines): a file renamed
        (its view goes on under the new name), replaced under its name (read again from
        0), shrunk (read on from where it was cut), or a torn last line consumed."""
        for report in reports:
            reason = report.reason
            if reason is QuarantineReason.FILE_ROTATED:
                old = report.raw.decode("utf-8", "surrogateescape")
                if old in self.files and report.file not in self.files:
                    self.files[report.file] = self.files.pop(old)
            elif reason is QuarantineReason.FILE_REPLACED:
                view = self.files.get(report.file)
                if view is not None:
                    view.read_end, view.max_ts_us, view.head = 0, None, None
            elif reason is QuarantineReason.FILE_TRUNCATED and report.file in self.files:
                view = self.files[report.file]
                view.read_end = min(view.read_end, report.offset)
            elif reason is QuarantineReason.TORN_LINE:  # its bytes will never be a line
                view = self.files.setdefault(report.file, FileView())
                view.read_end = max(view.read_end, report.offset + len(report.raw))

    def advance(
        self,
        files: Mapping[str, FileStat],
        now_us: int,
        clicks: Mapping[str, FileStat] | None = None,
    ) -> int:
        """The progress after looking at every query file (size, mtime, head) at
        ``now_us``, and at the DC's click files (``clicks``; None: not looked at, taken
        for idle)."""
        self._follow_heads(files)
        bounds: list[int] = []
        newest = NOTHING_READ
        if clicks is not None:  # every click file looked at (a file gone is forgotten)
            self.click_files = {n: v for n, v in self.click_files.items() if n in clicks}
            for name, stat in clicks.items():
                _looked_at(self.click_files, name, stat, now_us)
        clicks_live = self._clicks_live(now_us)
        for name, stat in files.items():
            size = stat.size
            view = _looked_at(self.files, name, stat, now_us)
            if view.max_ts_us is not None:
                newest = max(newest, view.max_ts_us)
            behind = size > view.read_end
            live = now_us - view.grown_at_us < self.idle_us
            if not (behind or live):
                continue
            if view.max_ts_us is None:
                if behind:  # unread lines of unknown time: no progress can be proven
                    return self.progress_us
                continue  # live, but nothing valid read in it yet: nothing to wait for
            bounds.append(view.max_ts_us - self.order_bound_us)
        if bounds:
            computed = min(bounds)
        elif clicks_live:  # query files silent while clicks are logged: a stall, not an end
            computed = newest
        else:
            computed = max(newest, now_us - self.idle_us)
        if self.max_ahead_us is not None:  # never past the reader's own clock plus the skew
            computed = min(computed, now_us + self.max_ahead_us)
        self.progress_us = max(self.progress_us, computed)
        return self.progress_us

    def _follow_heads(self, files: Mapping[str, FileStat]) -> None:
        """Views follow files by their heads, whatever their names now.

        A view whose file is under another name now (rotated: renamed, or copied
        before a truncation) moves there; one whose file went is dropped; so a new
        file under a known name is seen as new (nothing of it read: it holds the
        progress back until read), not as the old file read far past its end. A
        view read past the head learns its head at the first look.
        """
        for name, view in list(self.files.items()):
            stat = files.get(name)
            if view.head is None:
                if stat is not None and stat.head is not None and view.read_end >= HEAD_BYTES:
                    view.head = stat.head
                continue
            if stat is not None and stat.head == view.head:
                continue  # still there (another file may share its head: a copy)
            del self.files[name]
            # Where its head is now, under a name not followed already (a copy left by a
            # copy-then-truncate rotation, or the file renamed).
            now_under = next(
                (
                    other
                    for other, other_stat in sorted(files.items())
                    if other_stat.head == view.head
                    and self.files.get(other, FileView()).head != view.head
                ),
                None,
            )
            if now_under is not None:
                self.files[now_under] = view

    def cache_lost(self, now_us: int, newest_us: int = NOTHING_READ) -> None:
        """Queries read by ``now_us`` may be missing from the cache (a put failed), the
        batch's among them: none stamped after ``newest_us``."""
        self.cache_lost_at_us = max(self.cache_lost_at_us, now_us)
        self.cache_intact_after_us = max(
            self.cache_intact_after_us or NOTHING_READ, self.max_read_us, newest_us
        )

    def looked_at_cache(self, signs: CacheSigns | None) -> None:
        """Take a look at the cache (:meth:`CacheEventStore.reader_look`), made before the
        batch's queries are cached. The first look, one that finds other signs than the
        last, or none (no answer): any query read so far may be gone, so only those read
        from now on (newer than :attr:`max_read_us`) are known to be cached."""
        if signs is None or signs != self.cache_signs or self.cache_intact_after_us is None:
            self.cache_intact_after_us = max(
                self.cache_intact_after_us or NOTHING_READ, self.max_read_us
            )
        self.cache_signs = signs

    def settled(self, files: Mapping[str, FileStat], now_us: int) -> bool:
        """Every file read to its end and idle: the progress is as far as it can go until
        something is written (a reader stopping now leaves nothing behind it). Not while
        the DC's click files grow (as of the last :meth:`advance`): the clock may not
        have run the progress past them yet."""
        if self._clicks_live(now_us):
            return False
        for name, stat in files.items():
            size = stat.size
            view = self.files.get(name)
            if view is None or size > view.read_end or size != view.size:
                return False
            if now_us - view.grown_at_us < self.idle_us:
                return False
        return True

    def _clicks_live(self, now_us: int) -> bool:
        return any(now_us - v.grown_at_us < self.idle_us for v in self.click_files.values())

    def save(self, batch: str | None = None) -> None:
        """Persist the views, then publish the progress (each file whole); nothing when
        nothing changed since the last save (the reader looks every trigger interval).

        ``batch``: the batch whose queries were just cached; None for a look between
        batches. Every publish names the last such batch, so ``progress.json`` never
        returns to bytes it held before a batch was cached: a joiner that reads the same
        bytes twice knows no query was cached in between but ones not published yet
        (docs/join.md, "One joiner batch": the wake look). A look between batches that
        published "idle" went back to its own earlier bytes when the progress had not
        moved, though a batch's queries had been cached meanwhile."""
        if batch is not None:
            self.last_batch = batch
        signs = None if self.cache_signs is None else list(self.cache_signs)
        state: dict[str, object] = {
            "progress_us": self.progress_us,
            "cache_lost_at_us": self.cache_lost_at_us,
            "max_read_us": self.max_read_us,
            "cache_signs": signs,
            "cache_intact_after_us": self.cache_intact_after_us,
            "files": {name: asdict(view) for name, view in self.files.items()},
            "click_files": {name: asdict(view) for name, view in self.click_files.items()},
            "last_batch": self.last_batch,
        }
        if state == self._saved:
            return
        _write_json(self.state_dir / STATE_FILE, state)
        self._saved = state
        _write_json(
            self.state_dir / PROGRESS_FILE,
            {
                "progress_us": self.progress_us,
                "cache_lost_at_us": self.cache_lost_at_us,
                "cache_signs": signs,
                "cache_intact_after_us": self.cache_intact_after_us,
                "batch": self.last_batch,
            },
        )

    def _load(self) -> None:
        path = self.state_dir / STATE_FILE
        if not path.exists():
            return
        data = json.loads(path.read_text())
        self.progress_us = int(data["progress_us"])
        self.cache_lost_at_us = int(data.get("cache_lost_at_us", 0))
        self.files = {name: FileView(**view) for name, view in data["files"].items()}
        # A state saved before the reader looked at the cache: the newest time its views
        # hold (its look after this start finds no signs to match: a loss, from there).
        newest_viewed = max((v.max_ts_us or NOTHING_READ for v in self.files.values()), default=0)
        self.max_read_us = int(data.get("max_read_us", newest_viewed))
        signs = data.get("cache_signs")
        self.cache_signs = None if signs is None else CacheSigns(*signs)
        intact = data.get("cache_intact_after_us")
        self.cache_intact_after_us = None if intact is None else int(intact)
        clicks = data.get("click_files", {})  # a state saved before clicks were looked at
        self.click_files = {name: FileView(**view) for name, view in clicks.items()}
        last_batch = data.get("last_batch")  # a state saved before publishes named it
        self.last_batch = None if last_batch is None else str(last_batch)
        self._saved = data


def _looked_at(views: dict[str, FileView], name: str, stat: FileStat, now_us: int) -> FileView:
    """A file's view after one more look at its size and mtime."""
    view = views.get(name)
    if view is None:  # first sight: it last grew when it was last written
        view = views[name] = FileView(size=stat.size, grown_at_us=min(stat.mtime_us, now_us))
    elif stat.size != view.size:
        # It grew since the last look: by its mtime, never before that look.
        view.size = stat.size
        view.grown_at_us = max(view.grown_at_us, min(stat.mtime_us, now_us))
    return view


def file_stats(
    directory: Path, *, skip_prefix: str | None = None, heads: bool = False
) -> dict[str, FileStat]:
    """Size and mtime (µs), and with ``heads`` the head's fingerprint, of every log file
    in ``directory`` (rotated names included; none when it does not exist), but those
    whose name starts with ``skip_prefix``."""
    stats: dict[str, FileStat] = {}
    try:
        entries = list(os.scandir(directory))
    except FileNotFoundError:
        return stats
    for entry in entries:
        if is_log_name(entry.name) and not (skip_prefix and entry.name.startswith(skip_prefix)):
            try:
                stat = entry.stat()
            except FileNotFoundError:
                continue  # deleted meanwhile: nothing more is coming from it
            head = head_of(Path(entry.path)) if heads else None
            stats[entry.name] = FileStat(stat.st_size, stat.st_mtime_ns // 1000, head)
    return stats


def read_progress(reader_state_dir: Path) -> int:
    """The progress a DC's query reader published (:data:`NOTHING_READ` before any)."""
    published = _published(reader_state_dir, "progress_us")
    return NOTHING_READ if published is None else published


def read_cache_lost_at(reader_state_dir: Path) -> int | None:
    """When a DC's query reader last failed to cache queries it read (0: never); None
    when it published nothing that says (then every query may be missing)."""
    return _published(reader_state_dir, "cache_lost_at_us")


class CacheIntact(NamedTuple):
    """What a DC's query reader published of the cache: every query it read newer than
    ``after_us`` was cached since a look that found ``signs``, and kept while a look
    finds the same."""

    after_us: int
    signs: CacheSigns


def read_cache_intact(reader_state_dir: Path) -> CacheIntact | None:
    """The reader's :class:`CacheIntact`; None when it published none (no look yet, its
    last look had no answer, or a reader from before it looked)."""
    return cache_intact_of(_published_data(reader_state_dir))


def read_cache_state(reader_state_dir: Path) -> tuple[int | None, CacheIntact | None]:
    """:func:`read_cache_lost_at` and :func:`read_cache_intact` from one read of the file."""
    data = _published_data(reader_state_dir)
    return _int_of(data, "cache_lost_at_us"), cache_intact_of(data)


def cache_intact_of(data: dict[str, Any] | None) -> CacheIntact | None:
    """The :class:`CacheIntact` in a published ``progress.json`` (None: none in it)."""
    if data is None:
        return None
    try:
        after, signs = data.get("cache_intact_after_us"), data.get("cache_signs")
        if after is None or signs is None:
            return None
        run_id, evicted, token = signs
        if token is None:
            return None
        return CacheIntact(int(after), CacheSigns(str(run_id), int(evicted), token))
    except (ValueError, TypeError, AttributeError):
        return None


def published_mark(reader_state_dir: Path) -> bytes | None:
    """``progress.json`` as the reader last wrote it; None when there is none.

    The reader publishes after it caches each batch of queries, and each such
    publish names its batch, so the same bytes twice mean it cached no query it has
    published since (docs/join.md, "One joiner batch": the wake look)."""
    try:
        return (reader_state_dir / PROGRESS_FILE).read_bytes()
    except FileNotFoundError:
        return None


def _published(reader_state_dir: Path, name: str) -> int | None:
    """One value of ``progress.json``; None when missing or unreadable."""
    return _int_of(_published_data(reader_state_dir), name)


def _published_data(reader_state_dir: Path) -> dict[str, Any] | None:
    """``progress.json``; None when missing or unreadable."""
    raw = published_mark(reader_state_dir)
    try:
        data = None if raw is None else json.loads(raw)
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def _int_of(data: dict[str, Any] | None, name: str) -> int | None:
    try:
        return None if data is None else int(data[name])
    except (KeyError, ValueError, TypeError):
        return None


def _write_json(path: Path, data: object) -> None:
    write_whole(path, json.dumps(data, sort_keys=True).encode())
