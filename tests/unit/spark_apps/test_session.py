"""The Spark configuration every app and batch job starts with (no session started)."""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pyspark
import pytest

from photon.settings import PhotonSettings, PipelineSettings, load_settings
from spark_apps.session import (
    SPARK_PYTHON_LAUNCHER,
    _no_python,
    redundant_spark_zips,
    session_conf,
    spark_python_env,
    use_project_interpreter,
)

pytestmark = pytest.mark.unit


def test_locally_the_driver_stays_on_loopback_and_takes_no_cluster_bounds() -> None:
    conf = session_conf(PipelineSettings(), "local[*]")
    assert conf["spark.driver.host"] == conf["spark.driver.bindAddress"] == "127.0.0.1"
    assert conf["spark.ui.enabled"] == "false"
    assert "spark.cores.max" not in conf


def test_on_a_standalone_master_each_app_takes_a_bounded_share() -> None:
    pipeline = PipelineSettings(
        cluster_cores_per_app=2,
        executor_memory_mb=768,
        driver_host="joiner-a",
        driver_bind_address="0.0.0.0",
    )
    conf = session_conf(pipeline, "spark://spark-master:7077")
    assert conf["spark.cores.max"] == conf["spark.executor.cores"] == "2"
    assert conf["spark.executor.memory"] == "768m"
    assert (conf["spark.driver.host"], conf["spark.driver.bindAddress"]) == ("joiner-a", "0.0.0.0")


def test_the_ui_and_the_event_log_when_asked_for(tmp_path: Path) -> None:
    conf = session_conf(
        PipelineSettings(), "local[*]", ui_port=4041, event_log_dir=tmp_path / "events"
    )
    assert (conf["spark.ui.enabled"], conf["spark.ui.port"]) == ("true", "4041")
    assert int(conf["spark.ui.retainedJobs"]) <= 1000  # a stream's UI keeps its recent past
    assert conf["spark.eventLog.enabled"] == "true"
    assert conf["spark.eventLog.dir"] == (tmp_path / "events").as_uri()
    assert conf["spark.eventLog.rolling.enabled"] == "true"


def test_each_dc_has_its_ui_port_and_batch_jobs_the_next_and_zero_turns_them_off() -> None:
    settings = PhotonSettings(dcs=["a", "b"], pipeline={"spark_ui_base_port": 5050})  # type: ignore[arg-type]
    assert [settings.spark_ui_port(dc) for dc in ("a", "b", None)] == [5050, 5051, 5052]
    off = PhotonSettings(pipeline={"spark_ui_base_port": 0, "event_log": False})  # type: ignore[arg-type]
    assert off.spark_ui_port("a") == 0 and off.spark_event_log_dir is None
    assert settings.spark_event_log_dir == settings.pipeline_root / "spark-events"


def test_the_ui_binds_loopback_natively(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SPARK_LOCAL_IP", raising=False)
    use_project_interpreter(PipelineSettings())
    assert os.environ["SPARK_LOCAL_IP"] == "127.0.0.1"
    monkeypatch.delenv("SPARK_LOCAL_IP")
    use_project_interpreter(PipelineSettings(driver_bind_address="0.0.0.0"))  # compose
    assert "SPARK_LOCAL_IP" not in os.environ


def test_each_application_logs_its_events_in_a_directory_of_its_own(tmp_path: Path) -> None:
    from spark_apps.session import prepared_event_log

    joiner = prepared_event_log(tmp_path, "photon-joiner-a")
    reader = prepared_event_log(tmp_path, "photon-query-reader-a")
    # two apps started in one millisecond get one Spark id: their logs must not collide
    assert joiner == tmp_path / "photon-joiner-a" and joiner.is_dir()
    assert reader is not None and reader != joiner and reader.is_dir()
    assert prepared_event_log(None, "photon-joiner-a") is None
    assert prepared_event_log(tmp_path, "../x y") == tmp_path / ".._x_y"


def _launch(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(SPARK_PYTHON_LAUNCHER), *args], env=env, capture_output=True, text=True, check=False
    )


