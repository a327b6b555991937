"""What a chaos run's samples and app logs say: recovery after each fault, the catch-up.

Pure functions over the sampler's timeline (:class:`Sample`: backlogs), the joined rows'
write times (:data:`JoinTimes`) and the apps'
JSON log lines, so the figures of the report are tested without a run.

* **Recovery time** of a fault: from its end (or its strike, for an instant
  one) until every DC it affects — of those writing output when it struck —
  writes a joined row again (by the rows' ``joined_at_us``).
* **Catch-up** of the DC back from an outage: from its return until its
  joiner's lag (how far behind the end of its logs it is, in the logs' own
  time: :mod:`photon.join.backlog`) is back under ``caught_up_lag_s``. It
  is a restart (its apps start Spark again, until the joiner's first batch
  begins: a fixed cost, whatever the backlog) and a drain. Its speed is the
  event time it went through per second of draining — 1x is keeping pace,
  5x drains a 180 s backlog in 45 s; the speed over the whole catch-up,
  restart included, is reported beside it.
* **Wasted joins** during the catch-up: clicks the returning joiner joined
  and then lost in the registry to another DC, as a share of the clicks it
  read meanwhile (its batch reports, ``joiner.batch`` log lines).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

_BATCH_FIELDS = ("lines", "already_joined", "held", "joined", "wasted", "deferred")


@dataclass
class Sample:
    t_s: float  # since the stream started
    backlog_bytes: dict[str, int] = field(default_factory=dict)
    lag_s: dict[str, float] = field(default_factory=dict)


@dataclass
class CatchUp:
    dc: str
    returned_at_s: float  # its apps started again
    lag_at_return_s: float
    backlog_at_return_mib: float
    restart_s: float | None = None  # from its return until its joiner's first batch began
    caught_up_at_s: float | None = None
    catch_up_s: float | None = None  # from its return until caught up
    drain_s: float | None = None  # from its first batch until caught up
    speed_x: float | None = None  # event time drained per second of draining
    speed_with_restart_x: float | None = None  # the same over the whole catch-up
    batches: dict[str, int] = field(default_factory=dict)  # summed batch reports meanwhile
    wasted_share: float | None = None  # wasted / clicks read


#: Joined rows per DC per second of the run, by the time each was written (its
#: ``joined_at_us``): when output happened, not when a listing first saw it.
JoinTimes = dict[str, Counter[int]]


def output_again_s(
    joins: JoinTimes,
    dcs: Iterable[str],
    after_s: float,
    batches: dict[str, list[float]] | None = None,
) -> float | None:
    """Seconds from ``after_s`` until each DC in ``dcs`` works again: writes a joined row,
    or — when the other DC had joined its clicks meanwhile, so there is nothing left for
    it to write — reads its logs again (a ``joiner.batch`` with lines, from ``batches``)."""
    took = 0.0
    for dc in dcs:
        later: list[float] = [
            second for second, n in joins.get(dc, Counter()).items() if second >= after_s and n
        ]
        later += [t_s for t_s in (batches or {}).get(dc, []) if t_s >= after_s]
        if not later:
            return None
        took = max(took, min(later) - after_s)
    return round(max(took, 0.0), 1)


def batch_seconds(lines: Iterable[dict[str, Any]], dc: str, started_wall_s: float) -> list[float]:
    """When (seconds into the run) ``dc``'s joiner finished batches that read lines."""
    return sorted(
        round(at - started_wall_s, 1)
        for line in lines
        if (at := _batch_at(line, dc)) is not None and line.get("lines", 0)
    )


def joined_between(joins: JoinTimes, start_s: float, end_s: float) -> int:
    """Joined rows (all DCs) written between two moments of the run."""
    return sum(
        n
        for seconds in joins.values()
        for second, n in seconds.items()
        if start_s <= second < end_s
    )


def writing_at(joins: JoinTimes, t_s: float, window_s: float = 10.0) -> list[str]:
    """The DCs that wrote joined rows in the ``window_s`` before ``t_s`` (those a fault stops)."""
    return sorted(
        dc
        for dc, seconds in joins.items()
        if any(t_s - window_s <= second < t_s and n for second, n in seconds.items())
    )


