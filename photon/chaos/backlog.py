"""A DC joiner's backlog: the click log bytes it has not committed yet, and how old they are.

The joiner's progress is its Spark checkpoint: ``commits/<n>`` marks batch
``n`` done and ``offsets/<n>`` holds, on its last line, the source's end
offsets ``{"files": {"<name>": <byte offset>}}``. The backlog is every click
log byte past those offsets; its *lag* is the age (by its id's time) of the
oldest click not yet committed — 0 when nothing is left. A DC that is caught
up has a lag of about one micro-batch; one back from an outage starts with
a lag as long as the outage and drains it.

How it fails: it never raises for a checkpoint being written or wiped
meanwhile (a missing or half-written batch file reads as the batch before,
or as no progress); lines that do not decode are passed over.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from photon.events.records import decode_click
from photon.join.runtime import JOINER
from photon.settings import PhotonSettings

#: How far past an offset to look for the first click that decodes.
_PROBE_BYTES = 64 * 1024


@dataclass(frozen=True)
class Backlog:
    bytes: int
    lag_s: float  # age of the oldest uncommitted click; 0 when none is left


def committed_offsets(checkpoint: Path) -> dict[str, int]:
    """The end offsets of the newest committed batch (empty before the first)."""
    commits = checkpoint / "commits"
    done = sorted(
        (int(p.name) for p in commits.glob("[0-9]*") if p.name.isdigit()), reverse=True
    ) if commits.is_dir() else []  # fmt: skip
    for batch in done:
        try:
            lines = (checkpoint / "offsets" / str(batch)).read_text().splitlines()
            files = json.loads(lines[-1])["files"]
        except (OSError, IndexError, ValueError, KeyError, TypeError):
            continue  # being written or wiped: the batch before
        return {str(name): int(offset) for name, offset in files.items()}
    return {}


def backlog(click_logs: Path, offsets: dict[str, int], now_us: int) -> Backlog:
    unread = 0
    oldest_us: int | None = None
    for path in sorted(click_logs.glob("*.log")) if click_logs.is_dir() else []:
        try:
            size = path.stat().st_size
        except FileNotFoundError:
            continue
        start = offsets.get(path.name, 0)
        if size <= start:
            continue
        unread += size - start
        ts = _first_click_us(path, start)
        if ts is not None and (oldest_us is None or ts < oldest_us):
            oldest_us = ts
    lag_s = max(0.0, (now_us - oldest_us) / 1_000_000) if oldest_us is not None else 0.0
    return Backlog(unread, round(lag_s, 1))


def joiner_backlog(settings: PhotonSettings, dc: str, now_us: int) -> Backlog:
    checkpoint = settings.pipeline_dir(dc, JOINER) / "checkpoint"
    return backlog(settings.dc_logs(dc) / "clicks", committed_offsets(checkpoint), now_us)


def _first_click_us(path: Path, offset: int) -> int | None:
    try:
        with path.open("rb") as f:
            f.seek(offset)
            chunk = f.read(_PROBE_BYTES)
    except OSError:
        return None
    for raw in chunk.split(b"\n")[:-1]:  # complete lines only
        try:
            return decode_click(raw).click_id.ts_us
        except ValueError:
            continue
    return None
