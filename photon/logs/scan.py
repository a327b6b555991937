"""Read a DC's logs end to end: events, duplicates and quarantined lines, counted.

This is the reader and the decoder together, as the pipelines will use them;
``photon logs scan`` and the tests use it to check logs against a manifest.
How it fails: bad lines never stop the scan: each becomes a quarantine record
and a count; a DC with no logs scans as empty.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from photon import metrics
from photon.events.records import ClickEvent, QuarantineRecord, QueryEvent, Stream, decode_line
from photon.logs.reader import GrowingLogReader, LogLine

_SLICE_BYTES = 8 << 20


@dataclass(slots=True)
class StreamScan:
    files: int = 0
    lines: int = 0
    size_bytes: int = 0
    events: int = 0
    distinct_ids: set[str] = field(default_factory=set)
    quarantined: list[QuarantineRecord] = field(default_factory=list)

    @property
    def duplicates(self) -> int:
        return self.events - len(self.distinct_ids)

    def reasons(self) -> Counter[str]:
        return Counter(str(q.reason) for q in self.quarantined)


@dataclass(slots=True)
class DcScan:
    dc: str
    streams: dict[Stream, StreamScan]
    click_query_ids: dict[str, str] = field(default_factory=dict)


def scan_dc(logs_root: Path, dc: str) -> DcScan:
    result = DcScan(dc=dc, streams={})
    for stream in Stream:
        reader = GrowingLogReader(logs_root / dc / stream.value)
        scan = StreamScan(files=len(reader.files()))
        for line in _all_lines(reader, scan):
            decoded = decode_line(stream, line.file, line.offset, line.raw)
            if isinstance(decoded, QuarantineRecord):
                scan.quarantined.append(decoded)
            else:
                scan.events += 1
                if isinstance(decoded, ClickEvent):
                    click_id = str(decoded.click_id)
                    scan.distinct_ids.add(click_id)
                    result.click_query_ids[click_id] = str(decoded.query_id)
                elif isinstance(decoded, QueryEvent):
                    scan.distinct_ids.add(str(decoded.query_id))
        metrics.LINES_READ.labels(dc, stream.value).inc(scan.lines)
        for record in scan.quarantined:
            metrics.QUARANTINED_LINES.labels(dc, stream.value, str(record.reason)).inc()
        result.streams[stream] = scan
    return result


def _all_lines(reader: GrowingLogReader, scan: StreamScan) -> Iterator[LogLine]:
    """Every complete line, read in bounded slices as a pipeline would."""
    offsets: dict[str, int] = {}
    while True:
        read = reader.read(offsets, max_bytes=_SLICE_BYTES)
        scan.quarantined.extend(read.truncations)
        if not read.lines:
            return
        scan.lines += len(read.lines)
        scan.size_bytes += read.bytes_read
        yield from read.lines
        offsets = read.offsets


def decoded_clicks(
    directory: Path, *, pattern: str | None = None
) -> Iterator[tuple[LogLine, ClickEvent]]:
    """Every decodable click line of a click log directory, with its line (bad ones skipped)."""
    for line, event in _decoded(directory, Stream.CLICKS, pattern):
        assert isinstance(event, ClickEvent)
        yield line, event


def query_ids_in(directory: Path, wanted: set[str]) -> set[str]:
    """Which of the query ids ``wanted`` have a decodable line in a query log directory."""
    found: set[str] = set()
    if not wanted:
        return found
    for _, event in _decoded(directory, Stream.QUERIES, None):
        assert isinstance(event, QueryEvent)
        query_id = str(event.query_id)
        if query_id in wanted:
            found.add(query_id)
            if len(found) == len(wanted):
                break
    return found


def _decoded(
    directory: Path, stream: Stream, pattern: str | None
) -> Iterator[tuple[LogLine, ClickEvent | QueryEvent]]:
    reader = GrowingLogReader(directory, pattern=pattern)
    offsets: dict[str, int] = {}
    while (read := reader.read(offsets, max_bytes=_SLICE_BYTES)).lines:
        for line in read.lines:
            event = decode_line(stream, line.file, line.offset, line.raw)
            if isinstance(event, ClickEvent | QueryEvent):
                yield line, event
        offsets = read.offsets
