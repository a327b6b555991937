"""The scale-out figures of the joiner's batches: serial share, Amdahl, CPU per click."""

from __future__ import annotations

import pytest

from photon.apps import JOINER
from photon.settings import load_settings
from photon.tooling.bench.pipeline import joiner_alone_env
from photon.tooling.bench.scaling import (
    SCALING_BATCH_BYTES,
    SCALING_GROUPS,
    BatchTimes,
    amdahl,
    covered,
    per_thousand,
    round_order,
    serial_share,
    span,
    summarise_rounds,
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


def _run(rate: int, busy: float, serial: float = 0.05) -> dict[str, float | int | None]:
    return {
        "joined_per_s": rate,
        "cpu_s_per_1000_joined": 0.08,
        "driver_cpu_s_per_1000_joined": 0.003,
        "driver_cpu_share": 0.04,
        "serial_share": serial,
        "tasks_running": 1.5,
        "machine_cores_busy": busy,
        "services_cores_busy": 0.6,
    }


def test_every_scaling_run_joins_the_same_batches_in_the_same_groups(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The run's core count is not among its settings: one core and two do the same work.
    for name, value in joiner_alone_env().items():
        monkeypatch.setenv(name, value)
    pipeline = load_settings().pipeline
    assert pipeline.batch_bytes(JOINER) == SCALING_BATCH_BYTES == 2 << 20
    assert pipeline.join_groups == SCALING_GROUPS == 2
    assert load_settings().dcs == ["a"]


def test_each_core_count_goes_first_in_two_of_every_four_rounds() -> None:
    assert [round_order(n) for n in range(8)] == [(1, 2), (2, 1), (2, 1), (1, 2)] * 2
    with pytest.raises(ValueError, match="from 0"):
        round_order(-1)


def test_the_speed_up_is_the_median_of_each_round_s_own_ratio_not_a_ratio_of_medians() -> None:
    # The machine slowed down in the second round and sped up in the third: each round's
    # two runs saw the same machine, so each round's ratio is what the join gives.
    rounds = [
        (_run(10_000, 1.4), _run(12_500, 1.8)),  # 1.25 of a 1.43 ceiling
        (_run(7_000, 1.4), _run(9_100, 1.8)),  # 1.30
        (_run(12_000, 1.25), _run(13_200, 1.8)),  # 1.10 of a 1.60 ceiling
    ]
    summary = summarise_rounds(rounds, machine_cores=2)
    assert summary["speed_up_by_round"] == [1.25, 1.3, 1.1]
    assert summary["machine_ceiling_by_round"] == [1.43, 1.43, 1.6]
    assert summary["share_of_ceiling_by_round"] == [0.88, 0.91, 0.69]
    assert summary["speed_up_1_to_2_cores"] == 1.25
    assert summary["speed_up_share_of_ceiling"] == 0.88  # 1.25 / (2 / 1.4)
    assert summary["machine_ceiling"] == 1.43
    # A ratio of the medians would say 12,500 / 10,000 too, but of runs from other rounds.
    assert summary["at_1_core"]["joined_per_s"] == 10_000
    assert summary["at_2_cores"]["joined_per_s"] == 12_500
    assert summary["at_2_cores"]["serial_share"] == 0.05


def test_a_round_that_joined_nothing_leaves_no_speed_up_to_report() -> None:
    rounds = [(_run(10_000, 1.4), _run(12_500, 1.8)), (_run(0, 1.4), _run(12_000, 1.8))]
    summary = summarise_rounds(rounds, machine_cores=2)
    assert summary["speed_up_by_round"] == [1.25, None]
    assert summary["speed_up_1_to_2_cores"] is None
    assert summary["speed_up_share_of_ceiling"] is None
    with pytest.raises(ValueError, match="at least one round"):
        summarise_rounds([], machine_cores=2)
