"""Unjoinable records superseded, against the real stack: a query that comes after its
clicks were given up on, and a click one DC gave up on while the other joined it."""

from __future__ import annotations

from collections import Counter

import pytest

from photon.join.output import output_prefix, rows_under
from photon.ops.params import RecoverParams, Window
from photon.ops.recover import recover
from photon.ops.verify import pending_retries, read_outputs, verify
from tests.integration.ops_pipelines import OpsPhoton

pytestmark = pytest.mark.integration


def _withhold(ops_photon: OpsPhoton, dc: str, query_ids: set[str]) -> list[bytes]:
    """Take the lines of ``query_ids`` out of the DC's query logs (before any pipeline
    reads them); the lines taken, in order."""
    taken: list[bytes] = []
    for path in sorted((ops_photon.settings.dc_logs(dc) / "queries").glob("*.log")):
        kept = []
        for line in path.read_bytes().splitlines(keepends=True):
            if any(query_id.encode() in line for query_id in query_ids):
                taken.append(line)
            else:
                kept.append(line)
        path.write_bytes(b"".join(kept))
    return taken


def _window() -> Window:
    return RecoverParams.parse({"lookback_s": 3600, "settle_s": 0}).window()


def test_a_query_that_comes_after_its_clicks_were_given_up_on_is_joined_by_recovery(
    ops_photon: OpsPhoton,
) -> None:
    manifest = ops_photon.generate()
    settings, store, registry = ops_photon.settings, ops_photon.store, ops_photon.registry
    by_query = Counter(manifest.expected_joins.values())
    late, a_lacks = sorted(by_query)[10:13], sorted(by_query)[20:22]
    late_clicks = {c for c, q in manifest.expected_joins.items() if q in late}
    a_only = {c for c, q in manifest.expected_joins.items() if q in a_lacks}
    late_lines = _withhold(ops_photon, "a", set(late))
    _withhold(ops_photon, "b", set(late))
    _withhold(ops_photon, "a", set(a_lacks))  # DC b still has these

    # DC a runs first and gives up on both sets; then DC b joins what its logs hold.
    ops_photon.run("a")
    ops_photon.run("b")
    window = _window()
    unjoinable = {r["click_id"] for r in rows_under(store, output_prefix("unjoinable"))}
    assert late_clicks | a_only <= unjoinable
    outputs = read_outputs(store, window)
    assert a_only <= {r["click_id"] for r in outputs.joined}

    # The late queries arrive in DC a's logs, and its reader reads them.
    late_file = settings.dc_logs("a") / "queries" / "zz-late.log"
    late_file.write_bytes(b"".join(late_lines))
    assert ops_photon.read_queries("a", "zz-late.log") == len(late_lines)

    before = verify(
        settings, store, registry, window, run="before", latency_bound_s=3600, clear_tokens=False
    )
    c = before.completeness
    assert not before.passed
    assert c.unjoinable_with_query == len(late_clicks)
    assert set(c.unjoinable_with_query_sample) == late_clicks
    assert c.joined_and_unjoinable == len(a_only)
    assert set(c.joined_and_unjoinable_sample) == a_only

    dry = recover(settings, store, registry, window, dry_run=True, run="look")
    assert (dry.late_queries, dry.joined_and_unjoinable) == (len(late_clicks), len(a_only))
    assert dry.late_reinjected == dry.superseded == 0
    assert not list((settings.dc_logs("a") / "clicks").glob("recovery-*"))
    assert not list(store.keys(output_prefix("superseded")))

    report = recover(settings, store, registry, window, dry_run=False, run="late")
    assert report.late_reinjected == len(late_clicks)
    assert report.superseded == len(late_clicks) + len(a_only)
    [recovery_log] = (settings.dc_logs("a") / "clicks").glob("recovery-late-*-late.log")
    assert str(recovery_log) in report.recovery_logs
    ops_photon.read_recovery_logs("a")  # DC a's joiner joins them from its input

    after = verify(
        settings, store, registry, window, run="after", latency_bound_s=3600, clear_tokens=False
    )
    assert after.passed, after.failures
    c = after.completeness
    assert c.superseded == len(late_clicks) + len(a_only)
    assert c.unjoinable_with_query == c.joined_and_unjoinable == c.missing == 0
    joined = Counter(r["click_id"] for r in rows_under(store, output_prefix("joined")))
    assert set(joined) == set(manifest.expected_joins)
    assert set(joined.values()) == {1}
    # Each DC's decision was written once: the records stay, marked, never rewritten.
    unjoinable_rows = rows_under(store, output_prefix("unjoinable"))
    records = Counter((r["click_id"], r["dc"]) for r in unjoinable_rows)
    assert {records[(click, "a")] for click in late_clicks | a_only} == {1}
    assert {records[(click, "b")] for click in late_clicks} == {1}

    again = recover(settings, store, registry, window, dry_run=False, run="again")
    assert (again.late_queries, again.joined_and_unjoinable, again.superseded) == (0, 0, 0)


def test_a_late_query_in_another_dcs_logs_is_reinjected_there(ops_photon: OpsPhoton) -> None:
    manifest = ops_photon.generate()
    settings, store, registry = ops_photon.settings, ops_photon.store, ops_photon.registry
    late = sorted(set(manifest.expected_joins.values()))[10]
    late_clicks = {c for c, q in manifest.expected_joins.items() if q == late}
    lines = _withhold(ops_photon, "a", {late})
    _withhold(ops_photon, "b", {late})
    ops_photon.run("a")
    ops_photon.run("b")
    # The query is in DC b's logs, not read by anyone yet: recovery sends it to DC b,
    # whose joiner finds it once its reader reads it.
    (settings.dc_logs("b") / "queries" / "zz-late.log").write_bytes(b"".join(lines))
    window = _window()
    assert not pending_retries(settings) & late_clicks

    report = recover(settings, store, registry, window, dry_run=False, run="to-b")
    assert report.late_reinjected == len(late_clicks)
    assert {a["dc"] for a in report.actions if a["click_id"] in late_clicks} == {"b"}
    ops_photon.read_queries("b", "zz-late.log")
    ops_photon.read_recovery_logs("b")
    outputs = read_outputs(store, window)
    assert late_clicks <= {r["click_id"] for r in outputs.joined}
    assert late_clicks <= outputs.superseded and not late_clicks & outputs.unjoinable
