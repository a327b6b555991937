"""Pure parts of the shard groups: object names, the replay's filter of written rows, and
which DC a click is preferred by."""

from __future__ import annotations

import gc
import pickle
from collections import Counter
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from photon.events.ids import EventId
from photon.events.records import decode_click
from photon.join.group import (
    GroupJoiner,
    GroupOutcome,
    GroupParts,
    GroupWork,
    JoinClick,
    _Checked,
    _unwritten,
    part_name,
    preferred_dc,
)
from photon.join.retry import PendingClick
from registry.sharding import Epoch, ShardingConfig

pytestmark = pytest.mark.unit


def test_a_one_group_batch_keeps_the_batch_name_and_groups_sort_after_it() -> None:
    assert part_name("000000000004", 0, 1) == "000000000004"
    names = [part_name("000000000004", g, 12) for g in range(12)]
    assert names[0] == "000000000004.g000" and names[11] == "000000000004.g011"
    assert names == sorted(names)
    assert max(names) < part_name("000000000005", 0, 12)  # the next batch's objects list later


def test_a_replay_writes_only_rows_no_object_of_its_batch_has() -> None:
    rows = [{"click_id": c} for c in ("x", "y", "z")]
    assert _unwritten(rows, {"y"}) == [{"click_id": "x"}, {"click_id": "z"}]
    assert _unwritten(rows, set()) == rows


def test_a_click_crosses_to_a_spark_task_and_back_unchanged() -> None:
    raw = (
        b'{"click_id": "10.0.0.1:42:1795516000000000", '
        b'"query_id": "10.1.0.2:7:1795515999000000", "ad_id": "ad1", "cost_micros": 5}'
    )
    line = PendingClick("10.0.0.1:42:1795516000000000", raw, "c.log", 128, 1795516001, 3)
    click = JoinClick(decode_click(raw), line, True, ours=True, search_logs=False)
    again = pickle.loads(pickle.dumps(click))  # noqa: S301 (bytes it just wrote)
    assert again == click and again.line == line
    assert pickle.loads(pickle.dumps(line)) == line  # noqa: S301


def test_a_group_of_clicks_crosses_to_a_spark_task_unchanged_with_every_flag() -> None:
    def click(n: int, **flags: bool) -> JoinClick:
        click_id = f"10.0.0.1:42:{1_795_516_000_000_000 + n}"
        raw = (
            f'{{"click_id": "{click_id}", "query_id": "10.1.0.2:7:1795515999000000", '
            f'"ad_id": "ad{n}", "cost_micros": {n}}}'
        ).encode()
        behind = flags.pop("behind_reader", False)
        line = PendingClick(click_id, raw, f"c{n}.log", 128 * n, 1795516001 + n, n, behind)
        return JoinClick(decode_click(raw), line, **flags)

    clicks = [
        click(0, from_retry=False),
        click(1, from_retry=True, ours=True, search_logs=False),
        click(2, from_retry=True, behind_reader=True),
        click(3, from_retry=False, ours=True),
    ]
    work = GroupWork("000000000007", "000000000007.g001", 1795516009, True, clicks, 1795515000)
    again = pickle.loads(pickle.dumps(work))  # noqa: S301 (bytes it just wrote)
    assert again == work
    assert [c.line for c in again.clicks] == [c.line for c in clicks]
    assert gc.isenabled()  # the collector is back on after the clicks were made
    empty = GroupWork("000000000008", "000000000008", 1, False, [])
    assert pickle.loads(pickle.dumps(empty)) == empty  # noqa: S301 (bytes it just wrote)
    retried = GroupWork("000000000009", "000000000009", 1, False, clicks, task_attempt=2)
    again = pickle.loads(pickle.dumps(retried))  # noqa: S301 (bytes it just wrote)
    assert again == retried and again.replays and not empty.replays


def test_a_retried_task_joins_its_group_as_a_replay() -> None:
    """A later try of a Spark task may find its first try's registrations: it replays."""
    first = GroupWork("000000000007", "000000000007", 1, False, [])
    assert not first.replays
    assert GroupWork("000000000007", "000000000007", 1, False, [], task_attempt=1).replays
    assert GroupWork("000000000007", "000000000007", 1, True, []).replays


@pytest.mark.parametrize("shards", [2, 4, 6, 64])
def test_each_shard_group_holds_clicks_of_every_preferred_dc(shards: int) -> None:
    """The preferred DC does not follow the shard: a DC's two groups (tasks) each get
    about half of its own clicks, not one group all of them."""
    config = ShardingConfig((Epoch(0, shards),), 0, 3_600_000_000)
    ids = [f"10.0.0.{n % 7}:{n + 1}:{1_795_516_000_000_000 + n}" for n in range(4_000)]
    pairs = Counter(
        (config.shard_of(EventId.parse(i)) % 2, preferred_dc(i, ("a", "b"))) for i in ids
    )
    assert set(pairs) == {(g, dc) for g in (0, 1) for dc in ("a", "b")}
    assert min(pairs.values()) > 0.2 * len(ids)  # a quarter each, give or take


def test_the_preferred_dc_is_one_of_the_dcs_and_stable() -> None:
    ids = [f"10.0.0.1:{n}:{1_795_516_000_000_000 + n}" for n in range(1_000)]
    chosen = [preferred_dc(i, ("a", "b", "c")) for i in ids]
    assert set(chosen) == {"a", "b", "c"}
    assert chosen == [preferred_dc(i, ("a", "b", "c")) for i in ids]


