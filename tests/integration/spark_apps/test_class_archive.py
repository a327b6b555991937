"""The installation's class archive (``make install`` builds it) is one a Photon driver
maps: started with ``-Xshare:on``, a JVM that cannot use its archive does not start."""

from __future__ import annotations

import subprocess
import sys

import pytest

from spark_apps.class_archive import archive_path

pytestmark = pytest.mark.integration

DRIVER = """
from photon.settings import PipelineSettings
from spark_apps.session import photon_session

options = PipelineSettings().driver_java_options + " -Xshare:on"
pipeline = PipelineSettings(spark_master="local[1]", driver_java_options=options)
spark = photon_session("photon-test-class-archive", pipeline)
print("sum", spark.range(100).selectExpr("sum(id)").first()[0])
spark.stop()
"""


def test_a_photon_driver_maps_the_installations_class_archive() -> None:
    assert archive_path().is_file(), "make install builds it: python -m spark_apps.class_archive"
    result = subprocess.run(
        [sys.executable, "-c", DRIVER], capture_output=True, text=True, timeout=300, check=False
    )
    assert result.returncode == 0 and "sum 4950" in result.stdout, result.stderr[-3000:]
    assert "Unable to use shared archive" not in result.stderr


def test_with_the_archive_switched_off_no_archive_is_named() -> None:
    from photon.settings import PipelineSettings
    from spark_apps.session import driver_java_options

    assert "SharedArchiveFile" in driver_java_options(PipelineSettings())
    assert "SharedArchiveFile" not in driver_java_options(PipelineSettings(class_archive=False))
