"""Verification of the joined output: completeness and a Great Expectations suite.

For an event-time window of clicks (by the timestamp in ``click_id``):

* **completeness**: the clicks in every DC's input logs (decoded as the
  joiner decodes them; duplicates of a line count once) against the joined
  output of every DC, the unjoinable and too-old outputs, the clicks a joiner
  quarantined as ``unwritable`` (their record cannot be written), the clicks still
  waiting in the joiners' retry stores, and the registry. ``missing`` is a
  click in no output and not waiting; ``lost`` is an id registered with a
  token but in no output (what :mod:`photon.ops.recover` repairs);
* **expectations** (GX Core 1.x, a Checkpoint over a pandas frame of the
  joined rows in the window and a row for each of its clicks with none, whose
  ``UpdateDataDocsAction`` builds the run's Data Docs, published beside the
  report): ``click_id`` unique across all DCs; every click's outcome one that
  settles it (:data:`SETTLED_OUTCOMES`); the required fields not null on
  joined rows; ``query_id`` a well-formed id and the same as the click's in
  the input; latency (``joined_at_us`` minus the click's time) within the bound.

The run passes when every expectation holds and nothing is missing or lost:
the suite fails exactly when completeness does, so Data Docs and the report
always agree.
The report (JSON and a standalone HTML page) is written to the object store
under ``reports/verify/<run>/``. Tokens of ids confirmed in the output can
then be cleared in the registry (:func:`clear_confirmed_tokens`).

How it fails: unreadable output objects raise (the run fails, nothing is
cleared); GX problems raise; a failed expectation is a result, not an error:
the caller fails the run after the report is written.
"""

from __future__ import annotations

import contextlib
import html
import importlib
import json
import os
import tempfile
import threading
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from photon.events.records import Stream
from photon.extras import require
from photon.join.accounting import count_joins
from photon.join.retry import RetryStore
from photon.logs.reader import GrowingLogReader
from photon.logs.scan import decoded_clicks
from photon.ops.params import Window
from photon.ops.supersede import UnjoinableRecord, late_clicks, unjoinable_state
from photon.ops.window_output import (
    ids_in_window,
    in_window,
    ts_us,
    unwritable_in_window,
    window_keys,
)
from photon.settings import PhotonSettings
from photon.storage import ObjectStore
from registry import EventId, IdRegistry

ID_PATTERN = r"^(25[0-5]|2[0-4]\d|1?\d?\d)(\.(25[0-5]|2[0-4]\d|1?\d?\d)){3}:\d+:\d+$"
REQUIRED = ("click_id", "query_id", "dc", "joined_at_us")


# -- inputs ---------------------------------------------------------------------------


def clicks_in_file(path: Path, start_us: int, end_us: int) -> Iterator[tuple[str, str]]:
    """(click_id, query_id) of each decodable click line of one log file in the window."""
    for _, event in decoded_clicks(path.parent, pattern=path.name):
        if start_us <= event.click_id.ts_us < end_us:
            yield str(event.click_id), str(event.query_id)


def click_files(settings: PhotonSettings) -> list[Path]:
    files: list[Path] = []
    for dc in settings.dcs:
        directory = settings.dc_logs(dc) / Stream.CLICKS.value
        files += [directory / name for name in GrowingLogReader(directory).files()]
    return files


def input_clicks(files: Iterable[Path], window: Window) -> dict[str, str]:
    """Every DC's clicks in the window, once each: click_id -> query_id (plain Python)."""
    clicks: dict[str, str] = {}
    for path in files:
        clicks.update(clicks_in_file(path, window.start_us, window.end_us))
    return clicks


# -- outputs --------------------------------------------------------------------------