def catch_up(
    samples: list[Sample],
    dc: str,
    returned_at_s: float,
    caught_up_lag_s: float,
    log_lines: list[dict[str, Any]],
    started_wall_s: float,
) -> CatchUp:
    """The catch-up of ``dc`` back at ``returned_at_s``, from the samples and its joiner's log.

    The joiner's lag grows while it restarts (no batch commits), so the event
    time drained over the catch-up is ``catch_up_s + lag_at_return_s -
    lag_after_s``, all of it in the drain: ``speed_x`` divides it by the drain,
    ``speed_with_restart_x`` by the whole catch-up.
    """
    at_return = _at(samples, returned_at_s)
    result = CatchUp(
        dc=dc,
        returned_at_s=round(returned_at_s, 1),
        lag_at_return_s=at_return.lag_s.get(dc, 0.0) if at_return else 0.0,
        backlog_at_return_mib=round(
            (at_return.backlog_bytes.get(dc, 0) if at_return else 0) / (1 << 20), 2
        ),
    )
    caught_up = next(
        (
            s
            for s in samples
            if s.t_s > returned_at_s and s.lag_s.get(dc, float("inf")) <= caught_up_lag_s
        ),
        None,
    )
    if caught_up is None:
        return result
    took = caught_up.t_s - returned_at_s
    drained = took + result.lag_at_return_s - caught_up.lag_s[dc]
    result.caught_up_at_s = caught_up.t_s
    result.catch_up_s = round(took, 1)
    result.speed_with_restart_x = round(drained / took, 1) if took > 0 else None
    start_wall, end_wall = started_wall_s + returned_at_s, started_wall_s + caught_up.t_s
    first_batch = _first_batch_began(log_lines, dc, start_wall, end_wall)
    if first_batch is not None:
        result.restart_s = round(first_batch - start_wall, 1)
        drain = end_wall - first_batch
        result.drain_s = round(drain, 1)
        result.speed_x = round(drained / drain, 1) if drain > 0 else None
    result.batches = batch_totals(log_lines, dc, start_wall, end_wall)
    read = result.batches["lines"]
    result.wasted_share = round(result.batches["wasted"] / read, 4) if read else None
    return result


def _first_batch_began(
    lines: Iterable[dict[str, Any]], dc: str, start_wall_s: float, end_wall_s: float
) -> float | None:
    """When the first batch (not a retry pass) logged in the span began, by the wall clock."""
    for line in lines:
        at = _batch_at(line, dc)
        if at is None or not start_wall_s <= at <= end_wall_s:
            continue
        if str(line.get("batch", "")).startswith("retry-"):
            continue
        seconds = line.get("seconds", 0.0)
        return at - (float(seconds) if isinstance(seconds, int | float) else 0.0)
    return None


def batch_totals(
    lines: Iterable[dict[str, Any]], dc: str, start_wall_s: float, end_wall_s: float
) -> dict[str, int]:
    totals = dict.fromkeys(("batches", *_BATCH_FIELDS), 0)
    for line in lines:
        at = _batch_at(line, dc)
        if at is not None and start_wall_s <= at <= end_wall_s:
            totals["batches"] += 1
            for key in _BATCH_FIELDS:
                value = line.get(key, 0)
                totals[key] += value if isinstance(value, int) else 0
    return totals


def _batch_at(line: dict[str, Any], dc: str) -> float | None:
    """When a ``joiner.batch`` line of ``dc`` was logged (its batch's end); None otherwise."""
    if line.get("event") != "joiner.batch" or line.get("dc") != dc:
        return None
    return logged_at(line)


def logged_at(line: dict[str, Any]) -> float | None:
    """When a JSON log line was logged, in wall-clock seconds; None without a timestamp."""
    try:
        return datetime.fromisoformat(str(line["timestamp"])).timestamp()
    except (KeyError, ValueError):
        return None


def json_lines(path: Path) -> list[dict[str, Any]]:
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
