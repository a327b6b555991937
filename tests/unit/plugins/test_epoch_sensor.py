"""How the reshard's epoch sensor waits: a start seconds away is slept in the task (a
trigger due at once races Airflow's scheduler), a start far away is deferred."""

from __future__ import annotations

import time

import pytest
from airflow.exceptions import TaskDeferred

from plugins.sensors.epoch import INLINE_WAIT_S, EpochStartedSensor

pytestmark = pytest.mark.unit


def sensor(start_in_s: float) -> EpochStartedSensor:
    start_us = int((time.time() + start_in_s) * 1_000_000)
    return EpochStartedSensor(task_id="wait_for_epoch_start", start_us=start_us)


def test_a_start_a_second_away_is_waited_for_in_the_task_not_deferred() -> None:
    waiting = sensor(1.0)
    waiting.execute({})  # no TaskDeferred
    assert time.time_ns() // 1000 >= int(waiting.start_us)


def test_a_start_beyond_the_inline_wait_is_deferred_to_the_triggerer() -> None:
    with pytest.raises(TaskDeferred) as deferred:
        sensor(INLINE_WAIT_S + 600).execute({})
    assert deferred.value.method_name == "execute_complete"


def test_a_dry_run_or_a_start_already_past_returns_at_once() -> None:
    sensor(-5).execute({})
    EpochStartedSensor(task_id="wait_for_epoch_start", start_us=0).execute({})