@dataclass
class Outputs:
    joined: list[dict[str, Any]]  # rows of clicks in the window, every DC
    unjoinable: set[str]  # whose newest unjoinable record stands (photon.ops.supersede)
    too_old: set[str]
    #: click_id -> the keys of the joined objects holding it (a duplicate: more than one)
    joined_in: dict[str, list[str]] = field(default_factory=dict)
    #: whose every unjoinable record recovery superseded: joinable after all
    superseded: set[str] = field(default_factory=set)
    #: the standing records of ``unjoinable``, by click
    records: dict[str, UnjoinableRecord] = field(default_factory=dict)
    #: quarantined by a joiner: their joined record could not be written (never registered)
    unwritable: set[str] = field(default_factory=set)


def read_outputs(store: ObjectStore, window: Window) -> Outputs:
    """The window's joined rows (with the keys of the objects holding each click), its
    standing and superseded unjoinable records and the ids of its too-old clicks, read
    from the window's objects only."""

    joined: list[dict[str, Any]] = []
    joined_in: dict[str, list[str]] = {}
    for row in store.read_parquet(window_keys(store, "joined", window)).to_pylist():
        key = row.pop("object_key")
        if in_window(row["click_id"], window):
            joined.append(row)
            joined_in.setdefault(row["click_id"], []).append(key)
    state = unjoinable_state(store, window)
    return Outputs(
        joined, set(state.current), ids_in_window(store, "too_old", window), joined_in,
        superseded=state.superseded, records=state.current,
        unwritable=unwritable_in_window(store, window),
    )  # fmt: skip


def pending_retries(settings: PhotonSettings) -> set[str]:
    """Click ids waiting in any DC's retry store on this machine (local state)."""
    from photon.join.runtime import retry_store_path

    pending: set[str] = set()
    for dc in settings.dcs:
        path = retry_store_path(settings, dc)
        if path.exists():
            retries = RetryStore(path, settings.retry)
            try:
                pending |= set(retries.click_ids())
            finally:
                retries.close()
    return pending


# -- completeness ---------------------------------------------------------------------


@dataclass
class Completeness:
    input_clicks: int
    joined: int
    output_rows: int
    duplicates: int
    unjoinable: int
    too_old: int
    pending: int
    missing: int
    lost: int
    unexpected: int
    wrong_query: int
    registered: int
    #: joined, of the window's joinable clicks that are not still pending: 100 when
    #: nothing is missing or lost (a passing run's figure)
    complete_pct: float
    #: given up on (a standing unjoinable record), but their query is in a DC's logs now
    unjoinable_with_query: int = 0
    #: a standing unjoinable record, and joined all the same (by another DC, or later)
    joined_and_unjoinable: int = 0
    #: unjoinable records recovery superseded (joinable after all: counted as joinable)
    superseded: int = 0
    #: quarantined by a joiner, their joined record unwritable (a value beyond the schema)
    unwritable: int = 0
    missing_sample: list[str] = field(default_factory=list)
    lost_sample: list[str] = field(default_factory=list)
    #: samples of both kinds: recovery re-injects the first kind, marks both superseded
    unjoinable_with_query_sample: list[str] = field(default_factory=list)
    joined_and_unjoinable_sample: list[str] = field(default_factory=list)
    #: each duplicated click_id with the object keys that hold it, for on-call to look at
    duplicate_sample: list[dict[str, Any]] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        # Pending clicks (their query may still come) are reported, not failed:
        # the window's newest clicks would otherwise raise false alarms.
        return (
            self.missing == 0
            and self.lost == 0
            and self.unjoinable_with_query == 0
            and self.joined_and_unjoinable == 0
        )


