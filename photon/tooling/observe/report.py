"""``photon report``: a run's recorded metrics redrawn as the Photon paper's figures.

From ``metrics.jsonl`` (:mod:`photon.tooling.observe.recorder`) it builds one data
table per figure — the numbers behind the chart, also written to
``report.json`` and shown under each chart — then a PNG per table
(matplotlib, Agg) and ``index.html`` tying them together:

=====  ==========================================================================
Fig.   table
=====  ==========================================================================
7      end-to-end p90 latency over time, per DC (from the latency histogram's
       bucket counts gained in each interval)
8      lookups per interval: cache hits, cache misses, log-file-map lookups
9      joined clicks per second, per DC (across an outage: the DC that stopped
       and the one that took its clicks)
10     registry client: ids registered per second vs ZooKeeper transactions per
       second, and ids per transaction (batching effectiveness)
11     ids per shard at the run's start and end (and the epochs' shard counts)
12     wasted joins per interval, per DC, and their share of the joins
13     each joiner's lag behind its click logs (seconds, bytes) over time: a
       returning DC's catch-up
=====  ==========================================================================

Counters are cumulative in the record: an interval's value is the difference
between two lines; a counter that went down (its app restarted) counts from 0.
How it fails: a run with fewer than two recorded lines has no intervals and
:func:`build_tables` raises :class:`ReportError` saying so.
"""

from __future__ import annotations

import html
import json
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from itertools import pairwise
from pathlib import Path
from typing import Any

from photon.errors import PhotonError
from photon.extras import require
from photon.tooling.observe.prom import bucket_quantile


class ReportError(PhotonError, ValueError):
    """The recorded run cannot be reported; the message says why."""


@dataclass
class Table:
    figure: int
    title: str
    columns: list[str]
    rows: list[list[Any]] = field(default_factory=list)
    note: str = ""

    @property
    def slug(self) -> str:
        return f"fig{self.figure}"


def _total(record: dict[str, Any], app_key: str, name: str, **labels: str) -> float:
    return sum(
        float(value)
        for sample_name, sample_labels, value in record["apps"].get(app_key, [])
        if sample_name == name and all(sample_labels.get(k) == v for k, v in labels.items())
    )


def _gain(now: float, before: float) -> float:
    """A counter's increase over an interval; a restart (it went down) counts from 0."""
    return now - before if now >= before else now


def _buckets(record: dict[str, Any], dc: str) -> dict[float, float]:
    found: dict[float, float] = {}
    for name, labels, value in record["apps"].get(f"{dc}/joiner", []):
        if name == "photon_join_latency_seconds_bucket" and labels.get("dc") == dc:
            bound = float(labels["le"])
            found[bound] = found.get(bound, 0.0) + value
    return found


def _round(value: float | None, digits: int = 2) -> float | None:
    return None if value is None else round(value, digits)


def _epochs(registry: dict[str, Any]) -> str:
    return " → ".join(str(e["shards"]) for e in registry.get("epochs", [])) or "-"


