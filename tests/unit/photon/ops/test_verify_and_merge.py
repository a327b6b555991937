"""The pure parts of verification (completeness, the report) and of compaction (the merge)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from photon.join.logmap import MapEntry
from photon.ops.compaction import merge, query_file_exists, sample_entries
from photon.ops.verify import (
    SETTLED_OUTCOMES,
    Completeness,
    ExpectationOutcome,
    Outputs,
    VerifyReport,
    click_outcomes,
    completeness,
    joined_frame,
    render_html,
    verdict_frame,
)

pytestmark = pytest.mark.unit

T = 1_767_225_600_000_000


def cid(n: int) -> str:
    return f"10.0.0.1:1:{T + n}"


def qid(n: int) -> str:
    return f"10.0.9.1:1:{T - 1_000_000 + n}"


def row(n: int, dc: str = "a", query: int | None = None) -> dict[str, object]:
    return {"click_id": cid(n), "query_id": qid(n if query is None else query), "dc": dc,
            "joined_at_us": T + n + 2_000_000}  # fmt: skip


def test_completeness_counts_each_kind_of_click_once() -> None:
    inputs = {cid(n): qid(n) for n in range(10)}
    outputs = Outputs(
        joined=[row(0), row(1), row(1, dc="b"), row(2, query=7), row(42)],
        unjoinable={cid(3)},
        too_old={cid(4)},
        joined_in={cid(1): ["joined/dc=b/y/3.parquet", "joined/dc=a/x/1.parquet"]},
    )
    registered = {cid(0): "", cid(1): "a/x/1", cid(5): "a/x/2", cid(42): "b/y/1"}
    result = completeness(inputs, outputs, registered, pending={cid(6)})
    assert (result.input_clicks, result.joined, result.output_rows) == (10, 4, 5)
    assert result.duplicates == 1 and result.wrong_query == 1 and result.unexpected == 1
    # a duplicate is named with the objects that hold it
    assert result.duplicate_sample == [
        {"click_id": cid(1), "objects": ["joined/dc=a/x/1.parquet", "joined/dc=b/y/3.parquet"]}
    ]
    assert (result.unjoinable, result.too_old, result.pending) == (1, 1, 1)
    assert result.lost == 1 and result.lost_sample == [cid(5)]  # registered, in no output
    assert result.missing == 4  # 5, 7, 8, 9: in no output and not pending
    assert result.complete_pct == pytest.approx(100 * 3 / 7)  # of 8 joinable, 1 pending
    assert not result.complete


def test_a_clean_window_is_complete_at_100_percent() -> None:
    inputs = {cid(n): qid(n) for n in range(3)}
    outputs = Outputs(joined=[row(0), row(1)], unjoinable={cid(2)}, too_old=set())
    result = completeness(inputs, outputs, {cid(0): "a/x/1", cid(1): ""}, pending=set())
    assert result.complete and result.complete_pct == 100.0 and result.missing == 0


def test_unjoinable_clicks_whose_query_came_or_that_were_joined_fail_the_window() -> None:
    inputs = {cid(n): qid(n) for n in range(5)}
    outputs = Outputs(
        joined=[row(0), row(1), row(4)], unjoinable={cid(1), cid(2), cid(3)}, too_old=set(),
        superseded={cid(4)},
    )  # fmt: skip
    result = completeness(inputs, outputs, {}, pending=set(), with_query={cid(2)})
    assert result.unjoinable_with_query_sample == [cid(2)]
    assert result.joined_and_unjoinable_sample == [cid(1)]
    assert (result.superseded, result.missing) == (1, 0)
    assert not result.complete
    report = VerifyReport("run-3", "s", "e", result, [])
    assert report.failures == [
        "1 unjoinable whose query is in the logs now: photon_recover settles them",
        "1 unjoinable and joined all the same: photon_recover settles them",
    ]


def test_a_superseded_click_not_joined_yet_is_missing() -> None:
    outputs = Outputs(joined=[], unjoinable=set(), too_old=set(), superseded={cid(0)})
    result = completeness({cid(0): qid(0)}, outputs, {}, pending=set())
    assert result.missing == 1 and not result.complete
    waiting = completeness({cid(0): qid(0)}, outputs, {}, pending={cid(0)})
    assert waiting.missing == 0 and waiting.complete


def test_a_click_quarantined_as_unwritable_is_settled_and_counted_not_missing() -> None:
    inputs = {cid(n): qid(n) for n in range(3)}
    outputs = Outputs([row(0)], set(), set(), unwritable={cid(1), cid(2)})
    result = completeness(inputs, outputs, {cid(0): "a/x/1"}, pending=set())
    assert (result.unwritable, result.missing, result.lost) == (2, 0, 0)
    assert result.complete and result.complete_pct == 100.0


_ids = st.sets(st.integers(0, 12), max_size=13)


@given(
    inputs=_ids, joined=st.lists(st.integers(0, 14), max_size=16), unjoinable=_ids,
    too_old=_ids, unwritable=_ids, registered=_ids, pending=_ids, with_query=_ids,
)  # fmt: skip
def test_the_clicks_outcomes_fail_a_window_exactly_when_completeness_does(
    inputs: set[int], joined: list[int], unjoinable: set[int], too_old: set[int],
    unwritable: set[int], registered: set[int], pending: set[int], with_query: set[int],
) -> None:  # fmt: skip
    """The suite's outcome check (what Data Docs shows) and the report's verdict agree."""
    outputs = Outputs(
        joined=[row(n) for n in joined],
        unjoinable={cid(n) for n in unjoinable | with_query},
        too_old={cid(n) for n in too_old},
        unwritable={cid(n) for n in unwritable},
    )
    args = (
        {cid(n): qid(n) for n in inputs},
        outputs,
        {cid(n): "a/x/1" for n in registered},
        {cid(n) for n in pending},
    )
    late = {cid(n) for n in with_query}
    result = completeness(*args, with_query=late)
    outcomes = click_outcomes(*args, with_query=late)
    assert all(o in SETTLED_OUTCOMES for o in outcomes.values()) == result.complete
    frame = verdict_frame(outputs.joined, args[0], outcomes)
    # one row a joined row, one a click without any: a duplicate shows as a repeated id
    assert frame["click_id"].duplicated().any() == (result.duplicates > 0)
    assert set(frame["click_id"]) == set(outcomes)


def test_a_passing_window_is_100_percent_complete_with_clicks_still_pending() -> None:
    inputs = {cid(n): qid(n) for n in range(4)}
    outputs = Outputs(joined=[row(0), row(1)], unjoinable={cid(2)}, too_old=set())
    result = completeness(inputs, outputs, {}, pending={cid(3)})
    assert result.complete and result.pending == 1 and result.complete_pct == 100.0


def test_the_frame_carries_latency_and_whether_the_query_matches_the_input() -> None:
    frame = joined_frame([row(0), row(1, query=5)], {cid(0): qid(0), cid(1): qid(1)})
    assert list(frame["latency_s"]) == [2.0, 2.0]
    assert list(frame["query_id_matches_input"]) == [True, False]


def test_the_html_report_says_passed_or_failed_and_escapes_values() -> None:
    base = completeness({}, Outputs([], set(), set()), {}, set())
    failed = ExpectationOutcome("expect_column_values_to_be_unique", "click_id", False, 2, 2,
                                ["<b>"])  # fmt: skip
    report = VerifyReport("run-1", "2026-01-01T00:00:00+00:00", "2026-01-01T01:00:00+00:00",
                          base, [failed])  # fmt: skip
    page = render_html(report)
    assert "FAILED" in page and "&lt;b&gt;" in page and "<b>" not in page
    assert report.failures == ["expect_column_values_to_be_unique(click_id): 2 unexpected"]
    assert report.to_dict()["passed"] is False
    assert isinstance(report.completeness, Completeness)


def test_a_duplicate_is_reported_with_the_objects_that_hold_it() -> None:
    keys = ["joined/dc=a/x/1.parquet", "joined/dc=b/y/<3>.parquet"]
    outputs = Outputs([row(1), row(1, dc="b")], set(), set(), {cid(1): keys})
    result = completeness({cid(1): qid(1)}, outputs, {cid(1): "a/x/1"}, set())
    report = VerifyReport("run-2", "s", "e", result, [])
    assert not report.passed  # by itself, whatever the GX suite says
    assert report.failures == [f"1 duplicate rows: e.g. {cid(1)} in {keys[0]}, {keys[1]}"]
    page = render_html(report)
    assert "Duplicated clicks and the objects holding them" in page
    assert "joined/dc=b/y/&lt;3&gt;.parquet" in page and "<3>" not in page


def test_merge_drops_expired_entries_missing_files_and_duplicates() -> None:
    entries = [
        MapEntry("10.0.0.1:1", T + 5, "a.log", 100),
        MapEntry("10.0.0.1:1", T + 5, "a.log", 100),  # the same entry from two runs
        MapEntry("10.0.0.1:1", T - 5, "a.log", 0),  # below the boundary
        MapEntry("10.0.0.2:1", T + 9, "gone.log", 0),  # its file was deleted
        MapEntry("10.0.0.1:1", T + 1, "a.log", 50),
    ]
    merged, report = merge(entries, T, lambda name: name == "a.log")
    assert merged == [entries[4], entries[0]]
    assert (report.entries_before, report.entries_after) == (5, 2)
    assert (report.duplicates, report.dropped_expired, report.dropped_missing_file) == (1, 1, 1)


def test_only_plain_names_inside_the_query_directory_count_as_existing(tmp_path: Path) -> None:
    directory = tmp_path
    (directory / "q.log").write_text("")
    exists = query_file_exists(directory)
    assert exists("q.log")
    assert not exists("../q.log") and not exists("") and not exists("other.log")


def test_a_sample_is_spread_over_the_entries_and_never_larger_than_asked() -> None:
    entries = [MapEntry("p:1", T + n, "a.log", n) for n in range(100)]
    assert len(sample_entries(entries, 10)) == 10
    assert sample_entries(entries, 10)[1].ts_us - sample_entries(entries, 10)[0].ts_us == 10
    assert sample_entries(entries, 0) == [] and len(sample_entries(entries[:3], 10)) == 3


def test_great_expectations_loads_in_a_thread_of_its_own_while_the_caller_goes_on() -> None:
    # In a fresh interpreter: this one may have loaded it already.
    code = (
        "import sys, threading; from photon.ops.verify import load_expectations_meanwhile; "
        "t = load_expectations_meanwhile(); print(t is not threading.current_thread(), "
        "t.daemon); t.join(); print('great_expectations.checkpoint' in sys.modules)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert result.stdout.split() == ["True", "True", "True"]