def completeness(
    inputs: dict[str, str],
    outputs: Outputs,
    registered: dict[str, str],
    pending: set[str],
    sample: int = 20,
    *,
    with_query: Iterable[str] = (),
) -> Completeness:
    """``with_query``: the unjoinable clicks whose query is in a DC's logs now
    (:func:`photon.ops.supersede.late_clicks`); a superseded click is joinable."""
    settled = outputs.unjoinable | outputs.too_old | outputs.unwritable
    count = count_joins(outputs.joined, inputs, settled=settled | pending)
    joined = {r["click_id"] for r in outputs.joined}
    lost = sorted(set(registered) - joined - settled)
    # Of the joinable clicks, those not still waiting (their query may yet come).
    joinable = set(inputs) - settled - (pending - joined)
    done = len(joinable & joined)
    late = sorted(set(with_query) - joined)
    both = sorted(outputs.unjoinable & joined)
    return Completeness(
        input_clicks=len(inputs),
        joined=count.joined,
        output_rows=count.output_rows,
        duplicates=count.duplicates,
        unjoinable=len(outputs.unjoinable),
        too_old=len(outputs.too_old),
        pending=len(pending & set(inputs)),
        missing=count.missing,
        lost=len(lost),
        unexpected=count.unexpected,
        wrong_query=count.wrong_query,
        registered=len(registered),
        complete_pct=100.0 if not joinable else round(100.0 * done / len(joinable), 4),
        unjoinable_with_query=len(late),
        joined_and_unjoinable=len(both),
        superseded=len(outputs.superseded),
        unwritable=len(outputs.unwritable & set(inputs)),
        missing_sample=count.missing_ids[:sample],
        lost_sample=lost[:sample],
        unjoinable_with_query_sample=late[:sample],
        joined_and_unjoinable_sample=both[:sample],
        duplicate_sample=[
            {"click_id": click, "objects": sorted(outputs.joined_in.get(click, []))}
            for click in count.duplicated_ids[:sample]
        ],
    )


# -- what became of each click ------------------------------------------------------

#: What a click of the window may have come to in a passing run: anything else
#: (``missing``, ``lost``, ``unjoinable_with_query``, ``joined_and_unjoinable``) fails
#: it, as it fails :attr:`Completeness.complete`.
SETTLED_OUTCOMES = ("joined", "unjoinable", "too_old", "unwritable", "pending")


def click_outcomes(
    inputs: dict[str, str],
    outputs: Outputs,
    registered: dict[str, str],
    pending: set[str],
    *,
    with_query: Iterable[str] = (),
) -> dict[str, str]:
    """Each click of the window (in the input logs, or registered) and what it came to,
    decided as :func:`completeness` counts it."""
    joined = {r["click_id"] for r in outputs.joined}
    late = set(with_query) - joined
    outcomes: dict[str, str] = {}
    for click in set(inputs) | set(registered) | joined | late:
        if click in joined:
            unjoinable_too = click in outputs.unjoinable
            outcomes[click] = "joined_and_unjoinable" if unjoinable_too else "joined"
        elif click in late:
            outcomes[click] = "unjoinable_with_query"
        elif click in outputs.unjoinable:
            outcomes[click] = "unjoinable"
        elif click in outputs.too_old:
            outcomes[click] = "too_old"
        elif click in outputs.unwritable:
            outcomes[click] = "unwritable"
        elif click in registered:
            outcomes[click] = "lost"  # registered by an attempt, in no output
        elif click in pending:
            outcomes[click] = "pending"
        else:
            outcomes[click] = "missing"
    return outcomes


# -- the Great Expectations suite -----------------------------------------------------


@dataclass
class ExpectationOutcome:
    expectation: str
    column: str
    success: bool
    element_count: int
    unexpected_count: int
    unexpected_sample: list[str]


def joined_frame(rows: list[dict[str, Any]], inputs: dict[str, str]) -> Any:
    """The joined rows with what the suite checks: latency and the input's query id."""
    import pandas as pd

    frame = pd.DataFrame(
        rows, columns=[*REQUIRED, *sorted({k for r in rows for k in r} - set(REQUIRED))]
    )
    click_ts = frame["click_id"].map(lambda c: ts_us(c) if isinstance(c, str) else None)
    frame["latency_s"] = (frame["joined_at_us"] - click_ts) / 1e6
    frame["query_id_matches_input"] = [
        c not in inputs or inputs[c] == q
        for c, q in zip(frame["click_id"], frame["query_id"], strict=True)
    ]
    return frame


