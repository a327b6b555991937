"""Which event hours of joined output have landed and settled: what ``photon_output_hours``
announces, so that ``photon_verify`` runs as soon as an hour is complete.

The output's keys carry the event hour of their clicks (photon.join.output), so
the hours that have output are the ``hour=`` folders under ``joined/dc=<dc>/``:
one listing per DC, whatever the output's size. An hour is **settled** once its
end lies ``settle_s`` in the past (late clicks of the hour are then in, as in a
scheduled verification). Each announcement names the hours after the last one
announced (the asset's previous event says which); the first announcement names
only the newest settled hour, so a new deployment does not verify its history
in one run.

How it fails: the object store's errors (photon.storage); an hour folder whose
name is not an hour is ignored (it is not the joiners').
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta

from photon.join.output import HOUR_FORMAT, output_prefix
from photon.ops.params import Window
from photon.storage import ObjectStore

_HOUR_FOLDER = re.compile(r"hour=(\d{4}-\d{2}-\d{2}T\d{2})/$")


def hour_start(hour: str) -> datetime:
    """The start of an event hour named as in the keys (``2026-11-26T01``), in UTC."""
    return datetime.strptime(hour, HOUR_FORMAT).replace(tzinfo=UTC)


def output_hours(store: ObjectStore) -> list[str]:
    """Every event hour some DC has joined output of, in order."""
    hours = set()
    for dc_folder in store.folders(output_prefix("joined")):
        for folder in store.folders(dc_folder):
            match = _HOUR_FOLDER.search(folder)
            if match:
                hours.add(match.group(1))
    return sorted(hours)


def hours_to_announce(
    hours: Iterable[str], now: datetime, settle_s: float, last_announced: str | None
) -> list[str]:
    """The settled hours after ``last_announced`` (all of them); with none announced
    yet, the newest settled hour only."""
    settle = timedelta(seconds=settle_s)
    settled = sorted(h for h in set(hours) if hour_start(h) + timedelta(hours=1) + settle <= now)
    if last_announced is None:
        return settled[-1:]
    return [h for h in settled if h > last_announced]


def hours_window(hours: Iterable[str]) -> Window:
    """The window from the first hour's start to the last hour's end."""
    ordered = sorted(hours)
    if not ordered:
        raise ValueError("no hours to make a window of")
    return Window(start=hour_start(ordered[0]), end=hour_start(ordered[-1]) + timedelta(hours=1))
