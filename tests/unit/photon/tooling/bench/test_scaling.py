"""The scale-out figures of the joiner's batches: serial share, Amdahl, CPU per click."""

from __future__ import annotations

import pytest

from photon.tooling.bench.scaling import (
    BatchTimes,
    amdahl,
    covered,
    per_thousand,
    serial_share,
    span,
    tasks_running,
)

pytestmark = pytest.mark.unit


def test_the_serial_share_counts_the_gaps_between_batches_as_well_as_their_planning() -> None:
    # 10 s from the first start to the last end; tasks ran 3 + 4 s of it. The 1 s
    # between the batches (reading and planning the next) is serial too.
    batches = [BatchTimes(100.0, 104.0, 3.0), BatchTimes(105.0, 110.0, 4.0)]
    assert span(batches) == (100.0, 110.0)
    assert serial_share(batches) == pytest.approx(0.3)


def test_no_batch_or_a_span_of_no_time_gives_no_serial_share() -> None:
    assert span([]) is None
    assert serial_share([]) is None
    assert serial_share([BatchTimes(5.0, 5.0, 0.0)]) is None


def test_a_slowest_task_reported_longer_than_its_batch_cannot_make_the_share_negative() -> None:
    assert serial_share([BatchTimes(0.0, 1.0, 1.2)]) == 0.0


@pytest.mark.parametrize(
    ("serial", "cores", "speed_up"),
    [
        (0.0, 8, 8.0),
        (1.0, 8, 1.0),
        (0.1, 4, 1 / (0.1 + 0.9 / 4)),
        (0.13, 32, 1 / (0.13 + 0.87 / 32)),
    ],
)
def test_amdahl_bounds_the_speed_up_by_the_serial_share(
    serial: float, cores: int, speed_up: float
) -> None:
    assert amdahl(serial, cores) == pytest.approx(speed_up)
    assert amdahl(serial, 1) == pytest.approx(1.0)


@pytest.mark.parametrize(("serial", "cores"), [(-0.1, 2), (1.5, 2), (0.1, 0)])
def test_amdahl_refuses_what_is_not_a_share_or_a_core_count(serial: float, cores: int) -> None:
    with pytest.raises(ValueError):
        amdahl(serial, cores)


def test_cpu_is_per_thousand_joined_clicks_and_none_without_any() -> None:
    assert per_thousand(12.0, 4_000) == pytest.approx(3.0)
    assert per_thousand(12.0, 0) is None


def test_the_serial_share_counts_overlapping_task_time_once() -> None:
    """Batches whose tasks ran at once (the next batch's reads beside the last one's
    join) cover that time once: the share is of the time no task ran at all."""
    batches = [
        BatchTimes(0.0, 1.0, 0.8, ((0.1, 0.9),)),
        BatchTimes(0.8, 2.0, 0.9, ((0.7, 1.0), (1.1, 1.9))),
    ]
    # Covered: 0.1-1.0 and 1.1-1.9, 1.7 of the 2.0 s span.
    assert serial_share(batches) == pytest.approx(0.15)
    assert covered([(0.1, 0.9), (0.7, 1.0), (1.1, 1.9)], (0.0, 2.0)) == pytest.approx(1.7)
    assert covered([(-1.0, 0.5), (1.5, 3.0)], (0.0, 2.0)) == pytest.approx(1.0)  # clipped


def test_without_task_intervals_the_serial_share_adds_up_the_slowest_tasks() -> None:
    batches = [BatchTimes(0.0, 1.0, 0.8, ((0.1, 0.9),)), BatchTimes(1.0, 2.0, 0.5)]
    assert serial_share(batches) == pytest.approx(1 - 1.3 / 2.0)


def test_tasks_running_is_the_tasks_own_work_over_the_span_each_task_counted() -> None:
    """Two tasks a batch: both ran at once for part of each, one alone for the rest."""
    batches = [
        BatchTimes(0.0, 1.0, 0.8, tasks_busy=(((0.1, 0.9),), ((0.1, 0.5),))),
        BatchTimes(1.0, 2.0, 0.9, tasks_busy=(((1.0, 1.9),), ((1.0, 1.2), (1.4, 1.9)))),
    ]
    # Task time in the 2.0 s span: 0.8 + 0.4 + 0.9 + 0.7 = 2.8 s.
    assert tasks_running(batches) == pytest.approx(1.4)


def test_tasks_running_is_none_without_each_tasks_intervals_or_a_span() -> None:
    with_tasks = BatchTimes(0.0, 1.0, 0.5, ((0.0, 0.5),), (((0.0, 0.5),),))
    without = BatchTimes(1.0, 2.0, 0.5, ((1.0, 1.5),))
    assert tasks_running([with_tasks]) == pytest.approx(0.5)
    assert tasks_running([with_tasks, without]) is None  # an older joiner's line among them
    assert tasks_running([]) is None
