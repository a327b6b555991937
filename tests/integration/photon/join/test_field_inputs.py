"""The join against what the field sends, on the real stack (ZooKeeper, Redis, the S3
endpoint over HTTP): values that do not fit the output schema, and any JSON line at
all. The rule these prove: nothing that can fail the same way twice runs after the
registry commit, so every click ends joined, waiting, unjoinable or quarantined,
and none is registered without being written (docs/join.md, "Why none is lost")."""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from itertools import count
from pathlib import Path
from typing import Any, NoReturn

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from photon.events.records import ClickEvent, QueryEvent
from photon.faults import FaultInjector
from photon.logs.reader import LogLine
from photon.ops.params import Window
from photon.ops.window_output import unwritable_in_window
from photon.settings import FaultSettings
from photon.storage import ObjectStore
from registry import IdRegistry, LookupResult

from .conftest import Clock, MakeDc
from .test_join import rows

pytestmark = pytest.mark.integration

START_US = 1_767_225_600_000_000
S = 1_000_000


def log_lines(name: str, records: list[bytes]) -> list[LogLine]:
    """``records`` as the lines of one log file ``name``, at their byte offsets."""
    lines, offset = [], 0
    for raw in records:
        lines.append(LogLine(name, offset, raw))
        offset += len(raw) + 1
    return lines


def query_id(n: int) -> str:
    return f"10.0.0.2:7:{START_US + n * 1000}"


def click_id(n: int) -> str:
    return f"10.0.0.1:8:{START_US + 500_000 + n * 1000}"


def query(n: int, **fields: Any) -> bytes:
    return json.dumps({"query_id": query_id(n), "query": f"q{n}", **fields}).encode()


def click(n: int, q: int, **fields: Any) -> bytes:
    return json.dumps({"click_id": click_id(n), "query_id": query_id(q), **fields}).encode()


def killed_at(step: str) -> FaultInjector:
    def killed(code: int) -> NoReturn:
        raise SystemExit(code)

    return FaultInjector(FaultSettings.model_validate({"crash_at_step": step}), exit=killed)


def test_a_value_beyond_the_output_schema_is_quarantined_never_registered(
    make_dc: MakeDc, store: ObjectStore, registry: IdRegistry, tmp_path: Path
) -> None:
    """Two clicks whose ``cost_micros`` does not fit int64 among good ones, in one batch
    whose groups are killed after their write and replayed: the two are quarantined
    (``unwritable``, with file and offset) and never registered, every other click
    is joined once, and the quarantine records survive the replay (they land in the
    next part of the batch's quarantine object, after its malformed line's)."""
    clock = Clock(START_US + 60 * S)
    a = make_dc("a", tmp_path / "logs", clock)
    a.reader.process("q0", log_lines("q.0.log", [query(n) for n in range(6)]))
    poison = {6: 2**70, 7: -(2**64)}
    records = [click(n, n, cost_micros=n) for n in range(6)]
    records += [click(n, n - 6, cost_micros=cost) for n, cost in poison.items()]
    records.append(b'{"click_id": "not json')
    lines = log_lines("c.0.log", records)

    a.joiner.faults = killed_at("written")
    with pytest.raises(SystemExit):
        a.joiner.process("000000000000", lines)
    a.joiner.faults = FaultInjector(FaultSettings())
    report = a.joiner.process("000000000000", lines)  # Spark's replay

    assert report.replay and report.unwritable == 2
    joined = [r["click_id"] for r in rows(store, "joined/")]
    assert sorted(joined) == sorted(click_id(n) for n in range(6))
    found = registry.lookup(click_id(n) for n in poison)
    assert set(found.values()) == {LookupResult.ABSENT}
    quarantined = rows(store, "quarantine/")
    unwritable = [r for r in quarantined if r["reason"] == "unwritable"]
    assert sorted(r["offset"] for r in unwritable) == [lines[6].offset, lines[7].offset]
    assert all(r["file"] == "c.0.log" and "Overflow" in r["detail"] for r in unwritable)
    assert [r["reason"] for r in quarantined].count("invalid_json") == 1
    assert a.retries.pending() == 0 and not a.retries.unfinished_batches()
    # verification counts them as settled (quarantined), not as missing
    start = datetime.fromtimestamp(START_US / S, UTC)
    window = Window(start=start, end=start + timedelta(hours=1))
    assert unwritable_in_window(store, window) == {click_id(n) for n in poison}


