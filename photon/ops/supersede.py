"""Superseding unjoinable records: clicks given up on whose query came after all.

A joiner declares a click unjoinable (``unjoinable/``) only once its DC's query
reader has provably read past the click's time and a search of the logs found
no query (docs/join.md, "When a click is unjoinable"). A query can still come
later: a DC's query logs shipped after every query file stalled for longer than
``pipeline.query_file_idle_s``, or restored from a backup. Another DC may also
have joined a click this DC gave up on. Nothing in the pipeline turns such a
record back; recovery does, with this module:

* a record is *current* unless a mark in ``superseded/`` is at least as new
  (``superseded_at_us >= decided_at_us``); a click declared unjoinable again
  after it was superseded is current again;
* verification lists each current record whose click was joined after all, or
  whose query is now in a DC's query logs (:func:`late_clicks`);
* recovery re-injects each such click that is neither joined, registered nor
  waiting in a retry store into a DC whose query logs hold its query — a
  recovery log in that DC's click logs, read by the DC's joiner like any click
  file — and then marks it superseded; a click joined meanwhile is only marked.

How it fails: a crash after the recovery log and before the mark leaves the
record current: the next run finds the click joined (and marks it) or
re-injects it again, and the registry lets only one copy be joined. Marks are
write-once objects, one per run, DC and event hour; a run's name carries its
time, so a retried run never collides with its first try.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any

import structlog

from photon.events.records import Stream
from photon.join.output import SUPERSEDED, SUPERSEDED_KIND, by_hour, encode, superseded_key
from photon.localfiles import write_whole
from photon.logs.scan import query_ids_in
from photon.ops.params import Window
from photon.ops.window_output import in_window, window_keys
from photon.settings import PhotonSettings
from photon.storage import ObjectStore

log = structlog.get_logger(__name__)

#: What a mark says was done with the click.
REINJECTED = "reinjected"
JOINED = "joined"


@dataclass(frozen=True, slots=True)
class UnjoinableRecord:
    """A click's newest unjoinable record (of any DC)."""

    click_id: str
    query_id: str
    dc: str
    decided_at_us: int
    raw: str


_RECORD_COLUMNS = [f.name for f in fields(UnjoinableRecord)]


@dataclass(slots=True)
class UnjoinableState:
    """The window's unjoinable clicks: those whose newest record stands, and those
    whose every record a mark supersedes."""

    current: dict[str, UnjoinableRecord] = field(default_factory=dict)
    superseded: set[str] = field(default_factory=set)


def unjoinable_state(store: ObjectStore, window: Window) -> UnjoinableState:
    """Read the window's unjoinable records and marks (its objects only)."""
    records = _rows(store, "unjoinable", window, _RECORD_COLUMNS)
    marks = _rows(store, SUPERSEDED_KIND, window, ["click_id", "superseded_at_us"])
    return standing(records, marks)


def standing(
    records: Iterable[Mapping[str, Any]], marks: Iterable[Mapping[str, Any]]
) -> UnjoinableState:
    """Which clicks' newest unjoinable record stands, of rows of ``unjoinable/`` and
    ``superseded/`` objects: a mark supersedes the records no newer than itself."""
    newest: dict[str, UnjoinableRecord] = {}
    for row in records:
        # A column an object lacks reads as null: undated is oldest, no query is none.
        record = UnjoinableRecord(
            row["click_id"], row["query_id"] or "", row["dc"] or "",
            row["decided_at_us"] or 0, row["raw"] or "",
        )  # fmt: skip
        known = newest.get(record.click_id)
        if known is None or record.decided_at_us > known.decided_at_us:
            newest[record.click_id] = record
    marked: dict[str, int] = {}
    for row in marks:
        marked[row["click_id"]] = max(marked.get(row["click_id"], 0), row["superseded_at_us"])
    state = UnjoinableState()
    for click_id, record in newest.items():
        if marked.get(click_id, -1) >= record.decided_at_us:
            state.superseded.add(click_id)
        else:
            state.current[click_id] = record
    return state


def _rows(
    store: ObjectStore, kind: str, window: Window, columns: list[str]
) -> list[dict[str, Any]]:
    table = store.read_parquet(window_keys(store, kind, window), columns=columns)
    rows = table.select(columns).to_pylist() if table.num_rows else []
    return [row for row in rows if in_window(row["click_id"], window)]


def queries_in_logs(settings: PhotonSettings, query_ids: set[str]) -> dict[str, set[str]]:
    """For each DC, which of ``query_ids`` its query logs hold now."""
    return {
        dc: query_ids_in(settings.dc_logs(dc) / Stream.QUERIES.value, query_ids)
        for dc in settings.dcs
    }


@dataclass(frozen=True, slots=True)
class LateClicks:
    """Current unjoinable records that do not stand: their click was joined, or its
    query is in a DC's query logs now (by DC)."""

    joined: dict[str, UnjoinableRecord]
    with_query: dict[str, UnjoinableRecord]
    in_logs_of: dict[str, set[str]]  # DC -> query ids its logs hold


