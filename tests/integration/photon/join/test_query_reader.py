"""The query reader's batch against the real stack: what it caches, maps and publishes."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from photon.events.records import QuarantineReason, Stream
from photon.join.output import decode, quarantine_key
from photon.join.progress import ReaderProgress, ReadLine
from photon.logs.reader import LogLine
from photon.storage import ObjectStore

from .conftest import FILE_IDLE_US, MAX_AHEAD_US, ORDER_BOUND_US, Clock, MakeDc

pytestmark = pytest.mark.integration

NOW_US = 1_767_225_600_000_000
S = 1_000_000


def _query(ts_us: int, pid: int = 7) -> bytes:
    return json.dumps({"query_id": f"10.1.0.1:{pid}:{ts_us}", "query": "shoes"}).encode()


def test_a_batch_moves_the_progress_as_each_of_its_lines_would(
    make_dc: MakeDc, tmp_path: Path
) -> None:
    """The reader hands the progress one summary a file (its last line's end, its newest
    valid query), not each line: the views and the newest time read are the same as from
    every line, with bad lines, lines out of order and a query stamped beyond the clock's
    allowance among them."""
    raws = {
        "q.1.log": [_query(NOW_US - 9 * S), b"not json", _query(NOW_US - 5 * S, pid=8)],
        "q.2.log": [b'{"query_id": 42}', b"[1]"],  # no valid query: a view with no time
        "q.3.log": [_query(NOW_US + MAX_AHEAD_US + 3_600 * S), _query(NOW_US - 1 * S)],
    }
    lines: list[LogLine] = []
    for file, file_raws in raws.items():
        offset = 0
        for raw in file_raws:
            lines.append(LogLine(file, offset, raw))
            offset += len(raw) + 1
    lines.reverse()  # the reader takes them in any order
    clock = Clock(NOW_US)
    parts = make_dc("a", tmp_path / "logs", clock)

    report = parts.reader.process("000000000000", lines)

    assert (report.queries, report.quarantined) == (4, 3)
    assert parts.reader.progress is not None
    every_line = ReaderProgress(
        tmp_path / "every-line",
        order_bound_us=ORDER_BOUND_US,
        idle_us=FILE_IDLE_US,
        max_ahead_us=MAX_AHEAD_US,
    )
    every_line.observe(
        [
            ReadLine(line.file, line.end, int(json.loads(line.raw)["query_id"].split(":")[2]))
            if line.raw.startswith(b'{"query_id": "')
            else ReadLine(line.file, line.end, None)
            for line in lines
        ],
        NOW_US,
    )
    assert parts.reader.progress.files == every_line.files
    assert parts.reader.progress.max_read_us == every_line.max_read_us
    assert parts.reader.progress.files["q.2.log"].max_ts_us is None
    assert parts.reader.progress.files["q.3.log"].max_ts_us == NOW_US + MAX_AHEAD_US  # capped


def test_a_bad_query_line_is_quarantined_with_the_reason_decoding_gives(
    make_dc: MakeDc, store: ObjectStore, tmp_path: Path
) -> None:
    parts = make_dc("a", tmp_path / "logs", Clock(NOW_US))
    bad = b'{"query_id": "10.1.0.1:7:1767225600"}'  # seconds, not microseconds
    good = _query(NOW_US)
    lines = [LogLine("q.1.log", 0, bad), LogLine("q.1.log", len(bad) + 1, good)]
    report = parts.reader.process("000000000000", lines)
    assert (report.queries, report.quarantined, report.cached) == (1, 1, 1)
    key = quarantine_key("a", Stream.QUERIES.value, parts.reader.attempt, "000000000000")
    data = store.get(key)
    assert data is not None
    rows = decode(data)
    assert [(r["file"], r["offset"], r["reason"], r["raw_b64"]) for r in rows] == [
        ("q.1.log", 0, str(QuarantineReason.MALFORMED_ID), base64.b64encode(bad).decode())
    ]
    assert parts.reader.cache.find_many([f"10.1.0.1:7:{NOW_US}"]) == {f"10.1.0.1:7:{NOW_US}": good}
