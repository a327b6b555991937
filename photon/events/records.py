"""Record types and the line decoder for the query and click logs (docs/ARCHITECTURE.md).

A log line is one UTF-8 JSON object. A query needs ``query_id``; a click needs
``click_id`` and ``query_id``; both ids must be canonical event ids. Every
other field passes through untouched, in ``fields``.

Decoding never raises on bad input: :func:`decode_line` returns either the
event or a :class:`QuarantineRecord` naming the file, the byte offset, the
reason and the raw bytes (kept whole, so nothing is lost, even non-UTF-8).
A line nested deeper than :data:`MAX_NESTING` arrays and objects is refused
(``invalid_json``) before it is decoded: JSON sets no bound, a decoder has one
(RFC 8259, section 9), and Python's recursion limit was it — such a line raised
``RecursionError``, a failed batch instead of a bad line, on every replay alike,
at a depth that depended on the caller's stack.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import msgspec

from photon.errors import PhotonError
from photon.events.ids import EventId, InvalidEventIdError

#: One decoder for every line: msgspec parses ~4x faster than ``json`` and is strict.
_DECODER = msgspec.json.Decoder()

#: The deepest nesting of arrays and objects a line may hold (an ad server's lines
#: hold a few levels): every process decides the same for a line, whatever its stack.
MAX_NESTING = 100

#: A JSON string, escapes included: brackets inside one do not nest.
_JSON_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)
_BRACKET = re.compile(rb"[\[\]{}]")


class Stream(StrEnum):
    """The two logs Photon joins: the primary (queries) and the foreign (clicks)."""

    QUERIES = "queries"
    CLICKS = "clicks"


class QuarantineReason(StrEnum):
    NOT_UTF8 = "not_utf8"
    INVALID_JSON = "invalid_json"
    NOT_AN_OBJECT = "not_an_object"
    MISSING_FIELD = "missing_field"
    MALFORMED_ID = "malformed_id"
    FILE_TRUNCATED = "file_truncated"
    FILE_DELETED = "file_deleted"
    TORN_LINE = "torn_line"
    FILE_REPLACED = "file_replaced"
    FILE_ROTATED = "file_rotated"
    #: A click whose joined record cannot be written (a value that does not fit the
    #: output schema): found before its registration, never registered.
    UNWRITABLE = "unwritable"
    #: A click stamped further ahead of ZooKeeper's clock than ``shards.max_future_s``:
    #: no ad server's clock is that wrong (one less far ahead is held until in range).
    FUTURE_STAMPED = "future_stamped"


#: What the log reader reports about a file (bytes gone, a line never finished, a
#: file replaced or renamed under it), as opposed to what a line's content is wrong with.
FILE_REASONS = frozenset(
    {
        QuarantineReason.FILE_TRUNCATED,
        QuarantineReason.FILE_DELETED,
        QuarantineReason.TORN_LINE,
        QuarantineReason.FILE_REPLACED,
        QuarantineReason.FILE_ROTATED,
    }
)


#: What the join finds wrong with a click it decoded (its joined record), not the decoder.
JOIN_REASONS = frozenset({QuarantineReason.UNWRITABLE, QuarantineReason.FUTURE_STAMPED})


class BadLineError(PhotonError, ValueError):
    """A line that cannot become an event; carries the quarantine reason."""

    def __init__(self, reason: QuarantineReason, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


@dataclass(frozen=True, slots=True)
class QueryEvent:
    query_id: EventId
    fields: Mapping[str, Any] = field(default_factory=dict)

    def to_json_line(self) -> bytes:
        return _dump({**self.fields, "query_id": str(self.query_id)})


@dataclass(frozen=True, slots=True)
class ClickEvent:
    click_id: EventId
    query_id: EventId
    fields: Mapping[str, Any] = field(default_factory=dict)

    def to_json_line(self) -> bytes:
        return _dump(
            {**self.fields, "click_id": str(self.click_id), "query_id": str(self.query_id)}
        )


@dataclass(frozen=True, slots=True)
class JoinedRecord:
    """One click joined to its query; the adapter decides ``fields``."""

    click_id: EventId
    query_id: EventId
    dc: str
    joined_at_us: int
    fields: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            **self.fields,
            "click_id": str(self.click_id),
            "query_id": str(self.query_id),
            "dc": self.dc,
            "joined_at_us": self.joined_at_us,
        }


@dataclass(frozen=True, slots=True)
class QuarantineRecord:
    """A line (or a stretch of a file) that could not be used, and why."""

    file: str
    offset: int
    reason: QuarantineReason
    detail: str
    raw: bytes = b""

    def to_dict(self) -> dict[str, Any]:
        return {
            "file": self.file,
            "offset": self.offset,
            "reason": str(self.reason),
            "detail": self.detail,
            "raw_b64": base64.b64encode(self.raw).decode("ascii"),
        }


Event = QueryEvent | ClickEvent


# Every line of every stream is decoded into one of these: built through the slots'
# descriptors, not the frozen dataclasses' ``__init__`` (which sets each field by name
# through ``object.__setattr__``): a third of the cost, from values already checked.
_NEW = object.__new__
_SET_QUERY_ID = vars(QueryEvent)["query_id"].__set__
_SET_QUERY_FIELDS = vars(QueryEvent)["fields"].__set__
_SET_CLICK_ID = vars(ClickEvent)["click_id"].__set__
_SET_CLICKS_QUERY_ID = vars(ClickEvent)["query_id"].__set__
_SET_CLICK_FIELDS = vars(ClickEvent)["fields"].__set__


def _query_event(query_id: EventId, fields: dict[str, Any]) -> QueryEvent:
    query: QueryEvent = _NEW(QueryEvent)
    _SET_QUERY_ID(query, query_id)
    _SET_QUERY_FIELDS(query, fields)
    return query


def decode_query(raw: bytes) -> QueryEvent:
    obj = _load_object(raw)
    return _query_event(_required_id(obj, "query_id"), obj)


def decode_query_id(raw: bytes) -> EventId:
    """The ``query_id`` of the query line ``raw``: what :func:`decode_query` checks and
    gives, without building the event (the query reader keeps only the id and the raw
    line; raises :class:`BadLineError` as :func:`decode_query` does)."""
    return _required_id(_load_object(raw), "query_id")


def decode_query_of(raw: bytes, query_id: EventId) -> QueryEvent | None:
    """The query ``raw`` holds if its ``query_id`` is ``query_id``, else None (a line
    that is not a query, or another query's): what :func:`decode_query` and a
    comparison of the ids give, without parsing an id known already (the same text as
    a canonical id's is that id)."""
    try:
        obj = _load_object(raw)
    except BadLineError:
        return None
    return _query_event(query_id, obj) if obj.get("query_id") == str(query_id) else None


def decode_click(raw: bytes) -> ClickEvent:
    obj = _load_object(raw)
    click = _NEW(ClickEvent)
    _SET_CLICK_ID(click, _required_id(obj, "click_id"))
    _SET_CLICKS_QUERY_ID(click, _required_id(obj, "query_id"))
    _SET_CLICK_FIELDS(click, obj)
    return click


def decode_line(stream: Stream, file: str, offset: int, raw: bytes) -> Event | QuarantineRecord:
    """Decode one line of ``stream``; bad input becomes a quarantine record."""
    try:
        return decode_query(raw) if stream is Stream.QUERIES else decode_click(raw)
    except BadLineError as exc:
        return QuarantineRecord(
            file=file, offset=offset, reason=exc.reason, detail=exc.detail, raw=raw
        )


def nested_deeper_than(raw: bytes, bound: int) -> bool:
    """Whether ``raw`` opens more than ``bound`` arrays and objects inside each other
    (brackets in strings apart). A line with fewer brackets is not looked at further."""
    if raw.count(b"[") + raw.count(b"{") <= bound:
        return False
    depth = 0
    for match in _BRACKET.finditer(_JSON_STRING.sub(b"", raw)):
        if match[0] in (b"[", b"{"):
            depth += 1
            if depth > bound:
                return True
        else:
            depth -= 1
    return False


def _load_object(raw: bytes) -> dict[str, Any]:
    if nested_deeper_than(raw, MAX_NESTING):
        raise _not_json(raw, ValueError(f"nested deeper than {MAX_NESTING} levels"))
    try:
        obj = _DECODER.decode(raw)  # strict JSON: no NaN/Infinity, UTF-8 checked
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError) as exc:
        raise _not_json(raw, exc) from exc
    if not isinstance(obj, dict):
        raise BadLineError(QuarantineReason.NOT_AN_OBJECT, f"a {type(obj).__name__}, not an object")
    return obj


def query_id_text(raw: bytes) -> str | None:
    """The ``query_id`` string of a line that decodes to an object (unparsed), else
    None: what a search of the logs for a query's line compares."""
    try:
        value = _load_object(raw).get("query_id")
    except BadLineError:
        return None
    return value if isinstance(value, str) else None


def _not_json(raw: bytes, exc: Exception) -> BadLineError:
    """Why the decoder refused ``raw``: not UTF-8 at all, or not JSON (the rare path)."""
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as bad:
        return BadLineError(QuarantineReason.NOT_UTF8, f"byte {bad.start} is not UTF-8")
    return BadLineError(QuarantineReason.INVALID_JSON, str(exc))


def _required_id(obj: Mapping[str, Any], name: str) -> EventId:
    if name not in obj or obj[name] is None:
        raise BadLineError(QuarantineReason.MISSING_FIELD, f"no {name!r}")
    value = obj[name]
    if not isinstance(value, str):
        raise BadLineError(QuarantineReason.MALFORMED_ID, f"{name} is a {type(value).__name__}")
    try:
        return EventId.parse(value)
    except InvalidEventIdError as exc:
        raise BadLineError(QuarantineReason.MALFORMED_ID, f"{name}: {exc}") from exc


def _dump(obj: Mapping[str, Any]) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False, sort_keys=True).encode()
