"""Recovery: ids registered but missing from the output, whose attempt is dead.

A joiner registers a batch's clicks, then writes them. A crash in between
leaves ids registered under the batch's token (``<dc>/<attempt>/<batch>``)
and in no output. Spark replays the batch and its replay writes them, unless
the attempt will never run that batch again. Such an attempt is *dead* when:

* its DC's joiner now runs another attempt (its checkpoint was replaced), or
  the DC is no longer configured; or
* the batch is not open in the DC's retry store: it finished (or was
  abandoned) without writing these ids.

An id whose batch is still open is left alone: its replay will write it. So
is an id of a replaced attempt whose joiner is still connected to the
registry (its ephemeral ``members/joiner-<attempt>`` node is there): a hung
or paused joiner may yet commit and write, so only its session's end (the
node gone) makes it dead.

An ended batch of the DC's current (live) attempt is fenced on its own
(``IdRegistry.fence_batch``): the joiner runs on, but a task of that batch still
running somewhere (a lost executor's zombie) fails its fence check before it
writes; the output is then listed again after the settle time, as below.

Before it takes over any id of a dead attempt that is not the DC's current
one, recovery **fences** the attempt (``IdRegistry.fence_attempt``): every
registry commit of that attempt checks its fence, and its joiner checks it
again before each output write, so a zombie of it that wakes up later can
neither commit nor write. Recovery then waits ``pipeline.fence_settle_s``
and lists that attempt's output again, so a write that passed its fence
check just before the fence closed is seen, not doubled.

Recovery decides from the DC's joiner state (its attempt file and retry
store). Where that state is missing — recovery run on a host without it, or
a state directory lost — it stops with :class:`RecoveryStateError` before
touching anything, rather than take every attempt of the DC for dead.

For each dead id, recovery reads the click's line from the target DC's click
logs and **re-injects it as the DC's input**: a recovery log file,
``recovery-<run>.log``, in the DC's click logs, which the DC's joiner reads
with the same source as every other click file and joins like any click. It
never writes into a joiner's local state, so it need not run on the
joiner's host — only where the DC's click logs are. The reads happen in the
order tokens, open batches, output, so an id whose batch finished after its
tokens were read is seen in the output, never taken for lost.

The order of the writes makes a crash safe: first the lines are written to
``recovery-<run>.pending`` (a name the source does not read: the journal),
then each id is deleted from the registry only while it still holds the
dead token, then the lines of the ids deleted are written whole to
``recovery-<run>.log`` (a temporary name, then renamed) and the journal is
removed. A joiner reading the click before its id was deleted would drop it
as already joined; it cannot, the line is not there yet.

Then it supersedes the window's unjoinable records that no longer hold: clicks
whose query came after they were given up on are re-injected the same way,
and those joined all the same are marked (:mod:`photon.ops.supersede`).

How it fails: a crash before the journal changes nothing; between the
journal and the log file, the next run finishes the journal — it re-injects
each of its clicks that is registered by nobody and in no output — before
doing anything else. A click not found in the input logs is reported and
left registered.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import structlog

from photon.apps import JOINER
from photon.errors import PhotonError
from photon.events.records import Stream, decode_click
from photon.join.output import attempt_keys, click_ids_in, event_hour
from photon.join.retry import PendingClick, RetryStore
from photon.join.runtime import current_attempt, retry_store_path
from photon.localfiles import write_whole
from photon.logs.reader import RECOVERY_LOG_PREFIX
from photon.logs.scan import decoded_clicks
from photon.ops.landed import hours_window
from photon.ops.params import Window
from photon.ops.supersede import supersede
from photon.ops.verify import pending_retries
from photon.ops.window_output import ids_in_window
from photon.settings import PhotonSettings
from photon.storage import ObjectStore
from registry import IdRegistry, LookupResult

log = structlog.get_logger(__name__)


class RecoveryStateError(PhotonError, RuntimeError):
    """The joiner state recovery decides from is not where the settings say."""


_US = 1_000_000
_REPLACED = "attempt replaced"
_DC_GONE = "DC no longer configured"
RECOVERY_PREFIX = RECOVERY_LOG_PREFIX
#: The journal of a run that has not written its recovery log yet (the source reads *.log).
JOURNAL_SUFFIX = ".pending"


@dataclass(frozen=True, slots=True)
class LostId:
    click_id: str
    token: str
    token_dc: str
    dead: bool
    why: str

    @property
    def attempt(self) -> str | None:
        """The attempt of its token (None: a token of no pipeline)."""
        parts = self.token.split("/", 2)
        return parts[1] if len(parts) == 3 and parts[1] else None

    @property
    def batch(self) -> str | None:
        """The batch of its token (None: a token of no pipeline)."""
        parts = self.token.split("/", 2)
        return parts[2] if len(parts) == 3 and parts[2] else None

    @property
    def replaced(self) -> bool:
        """Dead because its attempt no longer runs (not its DC's current one)."""
        return self.dead and self.why in (_REPLACED, _DC_GONE)


@dataclass(slots=True)
class RecoveryReport:
    window_start: str
    window_end: str
    dry_run: bool
    registered: int = 0
    lost: int = 0
    dead: int = 0
    alive: int = 0
    deleted: int = 0
    reinjected: int = 0
    resumed: int = 0
    recovery_logs: list[str] = field(default_factory=list)
    not_in_input: int = 0
    token_changed: int = 0
    #: Dead attempts fenced before their ids were taken over (already fenced ones too).
    fenced: list[str] = field(default_factory=list)
    #: Ended batches of live attempts fenced before their ids were taken over
    #: (``<attempt>/<batch>``): a zombie task of one may no longer write.
    fenced_batches: list[str] = field(default_factory=list)
    #: Ids a fenced attempt wrote after all, found when its output was listed again.
    written_meanwhile: int = 0
    by_dc: dict[str, int] = field(default_factory=dict)
    why: dict[str, int] = field(default_factory=dict)
    #: Unjoinable clicks whose query is in a DC's logs now, and those joined all the same
    #: (photon.ops.supersede); how many of the first were re-injected, and how many
    #: records of both were marked superseded.
    late_queries: int = 0
    joined_and_unjoinable: int = 0
    late_reinjected: int = 0
    superseded: int = 0
    actions: list[dict[str, str]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _open_batches(settings: PhotonSettings, dc: str) -> set[str]:
    path = retry_store_path(settings, dc)
    if not path.exists():
        return set()
    retries = RetryStore(path, settings.retry)
    try:
        return set(retries.unfinished_batches())
    finally:
        retries.close()


def classify(
    settings: PhotonSettings, registered: dict[str, str], connected: set[str]
) -> list[LostId]:
    """Each registered id still holding a token, dead or alive, and why.

    ``connected``: the attempts whose joiner holds a registry session now.
    Reads the open batches now: call it after reading ``registered`` and
    before listing the output (see the module docstring).
    """
    attempts = {dc: current_attempt(settings, dc) for dc in settings.dcs}
    _check_state(settings, registered, attempts)
    open_batches = {dc: _open_batches(settings, dc) for dc in settings.dcs}
    lost = []
    for click_id, token in sorted(registered.items()):
        if not token:  # "": cleared after it was seen in output
            continue
        parts = token.split("/", 2)
        if len(parts) != 3:
            lost.append(LostId(click_id, token, "", True, "token of no pipeline"))
            continue
        dc, attempt, batch = parts
        if dc not in settings.dcs:
            lost.append(LostId(click_id, token, dc, True, _DC_GONE))
        elif attempts[dc] != attempt and attempt in connected:
            why = "attempt replaced, its joiner still connected: left"
            lost.append(LostId(click_id, token, dc, False, why))
        elif attempts[dc] != attempt:
            lost.append(LostId(click_id, token, dc, True, _REPLACED))
        elif batch in open_batches[dc]:
            lost.append(LostId(click_id, token, dc, False, "batch open: its replay writes it"))
        else:
            lost.append(LostId(click_id, token, dc, True, "batch ended without writing it"))
    return lost


def _check_state(
    settings: PhotonSettings, registered: dict[str, str], attempts: dict[str, str | None]
) -> None:
    """Stop when a DC that holds ids has no joiner state here (see the module docstring)."""
    holding = {token.split("/", 1)[0] for token in registered.values() if token}
    for dc in sorted(holding & set(settings.dcs)):
        if attempts[dc] is None:
            where = settings.pipeline_dir(dc, JOINER)
            raise RecoveryStateError(
                f"DC {dc}'s joiner state is not at {where}, but ids are registered by DC {dc}'s "
                "joiner. Recovery decides which attempts are dead from that state: run it "
                "where the joiner's state is (settings pipeline.state_root), or restore it."
            )


def connected_attempts(registry: IdRegistry) -> set[str]:
    """The attempts whose joiner is connected to the registry now (members/)."""
    return {
        str(info["attempt"])
        for info in registry.members().values()
        if info.get("app") == JOINER and "attempt" in info
    }


def find_clicks(settings: PhotonSettings, dc: str, ids: set[str]) -> dict[str, PendingClick]:
    """The lines of ``ids`` in ``dc``'s click logs (the first copy of each)."""
    found: dict[str, PendingClick] = {}
    if not ids:
        return found
    for line, event in decoded_clicks(settings.dc_logs(dc) / Stream.CLICKS.value):
        click_id = str(event.click_id)
        if click_id in ids and click_id not in found:
            found[click_id] = PendingClick(
                click_id, line.raw, line.file, line.offset, first_seen_us=event.click_id.ts_us
            )
            if len(found) == len(ids):
                break
    return found


def recover(
    settings: PhotonSettings,
    store: ObjectStore,
    registry: IdRegistry,
    window: Window,
    *,
    dc: str | None = None,
    dry_run: bool = True,
    now_us: int | None = None,
    run: str | None = None,
) -> RecoveryReport:
    """Find the lost ids of the window and, unless ``dry_run``, re-inject the dead ones.

    ``dc`` sends every click to that DC's joiner; None sends each to the DC that registered it.
    """
    if dc and dc not in settings.dcs:
        raise ValueError(f"dc {dc!r} is not a configured DC ({', '.join(settings.dcs)})")
    report = RecoveryReport(window.start.isoformat(), window.end.isoformat(), dry_run)
    if not dry_run:
        report.resumed = finish_journals(settings, store, registry)
    registered = registry.registered(window.start_us, window.end_us)  # first: see the docstring
    # Open batches and live sessions read now, before the output.
    lost = classify(settings, registered, connected_attempts(registry))
    joined = ids_in_window(store, "joined", window)
    lost = [item for item in lost if item.click_id not in joined]
    report.registered = len(registered)
    report.lost = len(lost)
    report.why = dict(Counter(item.why for item in lost))
    dead = [item for item in lost if item.dead]
    report.dead = len(dead)
    report.alive = report.lost - report.dead
    dead = _fence(settings, store, registry, dead, report, window, dry_run=dry_run)
    by_target: dict[str, list[LostId]] = {}
    for item in dead:
        target = dc or (item.token_dc if item.token_dc in settings.dcs else settings.dcs[0])
        by_target.setdefault(target, []).append(item)
    report.by_dc = {target: len(items) for target, items in by_target.items()}
    now = time.time_ns() // 1000 if now_us is None else now_us
    run = "".join(c if c.isalnum() or c in "._-" else "_" for c in run) if run else None
    name = name_of(run, now)  # of the run's recovery logs and its superseded marks
    for target, items in sorted(by_target.items()):
        clicks = find_clicks(settings, target, {item.click_id for item in items})
        for item in items:
            if item.click_id not in clicks:
                report.not_in_input += 1
                report.actions.append(_action(item, target, "not in the DC's input: left"))
        ready = [item for item in items if item.click_id in clicks]
        if dry_run:
            report.actions += [_action(i, target, "would delete and re-inject") for i in ready]
            continue
        if not ready:
            continue
        directory = settings.dc_logs(target) / Stream.CLICKS.value
        journal = _write_whole(
            directory / f"{name}{JOURNAL_SUFFIX}", (clicks[i.click_id].raw for i in ready)
        )
        deleted = []
        for item in ready:
            if registry.delete_if_token(item.click_id, item.token):
                deleted.append(item.click_id)
                report.actions.append(_action(item, target, "deleted and re-injected"))
            else:  # joined or recovered by someone else meanwhile: leave it to them
                report.token_changed += 1
                report.actions.append(_action(item, target, "token changed: left"))
        if deleted:
            written = _write_whole(directory / f"{name}.log", (clicks[i].raw for i in deleted))
            report.recovery_logs.append(str(written))
        journal.unlink()
        report.deleted += len(deleted)
        report.reinjected += len(deleted)
    _supersede(settings, store, window, registered, report, dc=dc, name=name)
    # Booleans as words: Airflow's log view shows a False value as nothing ("dry_run=").
    log.info(
        "ops.recover",
        **{
            k: str(v).lower() if isinstance(v, bool) else v
            for k, v in report.to_dict().items()
            if k != "actions"
        },
    )
    return report


def name_of(run: str | None, now_us: int) -> str:
    """The name of a run's recovery logs: ``recovery-<run>-<now>`` (unique per try)."""
    return f"{RECOVERY_PREFIX}{run or time.strftime('%Y%m%dT%H%M%S')}-{now_us:d}"


def _supersede(
    settings: PhotonSettings,
    store: ObjectStore,
    window: Window,
    registered: dict[str, str],
    report: RecoveryReport,
    *,
    dc: str | None,
    name: str,
) -> None:
    """Re-inject the window's unjoinable clicks whose query came after all; mark their
    records, and those of unjoinable clicks joined all the same, superseded. A click a
    joiner holds (registered, or waiting in a retry store) is left to it."""
    outcome = supersede(
        settings, store, window,
        joined=ids_in_window(store, "joined", window),  # listed again: what joined since too
        busy=set(registered) | pending_retries(settings),
        dc=dc, dry_run=report.dry_run, name=name,
        now_us=time.time_ns() // 1000,
    )  # fmt: skip
    report.late_queries = outcome.late_queries
    report.joined_and_unjoinable = outcome.joined_and_unjoinable
    report.late_reinjected = outcome.reinjected
    report.superseded = outcome.marked
    report.recovery_logs += outcome.recovery_logs
    report.actions += outcome.actions


def _fence(
    settings: PhotonSettings,
    store: ObjectStore,
    registry: IdRegistry,
    dead: list[LostId],
    report: RecoveryReport,
    window: Window,
    *,
    dry_run: bool,
) -> list[LostId]:
    """Fence the attempts that no longer run and hold dead ids, and the ended batches
    of live attempts that hold some; return the dead ids still missing once the fences
    have settled (see the module docstring)."""
    attempts = sorted({(i.token_dc, i.attempt) for i in dead if i.replaced and i.attempt})
    # A live attempt is not fenced (its joiner runs on), but each ended batch that left
    # ids unwritten is: a task of it may still run somewhere (a lost executor's) and
    # write them after this run re-injected them.
    batches = sorted(
        {(i.attempt, i.batch) for i in dead if not i.replaced and i.attempt and i.batch}
    )
    report.fenced = [attempt for _, attempt in attempts]
    report.fenced_batches = [f"{attempt}/{batch}" for attempt, batch in batches]
    if dry_run or not (attempts or batches):
        return dead
    for _, attempt in attempts:
        registry.fence_attempt(attempt)
    for attempt, batch in batches:
        registry.fence_batch(attempt, batch)
    time.sleep(settings.pipeline.fence_settle_s)
    written: set[str] = set()
    for dc, attempt in attempts:
        written.update(click_ids_in(store, attempt_keys(store, "joined", dc, attempt)))
    if batches:  # what a task of those batches wrote before its fence closed
        written |= ids_in_window(store, "joined", window)
    report.written_meanwhile = sum(1 for i in dead if i.click_id in written)
    return [i for i in dead if i.click_id not in written]


def finish_journals(settings: PhotonSettings, store: ObjectStore, registry: IdRegistry) -> int:
    """Finish what a crashed run left: re-inject its journal's clicks that nobody holds.

    A journal's click that is registered (by its dead attempt still, or by a joiner)
    or already in the output is left; the rest were deleted by the crashed run and
    go into a recovery log now. Returns how many were re-injected.
    """
    reinjected = 0
    for dc in settings.dcs:
        directory = settings.dc_logs(dc) / Stream.CLICKS.value
        for journal in sorted(directory.glob(f"{RECOVERY_PREFIX}*{JOURNAL_SUFFIX}")):
            lines = [line for line in journal.read_bytes().split(b"\n") if line]
            by_id = {str(decode_click(line).click_id): line for line in lines}
            states = registry.lookup(by_id)
            joined = ids_in_window(store, "joined", _span(by_id)) if by_id else set()
            free = [
                by_id[c]
                for c, state in states.items()
                if state is LookupResult.ABSENT and c not in joined
            ]
            if free:
                _write_whole(journal.with_suffix(".log"), free)
            journal.unlink()
            reinjected += len(free)
            log.warning("ops.recover.journal_finished", journal=str(journal), reinjected=len(free))
    return reinjected


def _write_whole(path: Path, lines: Iterable[bytes]) -> Path:
    """``lines`` as a file at ``path`` that appears whole, on disk before it is named."""
    return write_whole(path, b"".join(line + b"\n" for line in lines), sync=True)


def _action(item: LostId, target: str, what: str) -> dict[str, str]:
    return {
        "click_id": item.click_id,
        "token": item.token,
        "why": item.why,
        "dc": target,
        "action": what,
    }


def _span(click_ids: Iterable[str]) -> Window:
    """The whole event hours the clicks fall in (the output's objects are by event hour)."""
    return hours_window(event_hour(c) for c in click_ids)