def late_clicks(
    settings: PhotonSettings, current: dict[str, UnjoinableRecord], joined: set[str]
) -> LateClicks:
    """Which current records (:attr:`UnjoinableState.current`) verification lists and
    recovery supersedes. Reads the DCs' query logs only for records whose click is not
    joined, and not at all when there are none."""
    open_records = {c: r for c, r in current.items() if c not in joined and r.query_id}
    in_logs = queries_in_logs(settings, {r.query_id for r in open_records.values()})
    found = set().union(*in_logs.values())
    return LateClicks(
        joined={c: r for c, r in sorted(current.items()) if c in joined},
        with_query={c: r for c, r in sorted(open_records.items()) if r.query_id in found},
        in_logs_of=in_logs,
    )


@dataclass(slots=True)
class SupersedeOutcome:
    late_queries: int = 0
    joined_and_unjoinable: int = 0
    reinjected: int = 0
    marked: int = 0
    recovery_logs: list[str] = field(default_factory=list)
    actions: list[dict[str, str]] = field(default_factory=list)


def supersede(
    settings: PhotonSettings,
    store: ObjectStore,
    window: Window,
    *,
    joined: set[str],
    busy: set[str],
    dc: str | None,
    dry_run: bool,
    name: str,
    now_us: int,
) -> SupersedeOutcome:
    """Re-inject the window's late clicks and mark their records superseded.

    ``joined``: the window's joined clicks; ``busy``: clicks a joiner holds now
    (registered, or waiting in a retry store), left to it. ``dc`` sends every
    click to that DC (when its logs hold the query); None prefers the DC that
    gave up on it. ``name`` names the recovery logs and the marks' objects.
    """
    late = late_clicks(settings, unjoinable_state(store, window).current, joined)
    outcome = SupersedeOutcome(len(late.with_query), len(late.joined))
    marks = [_mark(record, JOINED, now_us, name) for record in late.joined.values()]
    what = "joined after all: would mark superseded" if dry_run else "joined: marked superseded"
    outcome.actions += [_action(r.click_id, r.dc, what, _JOINED_WHY) for r in late.joined.values()]
    to_reinject: dict[str, list[UnjoinableRecord]] = {}
    for click_id, record in late.with_query.items():
        target = _target(settings, record, late.in_logs_of, dc)
        left = (
            "held by a joiner: left" if click_id in busy
            else "no line in its record: left" if not record.raw
            else "query not in the DC's logs: left" if target is None
            else ""
        )  # fmt: skip
        if left or target is None:
            outcome.actions.append(_action(click_id, target or dc or record.dc, left, _LATE_WHY))
            continue
        to_reinject.setdefault(target, []).append(record)
    for target, records in sorted(to_reinject.items()):
        what = "would re-inject" if dry_run else "re-injected, marked superseded"
        outcome.actions += [_action(r.click_id, target, what, _LATE_WHY) for r in records]
        if dry_run:
            continue
        directory = settings.dc_logs(target) / Stream.CLICKS.value
        path = write_whole(
            directory / f"{name}-late.log",
            b"".join(r.raw.encode() + b"\n" for r in records),
            sync=True,
        )  # before the marks: a crash in between re-injects again, never loses
        outcome.recovery_logs.append(str(path))
        outcome.reinjected += len(records)
        marks += [_mark(r, REINJECTED, now_us, name, into_dc=target) for r in records]
    if not dry_run and marks:
        outcome.marked = _write_marks(store, marks, name)
    log.info("ops.supersede", **{k: v for k, v in asdict(outcome).items() if k != "actions"})
    return outcome


def _target(
    settings: PhotonSettings,
    record: UnjoinableRecord,
    in_logs_of: dict[str, set[str]],
    forced: str | None,
) -> str | None:
    """The DC to re-inject into: one whose query logs hold the query."""
    order = [forced] if forced else [record.dc, *settings.dcs]
    return next((d for d in order if record.query_id in in_logs_of.get(d, set())), None)


def _mark(
    record: UnjoinableRecord, action: str, now_us: int, run: str, *, into_dc: str = ""
) -> dict[str, Any]:
    return {
        "click_id": record.click_id,
        "query_id": record.query_id,
        "dc": record.dc,
        "into_dc": into_dc,
        "superseded_at_us": now_us,
        "run": run,
        "action": action,
    }


def _write_marks(store: ObjectStore, marks: Iterable[dict[str, Any]], run: str) -> int:
    by_dc: dict[str, list[dict[str, Any]]] = {}
    for mark in marks:
        by_dc.setdefault(mark["dc"], []).append(mark)
    written = 0
    for dc, rows in sorted(by_dc.items()):
        for hour, hour_rows in by_hour(rows).items():
            store.put(superseded_key(dc, hour, run), encode(hour_rows, SUPERSEDED), if_absent=True)
            written += len(hour_rows)
    return written


_LATE_WHY = "unjoinable, its query came since"
_JOINED_WHY = "unjoinable, joined all the same"


def _action(click_id: str, dc: str, what: str, why: str) -> dict[str, str]:
    return {"click_id": click_id, "dc": dc, "action": what, "why": why}
