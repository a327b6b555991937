"""The verification job's input side: Spark reads every DC's click logs with DataFrame
operations and keeps each click of the window once, as the plain-Python reading does."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from photon.ops.verify import clicks_in_file
from photon.tooling.gen.model import GenConfig
from photon.tooling.gen.simulator import simulate, write
from spark_apps.verify_output import window_clicks

pytestmark = pytest.mark.integration


def test_the_windows_clicks_once_each_from_every_dcs_logs(
    spark: SparkSession, tmp_path: Path
) -> None:
    start_us = time.time_ns() // 1000 - 3_600_000_000
    cfg = GenConfig(seed=11, dcs=["a", "b"], start_us=start_us, queries=2_000, query_rate=50.0)
    manifest = write(simulate(cfg), tmp_path / "logs")
    assert manifest.dcs["a"].duplicate_click_lines > 0  # a click shipped twice counts once
    files = sorted(str(p) for p in (tmp_path / "logs").glob("*/clicks/*") if p.is_file())
    assert len(files) >= 2
    # the middle of the stream: clicks before and after it are left out
    begin, end = start_us + 10_000_000, start_us + 30_000_000
    expected: dict[str, str] = {}
    for path in files:
        expected.update(clicks_in_file(Path(path), begin, end))
    got = window_clicks(spark, files, begin, end)
    assert got == expected
    assert 0 < len(got) < len({c for p in files for c, _ in clicks_in_file(Path(p), 0, 2**62)})
