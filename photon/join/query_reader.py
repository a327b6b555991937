"""The query reader: one micro-batch of query log lines into the two EventStores.

Per batch it decodes the lines (bad ones are quarantined), puts every query
into the CacheEventStore (best-effort: Redis may be down), and writes the
batch's log-file-map entries as one delta run under
``logmap/dc=<dc>/delta/<attempt>-<batch>.parquet``. The map builder's state
moves on only after that run is stored, so a replayed batch emits every entry
its lines need again.

How it fails: object-store errors fail the batch (Spark replays it); a
replayed batch rewrites its run under the same key (entries are an index:
a rewrite with more or other valid entries is harmless).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import structlog

from photon import metrics
from photon.events.records import QuarantineRecord, QueryEvent, Stream, decode_line
from photon.join.cache import CacheEventStore
from photon.join.logmap import LogFileMapBuilder, QueryLine, delta_prefix, encode_run
from photon.join.output import OutputWriter
from photon.logs.reader import LogLine
from photon.storage import ObjectStore

log = structlog.get_logger(__name__)


@dataclass(slots=True)
class QueryReaderTotals:
    batches: int = 0
    lines: int = 0
    queries: int = 0
    quarantined: int = 0
    cached: int = 0
    map_entries: int = 0

    def to_dict(self) -> dict[str, int]:
        return {k: getattr(self, k) for k in self.__slots__}


@dataclass(slots=True)
class QueryBatchReport:
    batch: str
    lines: int = 0
    queries: int = 0
    quarantined: int = 0
    cached: int = 0
    map_entries: int = 0
    map_run: str | None = None


def delta_run_key(dc: str, attempt: str, batch: str) -> str:
    return f"{delta_prefix(dc)}{attempt}-{batch}.parquet"


class QueryReader:
    def __init__(
        self,
        *,
        dc: str,
        attempt: str,
        cache: CacheEventStore,
        store: ObjectStore,
        output: OutputWriter,
        builder: LogFileMapBuilder,
    ) -> None:
        self.dc = dc
        self.attempt = attempt
        self.cache = cache
        self.store = store
        self.output = output
        self.builder = builder
        self.totals = QueryReaderTotals()

    def process(
        self,
        batch: str,
        lines: Sequence[LogLine],
        truncations: Sequence[QuarantineRecord] = (),
    ) -> QueryBatchReport:
        """One micro-batch; ``truncations`` (files that shrank) are quarantined too."""
        started = time.perf_counter()
        report = QueryBatchReport(batch=batch, lines=len(lines))
        raw_by_id: dict[str, bytes] = {}
        positions: list[QueryLine] = []
        quarantined: list[QuarantineRecord] = list(truncations)
        for line in lines:
            decoded = decode_line(Stream.QUERIES, line.file, line.offset, line.raw)
            if isinstance(decoded, QuarantineRecord):
                quarantined.append(decoded)
                continue
            assert isinstance(decoded, QueryEvent)
            raw_by_id[str(decoded.query_id)] = line.raw
            positions.append(QueryLine(decoded.query_id, line.file, line.offset))
        report.queries = len(positions)
        report.quarantined = len(quarantined)
        if quarantined:
            self.output.quarantine(batch, Stream.QUERIES.value, quarantined)
            for record in quarantined:
                metrics.QUARANTINED_LINES.labels(
                    self.dc, Stream.QUERIES.value, str(record.reason)
                ).inc()

        report.cached = self.cache.put_many(raw_by_id)
        entries, state = self.builder.plan(positions)
        if entries:
            report.map_run = delta_run_key(self.dc, self.attempt, batch)
            self.store.put(report.map_run, encode_run(entries))
            metrics.OUTPUT_OBJECTS.labels(self.dc, "logmap").inc()
        self.builder.commit(state)
        report.map_entries = len(entries)
        metrics.QUERIES_CACHED.labels(self.dc).inc(report.cached)
        metrics.LOGMAP_ENTRIES.labels(self.dc).inc(len(entries))
        metrics.LINES_READ.labels(self.dc, Stream.QUERIES.value).inc(len(lines))
        totals = self.totals
        totals.batches += 1
        totals.lines += report.lines
        totals.queries += report.queries
        totals.quarantined += report.quarantined
        totals.cached += report.cached
        totals.map_entries += report.map_entries
        seconds = round(time.perf_counter() - started, 3)
        metrics.BATCH_SECONDS.labels(self.dc, "query_reader").observe(seconds)
        log.info(
            "query_reader.batch",
            dc=self.dc,
            batch=batch,
            seconds=seconds,
            lines=report.lines,
            cached=report.cached,
            map_entries=report.map_entries,
            quarantined=report.quarantined,
        )
        return report
