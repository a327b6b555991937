"""The installation's class archive (``make install`` builds it) is one a Photon driver
maps: started with ``-Xshare:on``, a JVM that cannot use its archive does not start.
And it holds what an app's start loads: Spark's UI, its event log, Janino's compiler."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from photon.tooling.stack.ports import free_ports
from spark_apps.class_archive import archive_path

pytestmark = pytest.mark.integration

DRIVER = """
import sys
from pathlib import Path
from photon.settings import PipelineSettings
from spark_apps.session import photon_session

options = PipelineSettings().driver_java_options + " -Xshare:on " + sys.argv[1]
pipeline = PipelineSettings(spark_master="local[1]", driver_java_options=options)
spark = photon_session(
    "photon-test-class-archive", pipeline, ui_port=int(sys.argv[2]), event_log_dir=Path(sys.argv[3])
)
# generated code, compiled by Janino
print("sum", spark.range(100).selectExpr("sum(id * 2) as s").first()[0])
spark.stop()
"""

#: One class of each: Janino's compiler (from a signed jar), the UI's web server, the
#: event log's writer; none is loaded by a driver without them.
LOADED_AT_START = (
    "org.codehaus.janino.SimpleCompiler",
    "org.sparkproject.jetty.server.Server",
    "org.apache.spark.deploy.history.EventLogFileWriter",
)


def test_a_photon_driver_maps_the_installations_class_archive_with_what_it_loads(
    tmp_path: Path,
) -> None:
    assert archive_path().is_file(), "make install builds it: python -m spark_apps.class_archive"
    loaded = tmp_path / "classes.log"
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            DRIVER,
            f"-Xlog:class+load=info:file={loaded}",
            str(free_ports(1)[0]),
            str(tmp_path / "events"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0 and "sum 9900" in result.stdout, result.stderr[-3000:]
    assert "Unable to use shared archive" not in result.stderr
    sources: dict[str, str] = {}
    for line in loaded.read_text().splitlines():
        # [0.339s][info][class,load] java.lang.Object source: shared objects file
        name, _, source = line.partition("] ")[2].partition(" source: ")
        sources.setdefault(name, source)
    for name in LOADED_AT_START:
        assert sources.get(name, "").startswith("shared objects file"), (name, sources.get(name))


def test_with_the_archive_switched_off_no_archive_is_named() -> None:
    from photon.settings import PipelineSettings
    from spark_apps.session import driver_launch_conf

    assert (
        "SharedArchiveFile"
        in driver_launch_conf(PipelineSettings())["spark.driver.extraJavaOptions"]
    )
    off = driver_launch_conf(PipelineSettings(class_archive=False))
    assert "SharedArchiveFile" not in off["spark.driver.extraJavaOptions"]
    assert "spark.driver.extraClassPath" not in off
