"""The demo's audit table and verdict: ``photon demo`` and ``photon compose demo``
print the same."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from photon.apps import JOINER
from photon.tooling.audit import Audit
from photon.tooling.cli.common import out


def print_audit(result: Audit, summary: dict[str, Any], bucket: str) -> None:
    joiners = [a for a in summary["apps"] if a["app"] == JOINER]
    table = Table("", "clicks", title=f"bucket {bucket}")
    table.add_row("joinable (manifest)", str(result.expected_joins))
    table.add_row("joined, across DCs", str(result.joined))
    for dc, count in sorted(result.joined_by_dc.items()):
        table.add_row(f"  joined by DC {dc}", str(count))
    table.add_row("duplicates in the union of outputs", str(result.duplicates))
    table.add_row("missing", str(result.missing))
    table.add_row("never joinable (manifest)", str(result.never_joinable))
    for dc, count in sorted(result.unjoinable_by_dc.items()):
        table.add_row(f"  unjoinable in DC {dc}", str(count))
    for dc, count in sorted(result.quarantined_by_dc.items()):
        table.add_row(
            f"  quarantined lines in DC {dc}", f"{count} of {result.malformed_by_dc[dc]} malformed"
        )
    for j in joiners:
        # Of the queries found, the share the cache served (docs/join.md, "Cache hits").
        found = j.get("from_cache", 0) + j.get("from_logs", 0)
        hit_ratio = j.get("from_cache", 0) / found if found else 0.0
        attempted = j.get("joined", 0) + j.get("wasted", 0)
        wasted = j.get("wasted", 0) / attempted if attempted else 0.0
        p50, p90 = j.get("latency_p50_s"), j.get("latency_p90_s")
        table.add_row(
            f"DC {j['dc']} joiner",
            f"latency p50 {seconds(p50)}, p90 {seconds(p90)}; cache hits {hit_ratio:.0%}; "
            f"wasted joins {wasted:.1%}; skipped as already joined {j.get('already_joined', 0)}",
        )
    out.print(table)
    if result.exactly_once:
        out.print("verdict: [bold green]exactly once[/]")
    else:
        out.print("verdict: [bold red]NOT exactly once[/]")


def seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} s"
