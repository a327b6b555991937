"""The join's settings objects refuse what no joiner can run with, naming the field."""

from __future__ import annotations

from typing import Any

import pytest

from photon.join.dispatcher import DispatchPolicy
from photon.join.group import GroupParts, JoinPolicy

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    "field",
    [
        "affinity_grace_s",
        "affinity_max_age_s",
        "skip_fresh_logs_s",
        "reader_wait_s",
        "logmap_refresh_s",
    ],
)
def test_a_negative_join_policy_time_is_refused(field: str) -> None:
    with pytest.raises(ValueError, match=f"{field} must not be negative, not -1"):
        options: dict[str, Any] = {field: -1.0}
        JoinPolicy(**options)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"join_groups": 0}, "join_groups must be at least 1, not 0"),
        ({"query_window_us": -1}, "query_window_us must not be negative"),
        ({"retry_pass_quiet_s": -0.5}, "retry_pass_quiet_s must not be negative"),
        ({"max_retries_per_batch": -1}, "max_retries_per_batch must not be negative"),
        ({"arrival_window_s": -1.0}, "arrival_window_s must not be negative"),
    ],
)
def test_a_dispatch_policy_out_of_range_is_refused(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        DispatchPolicy(**options)


@pytest.mark.parametrize("attempt", ["", "a/b"])
def test_an_attempt_that_cannot_be_part_of_a_token_is_refused(attempt: str) -> None:
    with pytest.raises(ValueError, match="must be a non-empty name without '/'"):
        # Refused before any service is used: none is needed here.
        unused: Any = None
        GroupParts("a", attempt, unused, unused, unused, unused, unused)


def test_the_defaults_are_a_valid_policy() -> None:
    assert JoinPolicy().logmap_refresh_s == 1.0
    assert DispatchPolicy().join_groups == 1
