"""`photon bench pipeline`'s table: what a person reads of the scaling phase."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from photon.tooling.bench import pipeline
from photon.tooling.bench.scaling import summarise_rounds
from photon.tooling.cli import common
from photon.tooling.cli.main import app

pytestmark = pytest.mark.unit

runner = CliRunner(env={"COLUMNS": "250", "NO_COLOR": "1"})


def _run(round_: int, cores: int, rate: int, busy: float) -> dict[str, Any]:
    return {
        "round": round_,
        "cores": cores,
        "joined_per_s": rate,
        "cpu_s_per_1000_joined": 0.08,
        "driver_cpu_s_per_1000_joined": 0.003,
        "driver_cpu_share": 0.04,
        "serial_share": 0.05,
        "tasks_running": 0.9 * cores,
        "machine_cores_busy": busy,
        "services_cores_busy": 0.6,
    }


def test_the_scaling_table_gives_each_median_with_the_rounds_values(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PHOTON_LOGS_ROOT", str(tmp_path / "logs"))
    monkeypatch.setenv("PHOTON_STACK__STATE_DIR", str(tmp_path / "state"))
    # The console is made when the CLI is first imported, perhaps by another test and
    # without COLUMNS: wide enough here that no label wraps.
    monkeypatch.setattr(common.out, "width", 250)
    pairs = [
        (_run(1, 1, 10_000, 1.4), _run(1, 2, 12_500, 1.8)),
        (_run(2, 1, 7_000, 1.4), _run(2, 2, 9_100, 1.8)),
        (_run(3, 1, 12_000, 1.25), _run(3, 2, 13_200, 1.8)),
    ]
    asked: list[int] = []

    def run_scaling(
        workdir: Path, queries: int, step: object = None, rounds: int = 4
    ) -> dict[str, Any]:
        asked.append(rounds)
        return {
            "rounds": rounds,
            "runs": [run for pair in pairs for run in pair],
            **summarise_rounds(pairs, 2),
            "machine_cores": 2,
            "amdahl_speed_up": {"4": 3.5, "8": 5.9, "32": 12.5},
        }

    monkeypatch.setattr(pipeline, "run_scaling", run_scaling)
    result = runner.invoke(app, ["bench", "pipeline", "--scaling-only", "--scaling-rounds", "3"])
    assert result.exit_code == 0, result.output
    assert asked == [3]
    lines = result.output.splitlines()

    def line_of(label: str) -> str:
        return next(line for line in lines if label in line)

    assert "10000 (10000, 7000, 12000)" in line_of("1 core(s): joined clicks/s")
    assert "12500 (12500, 9100, 13200)" in line_of("2 core(s): joined clicks/s")
    assert "1.25 (1.25, 1.3, 1.1)" in line_of("speed-up 1 -> 2 cores")
    share = line_of("share of that ceiling")
    assert "0.88 (0.88, 0.91, 0.69)" in share
    assert share.split("│")[-2].strip() == "False"  # 0.88 < 0.9


@pytest.mark.parametrize("rounds", ["0", "17"])
def test_the_rounds_are_checked_before_anything_runs(rounds: str) -> None:
    result = runner.invoke(app, ["bench", "pipeline", "--scaling-only", "--scaling-rounds", rounds])
    assert result.exit_code == 2
    assert "scaling-rounds" in result.output


def test_without_the_option_the_scaling_phase_runs_the_benchs_rounds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    asked: list[int] = []

    def run_scaling(workdir: Path, queries: int, step: object, rounds: int) -> dict[str, Any]:
        asked.append(rounds)
        raise SystemExit(0)  # what runs after is the table, tested above

    monkeypatch.setattr(pipeline, "run_scaling", run_scaling)
    runner.invoke(app, ["bench", "pipeline", "--scaling-only"])
    assert asked == [pipeline.SCALING_ROUNDS] == [8]