def build_tables(records: list[dict[str, Any]], dcs: list[str]) -> list[Table]:
    if len(records) < 2:
        raise ReportError(
            f"the run recorded {len(records)} line(s); a report needs at least two "
            "(record for longer than one interval)"
        )
    t0 = float(records[0]["t"])
    pairs = list(pairwise(records))

    def at(record: dict[str, Any]) -> float:
        return round(float(record["t"]) - t0, 1)

    def gain(
        before: dict[str, Any], now: dict[str, Any], app: str, name: str, **labels: str
    ) -> float:
        return _gain(_total(now, app, name, **labels), _total(before, app, name, **labels))

    fig7 = Table(
        7, "End-to-end latency, p90 (s), per interval", ["t_s", *[f"p90_s_{dc}" for dc in dcs]]
    )
    fig8 = Table(8, "Query lookups per interval: cache vs log-file map",
                 ["t_s", "cache_hits", "cache_misses", "logmap_lookups"])  # fmt: skip
    fig9 = Table(
        9,
        "Joined clicks per second, per DC",
        ["t_s", *[f"joined_per_s_{dc}" for dc in dcs], *[f"joined_{dc}" for dc in dcs]],
    )
    fig10 = Table(
        10,
        "Registry client requests vs ZooKeeper transactions (per second)",
        ["t_s", "ids_per_s", "transactions_per_s", "ids_per_transaction", "ids", "transactions"],
    )
    fig12 = Table(12, "Wasted joins per interval, per DC",
                  ["t_s", *[f"wasted_{dc}" for dc in dcs], "wasted_share_pct"])  # fmt: skip
    lag_columns = [*[f"lag_s_{dc}" for dc in dcs], *[f"behind_bytes_{dc}" for dc in dcs]]
    fig13 = Table(13, "Each joiner's lag behind its click logs", ["t_s", *lag_columns])
    for before, now in pairs:
        t_s, dt = at(now), max(now["t"] - before["t"], 1e-9)
        p90s = []
        for dc in dcs:
            old, new = _buckets(before, dc), _buckets(now, dc)
            gained = sorted((b, _gain(new.get(b, 0.0), old.get(b, 0.0))) for b in new)
            p90s.append(_round(bucket_quantile(0.9, gained)))
        fig7.rows.append([t_s, *p90s])
        hits = sum(
            gain(before, now, f"{dc}/joiner", "photon_cache_lookups_total", result="hit")
            for dc in dcs
        )
        misses = sum(
            gain(before, now, f"{dc}/joiner", "photon_cache_lookups_total", result="miss")
            for dc in dcs
        )
        logmap = sum(gain(before, now, f"{dc}/joiner", "photon_logmap_lookups_total") for dc in dcs)
        fig8.rows.append([t_s, int(hits), int(misses), int(logmap)])
        joined = {
            dc: gain(before, now, f"{dc}/joiner", "photon_clicks_total", outcome="joined")
            for dc in dcs
        }
        fig9.rows.append(
            [t_s, *[round(joined[dc] / dt, 1) for dc in dcs], *[int(joined[dc]) for dc in dcs]]
        )
        ids = sum(
            gain(before, now, f"{dc}/joiner", "photon_registry_register_ids_total") for dc in dcs
        )
        txns = sum(
            gain(before, now, f"{dc}/joiner", "photon_registry_transactions_total") for dc in dcs
        )
        ratio = _round(ids / txns if txns else None, 1)
        fig10.rows.append(
            [t_s, round(ids / dt, 1), round(txns / dt, 2), ratio, int(ids), int(txns)]
        )
        wasted = {
            dc: gain(before, now, f"{dc}/joiner", "photon_clicks_total", outcome="wasted")
            for dc in dcs
        }
        attempts = sum(wasted.values()) + sum(joined.values())
        share = 100 * sum(wasted.values()) / attempts if attempts else 0.0
        fig12.rows.append([t_s, *[int(wasted[dc]) for dc in dcs], round(share, 2)])
        lags = [now["status"]["dcs"][dc]["input_lag"]["clicks"] for dc in dcs]
        fig13.rows.append([t_s, *[lag["lag_s"] for lag in lags], *[lag["bytes"] for lag in lags]])

    first, last = records[0]["status"]["registry"], records[-1]["status"]["registry"]
    fig11 = Table(
        11, "Ids per shard, at the run's start and end", ["shard", "ids_start", "ids_end"]
    )
    start_ids = {s["shard"]: s["ids"] for s in first.get("shards", [])}
    end_ids = {s["shard"]: s["ids"] for s in last.get("shards", [])}
    for shard in sorted(set(start_ids) | set(end_ids)):
        fig11.rows.append([shard, start_ids.get(shard, 0), end_ids.get(shard, 0)])
    fig11.note = f"shards per epoch: at start {_epochs(first)}; at end {_epochs(last)}"
    return [fig7, fig8, fig9, fig10, fig11, fig12, fig13]


#: The run's audit, kept in its directory beside the metrics (``photon demo`` writes it).
AUDIT_FILE = "audit.json"

#: A joiner further behind its logs than this is reading old logs (a backlog left
#: from before the run, or a DC catching up): such stretches are marked on Fig. 13.
STALE_LAG_S = 600.0

