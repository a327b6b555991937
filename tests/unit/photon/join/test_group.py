"""Pure parts of the shard groups: object names, and the replay's filter of written rows."""

from __future__ import annotations

import pytest

from photon.join.group import _unwritten, part_name

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
