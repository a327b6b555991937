"""What the pipelines write to the object store, as Parquet, one object per micro-batch
and event hour.

* ``joined/dc=<dc>/hour=<hour>/<attempt>/<batch>.parquet``: joined clicks, with
  ``click_id``, ``query_id``, ``dc``, ``joined_at_us``, ``token``, then the
  adapter's fields;
* ``unjoinable/dc=<dc>/hour=<hour>/<attempt>/<batch>.parquet``: clicks whose
  query never came, with the reason and where the click was read;
* ``too_old/dc=<dc>/hour=<hour>/<attempt>/<batch>.parquet``: clicks below
  their shard's GC boundary;
* ``quarantine/dc=<dc>/stream=<s>/<attempt>/<batch>.parquet``: lines that
  could not be used, with file, offset, reason and the raw bytes (a replay's
  records the object lacks go to its next part, as click rows do);
* ``superseded/dc=<dc>/hour=<hour>/<run>.parquet``: written by recovery, not by
  a pipeline: marks on DC ``<dc>``'s unjoinable records of clicks whose query
  came after all, each re-injected or found joined (photon.ops.supersede).

``<hour>`` is the UTC hour of the click's own time (the timestamp in its id),
``2026-11-26T01``: a batch's clicks of two hours go to two objects, and an
event-time window maps to one prefix per DC and hour (:func:`window_prefixes`),
so whoever checks a window (verification, recovery) lists and reads that
window's objects, not every object ever written (docs/operations.md, "What a
run reads: its window only"). ``<attempt>`` names the pipeline's checkpoint (stable across
restarts of the same checkpoint) and ``<batch>`` the micro-batch, so a
replayed batch produces the same keys; objects are written only where none is
(write-once, an S3 conditional put), so the first complete write of a batch
stands.

A batch's clicks are split into shard groups (photon.join.group), each
writing its own object, ``<batch>.g<group>.parquet`` (``<batch>.parquet``
when the batch is one group). A replay need not decide as its first try did
(a query arrived meanwhile): its joined and unjoinable rows that the batch's
objects lack go to the next part of their object, ``<….r<n>.parquet``, so
none is dropped; rows any of the batch's objects have are not written again.
Every joined row holds the batch's token, which won its registration, so this
adds no duplicate.

How it fails: see :mod:`photon.storage` (bounded retries, then an error that
fails the batch, which Spark runs again).
"""

from __future__ import annotations

import functools
import io
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, NamedTuple

import pyarrow as pa
import pyarrow.parquet as pq

from photon import metrics
from photon.events.records import QuarantineRecord
from photon.storage import ObjectStore

JOINED_BASE = pa.schema(
    [
        ("click_id", pa.string()),
        ("query_id", pa.string()),
        ("dc", pa.string()),
        ("joined_at_us", pa.int64()),
        ("token", pa.string()),
    ]
)
UNJOINABLE = pa.schema(
    [
        ("click_id", pa.string()),
        ("query_id", pa.string()),
        ("dc", pa.string()),
        ("reason", pa.string()),
        ("attempts", pa.int64()),
        ("first_seen_us", pa.int64()),
        ("decided_at_us", pa.int64()),
        ("file", pa.string()),
        ("offset", pa.int64()),
        ("raw", pa.string()),
    ]
)
SUPERSEDED = pa.schema(
    [
        ("click_id", pa.string()),
        ("query_id", pa.string()),
        ("dc", pa.string()),  # the DC whose unjoinable record it supersedes
        ("into_dc", pa.string()),  # the DC it was re-injected into ("": found joined)
        ("superseded_at_us", pa.int64()),
        ("run", pa.string()),
        ("action", pa.string()),  # "reinjected" or "joined"
    ]
)
QUARANTINE = pa.schema(
    [
        ("dc", pa.string()),
        ("stream", pa.string()),
        ("file", pa.string()),
        ("offset", pa.int64()),
        ("reason", pa.string()),
        ("detail", pa.string()),
        ("raw_b64", pa.string()),
    ]
)


