"""Event ids: ``"<server_ipv4>:<pid>:<ts_us>"`` (docs/ARCHITECTURE.md).

An id names the server process that logged the event and the event's time in
microseconds since the epoch; that time drives sharding, GC and the log-file
map. Only the canonical form is accepted, so that an id read back from any
store compares equal, byte for byte, to the id that was written:

* the IPv4 address is a dotted quad without leading zeros;
* pid and timestamp are plain decimal digits, no sign, no leading zeros;
* the timestamp lies in ``[MIN_TS_US, MAX_TS_US)`` — a value outside that range
  is almost always seconds or milliseconds mistaken for microseconds.

Anything else raises :class:`InvalidEventIdError` (a ``ValueError``) whose
message says what is wrong; callers quarantine the line that carried it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Self

from registry.errors import RegistryError

#: 2000-01-01T00:00:00Z, in microseconds.
MIN_TS_US = 946_684_800_000_000
#: 2200-01-01T00:00:00Z, in microseconds.
MAX_TS_US = 7_258_118_400_000_000
#: Largest pid accepted (pids are unsigned 32-bit on every platform we know).
MAX_PID = 2**32 - 1

_DIGITS = re.compile(r"[1-9][0-9]*")
_OCTET = r"(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9][0-9]|[0-9])"
_IPV4 = re.compile(rf"{_OCTET}(?:\.{_OCTET}){{3}}")
#: The whole id at once (every line of every stream carries one or two): one match, not
#: a split and three. The address part is only digits and dots of a dotted quad's length
#: here; :data:`_IPV4` checks it, once an address (:func:`_canonical_ip`).
_EVENT_ID = re.compile(r"([0-9.]{7,15}):([1-9][0-9]*):([1-9][0-9]*)")
#: Addresses checked canonical: a deployment has a few thousand servers at most.
_CANONICAL_IPS: set[str] = set()
_CANONICAL_IPS_MAX = 1 << 16
_NEW = object.__new__


class InvalidEventIdError(RegistryError, ValueError):
    """An event id that is not in canonical ``<ipv4>:<pid>:<ts_us>`` form."""


@dataclass(frozen=True, slots=True, order=True)
class EventId:
    """A parsed, validated event id. ``str(event_id)`` gives the canonical form."""

    server_ip: str
    pid: int
    ts_us: int
    #: The canonical text, when parsed from it (``str`` gives it back without formatting).
    _text: str = field(default="", init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        _check_ip(self.server_ip)
        _check_ranges(self.pid, self.ts_us)

    @classmethod
    def parse(cls, text: str) -> Self:
        """Parse the canonical form; raise :class:`InvalidEventIdError` otherwise."""
        if not isinstance(text, str):
            raise InvalidEventIdError(f"event id must be a string, not {type(text).__name__}")
        match = _EVENT_ID.fullmatch(text)
        if match is None:
            raise cls._why_not(text)
        ip, pid_text, ts_text = match.groups()
        if ip not in _CANONICAL_IPS:
            _canonical_ip(ip)
        pid, ts_us = int(pid_text), int(ts_text)
        if not (0 < pid <= MAX_PID and MIN_TS_US <= ts_us < MAX_TS_US):
            _check_ranges(pid, ts_us)  # raises, saying which
        # The address is checked (above): built without __post_init__ checking it again,
        # each slot set through its descriptor (the parse a quarter cheaper than with
        # object.__setattr__ by name; every line of every stream carries one or two ids).
        event_id = _NEW(cls)
        _SET_SERVER_IP(event_id, ip)
        _SET_PID(event_id, pid)
        _SET_TS_US(event_id, ts_us)
        _SET_TEXT(event_id, text)
        return event_id

    @staticmethod
    def _why_not(text: str) -> InvalidEventIdError:
        """What is wrong with ``text``, a string that is not a canonical id."""
        parts = text.split(":")
        if len(parts) != 3:
            return InvalidEventIdError(f"event id {text!r} is not '<ipv4>:<pid>:<ts_us>'")
        ip, pid, ts = parts
        for name, value in (("pid", pid), ("timestamp", ts)):
            if not _DIGITS.fullmatch(value):
                return InvalidEventIdError(
                    f"event id {text!r}: {name} {value!r} is not a positive decimal integer"
                )
        try:
            _check_ip(ip)
        except InvalidEventIdError as error:
            return error
        return InvalidEventIdError(f"event id {text!r} is not canonical")  # not reached

    @classmethod
    def is_valid(cls, text: str) -> bool:
        try:
            cls.parse(text)
        except InvalidEventIdError:
            return False
        return True

    @property
    def process(self) -> str:
        """``"<ipv4>:<pid>"``: the server process, the log-file map's key prefix."""
        return f"{self.server_ip}:{self.pid}"

    @property
    def time(self) -> datetime:
        return datetime.fromtimestamp(self.ts_us / 1_000_000, tz=UTC)

    def __str__(self) -> str:
        return self._text or f"{self.server_ip}:{self.pid}:{self.ts_us}"


# The slots' setters, past the frozen dataclass's ``__setattr__`` (used by ``parse``).
_SET_SERVER_IP = vars(EventId)["server_ip"].__set__
_SET_PID = vars(EventId)["pid"].__set__
_SET_TS_US = vars(EventId)["ts_us"].__set__
_SET_TEXT = vars(EventId)["_text"].__set__


def _check_ranges(pid: int, ts_us: int) -> None:
    if not 0 < pid <= MAX_PID:
        raise InvalidEventIdError(f"pid {pid} is outside 1..{MAX_PID}")
    if not MIN_TS_US <= ts_us < MAX_TS_US:
        raise InvalidEventIdError(f"timestamp {ts_us} is not microseconds between 2000 and 2200")


def _canonical_ip(ip: str) -> None:
    """Check ``ip`` and remember it (the set emptied when full: it only saves checks)."""
    _check_ip(ip)
    if len(_CANONICAL_IPS) >= _CANONICAL_IPS_MAX:
        _CANONICAL_IPS.clear()
    _CANONICAL_IPS.add(ip)


def _check_ip(ip: str) -> None:
    # A regex, not the ipaddress module: this runs for every id the registry
    # sees, and ipaddress costs ~60 us an id.
    if not _IPV4.fullmatch(ip):
        raise InvalidEventIdError(f"server address {ip!r} is not a canonical IPv4 address")


def parse_event_id(text: str) -> EventId:
    """Function form of :meth:`EventId.parse`."""
    return EventId.parse(text)