#: Readable legend names of the tables' columns (a DC's column: its measure, then "DC x").
_MEASURES = {
    "p90_s": "p90",
    "joined_per_s": "joined/s",
    "joined": "joined",
    "wasted": "wasted joins",
    "lag_s": "lag",
    "behind_bytes": "bytes behind",
    "cache_hits": "cache hits",
    "cache_misses": "cache misses",
    "logmap_lookups": "log-file-map lookups",
    "ids_per_s": "ids registered / s",
    "transactions_per_s": "ZooKeeper transactions / s",
    "ids_per_transaction": "ids per transaction",
    "wasted_share_pct": "wasted share of joins (%)",
    "ids_start": "at the start",
    "ids_end": "at the end",
}


def legend_name(column: str, dcs: list[str]) -> str:
    """``p90_s_a`` -> ``DC a``; ``cache_hits`` -> ``cache hits``."""
    for dc in dcs:
        if column.endswith(f"_{dc}") and column[: -len(dc) - 1] in _MEASURES:
            return f"DC {dc}"
    return _MEASURES.get(column, column.replace("_", " "))


@dataclass
class Periods:
    """Stretches of the run to read with care, in seconds since its start."""

    #: From the start until the first interval with a joined click: Spark apps starting.
    startup: tuple[float, float] | None
    #: Where a joiner was more than STALE_LAG_S behind its logs.
    stale_logs: list[tuple[float, float]]


def periods(tables: list[Table]) -> Periods:
    by_figure = {t.figure: t for t in tables}
    joined = by_figure[9]
    per_s = [i for i, c in enumerate(joined.columns) if c.startswith("joined_per_s_")]
    first = next((r[0] for r in joined.rows if any((r[i] or 0) > 0 for i in per_s)), None)
    startup = (0.0, float(first)) if first else None
    lag = by_figure[13]
    lags = [i for i, c in enumerate(lag.columns) if c.startswith("lag_s_")]
    stale: list[tuple[float, float]] = []
    previous = 0.0
    for row in lag.rows:
        if any((row[i] or 0) > STALE_LAG_S for i in lags):
            if stale and stale[-1][1] == previous:
                stale[-1] = (stale[-1][0], row[0])
            else:
                stale.append((previous, row[0]))
        previous = row[0]
    return Periods(startup, stale)


def draw(tables: list[Table], out: Path, dcs: list[str], *, started_at: float = 0.0) -> list[Path]:
    """One PNG per table, ``fig<N>.png`` (:func:`figures`)."""
    require("matplotlib", "verify", "drawing the report's figures")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for table, fig in zip(tables, figures(tables, dcs, started_at=started_at), strict=True):
        path = out / f"{table.slug}.png"
        fig.savefig(path)
        plt.close(fig)
        paths.append(path)
    return paths


def figures(tables: list[Table], dcs: list[str], *, started_at: float = 0.0) -> list[Any]:
    """A matplotlib figure per table: time as wall-clock (UTC) time, readable legends, the
    start-up marked on every chart over time and old-log stretches on Fig. 13."""
    require("matplotlib", "verify", "drawing the report's figures")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.dates as mdates
    import matplotlib.pyplot as plt

    marks = periods(tables)

    def clock(t_s: float) -> datetime:
        return datetime.fromtimestamp(started_at + t_s, UTC)

    drawn = []
    for table in tables:
        fig, ax = plt.subplots(figsize=(8, 4.2), dpi=100)
        if table.figure == 11:  # bars: start and end per shard
            xs = [row[0] for row in table.rows]
            width = 0.4
            ax.bar([x - width / 2 for x in xs], [r[1] for r in table.rows], width,
                   label=legend_name("ids_start", dcs))  # fmt: skip
            ax.bar([x + width / 2 for x in xs], [r[2] for r in table.rows], width,
                   label=legend_name("ids_end", dcs))  # fmt: skip
            ax.set_xlabel("shard")
            ax.legend(fontsize=8)
        else:
            _plot_over_time(ax, table, dcs, clock)
            if marks.startup is not None:
                _shade(ax, clock, marks.startup, color="0.85", label="start-up: nothing joined yet")
            if table.figure == 13:
                for n, stretch in enumerate(marks.stale_logs):
                    old = f"old logs (lag > {STALE_LAG_S:.0f} s)" if n == 0 else None
                    _shade(ax, clock, stretch, color="tab:orange", alpha=0.15, label=old)
                if marks.stale_logs:
                    ax.set_yscale("symlog", linthresh=60)  # hours of old logs beside seconds
            formatter = mdates.DateFormatter("%H:%M:%S", tz=UTC)  # type: ignore[no-untyped-call]
            ax.xaxis.set_major_formatter(formatter)
            ax.set_xlabel("time (UTC)")
            handles, labels = ax.get_legend_handles_labels()
            if table.figure == 12:
                twin = fig.axes[-1]
                more_handles, more_labels = twin.get_legend_handles_labels()
                handles, labels = handles + more_handles, labels + more_labels
            ax.legend(handles, labels, fontsize=8, loc="upper left")
        if table.figure in (8, 9, 12):  # counts: from 0, even when all are 0
            ax.set_ylim(bottom=0)
        ax.set_title(f"Fig. {table.figure}: {table.title}")
        ax.set_ylabel(_y_label(table))
        ax.grid(alpha=0.3)
        if table.figure != 11:
            fig.autofmt_xdate()
        fig.tight_layout()
        drawn.append(fig)
    return drawn


