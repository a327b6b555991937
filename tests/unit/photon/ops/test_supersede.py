"""Which unjoinable records stand: the newest record of a click against recovery's marks."""

from __future__ import annotations

import pytest

from photon.ops.supersede import standing

pytestmark = pytest.mark.unit


def record(click: str, dc: str, decided_at_us: int) -> dict[str, object]:
    return {"click_id": click, "query_id": f"q-{click}", "dc": dc,
            "decided_at_us": decided_at_us, "raw": "{}", "reason": "query_not_found"}  # fmt: skip


def mark(click: str, at_us: int) -> dict[str, object]:
    return {"click_id": click, "superseded_at_us": at_us, "run": "r", "action": "reinjected"}


def test_a_mark_supersedes_every_record_no_newer_than_itself() -> None:
    state = standing(
        [record("c1", "a", 10), record("c1", "b", 20), record("c2", "a", 10)],
        [mark("c1", 20)],
    )
    assert state.superseded == {"c1"}
    assert set(state.current) == {"c2"}


def test_a_click_given_up_on_again_after_its_mark_stands_again() -> None:
    state = standing([record("c1", "a", 10), record("c1", "b", 30)], [mark("c1", 20)])
    assert state.superseded == set()
    assert state.current["c1"].dc == "b" and state.current["c1"].decided_at_us == 30


def test_the_newest_of_several_marks_counts() -> None:
    state = standing([record("c1", "a", 25)], [mark("c1", 20), mark("c1", 30), mark("c1", 5)])
    assert state.superseded == {"c1"} and not state.current
