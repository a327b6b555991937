from __future__ import annotations

import json
from pathlib import Path

import pytest
from prometheus_client import REGISTRY

from photon.events.records import Stream
from photon.logs.scan import scan_dc

pytestmark = pytest.mark.unit

QID = "10.1.0.1:4242:1767225600123456"
CID = "10.2.0.1:777:1767225605000000"


def quarantined(dc: str, stream: str, reason: str) -> float:
    labels = {"dc": dc, "stream": stream, "reason": reason}
    return REGISTRY.get_sample_value("photon_quarantined_lines_total", labels) or 0.0


def test_bad_lines_are_quarantined_counted_and_the_reader_goes_on(tmp_path: Path) -> None:
    clicks = tmp_path / "x" / "clicks"
    clicks.mkdir(parents=True)
    good = json.dumps({"click_id": CID, "query_id": QID}).encode()
    bad = [
        b"\xff\xfe not utf-8",
        b'{"click_id": ',
        b'{"click_id": "%s"}' % CID.encode(),
        b'{"click_id": "%s", "query_id": "10.1.0.1:4242:1767225600"}' % CID.encode(),
        b"[1]",
    ]
    lines = [bad[0], bad[1], good, bad[2], bad[3], bad[4], good]
    (clicks / "srv.000000.log").write_bytes(b"\n".join(lines) + b"\n")
    before = {
        r: quarantined("x", "clicks", r)
        for r in ("not_utf8", "invalid_json", "missing_field", "malformed_id", "not_an_object")
    }

    scan = scan_dc(tmp_path, "x").streams[Stream.CLICKS]

    assert (scan.lines, scan.events, scan.duplicates) == (7, 2, 1)
    offsets = [sum(len(x) + 1 for x in lines[:i]) for i in range(len(lines))]
    assert [(q.file, q.offset, q.reason.value) for q in scan.quarantined] == [
        ("srv.000000.log", offsets[0], "not_utf8"),
        ("srv.000000.log", offsets[1], "invalid_json"),
        ("srv.000000.log", offsets[3], "missing_field"),
        ("srv.000000.log", offsets[4], "malformed_id"),
        ("srv.000000.log", offsets[5], "not_an_object"),
    ]
    for reason, count in before.items():
        assert quarantined("x", "clicks", reason) == count + 1