def verdict_frame(
    rows: list[dict[str, Any]], inputs: dict[str, str], outcomes: dict[str, str]
) -> Any:
    """What the suite checks: a row per joined row (:func:`joined_frame`), and one per
    click of the window with no joined row, each with its ``outcome``
    (:func:`click_outcomes`) and whether it has output (``in_output``). So the suite,
    and the Data Docs it builds, pass exactly when the report does: no click twice, no
    click unsettled, every joined row well-formed."""
    import pandas as pd

    frame = joined_frame(rows, inputs)
    frame["outcome"] = [outcomes.get(c, "joined") for c in frame["click_id"]]
    frame["in_output"] = True
    with_rows = set(frame["click_id"])
    without = sorted(c for c in outcomes if c not in with_rows)
    rest = pd.DataFrame(
        {
            "click_id": without,
            "outcome": [outcomes[c] for c in without],
            "in_output": False,
            "query_id_matches_input": True,
        }
    )
    if rest.empty:
        return frame
    return pd.concat([frame, rest], ignore_index=True)


#: The Data Docs site GX builds for a run (pages and styles; its fonts and images are
#: cosmetic and left out of the bucket).
DATA_DOCS_SITE = "photon"
_DOCS_LEFT_OUT = ("static/fonts/", "static/images/")


def load_expectations_meanwhile() -> threading.Thread:
    """Import Great Expectations in a thread of its own, while the caller does other
    work (the verification job: while its Spark driver starts and reads the inputs,
    which wait on the JVM); join the thread before :func:`run_expectations`. The
    package's import loads every module that one uses. Nothing is lost if the import
    fails here: that one raises it again, with its message."""
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")

    def load() -> None:
        with contextlib.suppress(Exception):  # run_expectations imports it again, and says why
            importlib.import_module("great_expectations")

    thread = threading.Thread(target=load, name="load-great-expectations", daemon=True)
    thread.start()
    return thread


