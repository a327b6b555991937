"""Pacing a joiner to its DC's query reader: no click read ahead of the queries read.

When a DC's query reader has a backlog — both apps just started on hours of
logs, a DC back from an outage — its joiner would otherwise read clicks far
ahead of the queries the reader has cached: each batch then finds most of its
queries missing, defers those clicks to the retry store, and joins them only
in later retry passes (a lookup, a deferral and a second read a click). Paced,
the joiner's log source leaves such clicks in the log files until the reader
has read their queries: a click file's planned range ends before its first
line whose click is newer than the reader's progress (the event time up to
which it has provably read every query, :mod:`photon.join.progress`) plus
``lead_us``. A click happens after its query, so the lines before that end
ask for queries the reader has read (docs/join.md, "Pacing the joiner to its
query reader").

Pacing holds lines back only while all of these hold, so it can delay a click,
never lose it nor hold it for good:

* the reader has more than ``behind_bytes`` of query logs past its last
  committed batch (:func:`photon.logs.offset_log.committed_offsets`): it is
  reading a backlog. A reader that is caught up has read every query there is,
  so a click newer than its progress waits for nothing it could read;
* the reader planned or committed a batch within :data:`STALE_S` (its
  checkpoint's ``offsets`` and ``commits`` directories change with each), or
  the joiner's source started within it: a reader that stopped or hangs paces
  nothing;
* the line's click is not stamped further ahead of the clock than
  ``max_ahead_us``: a future-stamped click (a server's clock a day ahead) is
  not waited for; the joiner holds it itself (docs/join.md, "Time: what a
  clock may decide").

A line whose click id cannot be found (a bad line) never holds anything back;
the joiner quarantines it as before. Pacing changes only where a batch ends,
which Spark records in its offset log before the batch runs: a replay reads
the same lines as its first try.

A paced source with nothing new to read may wait up to ``wait_ms`` for the reader
to commit its next batch (:meth:`Pacer.moved`), within the trigger it would
otherwise sleep through: the joiner's next batch then starts when the reader
commits, not at the next trigger after it (up to a trigger interval later, on the
path of a backlog's first output). So does one whose reader is running the last
batch of its backlog (:meth:`Pacer.reader_finishing`): planned after that commit,
its batch takes the backlog's clicks whole, where planned before it left a tail.

How it fails: never raises for the reader's state being written, wiped or
missing (each reads as "no pacing" or as the reader's last known state), nor
for a click file that went or shrank (its range is left as planned: the
source reports the loss).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from photon.logs.offset_log import (
    committed_offsets,
    logged_batches,
    planned_offsets,
    unread_bytes,
)

#: A reader whose checkpoint has not changed for this long (it planned and committed
#: nothing) is taken for stopped or hung: it paces nothing.
STALE_S = 30.0

#: The click id's time in a raw click line: ``"click_id": "<ip>:<pid>:<µs>"``.
_CLICK_TS = re.compile(rb'"click_id"\s*:\s*"[^"\n]*:([0-9]{1,19})"')

_SCAN_BYTES = 1 << 20

#: The share of its trigger interval a joiner's paced source waits for the reader: the
#: rest is left for Spark to plan the batch before the next trigger is due.
TRIGGER_WAIT_SHARE = 0.8
#: And at most this long, whatever the interval: a stop of the stream waits for the
#: wait to end (well within Spark's stop timeout).
MAX_WAIT_S = 5.0


def paced_wait_ms(trigger_s: float) -> int:
    """How long a joiner's paced source with nothing new waits for its reader, for a
    stream triggered every ``trigger_s``."""
    return int(min(trigger_s * TRIGGER_WAIT_SHARE, MAX_WAIT_S) * 1000)


@dataclass(frozen=True, slots=True)
class Pacing:
    """Where a DC's query reader keeps its state and logs, and the pacing's bounds."""

    reader_state_dir: Path
    queries_dir: Path
    behind_bytes: int
    lead_us: int
    max_ahead_us: int
    #: How long a paced source with nothing new to read waits for the reader to move on
    #: (0: it does not wait; the trigger after the reader moved reads what it let through).
    wait_ms: int = 0

    def __post_init__(self) -> None:
        if min(self.behind_bytes, self.lead_us, self.max_ahead_us, self.wait_ms) < 0:
            raise ValueError("behind_bytes, lead_us, max_ahead_us and wait_ms must not be negative")

    def to_options(self) -> dict[str, str]:
        """As the log source's options (spark_apps.growing_log_source)."""
        return {
            _STATE_DIR: str(self.reader_state_dir),
            _QUERIES_DIR: str(self.queries_dir),
            _BEHIND_BYTES: str(self.behind_bytes),
            _LEAD_US: str(self.lead_us),
            _MAX_AHEAD_US: str(self.max_ahead_us),
            _WAIT_MS: str(self.wait_ms),
        }

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> Pacing | None:
        """The pacing :meth:`to_options` gave a source; None when it has none. Raises
        ``ValueError`` for options that are not such a pacing's."""
        state_dir, queries_dir = options.get(_STATE_DIR), options.get(_QUERIES_DIR)
        if not state_dir and not queries_dir:
            return None
        if not state_dir or not queries_dir:
            raise ValueError(f"options {_STATE_DIR} and {_QUERIES_DIR} go together")
        return cls(
            reader_state_dir=Path(state_dir),
            queries_dir=Path(queries_dir),
            behind_bytes=_non_negative(options, _BEHIND_BYTES),
            lead_us=_non_negative(options, _LEAD_US),
            max_ahead_us=_non_negative(options, _MAX_AHEAD_US),
            wait_ms=_non_negative(options, _WAIT_MS) if _WAIT_MS in options else 0,
        )


