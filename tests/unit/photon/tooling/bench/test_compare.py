from __future__ import annotations

from collections import Counter
from types import SimpleNamespace

import pytest

from photon.tooling.bench import compare
from photon.tooling.gen.model import DcManifest, FileStats, GenConfig, Manifest

pytestmark = pytest.mark.unit


def manifest() -> Manifest:
    files = {"queries": {"q.log": FileStats(lines=70)}, "clicks": {"c.log": FileStats(lines=30)}}
    return Manifest(
        config=GenConfig(dcs=["a", "b"], start_us=1_767_225_600_000_000),
        queries=60,
        lost_queries=0,
        clicks=25,
        expected_joins={f"c{n}": f"q{n}" for n in range(20)},
        never_joinable={"c99": "q99"},
        dcs={"a": DcManifest(files=files), "b": DcManifest(files=files)},
    )


def test_input_lines_count_every_line_of_every_dc() -> None:
    assert compare.input_lines(manifest()) == 200


def test_figures_score_completeness_duplicates_across_dcs_and_unexpected_joins() -> None:
    ids = Counter({f"c{n}": 2 for n in range(10)}) + Counter({"c10": 1, "c99": 1})
    figures = compare._figures(4.0, ids, manifest())
    assert figures.input_events_per_s == 50  # 200 lines in 4 s
    assert figures.completeness == 0.55  # 11 of the 20 joinable
    assert figures.duplicates_across_dcs == 10
    assert figures.unexpected == 1 and figures.joined_distinct == 12
    assert figures.start_up_s is None and figures.after_first_output_s is None


def test_start_up_is_launch_to_first_output_and_the_rest_what_came_after() -> None:
    figures = compare._figures(6.0, Counter(), manifest(), output_s=[5.2, 5.9, 6.0])
    assert figures.start_up_s == 5.2
    assert figures.after_first_output_s == 0.8  # no rate of so short a stretch: times only


def test_a_median_over_runs_is_none_when_a_run_had_no_such_figure() -> None:
    assert compare._median([3, 1, 2]) == 2
    assert compare._median([3, None, 2]) is None


@pytest.mark.parametrize(
    ("queries", "runs", "warm_up_runs"),
    [(999, 3, 1), (10_000, 0, 1), (10_000, 21, 1), (10_000, 3, -1), (10_000, 3, 6)],
)
def test_bad_sizes_are_refused_before_anything_runs(
    queries: int, runs: int, warm_up_runs: int
) -> None:
    with pytest.raises(ValueError, match=r"^(queries|runs|warm_up_runs) must"):
        compare.run(queries=queries, runs=runs, warm_up_runs=warm_up_runs)


def test_warm_up_runs_come_first_on_workloads_of_their_own_and_stay_out_of_the_medians(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The systems stand in as figures by seed (what the two runners do is the
    integration tests' and the benchmark's): a warm-up run twice as slow as every
    measured one must not move the medians."""
    calls: list[tuple[str, int]] = []

    def figures(system: str, cfg: GenConfig) -> compare.SystemFigures:
        calls.append((system, cfg.seed))
        seconds = 20.0 if cfg.seed >= 14 else 10.0  # the warm-up's seeds follow the runs'
        return compare._figures(seconds, Counter({f"c{n}": 1 for n in range(20)}), manifest())

    monkeypatch.setattr(compare, "load_settings", lambda: SimpleNamespace(dcs=["a", "b"]))
    monkeypatch.setattr(compare, "_photon", lambda _dir, cfg: figures("photon", cfg))
    monkeypatch.setattr(
        compare, "_native", lambda _dir, cfg: (figures("spark_native", cfg), manifest())
    )
    data = compare.run(queries=10_000, runs=3, seed=11, warm_up_runs=2)
    assert [seed for _, seed in calls] == [14, 14, 15, 15, 11, 11, 12, 12, 13, 13]
    # Each kind of run alternates which system goes first.
    firsts = [system for system, _ in calls[::2]]
    assert firsts == ["photon", "spark_native", "photon", "spark_native", "photon"]
    assert len(data["warm_up"]) == 2 and len(data["runs"]) == 3
    assert data["warm_up"][0]["photon"]["seconds"] == 20.0
    assert data["median"]["photon"]["seconds"] == 10.0
    assert data["workload"]["warm_up_runs"] == 2
    assert data["photon_vs_native_events_per_s"] == 1.0
