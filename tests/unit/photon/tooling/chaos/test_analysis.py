"""The chaos report's figures from a timeline: recovery after a fault, catch-up, wasted joins."""

from __future__ import annotations

import json
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from photon.tooling.chaos.analysis import (
    JoinTimes,
    Sample,
    batch_seconds,
    catch_up,
    joined_between,
    json_lines,
    output_again_s,
    writing_at,
)
from photon.tooling.chaos.charts import draw
from photon.tooling.chaos.config import SCHEDULE, ChaosConfig, ChaosReport, scheduled
from photon.tooling.chaos.record import FaultRecord

pytestmark = pytest.mark.unit

MIB = 1 << 20


def outage_timeline() -> list[Sample]:
    """b is down from 10 s to 40 s (its lag grows), back at 40 s, caught up at 48 s."""
    samples = []
    for t in range(0, 62, 2):
        down = 10 <= t <= 40
        lag_b = 2.0 if t < 10 else (t - 8.0 if down else max(2.0, 32.0 - 4 * (t - 40)))
        samples.append(
            Sample(
                t_s=float(t),
                backlog_bytes={"a": 0, "b": int(lag_b * MIB / 4)},
                lag_s={"a": 1.0, "b": lag_b},
            )
        )
    return samples


def outage_joins() -> JoinTimes:
    """Rows written per second: a all along, b until 10 s and again from 46 s."""
    return {
        "a": Counter(dict.fromkeys(range(60), 10)),
        "b": Counter(dict.fromkeys([*range(10), *range(46, 60)], 5)),
    }


def test_output_again_waits_for_every_affected_dc() -> None:
    joins = outage_joins()
    assert output_again_s(joins, ["a"], 20.0) == 0.0
    assert output_again_s(joins, ["b"], 40.0) == 6.0  # b writes again at 46 s
    assert output_again_s(joins, ["a", "b"], 39.5) == 6.5
    assert output_again_s(joins, ["b"], 60.0) is None  # nothing written after


def test_a_dc_whose_clicks_the_other_joined_works_again_when_it_reads_its_logs() -> None:
    joins = {"a": Counter({10: 5, 70: 5}), "b": Counter({10: 5})}
    batches = {"b": [9.0, 75.5, 80.0]}  # b read its logs again at 75.5 s; a had joined them
    assert output_again_s(joins, ["b"], 60.0, batches) == 15.5
    assert output_again_s(joins, ["a", "b"], 60.0, batches) == 15.5
    lines: list[dict[str, Any]] = [
        {"event": "joiner.batch", "dc": "b", "lines": 3, "timestamp": "2026-01-01T00:01:15+00:00"},
        {"event": "joiner.batch", "dc": "b", "lines": 0, "timestamp": "2026-01-01T00:01:16+00:00"},
        {"event": "joiner.batch", "dc": "a", "lines": 9, "timestamp": "2026-01-01T00:01:17+00:00"},
        {"event": "app.start", "dc": "b", "timestamp": "2026-01-01T00:01:18+00:00"},
    ]
    started = datetime(2026, 1, 1, tzinfo=UTC).timestamp()
    assert batch_seconds(lines, "b", started) == [75.0]


def test_joined_between_counts_every_dc_s_rows_written_in_the_span() -> None:
    assert joined_between(outage_joins(), 20.0, 30.0) == 100  # a alone, 10/s


def test_a_fault_affects_only_the_dcs_writing_when_it_struck() -> None:
    assert writing_at(outage_joins(), 30.0) == ["a"]  # b is down
    assert writing_at(outage_joins(), 8.0) == ["a", "b"]


WALL = 1_790_000_000.0  # the wall clock when the stream started


def batch_line(at: float, dc: str, batch: str, seconds: float, **counts: int) -> dict[str, Any]:
    stamp = datetime.fromtimestamp(WALL + at, tz=UTC).isoformat().replace("+00:00", "Z")
    return {"event": "joiner.batch", "dc": dc, "timestamp": stamp, "level": "info",
            "batch": batch, "seconds": seconds, **counts}  # fmt: skip


def catch_up_log() -> list[dict[str, Any]]:
    """b's joiner: one batch before its outage, its first batch back begins at 43.5 s."""
    return [
        batch_line(9, "b", "000000000009", 0.5, lines=500, wasted=50),  # before: not counted
        batch_line(43.5, "b", "retry-000000000003", 0.5, already_joined=3),
        batch_line(
            45, "b", "000000000010", 1.5, lines=9_000, already_joined=8_800, joined=100, wasted=90
        ),
        batch_line(46, "a", "000000000050", 0.5, lines=300, joined=300),  # another DC
        batch_line(47, "b", "000000000011", 1.0, lines=1_000, already_joined=990, wasted=10),
        batch_line(55, "b", "000000000012", 0.5, lines=400, joined=200),  # after it caught up
    ]