_STATE_DIR, _QUERIES_DIR = "readerStateDir", "readerQueriesDir"
_BEHIND_BYTES, _LEAD_US, _MAX_AHEAD_US = "readerBehindBytes", "readerLeadUs", "maxAheadUs"
_WAIT_MS = "readerWaitMs"


def _non_negative(options: Mapping[str, str], key: str) -> int:
    value = options.get(key)
    try:
        number = int(value) if value is not None else -1
    except ValueError:
        number = -1
    if number < 0:
        raise ValueError(f"option {key} must be a non-negative integer, not {value!r}")
    return number


class Pacer:
    """One joiner source's pacing: the limit now, and where a click range ends under it.

    ``clock`` gives wall-clock seconds (the files' mtimes and the clicks' times are
    wall-clock too)."""

    def __init__(self, pacing: Pacing, clock: Callable[[], float] = time.time) -> None:
        self.pacing = pacing
        self._clock = clock
        self._started = clock()
        #: file -> (the start of its range last cut, how far from there every line was
        #: found within an earlier limit): a range planned again from the same start
        #: is scanned on from there.
        self._passed: dict[str, tuple[int, int]] = {}
        self._last_limit_us = 0
        self._behind_at = float("-inf")

    def reader_behind(self) -> bool:
        """Whether the reader is reading a backlog now (and not stopped): the joiner is
        paced, and a run until idle is not idle while it is."""
        pacing = self.pacing
        checkpoint = pacing.reader_state_dir / "checkpoint"
        if self._clock() - max(self._started, _changed_at(checkpoint)) > STALE_S:
            return False
        committed = committed_offsets(checkpoint)
        return unread_bytes(pacing.queries_dir, committed) > pacing.behind_bytes

    def behind_within(self, seconds: float) -> bool:
        """Whether the reader is behind now, or was at a look within ``seconds``.

        A joiner run until idle asks this every look: the joiner's source plans what
        a caught-up reader lets it read only at its next trigger, so until then, with
        the batch before having read nothing, the joiner would look idle."""
        now = self._clock()
        if self.reader_behind():
            self._behind_at = now
        return now - self._behind_at < seconds

    def limit_us(self) -> int | None:
        """The newest click time the joiner may read now; None: read as planned."""
        if not self.reader_behind():
            return None
        from photon.join.progress import read_progress  # only the joiner's source paces

        return read_progress(self.pacing.reader_state_dir) + self.pacing.lead_us

    def reader_finishing(self) -> bool:
        """Whether the reader's batch in flight (planned, not yet committed) is the last
        of its backlog: once it commits, nothing is paced. A plan paced to the progress
        it publishes just before that commit lets through the clicks of its queries
        but leaves those a little newer (``lead_us`` and more after the newest query)
        to a tail batch of their own, which both DCs then race on."""
        planned = planned_offsets(self.pacing.reader_state_dir / "checkpoint")
        return bool(planned) and (
            unread_bytes(self.pacing.queries_dir, planned) <= self.pacing.behind_bytes
        )

    def reader_mark(self) -> int:
        """What changes when the reader has moved on: its newest committed batch (-1:
        none), a listing of its checkpoint's ``commits`` folder (cheap enough to look
        at every few milliseconds). Not the folder's own time, which changes as Spark
        writes the commit's temporary file, before the rename that commits it: a plan
        then still found the reader behind. Nor its progress, which it publishes
        before it commits: a plan made between the two is still paced to the batch
        before, and lets a part of the clicks through where the commit lets through
        all that the batch's queries allow."""
        committed = logged_batches(self.pacing.reader_state_dir / "checkpoint" / "commits")
        return committed[0] if committed else -1

    def moved(self, since: int, timeout_s: float, poll_s: float = 0.02) -> bool:
        """Wait up to ``timeout_s`` for the reader to move on from ``since`` (a
        :meth:`reader_mark`); whether it did."""
        deadline = time.monotonic() + timeout_s
        while True:
            if self.reader_mark() != since:
                return True
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            time.sleep(min(poll_s, left))

    def cut(self, path: Path, start: int, end: int, limit_us: int) -> int:
        """Where a planned range ``[start, end)`` of click file ``path`` ends under
        ``limit_us``: at the first line whose click is newer than the limit (and not
        stamped past the clock's bound), else at ``end``. ``end`` falls after a line."""
        if limit_us < self._last_limit_us:
            self._passed.clear()  # the reader's state went back (wiped): scan afresh
        self._last_limit_us = limit_us
        ahead_us = int(self._clock() * 1_000_000) + self.pacing.max_ahead_us
        passed_start, passed = self._passed.get(path.name, (start, start))
        scanned = passed if passed_start == start and start <= passed <= end else start
        held = first_line_after(path, scanned, end, limit_us, ahead_us)
        cut = end if held is None else held
        self._passed[path.name] = (start, cut)
        return cut


