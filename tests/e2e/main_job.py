"""The correctness checks of the main job, shared by every e2e run of it (local and cluster).

The generator's manifest is the ground truth; the output is read straight from the bucket.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from photon.join.output import rows_under
from photon.storage import ObjectStore
from photon.tooling.gen.model import Manifest


def check_main_job(store: ObjectStore, manifest: Manifest, summary: dict[str, Any]) -> None:
    """Every joinable click joined once, the rest unjoinable or quarantined, counts reconciled."""
    joined = rows_under(store, "joined/")
    counts = Counter(r["click_id"] for r in joined)
    assert [c for c, n in counts.items() if n > 1] == []
    assert set(counts) == set(manifest.expected_joins)
    assert all(manifest.expected_joins[r["click_id"]] == r["query_id"] for r in joined)
    assert all(r["joined_at_us"] > 0 and r["dc"] in ("a", "b") for r in joined)
    apps = {(a["app"], a["dc"]): a for a in summary["apps"]}
    assert {a["exit"] for a in apps.values()} == {0}
    distinct = set(manifest.expected_joins) | set(manifest.never_joinable)
    for dc in ("a", "b"):
        unjoinable = rows_under(store, f"unjoinable/dc={dc}/")
        assert {r["click_id"] for r in unjoinable} == set(manifest.never_joinable)
        assert {r["reason"] for r in unjoinable} == {"query_not_found"}
        too_old = rows_under(store, f"too_old/dc={dc}/")
        assert too_old == []
        quarantined = rows_under(store, f"quarantine/dc={dc}/")
        expected = Counter((m.stream, m.file, m.offset) for m in manifest.dcs[dc].malformed)
        assert Counter((q["stream"], q["file"], q["offset"]) for q in quarantined) == expected

        # The counts reconcile. Distinct clicks in = joined + unjoinable + too old:
        assert len(distinct) == len(counts) + len(manifest.never_joinable) + len(too_old)
        # and every click line read = distinct clicks + quarantined + duplicate lines.
        joiner = apps[("joiner", dc)]
        dc_manifest = manifest.dcs[dc]
        click_malformed = sum(1 for m in dc_manifest.malformed if m.stream == "clicks")
        lines_in = sum(f.lines for f in dc_manifest.files["clicks"].values())
        assert joiner["lines"] == lines_in
        assert lines_in == len(distinct) + click_malformed + dc_manifest.duplicate_click_lines
        assert joiner["quarantined"] == click_malformed
        reader = apps[("query-reader", dc)]
        assert reader["lines"] == sum(f.lines for f in dc_manifest.files["queries"].values())
        assert reader["queries"] == dc_manifest.query_lines
    joined_by_dc = sum(apps[("joiner", dc)]["joined"] for dc in ("a", "b"))
    assert joined_by_dc == len(counts)  # every joined click written by exactly one DC
