from __future__ import annotations

from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession

from photon.settings import PipelineSettings
from spark_apps.session import photon_session


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """One local[2,4] session for the modules that share it (one xdist group: one JVM):
    two cores, and four tries a task, as a cluster's executors give it."""
    session = photon_session("photon-test-spark-apps", PipelineSettings(spark_master="local[2,4]"))
    yield session
    session.stop()
