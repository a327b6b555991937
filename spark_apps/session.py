"""The Spark session every Photon app starts: loopback only, the project's interpreter."""

from __future__ import annotations

import os
import sys

from pyspark.sql import SparkSession

from spark_apps.growing_log_source import GrowingLogDataSource


def photon_session(app_name: str, master: str, java_options: str = "") -> SparkSession:
    """The session; ``java_options`` go to the driver JVM (``pipeline.driver_java_options``)."""
    # Workers must run this interpreter: it has the project and pyarrow (DESIGN §7).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    spark = (
        SparkSession.builder.appName(app_name)
        .master(master)
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.streaming.stopTimeout", "30s")
        .config("spark.python.worker.reuse", "true")
        .config("spark.driver.extraJavaOptions", java_options)
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("WARN")
    spark.dataSource.register(GrowingLogDataSource)
    return spark