#: The kinds of click output, each laid out by DC and event hour.
CLICK_KINDS = ("joined", "unjoinable", "too_old")
#: Every kind of output a pipeline writes, clicks' and quarantined lines'.
OUTPUT_KINDS = (*CLICK_KINDS, "quarantine")
#: Recovery's marks on unjoinable records, laid out like the clicks.
SUPERSEDED_KIND = "superseded"
#: The kinds laid out by DC and event hour, so that a window reads its own objects only.
WINDOWED_KINDS = (*CLICK_KINDS, SUPERSEDED_KIND)
HOUR_US = 3600 * 1_000_000
#: How an event hour is named in the keys (UTC): ``2026-11-26T01``.
HOUR_FORMAT = "%Y-%m-%dT%H"


def output_prefix(kind: str, dc: str | None = None) -> str:
    """Where all output of a kind is (``joined/``), or one DC's (``joined/dc=a/``)."""
    if kind not in (*OUTPUT_KINDS, SUPERSEDED_KIND):
        known = ", ".join((*OUTPUT_KINDS, SUPERSEDED_KIND))
        raise ValueError(f"kind must be one of {known}, not {kind!r}")
    return f"{kind}/" if dc is None else f"{kind}/dc={dc}/"


def event_hour(click_id: str) -> str:
    """The UTC hour of a click's own time (the timestamp its id ends with): ``2026-11-26T01``."""
    return _hour_name(int(click_id.rsplit(":", 1)[1]) // HOUR_US)


def hours_between(start_us: int, end_us: int) -> list[str]:
    """The event hours that clicks with times in ``[start_us, end_us)`` fall in."""
    first = start_us // HOUR_US
    last = (end_us - 1) // HOUR_US
    return [_hour_name(h) for h in range(first, last + 1)]


@functools.lru_cache(maxsize=4096)
def _hour_name(hours_since_epoch: int) -> str:
    # Asked once for every row a group writes, of a handful of hours: a datetime and a
    # strftime a row were ~4% of a group task's time (docs/join.md, "Where a group
    # task's time goes").
    return datetime.fromtimestamp(hours_since_epoch * 3600, UTC).strftime(HOUR_FORMAT)


def joined_key(dc: str, attempt: str, batch: str, hour: str) -> str:
    return f"{output_prefix('joined', dc)}hour={hour}/{attempt}/{batch}.parquet"


def unjoinable_key(dc: str, attempt: str, batch: str, hour: str, *, too_old: bool = False) -> str:
    kind = "too_old" if too_old else "unjoinable"
    return f"{output_prefix(kind, dc)}hour={hour}/{attempt}/{batch}.parquet"


def superseded_key(dc: str, hour: str, run: str) -> str:
    return f"{output_prefix(SUPERSEDED_KIND, dc)}hour={hour}/{run}.parquet"


def window_prefixes(store: ObjectStore, kind: str, start_us: int, end_us: int) -> list[str]:
    """The prefixes under which ``kind``'s objects of clicks in the window are: one per
    DC that ever wrote (listed, so a DC no longer configured is not forgotten) and hour."""
    if kind not in WINDOWED_KINDS:
        raise ValueError(f"kind must be one of {', '.join(WINDOWED_KINDS)}, not {kind!r}")
    hours = hours_between(start_us, end_us)
    return [f"{dc}hour={hour}/" for dc in store.folders(output_prefix(kind)) for hour in hours]


def attempt_keys(store: ObjectStore, kind: str, dc: str, attempt: str) -> list[str]:
    """Every key of ``kind`` one attempt of a DC wrote, whatever its hours."""
    return [
        key
        for hour in store.folders(output_prefix(kind, dc))
        for key in store.keys(f"{hour}{attempt}/")
    ]


def click_ids_in(store: ObjectStore, keys: Sequence[str]) -> list[str]:
    """The click ids of the objects ``keys`` (read together: ObjectStore.read_parquet)."""
    table = store.read_parquet(keys, columns=["click_id"])
    ids: list[str] = table.column("click_id").to_pylist() if table.num_rows else []
    return ids


def by_hour(rows: Sequence[Mapping[str, Any]]) -> dict[str, list[Mapping[str, Any]]]:
    """Rows grouped by their click's event hour, hours in order."""
    return {hour: [rows[n] for n in indices] for hour, indices in rows_by_hour(rows).items()}


def rows_by_hour(rows: Sequence[Mapping[str, Any]]) -> dict[str, list[int]]:
    """The rows' indices grouped by their click's event hour, hours in order."""
    hours: dict[str, list[int]] = {}
    for index, row in enumerate(rows):
        hours.setdefault(event_hour(row["click_id"]), []).append(index)
    return dict(sorted(hours.items()))


def quarantine_key(dc: str, stream: str, attempt: str, batch: str) -> str:
    return f"{output_prefix('quarantine', dc)}stream={stream}/{attempt}/{batch}.parquet"


def encode(rows: Sequence[Mapping[str, Any]], schema: pa.Schema) -> bytes:
    return encode_table(pa.Table.from_pylist(list(rows), schema=schema))


def encode_table(table: pa.Table) -> bytes:
    sink = io.BytesIO()
    pq.write_table(table, sink, compression="zstd")
    return sink.getvalue()


#: What building or writing rows that do not fit, or unifying schemas that differ, raises.
UNFIT = (pa.ArrowException, ValueError, TypeError, OverflowError)


class RowCheck(NamedTuple):
    """What :func:`check_rows` found: the rows that cannot be written, by index, with
    the reason; the schema to write the others with; and, when every row fits, their
    table under that schema (what writing them builds again otherwise)."""

    bad: dict[int, str]
    schema: pa.Schema
    table: pa.Table | None


def check_rows(rows: Sequence[Mapping[str, Any]], schema: pa.Schema | None) -> RowCheck:
    """The rows that cannot be written under ``schema`` (None: inferred from the rows),
    by index, each with the reason; the schema to write the others with; and the
    rows' table when none is bad.

    Checked before a click is registered (docs/join.md, "Why none is lost"): a
    value that passes decoding and the adapter but does not fit (an integer beyond
    int64 in an int64 column, a string that is not UTF-8) would fail the write
    after the commit, and every replay the same way. The rows are built into a
    table once; only when that fails is each looked at on its own. Without a
    schema, each row must also fit the types the rows before it set (in order),
    and the schema returned is the one the rows kept were checked under, written
    to Parquet here too (an empty struct builds but does not write): any subset of
    them (the clicks whose registration won) writes under it, where a schema
    inferred from the subset alone might not.
    """
    if schema is not None:
        table = _built(rows, schema)
        if isinstance(table, pa.Table):
            return RowCheck({}, schema, table)
        bad = {n: r for n, row in enumerate(rows) if (r := _unfit([row], schema)) is not None}
        return RowCheck(bad, schema, None)
    whole = _built(rows, None)
    if isinstance(whole, pa.Table):
        return RowCheck({}, whole.schema, whole)
    bad = {}
    so_far = pa.schema([])
    for index, row in enumerate(rows):
        alone = _built([row], None)
        if isinstance(alone, pa.Table):  # its types against the earlier rows'
            try:
                so_far = pa.unify_schemas([so_far, alone.schema])
                continue
            except UNFIT as exc:
                alone = f"its types differ from the batch's other rows': {_said(exc)}"
        bad[index] = alone
    kept = [row for n, row in enumerate(rows) if n not in bad]
    reason = _unfit(kept, so_far)
    if reason is not None:  # never seen: then none of them is registered
        bad |= {n: reason for n in range(len(rows)) if n not in bad}
    return RowCheck(bad, so_far, None)


def _unfit(rows: Sequence[Mapping[str, Any]], schema: pa.Schema | None) -> str | None:
    """Why ``rows`` cannot be written together under ``schema`` (None: inferred); None
    if they can."""
    built = _built(rows, schema)
    return built if isinstance(built, str) else None


def _built(rows: Sequence[Mapping[str, Any]], schema: pa.Schema | None) -> pa.Table | str:
    """The rows' table under ``schema`` (None: inferred), or why they cannot be written
    together. A given schema of plain types always writes once its table builds; one
    inferred, or any with nested types, is written to Parquet to be sure."""
    try:
        if schema is None:
            table = _inferred_table(rows)
        else:
            table = pa.Table.from_pylist(list(rows), schema=schema)
        if schema is None or any(pa.types.is_nested(f.type) for f in table.schema):
            pq.write_table(table, pa.BufferOutputStream())
    except UNFIT as exc:
        return _said(exc)
    return table


def _inferred_table(rows: Sequence[Mapping[str, Any]]) -> pa.Table:
    """The table of ``rows`` with every field any of them has, in the order first
    seen, each typed from all its values (a row without it: null there). Not
    ``Table.from_pylist(rows)``: that takes its columns from the first row alone,
    and a field only later rows hold was dropped from the output unsaid, and its
    values never checked."""
    names = dict.fromkeys(name for row in rows for name in row)
    return pa.Table.from_pydict({name: [row.get(name) for row in rows] for name in names})


def _said(exc: BaseException) -> str:
    """An error as one UTF-8 line (a value in it may hold what UTF-8 cannot)."""
    text = f"{type(exc).__name__}: {exc}"
    return text.encode("utf-8", "backslashreplace").decode("utf-8")[:500]


def decode(data: bytes) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = pq.read_table(io.BytesIO(data), use_threads=False).to_pylist()
    return rows


def rows_by_object(store: ObjectStore, prefix: str) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """(key, rows) of every object under ``prefix`` (objects deleted meanwhile are skipped)."""
    for key in store.keys(prefix):
        data = store.get(key)
        if data is not None:
            yield key, decode(data)


def rows_under(store: ObjectStore, prefix: str) -> list[dict[str, Any]]:
    """Every row of every object under ``prefix`` (objects deleted meanwhile are skipped)."""
    return [row for _, rows in rows_by_object(store, prefix) for row in rows]


class OutputWriter:
    """Writes one DC's batches; every write is write-once by key."""

    def __init__(self, store: ObjectStore, dc: str, attempt: str) -> None:
        self.store = store
        self.dc = dc
        self.attempt = attempt

    def joined(
        self,
        batch: str,
        rows: Sequence[Mapping[str, Any]],
        schema: pa.Schema,
        table: pa.Table | None = None,
    ) -> list[str]:
        """Write a batch's joined rows, one object per event hour; the keys written.

        ``table``: the rows' table under ``schema`` (:func:`check_rows` built it), row
        for row, so that it is not built again."""
        if table is not None and table.num_rows != len(rows):
            raise ValueError(f"a table of {table.num_rows} rows for {len(rows)} rows")
        keys = []
        for hour, indices in rows_by_hour(rows).items():
            hour_table = None
            if table is not None:
                hour_table = table if len(indices) == len(rows) else table.take(indices)
            key = joined_key(self.dc, self.attempt, batch, hour)
            hour_rows = [rows[n] for n in indices]
            keys.append(self._put_rows(key, hour_rows, schema, "joined", table=hour_table))
        return keys

    def unjoinable(
        self, batch: str, rows: Sequence[Mapping[str, Any]], *, too_old: bool = False
    ) -> list[str]:
        """Write a batch's unjoinable (or too old) rows, one object per event hour."""
        kind = "too_old" if too_old else "unjoinable"
        return [
            self._put_rows(
                unjoinable_key(self.dc, self.attempt, batch, hour, too_old=too_old),
                hour_rows,
                UNJOINABLE,
                kind,
            )
            for hour, hour_rows in by_hour(rows).items()
        ]

    def written_ids(self, batch: str, hours: Iterable[str], *, kind: str = "joined") -> set[str]:
        """The click ids of every object a batch wrote of a kind (``joined``, ``too_old``,
        ``unjoinable``) in the given event hours: all its groups' parts, whatever their
        number. A click is only ever written under its own hour, so the hours of the
        clicks asked about are all that need looking at."""
        written: set[str] = set()
        for hour in sorted(set(hours)):
            key = (
                joined_key(self.dc, self.attempt, batch, hour)
                if kind == "joined"
                else unjoinable_key(self.dc, self.attempt, batch, hour, too_old=kind == "too_old")
            )
            for rows in self._parts_of(key):
                written.update(r["click_id"] for r in rows)
        return written

    def _parts_of(self, key: str) -> Iterator[list[dict[str, Any]]]:
        """The rows of every object written under ``key``'s name: its parts (``.rN``)
        and, for a batch's name, each group's (``.gNNN``)."""
        for part_key in self.store.keys(key.removesuffix("parquet")):
            data = self.store.get(part_key)
            if data is not None:
                yield decode(data)

    def quarantine(
        self,
        batch: str,
        stream: str,
        records: Sequence[QuarantineRecord],
        *,
        replay_of: str | None = None,
    ) -> str | None:
        """Write a batch's quarantine records; those its object lacks (a replay may
        report more: a click found unwritable, a file that went meanwhile) go to the
        object's next part, as click rows do. The key written; None when none is new.

        ``batch`` may be a group's part of a batch (``<batch>.g<n>``); in a replay of
        that batch (``replay_of``), records already in any of the batch's quarantine
        objects are left out too: a try of the batch by a version whose driver wrote
        every group's records under the batch's own name wrote them there."""
        if not records:
            return None
        rows = [{"dc": self.dc, "stream": stream, **r.to_dict()} for r in records]
        key = quarantine_key(self.dc, stream, self.attempt, batch)
        if replay_of is not None:
            whole = quarantine_key(self.dc, stream, self.attempt, replay_of)
            written = {_quarantined(r) for part in self._parts_of(whole) for r in part}
            rows = [r for r in rows if _quarantined(r) not in written]
            if not rows:
                return None
        return self._put_rows(key, rows, QUARANTINE, "quarantine", identity=_quarantined)

    def _put_rows(
        self,
        key: str,
        rows: Sequence[Mapping[str, Any]],
        schema: pa.Schema,
        kind: str,
        *,
        identity: Callable[[Mapping[str, Any]], object] = lambda row: row["click_id"],
        table: pa.Table | None = None,
    ) -> str:
        """Write a batch's rows: the rows its existing parts lack (by ``identity``, a
        click's id by default) go to its next part. ``table``: the rows' table, row for
        row, written as the first part.

        Returns the key of the part written, or of the first part when nothing was new.
        """
        remaining = list(rows)
        part = 0
        while True:
            part_key = key if part == 0 else key.removesuffix(".parquet") + f".r{part}.parquet"
            encoded = encode(remaining, schema) if table is None else encode_table(table)
            table = None  # a later part holds only what the earlier ones lack
            if self.store.put(part_key, encoded, if_absent=True):
                metrics.OUTPUT_OBJECTS.labels(self.dc, kind).inc()
                return part_key
            data = self.store.get(part_key)
            written = {identity(r) for r in decode(data)} if data is not None else set()
            remaining = [r for r in remaining if identity(r) not in written]
            if not remaining:
                metrics.OUTPUT_OBJECTS.labels(self.dc, "skipped").inc()
                return key
            part += 1


def _quarantined(row: Mapping[str, Any]) -> tuple[str, int, str]:
    """What a quarantine row is about: a stretch of a file, and why."""
    return (row["file"], row["offset"], row["reason"])
