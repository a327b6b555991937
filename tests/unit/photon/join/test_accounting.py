"""The exactly-once count the audit and verification share."""

from __future__ import annotations

import pytest

from photon.join.accounting import count_joins

pytestmark = pytest.mark.unit


def row(click: str, query: str, dc: str = "a") -> dict[str, str]:
    return {"click_id": click, "query_id": query, "dc": dc}


EXPECTED = {"c1": "q1", "c2": "q2", "c3": "q3", "c4": "q4"}


def test_every_expected_click_joined_once_with_its_query_is_exactly_once() -> None:
    rows = [row(c, q, dc) for (c, q), dc in zip(EXPECTED.items(), "abab", strict=True)]
    count = count_joins(rows, EXPECTED)
    assert count.exactly_once
    assert (count.joined, count.output_rows, count.joined_by_dc) == (4, 4, {"a": 2, "b": 2})


def test_each_way_to_fail_is_counted_on_its_own() -> None:
    rows = [
        row("c1", "q1"), row("c1", "q1", "b"),  # joined by both DCs
        row("c2", "q9"),  # the wrong query
        row("c7", "q7"),  # not a click that was expected
    ]  # fmt: skip
    count = count_joins(rows, EXPECTED)
    assert not count.exactly_once
    assert (count.duplicates, count.duplicated_ids) == (1, ["c1"])
    assert (count.wrong_query, count.unexpected) == (1, 1)
    assert (count.missing, count.missing_ids) == (2, ["c3", "c4"])


def test_a_click_settled_otherwise_is_not_missing() -> None:
    count = count_joins([row("c1", "q1"), row("c2", "q2")], EXPECTED, settled={"c3", "c4"})
    assert count.missing == 0 and count.exactly_once
