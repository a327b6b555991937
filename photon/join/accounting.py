"""Exactly-once accounting: the joined output against the clicks it should hold.

One count, used by the demo's audit (against the generator's manifest),
verification (against the input logs of a window) and the chaos run (where
every click of the run ended):

* ``duplicates``: rows beyond the first for a click (across every DC);
* ``missing``: clicks expected and in no output, and not settled otherwise
  (written as unjoinable or too old, or still pending in a retry store);
* ``unexpected``: clicks joined that were not expected;
* ``wrong_query``: joined rows whose query is not the expected one.

Pure: the callers read the output and say what was expected. Nothing here
raises; a row without ``click_id``, ``query_id`` or ``dc`` is the caller's bug
(``KeyError``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Set
from dataclasses import dataclass, field
from typing import Any, Protocol


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
        return is_exactly_once(self)


class Tally(Protocol):
    """The four counts that decide exactly once (a :class:`JoinCount`, the demo's audit)."""

    @property
    def duplicates(self) -> int: ...
    @property
    def missing(self) -> int: ...
    @property
    def unexpected(self) -> int: ...
    @property
    def wrong_query(self) -> int: ...


def is_exactly_once(tally: Tally) -> bool:
    """No duplicate, nothing missing, nothing joined that should not be, no wrong query."""
    return (
        tally.duplicates == 0
        and tally.missing == 0
        and tally.unexpected == 0
        and tally.wrong_query == 0
    )


def duplicate_rows(rows_per_click: Mapping[str, int]) -> int:
    """Rows beyond the first for each click: the duplicates in output holding these counts
    (the chaos run counts them as the output grows, the others once)."""
    return sum(n - 1 for n in rows_per_click.values() if n > 1)


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
        duplicates=duplicate_rows(counts),
        missing=len(missing),
        unexpected=len(joined - set(expected)),
        wrong_query=sum(
            1 for r in rows if expected.get(str(r["click_id"]), r["query_id"]) != r["query_id"]
        ),
        missing_ids=missing,
        duplicated_ids=sorted(c for c, n in counts.items() if n > 1),
        joined_by_dc=dict(Counter(str(r["dc"]) for r in rows)),
    )
