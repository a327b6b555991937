"""Event ids, as the domain sees them.

The canonical parser lives in :mod:`registry.ids`, because the IdRegistry
(which imports nothing of ours) must validate ids before it writes them;
this module is the name the rest of ``photon`` uses.

How it fails: an id not in canonical ``<ipv4>:<pid>:<ts_us>`` form raises
:class:`InvalidEventIdError` (a ``ValueError``) naming the part that is wrong.
"""

from registry.ids import (
    MAX_PID,
    MAX_TS_US,
    MIN_TS_US,
    EventId,
    InvalidEventIdError,
    parse_event_id,
)

__all__ = [
    "MAX_PID",
    "MAX_TS_US",
    "MIN_TS_US",
    "EventId",
    "InvalidEventIdError",
    "parse_event_id",
]