def test_the_launcher_drops_only_the_named_zips_and_keeps_the_rest_in_order(
    tmp_path: Path,
) -> None:
    zips = [str(tmp_path / "lib" / "pyspark.zip"), str(tmp_path / "lib" / "py4j-0.1-src.zip")]
    kept = [str(tmp_path / "a dir"), "/opt/*/lib", str(tmp_path / "pyspark.zip.d")]
    env = {
        "PATH": os.environ["PATH"],
        "SPARK_PYTHON_INTERPRETER": sys.executable,
        "SPARK_PYTHON_DROP_PATHS": os.pathsep.join(zips),
        "PYTHONPATH": os.pathsep.join([zips[0], kept[0], zips[1], kept[1], kept[2]]),
    }
    shown = _launch(env, "-c", "import os; print(os.environ['PYTHONPATH'])")
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.strip() == os.pathsep.join(kept)  # spaces and patterns kept as they are

    untouched = _launch(
        {**env, "SPARK_PYTHON_DROP_PATHS": ""}, "-c", "import os; print(os.environ['PYTHONPATH'])"
    )
    assert untouched.stdout.strip() == env["PYTHONPATH"]


def test_the_launcher_refuses_to_guess_an_interpreter() -> None:
    refused = _launch({"PATH": os.environ["PATH"]}, "-c", "print(1)")
    assert refused.returncode != 0
    assert "SPARK_PYTHON_INTERPRETER" in refused.stderr


