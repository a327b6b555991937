from __future__ import annotations

from collections import Counter

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


@pytest.mark.parametrize(("queries", "runs"), [(999, 3), (10_000, 0), (10_000, 21)])
def test_bad_sizes_are_refused_before_anything_runs(queries: int, runs: int) -> None:
    with pytest.raises(ValueError, match=r"^(queries|runs) must"):
        compare.run(queries=queries, runs=runs)
