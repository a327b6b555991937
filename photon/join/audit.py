"""Compare what the pipelines wrote with the generator's manifest (the ground truth).

Used by ``photon demo`` to show that the run was exactly-once: every joinable
click joined once across all DCs, no duplicate, and each never-joinable
click written out as unjoinable. (The scheduled verification with Great
Expectations over the real output is the ``photon_verify`` DAG.)
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from photon.gen.model import Manifest
from photon.join.output import output_prefix, rows_under
from photon.storage import ObjectStore


@dataclass
class Audit:
    expected_joins: int
    joined: int
    duplicates: int
    missing: int
    unexpected: int
    wrong_query: int
    never_joinable: int
    unjoinable_by_dc: dict[str, int] = field(default_factory=dict)
    joined_by_dc: dict[str, int] = field(default_factory=dict)
    quarantined_by_dc: dict[str, int] = field(default_factory=dict)
    malformed_by_dc: dict[str, int] = field(default_factory=dict)

    @property
    def exactly_once(self) -> bool:
        return (
            self.duplicates == 0
            and self.missing == 0
            and self.unexpected == 0
            and self.wrong_query == 0
        )

    def to_dict(self) -> dict[str, Any]:
        return {**vars(self), "exactly_once": self.exactly_once}


def audit(store: ObjectStore, manifest: Manifest) -> Audit:
    joined = rows_under(store, output_prefix("joined"))
    counts = Counter(r["click_id"] for r in joined)
    expected = manifest.expected_joins
    result = Audit(
        expected_joins=len(expected),
        joined=len(counts),
        duplicates=sum(n - 1 for n in counts.values() if n > 1),
        missing=len(set(expected) - set(counts)),
        unexpected=len(set(counts) - set(expected)),
        wrong_query=sum(
            1 for r in joined if expected.get(r["click_id"], r["query_id"]) != r["query_id"]
        ),
        never_joinable=len(manifest.never_joinable),
    )
    result.joined_by_dc = dict(Counter(r["dc"] for r in joined))
    for dc, dc_manifest in manifest.dcs.items():
        unjoinable = {r["click_id"] for r in rows_under(store, output_prefix("unjoinable", dc))}
        result.unjoinable_by_dc[dc] = len(unjoinable)
        result.quarantined_by_dc[dc] = len(rows_under(store, output_prefix("quarantine", dc)))
        result.malformed_by_dc[dc] = len(dc_manifest.malformed)
    return result
