"""A chaos run keeps its apps' logs, gzipped, beside its report."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from photon.tooling.chaos.harness import keep_app_logs

pytestmark = pytest.mark.unit


def test_every_apps_log_is_kept_gzipped_whole(tmp_path: Path) -> None:
    logs = tmp_path / "app-logs"
    logs.mkdir()
    lines = b"".join(b'{"event": "joiner.batch", "n": %d}\n' % n for n in range(5000))
    (logs / "joiner-b.log").write_bytes(lines)
    (logs / "query-reader-a.log").write_bytes(b"stream.started\n")
    (logs / "notes.txt").write_text("not an app's log")
    kept = keep_app_logs(logs, tmp_path / "report" / "app-logs")
    assert [p.name for p in kept] == ["joiner-b.log.gz", "query-reader-a.log.gz"]
    assert gzip.decompress(kept[0].read_bytes()) == lines
    assert kept[0].stat().st_size < len(lines) / 5


def test_a_run_without_logs_makes_no_directory(tmp_path: Path) -> None:
    assert keep_app_logs(tmp_path / "none", tmp_path / "report" / "app-logs") == []
    assert not (tmp_path / "report").exists()