def test_pips_own_zips_are_redundant_a_spark_distributions_are_not(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("SPARK_HOME", raising=False)
    home = Path(pyspark.__file__).parent
    lib = home / "python" / "lib"
    (core_jar,) = home.glob("jars/spark-core_*.jar")
    assert redundant_spark_zips() == [
        str(lib / "pyspark.zip"),
        str(lib / f"py4j-{importlib.metadata.version('py4j')}-src.zip"),
        str(core_jar),  # pip's Spark core jar holds no Python module
    ]
    monkeypatch.setenv("SPARK_HOME", str(tmp_path))  # a distribution: its zips are its own
    assert redundant_spark_zips() == []


def test_a_jar_is_redundant_only_when_it_holds_no_python_module(tmp_path: Path) -> None:
    classes, packed, broken = tmp_path / "classes.jar", tmp_path / "packed.jar", tmp_path / "x.jar"
    with zipfile.ZipFile(classes, "w") as jar:
        jar.writestr("org/apache/spark/SparkContext.class", b"\xca\xfe")
    with zipfile.ZipFile(packed, "w") as jar:
        jar.writestr("org/apache/spark/SparkContext.class", b"\xca\xfe")
        jar.writestr("pyspark/__init__.py", b"")
    broken.write_bytes(b"not a zip")
    assert _no_python(classes)
    assert not _no_python(packed)  # a build that packs PySpark in its jar: it stays
    assert not _no_python(broken)
    assert not _no_python(tmp_path / "missing.jar")


def test_spark_runs_python_through_the_launcher_on_a_local_master_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in (
        "PYSPARK_PYTHON",
        "SPARK_PYTHON_INTERPRETER",
        "SPARK_PYTHON_DROP_PATHS",
        "SPARK_HOME",
    ):
        monkeypatch.delenv(name, raising=False)
    use_project_interpreter(PipelineSettings(spark_master="local[2]"))
    assert os.environ["PYSPARK_PYTHON"] == str(SPARK_PYTHON_LAUNCHER)
    assert os.environ["SPARK_PYTHON_INTERPRETER"] == sys.executable
    assert os.environ["SPARK_PYTHON_DROP_PATHS"].split(os.pathsep) == redundant_spark_zips()
    load_settings()  # what the launcher reads is no Photon setting: nothing unknown to refuse

    monkeypatch.delenv("PYSPARK_PYTHON")
    use_project_interpreter(PipelineSettings(spark_master="spark://spark-master:7077"))
    assert os.environ["PYSPARK_PYTHON"] == sys.executable  # executors elsewhere: as they are

    monkeypatch.setenv("PYSPARK_PYTHON", "/opt/python3")  # the user's choice stands
    use_project_interpreter(PipelineSettings(spark_master="local[2]"))
    assert os.environ["PYSPARK_PYTHON"] == "/opt/python3"


def test_a_submitted_jobs_driver_runs_here_through_the_launcher_its_cluster_workers_do_not(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("SPARK_HOME", raising=False)
    zips = os.pathsep.join(redundant_spark_zips())
    local = spark_python_env(local_master=True, submitted=True)
    assert local == {
        "PYSPARK_PYTHON": str(SPARK_PYTHON_LAUNCHER),
        "PYSPARK_DRIVER_PYTHON": str(SPARK_PYTHON_LAUNCHER),
        "SPARK_PYTHON_INTERPRETER": sys.executable,
        "SPARK_PYTHON_DROP_PATHS": zips,
    }
    cluster = spark_python_env(local_master=False, submitted=True)
    assert cluster["PYSPARK_DRIVER_PYTHON"] == str(SPARK_PYTHON_LAUNCHER)
    assert cluster["PYSPARK_PYTHON"] == sys.executable  # executors elsewhere: as they are
    assert spark_python_env(local_master=False) == {
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
    }
    monkeypatch.setenv("SPARK_HOME", "/opt/spark")  # a distribution's zips are its own
    assert set(spark_python_env(local_master=True, submitted=True).values()) == {sys.executable}


def test_pysparks_numpy_converters_are_asked_only_about_numpy_values() -> None:
    import numpy
    import py4j.protocol

    from spark_apps.session import ask_numpy_converters_only_about_numpy

    asked: list[object] = []

    class NumpyArrayConverter:  # PySpark's converter, by name
        def can_convert(self, obj: object) -> bool:
            asked.append(obj)
            return True

        def convert(self, obj: object, _client: object) -> str:
            return f"converted {obj!r}"

    converters = py4j.protocol.INPUT_CONVERTER
    saved = list(converters)
    try:
        converters[:] = [NumpyArrayConverter()]
        ask_numpy_converters_only_about_numpy()
        ask_numpy_converters_only_about_numpy()  # once is enough; twice changes nothing
        (wrapped,) = converters
        assert not wrapped.can_convert("spark.master") and not wrapped.can_convert([1, 2])
        assert asked == []
        array = numpy.arange(3)
        assert wrapped.can_convert(array) and wrapped.can_convert(numpy.int64(1))
        assert len(asked) == 2 and asked[0] is array
        assert wrapped.convert(7, None) == "converted 7"
    finally:
        converters[:] = saved


def _job_label() -> str:
    """The label PySpark gives a job started here (``SCCallSiteSync``, as ``collect``)."""
    from pyspark.traceback_utils import SCCallSiteSync

    return str(SCCallSiteSync(None)._call_site)  # type: ignore[no-untyped-call]


def _nested_job_label(depth: int) -> str:
    return _job_label() if depth == 0 else _nested_job_label(depth - 1)


def test_job_call_sites_are_found_from_the_frames_as_pyspark_finds_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import threading
    import traceback

    import pyspark.traceback_utils

    from spark_apps.session import find_call_sites_from_frames

    labels = [_job_label(), _nested_job_label(20)]
    in_thread: list[str] = []
    worker = threading.Thread(target=lambda: in_thread.append(_nested_job_label(5)))
    worker.start()
    worker.join()
    assert labels[0].startswith("__init__ at ") and __file__ in labels[0]

    monkeypatch.setattr(pyspark.traceback_utils, "first_spark_call", None)  # restored after
    find_call_sites_from_frames()
    find_call_sites_from_frames()  # once is enough; twice changes nothing
    read_sources: list[object] = []

    def extract_stack(*args: object) -> list[object]:
        read_sources.append(args)
        return []

    monkeypatch.setattr(traceback, "extract_stack", extract_stack)
    assert [_job_label(), _nested_job_label(20)] == labels
    worker = threading.Thread(target=lambda: in_thread.append(_nested_job_label(5)))
    worker.start()
    worker.join()
    assert in_thread[0] == in_thread[1]
    assert read_sources == []