class _Fields:
    """An adapter without a schema, or with one: each click's row is the fields given."""

    def __init__(self, schema: pa.Schema | None = None) -> None:
        if schema is not None:
            self.schema = schema

    def adapt(self, click: object, query: object) -> dict[str, Any]:
        raise AssertionError("not called: the rows are given")


def _candidates(first: int, *rows: dict[str, Any]) -> list[tuple[JoinClick, dict[str, Any]]]:
    out = []
    for n, fields in enumerate(rows, first):
        click_id = f"10.0.0.1:42:{1_795_516_000_000_000 + n}"
        raw = f'{{"click_id": "{click_id}", "query_id": "10.1.0.2:7:1795515999000000"}}'
        line = PendingClick(click_id, raw.encode(), "c.log", 100 * n)
        out.append((JoinClick(decode_click(raw.encode()), line, False), fields))
    return out


def _group_joiner(schema: pa.Schema | None) -> GroupJoiner:
    # Only the adapter's schema is read by the row checks: no service is called.
    parts = GroupParts("a", "run1", None, None, None, None, _Fields(schema))  # type: ignore[arg-type]
    return GroupJoiner(parts)


def test_a_later_chunks_rows_are_checked_with_the_earlier_ones_without_a_schema() -> None:
    joiner = _group_joiner(None)
    out = GroupOutcome(part="p")
    first = joiner._writable(_Checked([], None, None), _candidates(0, {"x": 1}, {"x": None}), out)
    assert first.table is not None and out.counts["unwritable"] == 0
    # registered already, the first chunk's rows stay; a later row of another type does not
    second = joiner._writable(first, _candidates(2, {"x": "s"}, {"x": 2}, {"y": True}), out)
    assert [row for _, row in second.candidates] == [
        {"x": 1}, {"x": None}, {"x": 2}, {"y": True},
    ]  # fmt: skip
    assert out.counts["unwritable"] == 1 and [q.offset for q in out.quarantined] == [200]
    kept = [row for _, row in second.candidates]
    assert pa.Table.from_pylist(kept, schema=second.schema).num_rows == 4
    assert second.table is None  # of the rows checked, the one quarantined too


def test_chunks_that_fit_a_declared_schema_keep_one_table_of_them_all() -> None:
    schema = pa.schema([("x", pa.int64())])
    joiner = _group_joiner(schema)
    out = GroupOutcome(part="p")
    first = joiner._writable(_Checked([], None, None), _candidates(0, {"x": 1}), out)
    second = joiner._writable(first, _candidates(1, {"x": 2}, {"x": 3}), out)
    assert second.table is not None and second.table.column("x").to_pylist() == [1, 2, 3]
    third = joiner._writable(second, _candidates(3, {"x": 2**64}), out)
    assert len(third.candidates) == 3 and third.table is None
    assert out.counts["unwritable"] == 1


def test_a_field_a_chunks_first_row_lacks_is_checked_against_the_earlier_chunks() -> None:
    """A chunk's later row with a field its first row lacks: that field's values are
    checked like any other (its type inferred from every row, not the first alone).
    Inferred from the first row, the field was left out of the chunk's schema, the
    union took the earlier chunk's type for it, and the write of the registered rows
    failed after their commit."""
    joiner = _group_joiner(None)
    out = GroupOutcome(part="p")
    first = joiner._writable(_Checked([], None, None), _candidates(0, {"x": None}, {"x": 0}), out)
    second = joiner._writable(first, _candidates(2, {}, {"x": False}), out)
    assert out.counts["unwritable"] == 1 and [q.offset for q in out.quarantined] == [300]
    kept = [row for _, row in second.candidates]
    assert pa.Table.from_pylist(kept, schema=second.schema).column("x").to_pylist() == [
        None, 0, None,
    ]  # fmt: skip


def test_a_field_only_a_later_row_holds_is_written() -> None:
    joiner = _group_joiner(None)
    out = GroupOutcome(part="p")
    checked = joiner._writable(_Checked([], None, None), _candidates(0, {}, {"y": [1]}), out)
    assert checked.table is not None and checked.table.column("y").to_pylist() == [None, [1]]


_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False)
    | st.text(max_size=4),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=2), inner, max_size=3)
    ),
    max_leaves=6,
)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.dictionaries(st.sampled_from("xyz"), _values, max_size=3), min_size=1, max_size=10),
    st.integers(min_value=1, max_value=4),
    st.data(),
)
def test_whatever_rows_come_in_whatever_chunks_the_registered_ones_write_with_every_field(
    rows: list[dict[str, Any]], chunk: int, data: st.DataObject
) -> None:
    """The property the join's write after the registry commit relies on, without an
    adapter's schema: checked chunk by chunk, any subset of the rows kept (the clicks
    whose registration won) builds and writes under the schema the checks return,
    with every field each of them has."""
    joiner = _group_joiner(None)
    out = GroupOutcome(part="p")
    checked = _Checked([], None, None)
    for first in range(0, len(rows), chunk):
        checked = joiner._writable(checked, _candidates(first, *rows[first : first + chunk]), out)
    kept = [row for _, row in checked.candidates]
    assert len(kept) + out.counts["unwritable"] == len(rows)
    if not kept:
        return
    won = sorted(data.draw(st.sets(st.integers(0, len(kept) - 1), min_size=1)))
    subset = [kept[n] for n in won]
    table = pa.Table.from_pylist(subset, schema=checked.schema)
    pq.write_table(table, pa.BufferOutputStream())
    assert {name for row in subset for name in row} <= set(table.column_names)