def test_catch_up_is_a_restart_then_a_drain_measured_against_real_time() -> None:
    result = catch_up(outage_timeline(), "b", 40.0, 4.0, catch_up_log(), WALL)
    assert result.lag_at_return_s == 32.0
    assert result.backlog_at_return_mib == 8.0
    assert result.caught_up_at_s == 48.0 and result.catch_up_s == 8.0
    assert result.restart_s == 3.5 and result.drain_s == 4.5  # first batch began at 43.5 s
    # 8 s of wall time went through 8 + 32 - 2 = 38 s of event time, all while draining
    assert result.speed_with_restart_x == pytest.approx(38 / 8, abs=0.05)
    assert result.speed_x == pytest.approx(38 / 4.5, abs=0.05)


def test_wasted_joins_are_summed_from_the_batch_reports_of_the_catch_up() -> None:
    result = catch_up(outage_timeline(), "b", 40.0, 4.0, catch_up_log(), WALL)
    assert result.batches["batches"] == 3  # the retry pass, batches 10 and 11
    assert result.batches["lines"] == 10_000 and result.batches["wasted"] == 100
    assert result.wasted_share == 0.01


def test_a_dc_that_never_catches_up_has_no_catch_up_time() -> None:
    result = catch_up(outage_timeline(), "b", 40.0, 1.0, catch_up_log(), WALL)
    assert result.catch_up_s is None and result.speed_x is None and result.batches == {}


def test_json_lines_skip_what_is_not_a_json_object(tmp_path: Path) -> None:
    log = tmp_path / "joiner-b.log"
    log.write_text(
        "Spark's own line, not JSON\n"
        + "\n".join(json.dumps(x) for x in catch_up_log())
        + "\n{broken\n[1, 2]\n"
    )
    assert json_lines(log) == catch_up_log()
    assert json_lines(tmp_path / "none.log") == []


def test_the_config_refuses_an_outage_that_would_not_end_by_half_the_stream() -> None:
    ChaosConfig()  # the defaults: 180 s of an 800 s stream, from 27% to 49.5%
    with pytest.raises(ValueError, match="does not end by 50%"):
        ChaosConfig(queries=800_000, query_rate=1_000, outage_s=190)
    # the longest it allows, as it says it, is allowed (not rounded up past the limit)
    with pytest.raises(ValueError, match=r"at most 4\.6 s") as refused:
        ChaosConfig(queries=8_000, query_rate=400, outage_s=5)
    allowed = float(str(refused.value).split("at most ")[1].split(" s")[0])
    ChaosConfig(queries=8_000, query_rate=400, outage_s=allowed, restart_after_s=2)
    with pytest.raises(ValueError, match="sample_s must be positive"):
        ChaosConfig(sample_s=0)
    every = [name for name, _ in scheduled(ChaosConfig())]
    assert every == sorted(SCHEDULE, key=SCHEDULE.__getitem__) and len(every) == 16
    two = scheduled(ChaosConfig(joiner_kills=2))
    assert [n for n, _ in two if n.startswith("kill")] == ["kill_joiner_1", "kill_joiner_2"]
    assert [n for n, _ in two if not n.startswith("kill")] == [
        n for n in every if not n.startswith("kill")
    ]
    for kills in (0, 5):
        with pytest.raises(ValueError, match="joiner_kills must be 1 to 4"):
            ChaosConfig(joiner_kills=kills)


def test_checks_fail_when_the_catch_up_is_slow_or_a_fault_never_struck() -> None:
    report = ChaosReport(faults=[FaultRecord("kill_joiner", "joiner[a]", ended_s=1.0)])
    report.catch_up = catch_up(outage_timeline(), "b", 40.0, 4.0, [], WALL)
    checks = report.to_dict()["checks"]
    assert checks["no_duplicate_at_any_sample"] and checks["nothing_missing_after_recovery"]
    assert not checks["every_fault_struck"]
    assert not checks["crash_loss_confined_and_restored"]  # no crash lost anything
    assert not checks["catch_up_at_least_5x"]  # no first batch seen: no drain speed
    assert not checks["wasted_joins_at_most_10pct"]  # no batch report read
    assert report.to_dict()["passed"] is False


def test_the_charts_are_pngs(tmp_path: Path) -> None:
    samples = outage_timeline()
    result = catch_up(samples, "b", 40.0, 4.0, catch_up_log(), WALL)
    faults = [("kill_joiner", 5.0)]
    paths = draw(samples, outage_joins(), ["a", "b"], faults, ("b", 10.0, 40.0), result, tmp_path)
    assert [p.name for p in paths] == ["joined_per_dc.png", "catch_up.png"]
    assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and p.stat().st_size > 10_000
               for p in paths)  # fmt: skip