def run_expectations(
    frame: Any,
    *,
    latency_bound_s: float,
    max_clock_skew_s: float,
    run: str = "verify",
    docs_dir: Path | None = None,
) -> list[ExpectationOutcome]:
    """The suite over the joined rows, run as a GX Checkpoint; with ``docs_dir``, its
    ``UpdateDataDocsAction`` builds the run's Data Docs site there."""
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
    require("great_expectations", "verify", "verification's expectation suite")
    import great_expectations as gx
    from great_expectations.checkpoint import UpdateDataDocsAction, ValidationAction
    from great_expectations.core.run_identifier import RunIdentifier
    from great_expectations.data_context.types.base import ProgressBarsConfig
    from great_expectations.expectations.row_conditions import Column

    context = gx.get_context(mode="ephemeral")
    context.variables.progress_bars = ProgressBarsConfig(globally=False)
    actions: list[ValidationAction] = []
    if docs_dir is not None:
        context.add_data_docs_site(
            site_name=DATA_DOCS_SITE,
            site_config={
                "class_name": "SiteBuilder",
                "store_backend": {
                    "class_name": "TupleFilesystemStoreBackend",
                    "base_directory": str(docs_dir),
                },
                "site_index_builder": {"class_name": "DefaultSiteIndexBuilder"},
            },
        )
        actions.append(UpdateDataDocsAction(name="data_docs", site_names=[DATA_DOCS_SITE]))
    batch_definition = (
        context.data_sources.add_pandas("photon")
        .add_dataframe_asset("joined")
        .add_batch_definition_whole_dataframe("window")
    )
    suite = gx.ExpectationSuite(name="photon_joined_output")
    suite.add_expectation(
        gx.expectations.ExpectColumnValuesToBeUnique(
            column="click_id", description="No click is output twice (across every DC)."
        )
    )
    suite.add_expectation(gx.expectations.ExpectColumnValuesToNotBeNull(column="click_id"))
    has_output = "in_output" in frame.columns
    for column in REQUIRED[1:]:
        suite.add_expectation(
            gx.expectations.ExpectColumnValuesToNotBeNull(
                column=column,
                row_condition=Column("in_output") == True,  # noqa: E712
            )
            if has_output
            else gx.expectations.ExpectColumnValuesToNotBeNull(column=column)
        )
    if "outcome" in frame.columns:
        suite.add_expectation(
            gx.expectations.ExpectColumnValuesToBeInSet(
                column="outcome",
                value_set=list(SETTLED_OUTCOMES),
                description="Every click of the window is settled: joined, unjoinable, too "
                "old, unwritable, or still pending; none missing or lost (registered, in no "
                "output), none given up on whose query has come, none both joined and "
                "given up on.",
            )
        )
    suite.add_expectation(
        gx.expectations.ExpectColumnValuesToMatchRegex(column="query_id", regex=ID_PATTERN)
    )
    suite.add_expectation(
        gx.expectations.ExpectColumnValuesToBeInSet(
            column="query_id_matches_input", value_set=[True]
        )
    )
    suite.add_expectation(
        gx.expectations.ExpectColumnValuesToBeBetween(
            column="latency_s", min_value=-max_clock_skew_s, max_value=latency_bound_s
        )
    )
    suite = context.suites.add(suite)
    validation = context.validation_definitions.add(
        gx.ValidationDefinition(name=run, data=batch_definition, suite=suite)
    )
    checkpoint = context.checkpoints.add(
        gx.Checkpoint(
            name="photon_verify",
            validation_definitions=[validation],
            actions=actions,
            result_format="SUMMARY",
        )
    )
    checkpoint_result = checkpoint.run(
        batch_parameters={"dataframe": frame}, run_id=RunIdentifier(run_name=run)
    )
    [result] = checkpoint_result.run_results.values()
    outcomes = []
    for item in result.results:
        details = item.result or {}
        config = item.expectation_config
        outcomes.append(
            ExpectationOutcome(
                expectation=str(config.type) if config else "?",
                column=str(config.kwargs.get("column", "")) if config else "",
                success=bool(item.success),
                element_count=int(details.get("element_count") or 0),
                unexpected_count=int(details.get("unexpected_count") or 0),
                unexpected_sample=[str(v) for v in (details.get("partial_unexpected_list") or [])][
                    :10
                ],
            )
        )
    return outcomes


# -- the report -----------------------------------------------------------------------


@dataclass
class VerifyReport:
    run: str
    window_start: str
    window_end: str
    completeness: Completeness
    expectations: list[ExpectationOutcome]
    tokens_cleared: int = 0
    #: The run's Data Docs validation page, relative to its report (empty: none built)
    data_docs: str = ""

    @property
    def passed(self) -> bool:
        c = self.completeness
        return c.complete and c.duplicates == 0 and all(e.success for e in self.expectations)

    @property
    def failures(self) -> list[str]:
        failed = [
            f"{e.expectation}({e.column}): {e.unexpected_count} unexpected"
            for e in self.expectations
            if not e.success
        ]
        c = self.completeness
        failed += [f"{n} {what}" for n, what in ((c.missing, "missing"), (c.lost, "lost")) if n]
        failed += [
            f"{n} unjoinable {what}: photon_recover settles them"
            for n, what in (
                (c.unjoinable_with_query, "whose query is in the logs now"),
                (c.joined_and_unjoinable, "and joined all the same"),
            )
            if n
        ]
        if c.duplicate_sample:
            first = c.duplicate_sample[0]
            failed.append(
                f"{c.duplicates} duplicate rows: e.g. {first['click_id']} in "
                + ", ".join(first["objects"])
            )
        return failed

    def to_dict(self) -> dict[str, Any]:
        return {
            "run": self.run,
            "window_start": self.window_start,
            "window_end": self.window_end,
            "passed": self.passed,
            "failures": self.failures,
            "completeness": {**asdict(self.completeness), "complete": self.completeness.complete},
            "expectations": [asdict(e) for e in self.expectations],
            "tokens_cleared": self.tokens_cleared,
            "data_docs": self.data_docs,
        }


