"""Recovery: ids registered but missing from the output, whose attempt is dead.

A joiner registers a batch's clicks, then writes them. A crash in between
leaves ids registered under the batch's token (``<dc>/<attempt>/<batch>``)
and in no output. Spark replays the batch and its replay writes them, unless
the attempt will never run that batch again. Such an attempt is *dead* when:

* its DC's joiner now runs another attempt (its checkpoint was replaced), or
  the DC is no longer configured; or
* the batch is not open in the DC's retry store: it finished (or was
  abandoned) without writing these ids.

An id whose batch is still open is left alone: its replay will write it.

For each dead id, recovery reads the click's line from the target DC's click
logs, puts it into that DC's retry store (due a little later), deletes the
id from the registry only while it still holds the dead token, then makes it
due now; the joiner joins it again like any retried click. The reads happen
in the order tokens, open batches, output, so an id whose batch finished
after its tokens were read is seen in the output, never taken for lost.

How it fails: a crash after the injection and before the delete leaves a
click the joiner drops as already registered (still lost, found again by the
next run); after the delete, the click is in the retry store and is joined.
A click not found in the input logs is reported and left registered.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

import structlog

from photon.events.records import Stream
from photon.join.output import rows_under
from photon.join.retry import PendingClick, RetryStore
from photon.join.runtime import current_attempt, retry_store_path
from photon.logs.scan import decoded_clicks
from photon.ops.params import Window
from photon.ops.verify import in_window
from photon.settings import PhotonSettings
from photon.storage import ObjectStore
from registry import IdRegistry

log = structlog.get_logger(__name__)

_US = 1_000_000
#: Injected clicks wait this long until the registry delete is done.
_INJECT_HOLD_US = 30 * _US


@dataclass(frozen=True, slots=True)
class LostId:
    click_id: str
    token: str
    token_dc: str
    dead: bool
    why: str


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
    not_in_input: int = 0
    token_changed: int = 0
    by_dc: dict[str, int] = field(default_factory=dict)
    why: dict[str, int] = field(default_factory=dict)
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


def classify(settings: PhotonSettings, registered: dict[str, str]) -> list[LostId]:
    """Each registered id still holding a token, dead or alive, and why.

    Reads the open batches now: call it after reading ``registered`` and
    before listing the output (see the module docstring).
    """
    attempts = {dc: current_attempt(settings, dc) for dc in settings.dcs}
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
            lost.append(LostId(click_id, token, dc, True, "DC no longer configured"))
        elif attempts[dc] != attempt:
            lost.append(LostId(click_id, token, dc, True, "attempt replaced"))
        elif batch in open_batches[dc]:
            lost.append(LostId(click_id, token, dc, False, "batch open: its replay writes it"))
        else:
            lost.append(LostId(click_id, token, dc, True, "batch ended without writing it"))
    return lost


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
) -> RecoveryReport:
    """Find the lost ids of the window and, unless ``dry_run``, re-inject the dead ones.

    ``dc`` sends every click to that DC's joiner; None sends each to the DC that registered it.
    """
    if dc and dc not in settings.dcs:
        raise ValueError(f"dc {dc!r} is not a configured DC ({', '.join(settings.dcs)})")
    report = RecoveryReport(window.start.isoformat(), window.end.isoformat(), dry_run)
    registered = registry.registered(window.start_us, window.end_us)  # first: see the docstring
    lost = classify(settings, registered)  # open batches read now, before the output
    joined = {
        r["click_id"] for r in rows_under(store, "joined/") if in_window(r["click_id"], window)
    }
    lost = [item for item in lost if item.click_id not in joined]
    report.registered = len(registered)
    report.lost = len(lost)
    report.why = dict(Counter(item.why for item in lost))
    dead = [item for item in lost if item.dead]
    report.dead = len(dead)
    report.alive = report.lost - report.dead
    by_target: dict[str, list[LostId]] = {}
    for item in dead:
        target = dc or (item.token_dc if item.token_dc in settings.dcs else settings.dcs[0])
        by_target.setdefault(target, []).append(item)
    report.by_dc = {target: len(items) for target, items in by_target.items()}
    now = time.time_ns() // 1000 if now_us is None else now_us
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
        retries = RetryStore(retry_store_path(settings, target), settings.retry)
        try:
            retries.inject([clicks[i.click_id] for i in ready], due_us=now + _INJECT_HOLD_US)
            deleted = []
            for item in ready:
                if registry.delete_if_token(item.click_id, item.token):
                    deleted.append(item.click_id)
                    report.actions.append(_action(item, target, "deleted and re-injected"))
                else:  # joined or recovered by someone else meanwhile: leave it to them
                    report.token_changed += 1
                    report.actions.append(_action(item, target, "token changed: left"))
            retries.inject([clicks[i] for i in deleted], due_us=now)
        finally:
            retries.close()
        report.deleted += len(deleted)
        report.reinjected += len(deleted)
    log.info("ops.recover", **{k: v for k, v in report.to_dict().items() if k != "actions"})
    return report


def _action(item: LostId, target: str, what: str) -> dict[str, str]:
    return {
        "click_id": item.click_id,
        "token": item.token,
        "why": item.why,
        "dc": target,
        "action": what,
    }
