"""The output of an event-time window: its objects and the click ids in them.

Output objects are laid out by DC and the click's event hour (photon.join.output),
so a window's reads list and read that window's objects only, however much output
there is (docs/operations.md, "What a run reads: its window only").

How it fails: see :mod:`photon.storage` (bounded retries, then an error).
"""

from __future__ import annotations

import base64

from photon.events.records import JOIN_REASONS, Stream, decode_click
from photon.join.output import click_ids_in, output_prefix, window_prefixes
from photon.ops.params import Window
from photon.storage import ObjectStore


def ts_us(event_id: str) -> int:
    """The time of an event id (the timestamp it ends with), in microseconds."""
    return int(event_id.rsplit(":", 1)[1])


def in_window(event_id: str, window: Window) -> bool:
    return window.start_us <= ts_us(event_id) < window.end_us


def window_keys(store: ObjectStore, kind: str, window: Window) -> list[str]:
    """The keys of ``kind``'s objects that can hold clicks of the window: those under the
    window's event hours only, however much output there is."""
    prefixes = window_prefixes(store, kind, window.start_us, window.end_us)
    return [key for prefix in prefixes for key in store.keys(prefix)]


def ids_in_window(store: ObjectStore, kind: str, window: Window) -> set[str]:
    """The ids of ``kind``'s clicks in the window, read from the window's objects only."""
    ids = click_ids_in(store, window_keys(store, kind, window))
    return {click for click in ids if in_window(click, window)}


#: The reasons a joiner quarantines a click it decoded.
_JOINERS_REASONS = frozenset(reason.value for reason in JOIN_REASONS)


def unwritable_in_window(store: ObjectStore, window: Window) -> set[str]:
    """The ids of the window's clicks a joiner quarantined (``unwritable``: their joined
    record could not be written; ``future_stamped``: beyond any sane clock): never
    registered, never joined (docs/join.md).

    Quarantine objects are laid out by batch, not by hour: this reads the reason and
    the raw line of every click quarantine object of every DC. They are few (a batch
    writes one only when it had bad lines).
    """
    keys = [
        key
        for dc in store.folders(output_prefix("quarantine"))
        for key in store.keys(f"{dc}stream={Stream.CLICKS.value}/")
    ]
    table = store.read_parquet(keys, columns=["reason", "raw_b64"])
    if not table.num_rows:
        return set()
    ids: set[str] = set()
    for reason, raw in zip(
        table.column("reason").to_pylist(), table.column("raw_b64").to_pylist(), strict=True
    ):
        if reason in _JOINERS_REASONS:
            click_id = str(decode_click(base64.b64decode(raw)).click_id)
            if in_window(click_id, window):
                ids.add(click_id)
    return ids
