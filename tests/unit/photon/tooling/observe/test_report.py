"""The report's tables from recorded lines: intervals, counters, restarts, shards."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from photon.tooling.observe.recorder import read_records
from photon.tooling.observe.report import ReportError, build_tables, write

pytestmark = pytest.mark.unit


def record(t: float, joined: float, ids: float, txns: float, lag_s: float, shards: list[int],
           buckets: dict[str, float]) -> dict[str, Any]:  # fmt: skip
    samples: list[list[Any]] = [
        ["photon_clicks_total", {"dc": "a", "outcome": "joined"}, joined],
        ["photon_clicks_total", {"dc": "a", "outcome": "wasted"}, 1.0],
        ["photon_cache_lookups_total", {"dc": "a", "result": "hit"}, joined],
        ["photon_registry_register_ids_total", {"dc": "a"}, ids],
        ["photon_registry_transactions_total", {"dc": "a"}, txns],
    ]
    samples += [
        ["photon_join_latency_seconds_bucket", {"dc": "a", "le": le}, n]
        for le, n in buckets.items()
    ]
    lag = {"clicks": {"bytes": 10, "files": 1, "lag_s": lag_s}}
    return {
        "t": t,
        "apps": {"a/joiner": samples},
        "status": {
            "dcs": {"a": {"input_lag": lag}},
            "registry": {
                "epochs": [{"start_us": 0, "shards": len(shards)}],
                "shards": [{"shard": i, "ids": n} for i, n in enumerate(shards)],
            },
        },
    }


def records() -> list[dict[str, Any]]:
    return [
        record(100.0, 0, 0, 0, 5.0, [0, 0], {"1.0": 0, "2.0": 0, "+Inf": 0}),
        record(102.0, 40, 40, 2, 3.0, [10, 20], {"1.0": 10, "2.0": 40, "+Inf": 40}),
        # the joiner restarted: its counters start again from 0
        record(104.0, 6, 6, 1, 1.0, [13, 23], {"1.0": 6, "2.0": 6, "+Inf": 6}),
    ]


def test_each_interval_is_the_difference_of_two_lines_and_a_restart_counts_from_zero() -> None:
    tables = {t.figure: t for t in build_tables(records(), ["a"])}
    assert list(tables) == [7, 8, 9, 10, 11, 12, 13]
    assert tables[9].rows == [[2.0, 20.0, 40], [4.0, 3.0, 6]]
    assert tables[10].rows == [[2.0, 20.0, 1.0, 20.0, 40, 2], [4.0, 3.0, 0.5, 6.0, 6, 1]]
    assert tables[8].rows[0] == [2.0, 40, 0, 0]
    # 40 latencies in the first interval: 10 under 1 s, 30 in (1, 2]: the p90 (rank 36) is
    # 1 + (36 - 10) / 30 of the way through (1, 2]
    assert tables[7].rows[0][1] == pytest.approx(1 + 26 / 30, abs=0.01)
    assert tables[12].rows[0] == [2.0, 0, 0.0]  # the wasted counter did not move
    assert tables[13].rows == [[2.0, 3.0, 10], [4.0, 1.0, 10]]
    assert tables[11].rows == [[0, 0, 13], [1, 0, 23]]
    assert "at start 2; at end 2" in tables[11].note


def test_a_run_of_one_line_cannot_be_reported() -> None:
    with pytest.raises(ReportError, match="at least two"):
        build_tables(records()[:1], ["a"])


def test_the_page_has_every_chart_and_its_numbers(tmp_path: Path) -> None:
    page = write(records(), ["a"], tmp_path, source="unit")
    text = page.read_text()
    for figure in (7, 8, 9, 10, 11, 12, 13):
        png = tmp_path / f"fig{figure}.png"
        assert png.read_bytes()[:4] == b"\x89PNG"
        assert f"fig{figure}.png" in text and f"Fig. {figure}:" in text
    assert (tmp_path / "report.json").is_file()


def test_a_torn_last_line_is_left_out(tmp_path: Path) -> None:
    (tmp_path / "metrics.jsonl").write_text('{"t": 1, "apps": {}}\n{"t": 2, "ap')
    assert read_records(tmp_path) == [{"t": 1, "apps": {}}]


AUDIT = {
    "expected_joins": 902, "joined": 902, "duplicates": 0, "missing": 0, "unexpected": 0,
    "wrong_query": 0, "never_joinable": 28, "joined_by_dc": {"a": 500, "b": 402},
    "unjoinable_by_dc": {"a": 28, "b": 28}, "quarantined_by_dc": {"a": 3, "b": 2},
    "exactly_once": True,
}  # fmt: skip


@pytest.mark.parametrize(
    ("audit", "verdict"),
    [
        (AUDIT, "Verdict: exactly once"),
        (AUDIT | {"missing": 9, "exactly_once": False}, "Verdict: NOT exactly once"),
        (None, "No audit for this run"),
    ],
)
def test_the_page_opens_with_its_verdict_and_audit(
    tmp_path: Path, audit: dict[str, Any] | None, verdict: str
) -> None:
    text = write(records(), ["a"], tmp_path, source="unit", audit=audit).read_text()
    assert verdict in text
    assert text.index(verdict) < text.index("<h2>")  # before any figure
    if audit is not None:
        assert text.index("joined, once each") < text.index("<h2>")
        assert f"<td>{audit['missing']}</td>" in text


def test_every_chart_has_labelled_axes_wall_clock_time_and_readable_legends() -> None:
    from photon.tooling.observe.report import figures, legend_name

    assert legend_name("p90_s_a", ["a", "b"]) == "DC a"
    assert legend_name("wasted_share_pct", ["a"]) == "wasted share of joins (%)"
    tables = build_tables(records(), ["a"])
    for table, fig in zip(tables, figures(tables, ["a"], started_at=1_800_000_000), strict=True):
        ax = fig.axes[0]
        assert ax.get_xlabel() and ax.get_ylabel(), table.figure
        legend = [t.get_text() for t in ax.get_legend().get_texts()]
        assert legend and not any("_" in name for name in legend), (table.figure, legend)
        if table.figure != 11:
            assert ax.get_xlabel() == "time (UTC)"
            fig.canvas.draw()  # tick labels are made when drawn
            ticks = [t.get_text() for t in ax.get_xticklabels()]
            assert any(":" in tick for tick in ticks), ticks  # HH:MM:SS
    twelve = next(f for t, f in zip(tables, figures(tables, ["a"]), strict=True) if t.figure == 12)
    assert twelve.axes[1].get_ylabel() == "share of joins (%)"  # a share on its own axis


def test_the_start_up_and_old_logs_are_marked() -> None:
    from photon.tooling.observe.report import periods

    lines = records()
    lines[1]["apps"]["a/joiner"][0][2] = 0  # nothing joined in the first interval
    lines[2]["status"]["dcs"]["a"]["input_lag"]["clicks"]["lag_s"] = 10_370.0  # stale logs
    marks = periods(build_tables(lines, ["a"]))
    assert marks.startup == (0.0, 4.0)
    assert marks.stale_logs == [(2.0, 4.0)]
