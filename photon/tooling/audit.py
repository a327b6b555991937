"""Compare what the pipelines wrote with the generator's manifest (the ground truth).

Used by ``photon demo`` to show that the run was exactly-once: every joinable
click joined once across all DCs, no duplicate, and each never-joinable
click written out as unjoinable (the count is :mod:`photon.join.accounting`'s).
(The scheduled verification with Great Expectations over the real output is
the ``photon_verify`` DAG.)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from photon.join.accounting import count_joins, is_exactly_once
from photon.join.output import output_prefix, rows_under
from photon.storage import ObjectStore
from photon.tooling.gen.model import Manifest


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
        return is_exactly_once(self)

    def to_dict(self) -> dict[str, Any]:
        return {**vars(self), "exactly_once": self.exactly_once}


def audit(store: ObjectStore, manifest: Manifest) -> Audit:
    count = count_joins(rows_under(store, output_prefix("joined")), manifest.expected_joins)
    result = Audit(
        expected_joins=len(manifest.expected_joins),
        joined=count.joined,
        duplicates=count.duplicates,
        missing=count.missing,
        unexpected=count.unexpected,
        wrong_query=count.wrong_query,
        never_joinable=len(manifest.never_joinable),
        joined_by_dc=count.joined_by_dc,
    )
    for dc, dc_manifest in manifest.dcs.items():
        unjoinable = {r["click_id"] for r in rows_under(store, output_prefix("unjoinable", dc))}
        result.unjoinable_by_dc[dc] = len(unjoinable)
        result.quarantined_by_dc[dc] = len(rows_under(store, output_prefix("quarantine", dc)))
        result.malformed_by_dc[dc] = len(dc_manifest.malformed)
    return result


def first_joined_at_us(store: ObjectStore) -> int | None:
    """When the first joined click of the output was joined (its batch's start,
    ``joined_at_us``); None when nothing was joined."""
    return min(
        (int(r["joined_at_us"]) for r in rows_under(store, output_prefix("joined"))), default=None
    )
