"""The Spark standalone daemons' command lines and environments (no JVM started)."""

from __future__ import annotations

from pathlib import Path

import pytest

from photon.settings import StackSettings
from photon.tooling.stack.spark import (
    MASTER_CLASS,
    WORKER_CLASS,
    SparkMaster,
    SparkWorker,
    spark_class,
)

pytestmark = pytest.mark.unit

STACK = StackSettings(
    spark_master_port=17077,
    spark_master_ui_port=18090,
    spark_worker_ports=[17078, 17079],
    spark_worker_ui_ports=[18091, 18092],
)


def test_spark_class_is_the_pinned_pip_installed_launcher() -> None:
    launcher = Path(spark_class())
    assert launcher.is_file() and launcher.parts[-3:] == ("pyspark", "bin", "spark-class")


def test_the_master_binds_loopback_with_its_rest_server_off() -> None:
    master = SparkMaster(STACK, Path("/tmp/stack"))
    argv = master.argv()
    assert argv[1] == MASTER_CLASS
    assert argv[2:] == ["--host", "127.0.0.1", "--port", "17077", "--webui-port", "18090"]
    env = master.env()
    assert env["SPARK_LOCAL_IP"] == "127.0.0.1"  # where Spark binds its web UI too
    assert "-Dspark.master.rest.enabled=false" in env["SPARK_MASTER_OPTS"]
    assert master.ports() == {"spark_master_port": 17077, "spark_master_ui_port": 18090}


def test_each_worker_has_its_own_ports_and_an_absolute_work_directory() -> None:
    second = SparkWorker(1, STACK, Path("relative/stack"))
    argv = second.argv()
    assert second.name == "spark-worker2"
    assert argv[1] == WORKER_CLASS and argv[-1] == "spark://127.0.0.1:17077"
    options = dict(zip(argv[2:-1:2], argv[3:-1:2], strict=True))
    assert options["--port"] == "17079" and options["--webui-port"] == "18092"
    assert options["--cores"] == "4" and options["--memory"] == "4096m"
    assert Path(options["--work-dir"]).is_absolute()
    assert second.env()["SPARK_LOCAL_IP"] == "127.0.0.1"
    assert second.ports() == {"spark_worker_ports[1]": 17079, "spark_worker_ui_ports[1]": 18092}


@pytest.mark.parametrize(
    ("address", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.3.2.1", True),
        ("::1", True),
        ("::ffff:127.0.0.1", True),  # how Java's dual-stack sockets show IPv4 loopback
        ("0.0.0.0", False),
        ("::", False),
        ("::ffff:10.1.2.3", False),
        ("192.0.2.2", False),
    ],
)
def test_loopback_addresses_are_told_apart(address: str, loopback: bool) -> None:
    from photon.tooling.stack.process import is_loopback

    assert is_loopback(address) is loopback