def _shade(ax: Any, clock: Any, stretch: tuple[float, float], **style: Any) -> None:
    """Mark a stretch of the run (seconds since its start) behind the curves."""
    ax.axvspan(clock(stretch[0]), clock(stretch[1]), zorder=0, **style)


def _plot_over_time(ax: Any, table: Table, dcs: list[str], clock: Any) -> None:
    columns = table.columns[1:]
    plotted: dict[int, tuple[str, ...]] = {
        9: ("joined_per_s",),
        10: ("ids_per_s", "transactions_per_s"),
        12: ("wasted_",),
        13: ("lag_s",),
    }
    if table.figure in plotted:  # the rest of the columns are in the table
        columns = [c for c in columns if c.startswith(plotted[table.figure])]
    for name in columns:
        if name == "wasted_share_pct":
            continue
        i = table.columns.index(name)
        points = [(clock(r[0]), r[i]) for r in table.rows if r[i] is not None]
        ax.plot([p[0] for p in points], [p[1] for p in points], marker=".",
                label=legend_name(name, dcs))  # fmt: skip
    if table.figure == 12:  # a share is not a count: its own axis, on the right
        share = ax.twinx()
        i = table.columns.index("wasted_share_pct")
        share.plot(
            [clock(r[0]) for r in table.rows],
            [r[i] for r in table.rows],
            color="tab:red",
            linestyle="--",
            label=legend_name("wasted_share_pct", dcs),
        )
        share.set_ylabel("share of joins (%)")
        share.set_ylim(bottom=0)


def _y_label(table: Table) -> str:
    return {
        7: "p90 latency (s)",
        8: "lookups in the interval",
        9: "joined clicks / s",
        10: "per second",
        11: "ids",
        12: "wasted joins in the interval",
        13: "lag (s, logs' time)",
    }[table.figure]


#: The audit's fields, in the order of the page's table, with readable names.
_AUDIT_ROWS = {
    "expected_joins": "joinable clicks (the generator's manifest)",
    "joined": "joined, once each",
    "duplicates": "duplicates",
    "missing": "missing",
    "unexpected": "joined but not joinable",
    "wrong_query": "joined to the wrong query",
    "never_joinable": "never joinable (no query was ever logged)",
}


def write(
    records: list[dict[str, Any]],
    dcs: list[str],
    out: Path,
    *,
    source: str = "",
    audit: dict[str, Any] | None = None,
) -> Path:
    """Tables, charts, ``report.json`` and ``index.html`` under ``out``; the page's path.
    ``audit``: the run's audit (:class:`photon.tooling.audit.Audit`), shown first."""
    tables = build_tables(records, dcs)
    started_at = float(records[0]["t"])
    charts = draw(tables, out, dcs, started_at=started_at)
    marks = periods(tables)
    summary = {
        "source": source,
        "dcs": dcs,
        "lines": len(records),
        "started_at": datetime.fromtimestamp(started_at, UTC).isoformat(),
        "seconds": round(records[-1]["t"] - records[0]["t"], 1),
        "audit": audit,
        "startup_s": marks.startup,
        "stale_logs_s": marks.stale_logs,
        "tables": [asdict(t) for t in tables],
        "charts": [p.name for p in charts],
    }
    (out / "report.json").write_text(json.dumps(summary, indent=2) + "\n")
    page = out / "index.html"
    page.write_text(_html(tables, charts, summary))
    return page


