"""Rows checked against the output schema before their clicks are registered: what
cannot be written is named, with the reason, and whatever is left can be written."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from photon.join.adapter import AdClickAdapter
from photon.join.output import JOINED_BASE, check_rows, encode, encode_table

pytestmark = pytest.mark.unit

SCHEMA = pa.schema([*JOINED_BASE, *AdClickAdapter.schema])


def row(n: int, **fields: Any) -> dict[str, Any]:
    return {
        "click_id": f"10.0.0.1:1:{1_767_225_600_000_000 + n}",
        "query_id": "10.0.0.2:1:1767225599000000",
        "dc": "a",
        "joined_at_us": 1_767_225_601_000_000,
        "token": "a/run1/000000000001",
        "click_ts_us": 1_767_225_600_000_000 + n,
        "query_ts_us": 1_767_225_599_000_000,
        "ad_id": f"ad{n}",
        "cost_micros": n,
        "query_text": "q",
        "country": "fr",
        "ad_shown": True,
        "click_fields": "{}",
        "query_fields": "{}",
    } | fields


def test_rows_that_fit_are_all_writable() -> None:
    assert check_rows([row(n) for n in range(100)], SCHEMA)[:2] == ({}, SCHEMA)
    assert check_rows([], SCHEMA)[:2] == ({}, SCHEMA)


def test_rows_that_fit_come_back_as_their_table_which_writes_as_they_do() -> None:
    rows = [row(n) for n in range(10)]
    bad, schema, table = check_rows(rows, SCHEMA)
    assert bad == {} and schema == SCHEMA and table is not None
    assert table.to_pylist() == rows
    assert encode_table(table) == encode(rows, SCHEMA)
    inferred = [{"click_id": "x1", "v": 1}, {"click_id": "x2", "v": 2}]
    bad, schema, table = check_rows(inferred, None)
    assert bad == {} and table is not None and table.schema == schema
    assert table.to_pylist() == inferred


def test_no_table_comes_back_when_a_row_does_not_fit() -> None:
    bad, _, table = check_rows([row(0), row(1, cost_micros=2**70)], SCHEMA)
    assert list(bad) == [1] and table is None
    bad, _, table = check_rows([{"click_id": "x1", "v": 1}, {"click_id": "x2", "v": "a"}], None)
    assert list(bad) == [1] and table is None


@pytest.mark.parametrize("cost", [2**63, -(2**63) - 1, 2**70, 10**30])
def test_an_integer_beyond_int64_is_named_with_its_reason(cost: int) -> None:
    rows = [row(0), row(1, cost_micros=cost), row(2)]
    bad = check_rows(rows, SCHEMA).bad
    assert list(bad) == [1] and "Overflow" in bad[1]
    encode([r for n, r in enumerate(rows) if n not in bad], SCHEMA)  # the rest writes


def test_a_string_that_is_not_utf8_is_named_and_its_reason_is_utf8() -> None:
    bad = check_rows([row(0, query_text="\ud800 lone surrogate")], SCHEMA).bad
    assert list(bad) == [0]
    bad[0].encode("utf-8")  # the reason itself can be written


def test_without_a_schema_a_row_whose_types_clash_with_earlier_rows_is_named() -> None:
    rows: list[dict[str, Any]] = [{"click_id": "x1", "v": 1}, {"click_id": "x2", "v": "one"}]
    rows.append({"click_id": "x3", "v": 3})
    bad, schema, _ = check_rows(rows, None)
    assert list(bad) == [1] and schema.field("v").type == pa.int64()


def test_without_a_schema_a_value_parquet_cannot_hold_is_named() -> None:
    rows = [{"click_id": "x1", "v": {"a": 1}}, {"click_id": "x2", "v": {}}]
    bad = check_rows([rows[1]], None).bad
    assert list(bad) == [0]  # an empty struct builds a table, but does not write
    assert check_rows([rows[0]], None).bad == {}


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**80), max_value=2**80)
    | st.floats(allow_nan=False)
    | st.text(),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.dictionaries(st.sampled_from("abcd"), json_values, max_size=4), max_size=6))
def test_whatever_the_values_the_rows_left_can_be_written(extra: list[dict[str, Any]]) -> None:
    """The property the join relies on: once the named rows are taken out, a write of
    the others (any subset, as the committed ones are) cannot fail."""
    rows = [{"click_id": f"x{n}", **fields} for n, fields in enumerate(extra)]
    bad, schema, _ = check_rows(rows, None)
    kept = [r for n, r in enumerate(rows) if n not in bad]
    for subset in (kept, kept[::2], kept[1::2], kept[-1:]):
        encode(subset, schema)
    cost = [row(n, cost_micros=f.get("a")) for n, f in enumerate(extra)]
    bad = check_rows(cost, SCHEMA).bad
    encode([r for n, r in enumerate(cost) if n not in bad], SCHEMA)
