"""What a chaos run's samples and app logs say: recovery after each fault, the catch-up.

Pure functions over the sampler's timeline (:class:`Sample`) and the apps'
JSON log lines, so the figures of the report are tested without a run.

* **Recovery time** of a fault: from its end (or its strike, for an instant
  one) until every DC it affects writes joined output again.
* **Catch-up** of the DC back from an outage: from its return until its
  joiner's lag (the age of its oldest uncommitted click) is back under
  ``caught_up_lag_s``. Its speed is the event time it went through per
  second of wall time: ``(catch_up_s + lag_at_return_s - lag_after_s) /
  catch_up_s`` — 1x is keeping pace, 5x drains a 150 s outage in 37 s.
* **Wasted joins** during the catch-up: clicks the returning joiner joined
  and then lost in the registry to another DC, as a share of the clicks it
  read meanwhile (its batch reports, ``joiner.batch`` log lines).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

_BATCH_FIELDS = ("lines", "already_joined", "held", "joined", "wasted", "deferred")


@dataclass
class Sample:
    t_s: float  # since the stream started
    joined: dict[str, int] = field(default_factory=dict)  # per DC, cumulative
    backlog_bytes: dict[str, int] = field(default_factory=dict)
    lag_s: dict[str, float] = field(default_factory=dict)


@dataclass
class CatchUp:
    dc: str
    returned_at_s: float
    lag_at_return_s: float
    backlog_at_return_mib: float
    caught_up_at_s: float | None = None
    catch_up_s: float | None = None
    speed_x: float | None = None  # event time drained per second of wall time
    batches: dict[str, int] = field(default_factory=dict)  # summed batch reports meanwhile
    wasted_share: float | None = None  # wasted / clicks read


def output_again_s(samples: list[Sample], dcs: Iterable[str], after_s: float) -> float | None:
    """Seconds from ``after_s`` until each DC in ``dcs`` has joined more than it had then."""
    dcs = list(dcs)
    before = _at(samples, after_s)
    base = {dc: before.joined.get(dc, 0) if before else 0 for dc in dcs}
    waiting = set(dcs)
    for sample in samples:
        if sample.t_s < after_s:
            continue
        waiting -= {dc for dc in waiting if sample.joined.get(dc, 0) > base[dc]}
        if not waiting:
            return round(sample.t_s - after_s, 1)
    return None


def joined_between(samples: list[Sample], start_s: float, end_s: float) -> int:
    """Joined output (all DCs) that appeared between two moments of the run."""
    first, last = _at(samples, start_s), _at(samples, end_s)
    total = sum(last.joined.values()) if last else 0
    return total - (sum(first.joined.values()) if first else 0)


def catch_up(
    samples: list[Sample], dc: str, returned_at_s: float, caught_up_lag_s: float
) -> CatchUp:
    at_return = _at(samples, returned_at_s)
    result = CatchUp(
        dc=dc,
        returned_at_s=round(returned_at_s, 1),
        lag_at_return_s=at_return.lag_s.get(dc, 0.0) if at_return else 0.0,
        backlog_at_return_mib=round(
            (at_return.backlog_bytes.get(dc, 0) if at_return else 0) / (1 << 20), 2
        ),
    )
    for sample in samples:
        if sample.t_s <= returned_at_s or sample.lag_s.get(dc, float("inf")) > caught_up_lag_s:
            continue
        took = sample.t_s - returned_at_s
        result.caught_up_at_s = sample.t_s
        result.catch_up_s = round(took, 1)
        drained = took + result.lag_at_return_s - sample.lag_s[dc]
        result.speed_x = round(drained / took, 1) if took > 0 else None
        break
    return result


def add_batch_reports(result: CatchUp, log_path: Path, started_wall_s: float) -> None:
    """Sum the returning joiner's batch reports logged during its catch-up."""
    if result.caught_up_at_s is None:
        return
    start = started_wall_s + result.returned_at_s
    end = started_wall_s + result.caught_up_at_s
    result.batches = batch_totals(_json_lines(log_path), result.dc, start, end)
    read = result.batches.get("lines", 0)
    result.wasted_share = round(result.batches.get("wasted", 0) / read, 4) if read else None


def batch_totals(
    lines: Iterable[dict[str, Any]], dc: str, start_wall_s: float, end_wall_s: float
) -> dict[str, int]:
    totals = dict.fromkeys(("batches", *_BATCH_FIELDS), 0)
    for line in lines:
        if line.get("event") != "joiner.batch" or line.get("dc") != dc:
            continue
        try:
            at = datetime.fromisoformat(str(line["timestamp"])).timestamp()
        except (KeyError, ValueError):
            continue
        if start_wall_s <= at <= end_wall_s:
            totals["batches"] += 1
            for key in _BATCH_FIELDS:
                value = line.get(key, 0)
                totals[key] += value if isinstance(value, int) else 0
    return totals


def _json_lines(path: Path) -> list[dict[str, Any]]:
    """The JSON log lines of an app (Spark's own lines, not JSON, are passed over)."""
    if not path.exists():
        return []
    lines = []
    with path.open("rb") as f:
        for raw in f:
            if not raw.startswith(b"{"):
                continue
            try:
                obj = json.loads(raw)
            except ValueError:
                continue
            if isinstance(obj, dict):
                lines.append(obj)
    return lines


def _at(samples: list[Sample], t_s: float) -> Sample | None:
    """The last sample taken at or before ``t_s``."""
    before = [s for s in samples if s.t_s <= t_s]
    return before[-1] if before else None
