"""Pure parts of the shard groups: object names, and the replay's filter of written rows."""

from __future__ import annotations

import pickle

import pytest

from photon.events.records import decode_click
from photon.join.group import JoinClick, _unwritten, part_name
from photon.join.retry import PendingClick

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
