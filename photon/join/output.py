"""What the pipelines write to the object store, as Parquet, one object per micro-batch.

* ``joined/dc=<dc>/<attempt>/<batch>.parquet``: joined clicks, with
  ``click_id``, ``query_id``, ``dc``, ``joined_at_us``, ``token``, then the
  adapter's fields;
* ``unjoinable/dc=<dc>/<attempt>/<batch>.parquet``: clicks whose query never
  came, with the reason and where the click was read;
* ``too_old/dc=<dc>/<attempt>/<batch>.parquet``: clicks below their shard's
  GC boundary;
* ``quarantine/dc=<dc>/stream=<s>/<attempt>/<batch>.parquet``: lines that
  could not be used, with file, offset, reason and the raw bytes.

``<attempt>`` names the pipeline's checkpoint (stable across restarts of the
same checkpoint) and ``<batch>`` the micro-batch, so a replayed batch
produces the same keys; objects are written only where none is (write-once,
an S3 conditional put), so the first complete write of a batch stands.

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

import io
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

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


def joined_key(dc: str, attempt: str, batch: str) -> str:
    return f"joined/dc={dc}/{attempt}/{batch}.parquet"


def unjoinable_key(dc: str, attempt: str, batch: str, *, too_old: bool = False) -> str:
    prefix = "too_old" if too_old else "unjoinable"
    return f"{prefix}/dc={dc}/{attempt}/{batch}.parquet"


def quarantine_key(dc: str, stream: str, attempt: str, batch: str) -> str:
    return f"quarantine/dc={dc}/stream={stream}/{attempt}/{batch}.parquet"


def encode(rows: Sequence[Mapping[str, Any]], schema: pa.Schema) -> bytes:
    table = pa.Table.from_pylist(list(rows), schema=schema)
    sink = io.BytesIO()
    pq.write_table(table, sink, compression="zstd")
    return sink.getvalue()


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
        self, batch: str, rows: Sequence[Mapping[str, Any]], schema: pa.Schema
    ) -> str | None:
        key = joined_key(self.dc, self.attempt, batch)
        return self._put_clicks(key, rows, schema, "joined")

    def unjoinable(
        self, batch: str, rows: Sequence[Mapping[str, Any]], *, too_old: bool = False
    ) -> str | None:
        key = unjoinable_key(self.dc, self.attempt, batch, too_old=too_old)
        return self._put_clicks(key, rows, UNJOINABLE, "too_old" if too_old else "unjoinable")

    def written_ids(self, batch: str, *, kind: str = "joined") -> set[str]:
        """The click ids of every object a batch wrote of a kind (``joined``, ``too_old``,
        ``unjoinable``): all its groups' parts, whatever their number."""
        key = (
            joined_key(self.dc, self.attempt, batch)
            if kind == "joined"
            else unjoinable_key(self.dc, self.attempt, batch, too_old=kind == "too_old")
        )
        written: set[str] = set()
        for part_key in self.store.keys(key.removesuffix("parquet")):
            data = self.store.get(part_key)
            if data is not None:
                written.update(r["click_id"] for r in decode(data))
        return written

    def quarantine(
        self, batch: str, stream: str, records: Sequence[QuarantineRecord]
    ) -> str | None:
        rows = [{"dc": self.dc, "stream": stream, **r.to_dict()} for r in records]
        key = quarantine_key(self.dc, stream, self.attempt, batch)
        return self._put(key, rows, QUARANTINE, "quarantine")

    def _put_clicks(
        self, key: str, rows: Sequence[Mapping[str, Any]], schema: pa.Schema, kind: str
    ) -> str | None:
        """Write a batch's click rows: the rows its existing parts lack go to its next part.

        Returns the key of the part written, or of the first part when nothing was new.
        """
        if not rows:
            return None
        remaining = list(rows)
        part = 0
        while True:
            part_key = key if part == 0 else key.removesuffix(".parquet") + f".r{part}.parquet"
            if self.store.put(part_key, encode(remaining, schema), if_absent=True):
                metrics.OUTPUT_OBJECTS.labels(self.dc, kind).inc()
                return part_key
            data = self.store.get(part_key)
            written = {r["click_id"] for r in decode(data)} if data is not None else set()
            remaining = [r for r in remaining if r["click_id"] not in written]
            if not remaining:
                metrics.OUTPUT_OBJECTS.labels(self.dc, "skipped").inc()
                return key
            part += 1

    def _put(
        self, key: str, rows: Sequence[Mapping[str, Any]], schema: pa.Schema, kind: str
    ) -> str | None:
        """Write ``rows`` under ``key`` unless it exists; the key, or None when no rows."""
        if not rows:
            return None
        wrote = self.store.put(key, encode(rows, schema), if_absent=True)
        metrics.OUTPUT_OBJECTS.labels(self.dc, kind if wrote else "skipped").inc()
        return key