def test_lines_nested_deeper_than_any_decoder_takes_are_quarantined_and_fail_no_batch(
    make_dc: MakeDc, store: ObjectStore, registry: IdRegistry, tmp_path: Path
) -> None:
    """A query line and a click line nested ~50,000 deep (Python's recursion limit made
    each raise RecursionError: the reader's batch and the group's failed, on every
    replay alike) are quarantined as invalid JSON; every other click is joined, and the
    deep click is never registered."""
    clock = Clock(START_US + 60 * S)
    a = make_dc("a", tmp_path / "logs", clock)
    deep = b"[" * 50_000 + b"]" * 50_000
    deep_query = b'{"query_id": "%s", "x": %s}' % (query_id(3).encode(), deep)
    report = a.reader.process(
        "q0", log_lines("q.0.log", [query(0), deep_query, query(1), query(2)])
    )
    assert (report.queries, report.quarantined) == (3, 1)
    deep_click = b'{"click_id": "%s", "query_id": "%s", "x": %s}' % (
        click_id(3).encode(), query_id(0).encode(), deep,
    )  # fmt: skip
    lines = log_lines("c.0.log", [click(0, 0), deep_click, click(1, 1), click(2, 2)])
    joined_report = a.joiner.process("000000000000", lines)

    assert joined_report.joined == 3 and joined_report.quarantined == 1
    assert sorted(r["click_id"] for r in rows(store, "joined/")) == [click_id(n) for n in range(3)]
    quarantined = rows(store, "quarantine/dc=a/stream=clicks/")
    assert [(r["offset"], r["reason"]) for r in quarantined] == [(lines[1].offset, "invalid_json")]
    assert "nested deeper" in quarantined[0]["detail"]
    assert registry.lookup([click_id(3)])[click_id(3)] is LookupResult.ABSENT
    assert a.retries.pending() == 0


class PassThrough:
    """An adapter without a schema: every field of the click, as it came (so the
    output's types are whatever the lines hold)."""

    def adapt(self, click: ClickEvent, query: QueryEvent) -> Mapping[str, Any] | None:
        return {f"c_{k}": v for k, v in click.fields.items() if k not in ("click_id", "query_id")}


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**80), max_value=2**80)
    | st.sampled_from([2**63, -(2**63) - 1, 2**64, 10**30])  # just past int64, and far
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3)
    ),
    max_leaves=6,
)
field_names = st.sampled_from(["ad_id", "x", "query"])
#: What billing reads most: an integer of any size (int64 in the output), or anything else.
costs = st.integers(min_value=-(2**70), max_value=2**70) | json_values
click_lines = st.lists(
    st.tuples(
        st.dictionaries(field_names, json_values, max_size=3),
        costs,
        st.sampled_from(["query", "late", "ok"]),  # its query: there, never, or a good line
    ),
    min_size=1,
    max_size=6,
)


@pytest.mark.parametrize("dcs", [("a",), ("a", "b")], ids=["one-dc", "two-dcs"])
@pytest.mark.parametrize("schema", ["AdClickAdapter", "none"])
def test_any_json_click_joins_waits_or_is_quarantined_and_never_fails_a_batch(
    make_dc: MakeDc,
    store: ObjectStore,
    registry: IdRegistry,
    tmp_path: Path,
    schema: str,
    dcs: tuple[str, ...],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Property: whatever JSON a click line holds — integers of any size, floats,
    strings, nested values, with the default adapter and with one that has no schema —
    its batch ends (no error after a commit), and every click is then joined,
    waiting in the retry store, or quarantined; none is registered and missing from
    the output. With two DCs, a group joins the clicks DC a is preferred for before
    the others, in chunks, and writes their rows as one part."""
    clock = Clock(START_US + 60 * S)
    adapter = PassThrough() if schema == "none" else None
    # two DCs: every click is past the affinity's age, so none is held for DC b; a
    # group's clicks go in chunks of two, each checked with the rows before it
    monkeypatch.setattr("photon.join.group._CHUNK", 2)
    affinity = {"dcs": dcs, "affinity_grace_s": 3.0, "affinity_max_age_s": 1.0}
    a = make_dc(
        "a",
        tmp_path / "logs",
        clock,
        adapter=adapter,
        join_groups=2,
        **(affinity if len(dcs) > 1 else {}),
    )
    numbers = count()
    batches = count()

    @settings(
        max_examples=25,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
    @given(click_lines)
    def one_batch(examples: list[tuple[dict[str, Any], Any, str]]) -> None:
        queries, clicks = [], []
        for extra, cost, kind in examples:
            fields = extra | {"cost_micros": cost}
            n = next(numbers)
            if kind != "late":
                queries.append(query(n, **(fields if kind == "query" else {})))
            clicks.append(click(n, n, **fields))
        a.reader.process(f"q{n}", log_lines(f"q.{n}.log", queries))
        lines = log_lines(f"c.{n}.log", clicks)
        report = a.joiner.process(f"{next(batches):012d}", lines)

        joined = {r["click_id"] for r in rows(store, "joined/dc=a/")}
        quarantined = {
            (r["file"], r["offset"]) for r in rows(store, "quarantine/dc=a/stream=clicks/")
        }
        ids = [json.loads(raw)["click_id"] for raw in clicks]
        found = registry.lookup(ids)
        for line, id_ in zip(lines, ids, strict=True):
            settled = (
                id_ in joined,
                (line.file, line.offset) in quarantined,
                a.retries.contains(id_),
            )
            assert sum(settled) == 1, (id_, settled, report)
            registered = found[id_] is LookupResult.PRESENT
            assert registered == (id_ in joined), (id_, report)
        assert not a.retries.unfinished_batches()

    one_batch()