def _verdict(audit: dict[str, Any] | None) -> str:
    if audit is None:
        return ("<div class='verdict none'>No audit for this run: its output was not "
                "checked against the generator's manifest (`photon demo` does).</div>")  # fmt: skip
    ok = bool(audit.get("exactly_once"))
    text = "exactly once" if ok else "NOT exactly once"
    rows = "".join(
        f"<tr><th>{html.escape(label)}</th><td>{audit.get(key, '-')}</td></tr>"
        for key, label in _AUDIT_ROWS.items()
    )
    per_dc = "".join(
        f"<tr><th>DC {html.escape(dc)}</th><td>{audit.get('joined_by_dc', {}).get(dc, 0)}</td>"
        f"<td>{audit.get('unjoinable_by_dc', {}).get(dc, 0)}</td>"
        f"<td>{audit.get('quarantined_by_dc', {}).get(dc, 0)}</td></tr>"
        for dc in sorted(audit.get("joined_by_dc", {}))
    )
    return (
        f"<div class='verdict {'ok' if ok else 'bad'}'>Verdict: {text}</div>"
        f"<table class='audit'>{rows}</table>"
        "<table class='audit'><tr><th></th><th>joined</th><th>unjoinable</th>"
        f"<th>quarantined lines</th></tr>{per_dc}</table>"
    )


def _html(tables: list[Table], charts: list[Path], summary: dict[str, Any]) -> str:
    startup = summary["startup_s"]
    reading = ["Time is wall-clock time (UTC)."]
    if startup:
        reading.append(
            f"The grey stretch is the start-up: the {startup[1]:.0f} s before the first click "
            "was joined, while the Spark applications started; nothing is lost there, the "
            "clicks wait in the logs."
        )
    if summary["stale_logs_s"]:
        reading.append(
            f"Orange on Fig. 13: a joiner more than {STALE_LAG_S:.0f} s behind its logs, "
            "reading old logs (left from before the run, or a DC catching up); its lag axis "
            "is logarithmic above 60 s."
        )
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'><title>Photon run report</title>",
        "<style>body{font-family:sans-serif;max-width:60em;margin:2em auto}"
        "table{border-collapse:collapse;font-size:.85em;margin:.5em 0}td,th{border:1px solid "
        "#ccc;padding:.2em .5em;text-align:right}th{text-align:left}details{margin:.5em 0 2em}"
        ".verdict{font-size:1.6em;font-weight:bold;padding:.4em .6em;border-radius:.3em}"
        ".ok{background:#dafbe1;color:#1a7f37}.bad{background:#ffebe9;color:#cf222e}"
        ".none{background:#eee;color:#555;font-size:1.1em}</style></head><body>",
        "<h1>Photon run report</h1>",
        _verdict(summary["audit"]),
        f"<p>{html.escape(summary['source'])}: {summary['lines']} recorded snapshots over "
        f"{summary['seconds']} s from {html.escape(summary['started_at'])}; DCs "
        f"{html.escape(', '.join(summary['dcs']))}. Each chart redraws a figure of the Photon "
        "paper (SIGMOD 2013) for this run; the numbers behind it are in the table under it "
        "and in report.json.</p>",
        f"<p>{html.escape(' '.join(reading))}</p>",
    ]
    for table, chart in zip(tables, charts, strict=True):
        parts.append(f"<h2>Fig. {table.figure}: {html.escape(table.title)}</h2>")
        parts.append(f"<img src='{chart.name}' alt='Fig. {table.figure}' width='800'>")
        if table.note:
            parts.append(f"<p>{html.escape(table.note)}</p>")
        header = "".join(f"<th>{html.escape(c)}</th>" for c in table.columns)
        body = "".join(
            "<tr>" + "".join(f"<td>{'-' if v is None else v}</td>" for v in row) + "</tr>"
            for row in table.rows
        )
        parts.append(f"<details><summary>data ({len(table.rows)} rows)</summary>"
                     f"<table><tr>{header}</tr>{body}</table></details>")  # fmt: skip
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"
