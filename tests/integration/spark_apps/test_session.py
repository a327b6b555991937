"""Spark's Python processes on a local master: the project's interpreter, with pyspark and
py4j read from its site-packages, not compiled again from SPARK_HOME's zips."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Iterator

import pytest
from pyspark.sql import SparkSession

from spark_apps.session import SPARK_PYTHON_LAUNCHER, redundant_spark_zips

pytestmark = pytest.mark.integration


def _imported_from(_rows: Iterable[int]) -> Iterator[tuple[str, str, str, list[str]]]:
    import py4j
    import pyspark

    yield pyspark.__file__ or "", py4j.__file__ or "", sys.executable, sys.path


def test_task_workers_import_pyspark_compiled_from_site_packages(spark: SparkSession) -> None:
    assert os.environ["PYSPARK_PYTHON"] == str(SPARK_PYTHON_LAUNCHER)
    zips = redundant_spark_zips()
    assert zips, "pip's pyspark ships its zips: they are what the launcher leaves out"
    seen = spark.sparkContext.parallelize([0, 1], 2).mapPartitions(_imported_from).collect()
    assert len(seen) == 2
    for pyspark_file, py4j_file, executable, path in seen:
        assert executable == sys.executable
        assert ".zip" not in pyspark_file and ".zip" not in py4j_file
        assert not set(zips) & set(path)
