from __future__ import annotations

import base64
import dataclasses
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from photon.events.ids import EventId
from photon.events.records import (
    MAX_NESTING,
    BadLineError,
    ClickEvent,
    JoinedRecord,
    QuarantineReason,
    QuarantineRecord,
    QueryEvent,
    Stream,
    decode_click,
    decode_line,
    decode_query,
    decode_query_id,
    decode_query_of,
    nested_deeper_than,
    query_id_text,
)

pytestmark = pytest.mark.unit

QID = "10.1.0.1:4242:1767225600123456"
CID = "10.2.0.1:777:1767225605000000"


def test_a_query_keeps_every_other_field() -> None:
    raw = json.dumps({"query_id": QID, "query": "shoes", "nested": {"a": [1, 2]}}).encode()
    event = decode_line(Stream.QUERIES, "q.log", 0, raw)
    assert isinstance(event, QueryEvent)
    assert event.query_id == EventId.parse(QID)
    assert event.fields["nested"] == {"a": [1, 2]}
    assert json.loads(event.to_json_line()) == json.loads(raw)


def test_a_click_needs_both_ids() -> None:
    raw = json.dumps({"click_id": CID, "query_id": QID, "ad_id": "ad7"}).encode()
    event = decode_line(Stream.CLICKS, "c.log", 10, raw)
    assert isinstance(event, ClickEvent)
    assert (str(event.click_id), str(event.query_id), event.fields["ad_id"]) == (CID, QID, "ad7")


@pytest.mark.parametrize(
    ("stream", "raw", "reason"),
    [
        (Stream.QUERIES, b'{"query_id": "\xff\xfe"}', QuarantineReason.NOT_UTF8),
        (Stream.QUERIES, b'{"query_id": ', QuarantineReason.INVALID_JSON),
        (Stream.QUERIES, b"", QuarantineReason.INVALID_JSON),
        (
            Stream.QUERIES,
            b'{"query_id": "%s", "x": NaN}' % QID.encode(),
            QuarantineReason.INVALID_JSON,
        ),
        # Numbers and strings no other reader takes: infinity, a lone surrogate.
        (
            Stream.QUERIES,
            b'{"query_id": "%s", "x": 1e999}' % QID.encode(),
            QuarantineReason.INVALID_JSON,
        ),
        (
            Stream.QUERIES,
            b'{"query_id": "%s", "x": "\\ud800"}' % QID.encode(),
            QuarantineReason.INVALID_JSON,
        ),
        (
            Stream.QUERIES,
            b'{"query_id": "%s"} trailing' % QID.encode(),
            QuarantineReason.INVALID_JSON,
        ),
        (Stream.QUERIES, b"\xff{}", QuarantineReason.NOT_UTF8),
        (Stream.QUERIES, b"[1, 2]", QuarantineReason.NOT_AN_OBJECT),
        (Stream.QUERIES, b'"just a string"', QuarantineReason.NOT_AN_OBJECT),
        (Stream.QUERIES, b'{"query": "no id"}', QuarantineReason.MISSING_FIELD),
        (Stream.QUERIES, b'{"query_id": null}', QuarantineReason.MISSING_FIELD),
        (Stream.CLICKS, b'{"click_id": "%s"}' % CID.encode(), QuarantineReason.MISSING_FIELD),
        (Stream.CLICKS, b'{"query_id": "%s"}' % QID.encode(), QuarantineReason.MISSING_FIELD),
        (Stream.QUERIES, b'{"query_id": 42}', QuarantineReason.MALFORMED_ID),
        (
            Stream.QUERIES,
            b'{"query_id": "10.1.0.1:4242:1767225600"}',
            QuarantineReason.MALFORMED_ID,
        ),
        (
            Stream.CLICKS,
            b'{"click_id": "x", "query_id": "%s"}' % QID.encode(),
            QuarantineReason.MALFORMED_ID,
        ),
        (
            Stream.CLICKS,
            b'{"click_id": "%s", "query_id": "1:2:3"}' % CID.encode(),
            QuarantineReason.MALFORMED_ID,
        ),
    ],
)
def test_bad_lines_are_quarantined_with_file_offset_and_raw_bytes(
    stream: Stream, raw: bytes, reason: QuarantineReason
) -> None:
    record = decode_line(stream, "dc/a.log", 1234, raw)
    assert isinstance(record, QuarantineRecord)
    assert (record.file, record.offset, record.reason) == ("dc/a.log", 1234, reason)
    assert record.detail
    assert base64.b64decode(record.to_dict()["raw_b64"]) == raw  # nothing is lost


