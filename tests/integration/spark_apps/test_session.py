"""Spark's Python processes on a local master: the project's interpreter, with pyspark and
py4j read from its site-packages, not compiled again from SPARK_HOME's zips; and a
driver's start-up without Spark's search for installed data sources or PySpark's test
helpers (docs/deploy.md, "Start-up")."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

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


def _worker_s_daemon(_rows: Iterable[int]) -> Iterator[tuple[str | None, bool]]:
    main = sys.modules["__main__"]
    yield getattr(main.__spec__, "name", None), "spark_apps.join_tasks" in sys.modules


def test_task_workers_are_forked_with_the_join_s_modules_imported(spark: SparkSession) -> None:
    """The apps' daemon loaded them before it forked (spark_apps/preloading_daemon.py)."""
    seen = spark.sparkContext.parallelize([0, 1], 2).mapPartitions(_worker_s_daemon).collect()
    assert seen == [("spark_apps.preloading_daemon", True)] * 2


#: A driver with an installed ``pyspark_*`` data source on its path, which Spark's search
#: would find and register under its name.
DRIVER = """
import sys
from photon.settings import PipelineSettings
from spark_apps.growing_log_source import GrowingLogDataSource
from spark_apps.session import photon_session, skip_static_data_source_search

spark = photon_session("photon-test-session-start", PipelineSettings(spark_master="local[1]"))
print("loaded", sorted(m for m in ("pandas", "pyspark.testing") if m in sys.modules))
manager = spark._jsparkSession.sessionState().dataSourceManager()
print("installed source registered", manager.dataSourceExists("photon_installed_test"))
print("log source registered", manager.dataSourceExists(GrowingLogDataSource.name()))
print("skipped again", skip_static_data_source_search(spark))
import numpy
print("sum", spark.range(int(numpy.int64(10))).selectExpr("sum(id)").first()[0])
spark.stop()
"""

INSTALLED_SOURCE = """
from pyspark.sql.datasource import DataSource


class DefaultSource(DataSource):
    @classmethod
    def name(cls):
        return "photon_installed_test"
"""


def test_a_driver_starts_without_spark_s_data_source_search_or_pyspark_s_test_helpers(
    tmp_path: Path,
) -> None:
    """Spark's search of the path for installed ``pyspark_*`` data sources is skipped (an
    installed one is not registered); Photon's log source is. PySpark's NumPy converters,
    asked only about NumPy values, leave ``pyspark.testing`` and pandas unimported."""
    package = tmp_path / "pyspark_photon_installed_test"
    package.mkdir()
    (package / "__init__.py").write_text(INSTALLED_SOURCE)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), *sys.path]))
    result = subprocess.run(
        [sys.executable, "-c", DRIVER], capture_output=True, text=True, timeout=300,
        check=False, env=env,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    shown = result.stdout
    assert "installed source registered False" in shown, shown
    assert "log source registered True" in shown and "skipped again True" in shown, shown
    assert "loaded []" in shown and "sum 45" in shown, shown
