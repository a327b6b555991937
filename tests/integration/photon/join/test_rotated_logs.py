"""Query logs rotated, copied and truncated, or torn, under a query reader on the real
stack: its progress follows each file by its identity (its head), not its name, so a
stopped or lagging reader never lets a joinable click expire, and a torn last line
never freezes it (docs/join.md, "When a click is unjoinable")."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from photon.logs.reader import GrowingLogReader, LogLine
from photon.storage import ObjectStore
from registry import EventId
from tests.logrotate import ROTATIONS, rotate

from .conftest import Clock, DcParts, MakeDc
from .test_join import rows

pytestmark = pytest.mark.integration

S = 1_000_000
START_US = 1_767_225_600 * S


def query(n: int, at_us: int) -> bytes:
    """A query line, padded so that its first line covers a file's head."""
    record = {"query_id": str(EventId("10.0.0.2", 7, at_us)), "query": f"q{n}", "pad": "x" * 40}
    return json.dumps(record).encode() + b"\n"


class Reader:
    """A DC's query reader fed by the growing-log reader, as its app feeds it."""

    def __init__(self, dc: DcParts, directory: Path) -> None:
        self.dc = dc
        self.logs = GrowingLogReader(directory)
        self.offsets: dict[str, int] = {}
        self.heads: dict[str, str] = {}
        self.batches = 0

    def read(self) -> int:
        got = self.logs.read(self.offsets, heads=self.heads)
        self.offsets, self.heads = got.offsets, got.heads
        self.dc.reader.process(f"q{self.batches}", got.lines, got.truncations)
        self.batches += 1
        return len(got.lines)


def click_for(clicks: Path, n: int, query_at_us: int) -> list[LogLine]:
    query_id = str(EventId("10.0.0.2", 7, query_at_us))
    raw = json.dumps({"click_id": str(EventId("10.0.0.1", 9, query_at_us + S)),
                      "query_id": query_id}).encode()  # fmt: skip
    path = clicks / f"c.{n}.log"
    path.write_bytes(raw + b"\n")
    return [LogLine(path.name, 0, raw)]


@pytest.mark.parametrize("rotation", ROTATIONS)
def test_a_query_file_rotated_under_a_stopped_reader_holds_its_progress_back(
    make_dc: MakeDc, store: ObjectStore, tmp_path: Path, rotation: str
) -> None:
    """``q.log`` is read to its end and goes quiet; logrotate moves it to ``q.log.1``
    and the writer goes on in a new, shorter ``q.log`` that the stopped reader never
    reads. The new file is new to the progress (not the old one read past its end):
    a click whose query is in it waits instead of expiring, and joins once the reader
    reads on."""
    root = tmp_path / "logs"
    queries, clicks = root / "a" / "queries", root / "a" / "clicks"
    queries.mkdir(parents=True)
    clicks.mkdir(parents=True)
    clock = Clock(START_US)
    a = make_dc("a", root, clock, join_groups=1)
    reader = Reader(a, queries)
    (queries / "q.log").write_bytes(b"".join(query(n, START_US + n * S) for n in range(5)))
    assert reader.read() == 5
    clock.now_us += 40 * S  # quiet past the idle time: everything written was read
    before = a.reader.publish_progress()
    assert before is not None

    rotate(queries / "q.log", rotation)
    late_at = START_US + 100 * S
    (queries / "q.log").write_bytes(query(9, late_at))  # shorter than the old q.log
    clock.now_us = late_at + 2 * S
    a.joiner.process("000000000000", click_for(clicks, 0, late_at))
    for _ in range(30):  # the reader is stopped; its publisher is not
        clock.now_us += 20 * S
        a.reader.publish_progress()
        a.joiner.process_retries()
    assert rows(store, "unjoinable/") == []  # waiting for the reader, not given up on
    assert a.reader.publish_progress() == before  # nothing of the new q.log was read

    assert reader.read() == 1  # the new q.log, from its start; q.log.1 read on, not again
    clock.now_us += 60 * S
    a.reader.publish_progress()
    a.joiner.process_retries()
    assert len(rows(store, "joined/")) == 1 and a.retries.pending() == 0


def test_a_torn_last_line_of_a_rolled_over_query_file_never_freezes_the_progress(
    make_dc: MakeDc, tmp_path: Path
) -> None:
    """The writer left ``q.000000.log`` with a torn last line and moved on: the torn bytes
    are quarantined and count as read, so the file stops holding the progress back and
    the reader settles (``--until-idle`` ends)."""
    root = tmp_path / "logs"
    queries = root / "a" / "queries"
    queries.mkdir(parents=True)
    clock = Clock(START_US + 10 * S)
    a = make_dc("a", root, clock, join_groups=1)
    reader = Reader(a, queries)
    torn = query(2, START_US + 2 * S)[:30]
    (queries / "q.000000.log").write_bytes(query(0, START_US) + query(1, START_US + S) + torn)
    (queries / "q.000001.log").write_bytes(query(3, START_US + 3 * S))
    assert reader.read() == 3
    assert reader.read() == 0  # the next trigger: the torn line, quarantined
    clock.now_us += 40 * S
    assert a.reader.settled()
    assert a.reader.publish_progress() == clock.now_us - 30 * S  # every file read and idle