@given(
    st.one_of(
        st.binary(max_size=60),
        st.builds(
            lambda value, extra: json.dumps({"query_id": value, **extra}).encode(),
            st.one_of(
                st.sampled_from([QID, CID, "10.01.0.1:4242:1767225600123456", "1:2:3", ""]),
                st.none(),
                st.integers(),
                st.text(max_size=30),
            ),
            st.dictionaries(st.text(max_size=5), st.integers() | st.text(max_size=5), max_size=3),
        ),
        st.sampled_from([b'{"query_id": "%s", "x": NaN}' % QID.encode(), b"[1]", b'{"x": 1}']),
    )
)
def test_a_query_id_decoded_alone_is_what_decoding_the_query_gives(raw: bytes) -> None:
    """The query reader keeps only the id: decode_query_id takes and refuses exactly the
    lines decode_line does, with the same reason and detail."""
    line = decode_line(Stream.QUERIES, "q.log", 7, raw)
    try:
        query_id = decode_query_id(raw)
    except BadLineError as exc:
        assert isinstance(line, QuarantineRecord)
        assert (exc.reason, exc.detail) == (line.reason, line.detail)
    else:
        assert isinstance(line, QueryEvent)
        assert query_id == line.query_id and str(query_id) == str(line.query_id)


def test_joined_record_carries_the_required_columns() -> None:
    record = JoinedRecord(
        EventId.parse(CID), EventId.parse(QID), "a", 1767225606000000, {"ad_id": "ad7"}
    )
    assert record.to_dict() == {
        "click_id": CID,
        "query_id": QID,
        "dc": "a",
        "joined_at_us": 1767225606000000,
        "ad_id": "ad7",
    }


_OTHER_QID = "10.1.0.1:4242:1767225600999999"


@given(
    st.sampled_from([QID, _OTHER_QID, "10.01.0.1:4242:1767225600123456", "", 7, None, "missing"]),
    st.sampled_from(["json", "not json", "array"]),
)
def test_a_query_decoded_for_its_id_is_what_decoding_and_comparing_give(
    value: object, shape: str
) -> None:
    """decode_query_of skips the parse of an id it knows; it answers as decode_query
    and a comparison of the ids do, for any line."""
    fields = {"query": "shoes"} | ({} if value == "missing" else {"query_id": value})
    raw = {
        "json": json.dumps(fields).encode(),
        "not json": b'{"query_id": "' + str(value).encode() + b'"',
        "array": json.dumps([fields]).encode(),
    }[shape]
    query_id = EventId.parse(QID)
    try:
        decoded: QueryEvent | None = decode_query(raw)
    except ValueError:
        decoded = None
    expected = decoded if decoded is not None and decoded.query_id == query_id else None
    got = decode_query_of(raw, query_id)
    assert got == expected
    if got is not None:
        assert str(got.query_id) == QID and got.fields == fields


def test_events_built_past_init_equal_the_ones_init_builds() -> None:
    raw = json.dumps({"click_id": CID, "query_id": QID, "ad_id": "ad7"}).encode()
    click = decode_click(raw)
    fields = json.loads(raw)
    assert click == ClickEvent(EventId.parse(CID), EventId.parse(QID), fields)
    query = decode_query(json.dumps({"query_id": QID}).encode())
    assert query == QueryEvent(EventId.parse(QID), {"query_id": QID})
    with pytest.raises(dataclasses.FrozenInstanceError):
        click.fields = {}  # type: ignore[misc]


def nested(depth: int, leaf: bytes = b"1") -> bytes:
    """``depth`` arrays and objects inside each other, alternating."""
    opening = b"".join(b'{"k":' if n % 2 else b"[" for n in range(depth))
    closing = b"".join(b"}" if n % 2 else b"]" for n in reversed(range(depth)))
    return opening + leaf + closing


@pytest.mark.parametrize("stream", [Stream.QUERIES, Stream.CLICKS])
@pytest.mark.parametrize(
    "raw",
    [
        b"[" * 100_000 + b"]" * 100_000,  # deeper than any recursion limit
        b"[" * 100_000,  # and never closed
        b'{"query_id": "%s", "click_id": "%s", "x": %s}'
        % (QID.encode(), CID.encode(), nested(5_000)),
        b'{"query_id": "%s", "click_id": "%s", "x": %s}'
        % (QID.encode(), CID.encode(), nested(MAX_NESTING)),  # the object is one more level
    ],
    ids=["bare", "unclosed", "in-a-field", "one-past-the-bound"],
)
def test_a_line_nested_past_the_bound_is_quarantined_not_raised(stream: Stream, raw: bytes) -> None:
    """Python's recursion limit made such a line raise RecursionError: a failed batch,
    the same on every replay, instead of one bad line (docs/join.md, "One joiner batch")."""
    record = decode_line(stream, "dc/a.log", 9, raw)
    assert isinstance(record, QuarantineRecord)
    assert record.reason is QuarantineReason.INVALID_JSON
    assert query_id_text(raw) is None
    if stream is Stream.QUERIES:
        with pytest.raises(BadLineError):
            decode_query_id(raw)
        assert decode_query_of(raw, EventId.parse(QID)) is None


def test_a_line_nested_to_the_bound_decodes_and_brackets_in_strings_do_not_nest() -> None:
    at_bound = b'{"query_id": "%s", "x": %s}' % (QID.encode(), nested(MAX_NESTING - 1))
    assert decode_query(at_bound).fields["x"] is not None
    brackets = b'{"query_id": "%s", "x": "%s", "y": "\\"[{"}' % (QID.encode(), b"[{" * 5_000)
    assert not nested_deeper_than(brackets, MAX_NESTING)
    assert decode_query(brackets).fields["x"] == "[{" * 5_000
    assert query_id_text(brackets) == QID
