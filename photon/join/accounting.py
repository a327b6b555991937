"""Exactly-once accounting: the joined output against the clicks it should hold.

One count, used by the demo's audit (against the generator's manifest),
verification (against the input logs of a window) and the chaos run (where
every click of the run ended):

* ``duplicates``: rows beyond the first for a click (across every DC);
* ``missing``: clicks expected and in no output, and not settled otherwise
  (written as unjoinable or too old, or still pending in a retry store);
* ``unexpected``: clicks joined that were not expected;
* ``wrong_query``: joined rows whose query is not the expected one.

Pure: the callers read the output and say what was expected.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Set
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class JoinCount:
    joined: int  # distinct clicks joined
    output_rows: int
    duplicates: int
    missing: int
    unexpected: int
    wrong_query: int
    #: the missing and the duplicated click ids, in order
    missing_ids: list[str] = field(default_factory=list)
    duplicated_ids: list[str] = field(default_factory=list)
    joined_by_dc: dict[str, int] = field(default_factory=dict)

    @property
    def exactly_once(self) -> bool:
        return (
            self.duplicates == 0
            and self.missing == 0
            and self.unexpected == 0
            and (self.wrong_query == 0)
        )


def count_joins(
    joined_rows: Iterable[Mapping[str, Any]],
    expected: Mapping[str, str],
    *,
    settled: Set[str] = frozenset(),
) -> JoinCount:
    """Count the joined rows (``click_id``, ``query_id``, ``dc``) against ``expected``
    (click id -> its query id); a click in ``settled`` is accounted for without a join."""
    rows = list(joined_rows)
    counts = Counter(str(r["click_id"]) for r in rows)
    joined = set(counts)
    missing = sorted(set(expected) - joined - settled)
    return JoinCount(
        joined=len(joined),
        output_rows=len(rows),
        duplicates=sum(n - 1 for n in counts.values() if n > 1),
        missing=len(missing),
        unexpected=len(joined - set(expected)),
        wrong_query=sum(
            1 for r in rows if expected.get(str(r["click_id"]), r["query_id"]) != r["query_id"]
        ),
        missing_ids=missing,
        duplicated_ids=sorted(c for c, n in counts.items() if n > 1),
        joined_by_dc=dict(Counter(str(r["dc"]) for r in rows)),
    )
