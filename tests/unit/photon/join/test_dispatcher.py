"""The dispatcher's pure helpers."""

from __future__ import annotations

import pytest

from photon.join.dispatcher import merged_intervals

pytestmark = pytest.mark.unit


def test_a_batch_s_task_intervals_merge_where_they_touch_or_overlap() -> None:
    spans = [(2.0, 3.0), (0.0, 1.0), (0.5, 1.5), (1.5, 1.75), (4.00001, 4.5)]
    assert merged_intervals(spans) == [(0.0, 1.75), (2.0, 3.0), (4.0, 4.5)]


def test_no_task_no_interval() -> None:
    assert merged_intervals([]) == []
