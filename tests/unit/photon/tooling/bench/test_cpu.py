"""The scaling figure's ceiling: busy cores read from /proc text and integrated over batches."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from photon.tooling.bench.cpu import (
    CpuSample,
    CpuSampler,
    ceiling,
    cores_busy,
    machine_busy_s,
    process_busy_s,
)
from photon.tooling.bench.pipeline import batch_window

pytestmark = pytest.mark.unit

_PROC_STAT = "cpu  1000 50 300 9000 70 5 15 10 0 0\ncpu0 500 25 150 4500 35 3 7 5 0 0\nintr 12345\n"


def test_machine_busy_time_counts_every_state_but_idle_and_io_wait() -> None:
    # user + nice + system + irq + softirq + steal, in ticks of 1/100 s
    assert machine_busy_s(_PROC_STAT, 100) == pytest.approx((1000 + 50 + 300 + 5 + 15 + 10) / 100)


def test_a_text_that_is_not_proc_stat_is_refused() -> None:
    with pytest.raises(ValueError, match="not /proc/stat"):
        machine_busy_s("intr 1 2 3\n", 100)


def test_a_process_busy_time_is_read_past_a_name_with_spaces_and_parentheses() -> None:
    stat = "4242 (java (zk) node) S 1 2 3 4 5 6 7 8 9 10 250 150 0 0 20 0 1"
    assert process_busy_s(stat, 100) == pytest.approx(4.0)  # utime 250 + stime 150 ticks


def _steady(machine_rate: float, services_rate: float, until: float) -> list[CpuSample]:
    """Samples every 0.5 s of CPU time growing at fixed rates (cores busy)."""
    times = [n * 0.5 for n in range(int(until / 0.5) + 1)]
    return [CpuSample(t, machine_rate * t, services_rate * t) for t in times]


def test_busy_cores_are_averaged_over_the_windows_only() -> None:
    samples = _steady(1.5, 0.25, 10.0)
    # A burst between 4.2 and 4.7 s (between samples) that the windows leave out.
    samples = [
        CpuSample(s.at, s.machine_s + (3.0 if s.at >= 5.0 else 0.0), s.services_s) for s in samples
    ]
    busy = cores_busy(samples, [(1.2, 2.7), (6.1, 9.3)])
    assert busy is not None
    assert busy.machine == pytest.approx(1.5)
    assert busy.services == pytest.approx(0.25)
    assert busy.app == pytest.approx(1.25)
    assert busy.to_dict() == {
        "machine_cores_busy": 1.5,
        "services_cores_busy": 0.25,
        "driver_cores_busy": 0.0,
    }


def test_the_driver_watched_from_its_start_counts_apart_from_the_services(tmp_path: Path) -> None:
    sampler = CpuSampler([11], proc=tmp_path)  # zk1
    _fake_proc(tmp_path, 500, {11: 100})
    before = sampler.sample()
    sampler.watch_driver(40)  # the app's driver, launched after the sampler
    _fake_proc(tmp_path, 600, {11: 110, 40: 20})
    at_start = sampler.sample()
    _fake_proc(tmp_path, 900, {11: 130, 40: 50})
    later = sampler.sample()
    assert before is not None and at_start is not None and later is not None
    ticks = os.sysconf("SC_CLK_TCK")
    assert before.driver_s == 0.0 and at_start.driver_s == pytest.approx(20 / ticks)
    assert later.services_s - at_start.services_s == pytest.approx(20 / ticks)
    assert later.driver_s - at_start.driver_s == pytest.approx(30 / ticks)
    busy = cores_busy(
        [CpuSample(0.0, at_start.machine_s, at_start.services_s, at_start.driver_s),
         CpuSample(2.0, later.machine_s, later.services_s, later.driver_s)],
        [(0.0, 2.0)],
    )  # fmt: skip
    assert busy is not None
    assert busy.driver == pytest.approx(15 / ticks)  # 30 ticks over 2 s
    assert busy.app == pytest.approx(140 / ticks)  # the machine's 300 less the services' 20


def test_windows_the_samples_do_not_cover_give_no_figure() -> None:
    samples = _steady(1.0, 0.1, 5.0)
    assert cores_busy(samples, [(1.0, 6.0)]) is None
    assert cores_busy(samples, [(-1.0, 2.0)]) is None
    assert cores_busy(samples, []) is None
    assert cores_busy(samples[:1], [(0.0, 0.0)]) is None


@pytest.mark.parametrize(
    ("cores", "busy", "most"),
    [(2, 1.25, 1.6), (2, 1.0, 2.0), (8, 1.3, 2.0), (2, 2.0, 1.0)],
)
def test_the_ceiling_is_the_cores_over_what_one_executor_core_kept_busy_and_twice_at_most(
    cores: int, busy: float, most: float
) -> None:
    assert ceiling(cores, busy) == pytest.approx(most)


def test_a_ceiling_of_nothing_busy_is_refused() -> None:
    with pytest.raises(ValueError, match="positive"):
        ceiling(2, 0.0)


def test_a_batch_window_ends_at_its_log_line_and_lasts_its_seconds() -> None:
    start, end = batch_window({"timestamp": "2026-11-26T14:04:59.854128Z", "seconds": 0.987})
    assert end == pytest.approx(1_795_701_899.854128)
    assert end - start == pytest.approx(0.987)


def _fake_proc(root: Path, machine_ticks: int, pids: dict[int, int]) -> None:
    (root / "stat").write_text(f"cpu  {machine_ticks} 0 0 100 0 0 0 0 0 0\n")
    for pid, ticks in pids.items():
        (root / str(pid)).mkdir(exist_ok=True)
        (root / str(pid) / "stat").write_text(f"{pid} (zk) S {'0 ' * 10}{ticks} 0 0 0")


def test_a_service_process_that_is_gone_keeps_what_it_had_spent(tmp_path: Path) -> None:
    sampler = CpuSampler([11, 12], proc=tmp_path)  # zk1, redis
    _fake_proc(tmp_path, 500, {11: 100, 12: 30})
    first = sampler.sample()
    (tmp_path / "12" / "stat").unlink()  # redis is gone
    _fake_proc(tmp_path, 700, {11: 150})
    second = sampler.sample()
    assert first is not None and second is not None
    ticks = os.sysconf("SC_CLK_TCK")
    assert first.services_s == pytest.approx(130 / ticks)
    assert second.services_s == pytest.approx(180 / ticks)  # redis's 30 stay counted
    assert second.machine_s - first.machine_s == pytest.approx(200 / ticks)


def test_without_proc_the_sampler_records_nothing(tmp_path: Path) -> None:
    with CpuSampler([], period_s=0.01, proc=tmp_path / "none") as sampler:
        pass
    assert sampler.samples == []