def first_line_after(path: Path, start: int, end: int, limit_us: int, ahead_us: int) -> int | None:
    """The offset of the first line in ``[start, end)`` of ``path`` whose click time is
    in ``(limit_us, ahead_us]``; None when there is none (or the file cannot be read).
    Only complete lines count: a torn last line holds nothing back."""
    try:
        with path.open("rb") as file:
            file.seek(start)
            position = start
            carry = b""
            while position < end:
                chunk = file.read(min(_SCAN_BYTES, end - position))
                if not chunk:
                    return None  # shrank under us: the source reports it
                position += len(chunk)
                data = carry + chunk
                last = data.rfind(b"\n")
                if last < 0:
                    carry = data
                    continue
                base = position - len(data)
                for match in _CLICK_TS.finditer(data, 0, last):
                    ts_us = int(match[1])
                    if limit_us < ts_us <= ahead_us:
                        return base + data.rfind(b"\n", 0, match.start()) + 1
                carry = data[last + 1 :]
    except OSError:
        return None
    return None


def _changed_at(checkpoint: Path) -> float:
    """When the app last planned or committed a batch (0: never)."""
    changed = 0.0
    for sub in ("offsets", "commits"):
        try:
            changed = max(changed, (checkpoint / sub).stat().st_mtime)
        except OSError:
            continue
    return changed