def report_keys(run: str) -> tuple[str, str]:
    base = f"reports/verify/{run}/"
    return base + "report.json", base + "report.html"


def render_html(report: VerifyReport) -> str:
    data = report.to_dict()
    verdict = "PASSED" if report.passed else "FAILED"
    colour = "#1a7f37" if report.passed else "#cf222e"
    rows = "".join(
        f"<tr><td>{html.escape(k)}</td><td>{html.escape(str(v))}</td></tr>"
        for k, v in data["completeness"].items()
        if k != "duplicate_sample"
    )
    duplicates = "".join(
        f"<tr><td>{html.escape(d['click_id'])}</td>"
        f"<td>{'<br>'.join(html.escape(k) for k in d['objects'])}</td></tr>"
        for d in report.completeness.duplicate_sample
    )
    if duplicates:
        rows += (
            "</table><h2>Duplicated clicks and the objects holding them</h2>"
            f"<table><tr><th>click_id</th><th>objects</th></tr>{duplicates}"
        )
    expectations = "".join(_expectation_row(e) for e in report.expectations)
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>Photon verification {html.escape(report.run)}</title>
<style>body{{font-family:sans-serif;margin:2em}}table{{border-collapse:collapse}}
td,th{{border:1px solid #ccc;padding:4px 8px;text-align:left}}</style></head>
<body><h1>Photon verification: <span style="color:{colour}">{verdict}</span></h1>
<p>Run {html.escape(report.run)}; clicks with event time in
[{html.escape(report.window_start)}, {html.escape(report.window_end)}).
Tokens cleared: {report.tokens_cleared}.</p>
<p>{html.escape("; ".join(report.failures) or "no failures")}</p>
{_data_docs_link(report)}
<h2>Completeness</h2><table>{rows}</table>
<h2>Expectations (Great Expectations)</h2>
<table><tr><th>expectation</th><th>column</th><th>result</th><th>rows</th><th>unexpected</th>
<th>sample</th></tr>{expectations}</table></body></html>
"""


def _data_docs_link(report: VerifyReport) -> str:
    if not report.data_docs:
        return ""
    page = html.escape(report.data_docs, quote=True)
    return (
        f"<p>Great Expectations' own view of this run: <a href='{page}'>its validation "
        "result</a> (the Data Docs site: <a href='data_docs/index.html'>index</a>).</p>"
    )


def _expectation_row(e: ExpectationOutcome) -> str:
    colour, verdict = ("#1a7f37", "ok") if e.success else ("#cf222e", "FAILED")
    cells = [
        html.escape(e.expectation),
        html.escape(e.column),
        f"<span style='color:{colour}'>{verdict}</span>",
        str(e.element_count),
        str(e.unexpected_count),
        html.escape(", ".join(e.unexpected_sample)),
    ]
    return "<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>"


def write_report(store: ObjectStore, report: VerifyReport) -> tuple[str, str]:
    json_key, html_key = report_keys(report.run)
    store.put(json_key, json.dumps(report.to_dict(), indent=2).encode())
    store.put(html_key, render_html(report).encode())
    return json_key, html_key


def data_docs_prefix(run: str) -> str:
    return f"reports/verify/{run}/data_docs/"


def validation_pages(site: Path) -> list[Path]:
    """The Data Docs pages of the site's validation results (static HTML: they render
    without the CDN scripts the site's index needs to list them)."""
    return sorted((site / "validations").rglob("*.html"))


#: Data Docs pages take their look from CDNs (Bootstrap and its kin), which a closed
#: network does not reach: without them a page is bare text. These few rules, inlined
#: in each page, keep its tables, cards and verdicts readable anywhere.
_OFFLINE_STYLE = """<style id="photon-offline">
body{font-family:system-ui,sans-serif;margin:1.5em;color:#1f2328}
table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #d0d7de;padding:4px 8px}
.card{border:1px solid #d0d7de;border-radius:6px;margin:1em 0;padding:.5em 1em}
.text-danger,.badge-danger{color:#cf222e}.text-success,.badge-success{color:#1a7f37}
.badge{font-weight:600}.hide,.d-none,.modal{display:none}
</style>"""


def offline_styled(page: bytes) -> bytes:
    """A Data Docs page with :data:`_OFFLINE_STYLE` before its ``</head>`` (the CDN
    styles, when they load, come after it and win)."""
    head = page.find(b"<head>")
    if head < 0 or b'id="photon-offline"' in page:
        return page
    at = head + len(b"<head>")
    return page[:at] + _OFFLINE_STYLE.encode() + page[at:]


def publish_data_docs(store: ObjectStore, run: str, site: Path) -> list[str]:
    """Put the run's Data Docs site in the bucket, beside its report; the keys. Its
    pages carry a few inline styles, so that they read well without the CDNs."""
    keys = []
    for path in sorted(p for p in site.rglob("*") if p.is_file()):
        relative = path.relative_to(site).as_posix()
        if relative.startswith(_DOCS_LEFT_OUT):
            continue
        key = data_docs_prefix(run) + relative
        data = path.read_bytes()
        store.put(key, offline_styled(data) if relative.endswith(".html") else data)
        keys.append(key)
    return keys


def read_report(store: ObjectStore, run: str) -> dict[str, Any] | None:
    data = store.get(report_keys(run)[0])
    return None if data is None else dict(json.loads(data))


def clear_confirmed_tokens(
    registry: IdRegistry, joined: Iterable[dict[str, Any]], registered: dict[str, str]
) -> int:
    """Clear the tokens of ids in the output that still hold one."""
    confirmed = sorted({r["click_id"] for r in joined} & {i for i, t in registered.items() if t})
    return registry.clear_tokens(EventId.parse(i) for i in confirmed) if confirmed else 0


def verify(
    settings: PhotonSettings,
    store: ObjectStore,
    registry: IdRegistry,
    window: Window,
    *,
    run: str,
    latency_bound_s: float,
    clear_tokens: bool,
    inputs: dict[str, str] | None = None,
) -> VerifyReport:
    """The whole check in plain Python; the Spark job passes ``inputs`` it computed."""
    registered = registry.registered(window.start_us, window.end_us)
    pending = pending_retries(settings)
    outputs = read_outputs(store, window)
    if inputs is None:
        inputs = input_clicks(click_files(settings), window)
    late = late_clicks(settings, outputs.records, {r["click_id"] for r in outputs.joined})
    result = completeness(inputs, outputs, registered, pending, with_query=late.with_query)
    clicks = click_outcomes(inputs, outputs, registered, pending, with_query=late.with_query)
    with tempfile.TemporaryDirectory(prefix="photon-data-docs-") as docs:
        outcomes = run_expectations(
            verdict_frame(outputs.joined, inputs, clicks),
            latency_bound_s=latency_bound_s,
            max_clock_skew_s=settings.shards.max_clock_skew_s,
            run=run,
            docs_dir=Path(docs),
        )
        publish_data_docs(store, run, Path(docs))
        pages = [p.relative_to(docs).as_posix() for p in validation_pages(Path(docs))]
    report = VerifyReport(run, window.start.isoformat(), window.end.isoformat(), result, outcomes)
    report.data_docs = f"data_docs/{pages[0]}" if pages else ""
    if clear_tokens and all(e.success for e in outcomes):
        report.tokens_cleared = clear_confirmed_tokens(registry, outputs.joined, registered)
    write_report(store, report)
    return report
