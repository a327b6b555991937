"""The Spark session every Photon app starts: the project's interpreter, the driver where
the settings put it (loopback natively), a bounded share of a standalone cluster."""

from __future__ import annotations

import contextlib
import functools
import importlib.metadata
import ipaddress
import os
import sys
import zipfile
from pathlib import Path
from types import FrameType
from typing import Any

import py4j.protocol
import pyspark
import pyspark.traceback_utils
from pyspark import SparkConf, SparkContext
from pyspark.sql import SparkSession

from photon.settings import PhotonSettings, PipelineSettings
from spark_apps import fork_server, preloading_daemon
from spark_apps.class_archive import class_archive_conf
from spark_apps.growing_log_source import GrowingLogDataSource

#: What Spark starts its Python processes with on a local master: this interpreter,
#: without SPARK_HOME's zipped pyspark and py4j (Python compiles what it imports from a
#: zip in every process again; docs/deploy.md, "Start-up"), nor Spark's core jar.
SPARK_PYTHON_LAUNCHER = Path(__file__).with_name("spark_python")
#: The Spark setting that names the streaming checkpoint writer.
CHECKPOINT_FILE_MANAGER_CONF = "spark.sql.streaming.checkpointFileManagerClass"
#: Writes a streaming query's checkpoint files through Hadoop's FileSystem API (a
#: temporary file, then a rename: atomic on a local disk and on HDFS), Spark's own
#: choice where FileContext is missing.
CHECKPOINT_FILE_MANAGER = (
    "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager"
)


def session_conf(
    pipeline: PipelineSettings,
    master: str,
    *,
    ui_port: int = 0,
    event_log_dir: Path | None = None,
) -> dict[str, str]:
    """The configuration both the streaming apps and the batch jobs start with; the UI
    on ``ui_port`` (0: none), the event log in ``event_log_dir`` (None: none)."""
    conf = {
        "spark.driver.host": pipeline.driver_host,
        "spark.driver.bindAddress": pipeline.driver_bind_address,
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": "2",
    }
    if ui_port:
        conf |= {
            "spark.ui.enabled": "true",
            "spark.ui.port": str(ui_port),
            # A stream runs for days: the UI keeps its recent past, not all of it.
            "spark.ui.retainedJobs": "200",
            "spark.ui.retainedStages": "200",
            "spark.sql.ui.retainedExecutions": "200",
            "spark.sql.streaming.numRecentProgressUpdates": "100",
        }
    if event_log_dir is not None:
        conf |= {
            "spark.eventLog.enabled": "true",
            "spark.eventLog.dir": event_log_dir.resolve().as_uri(),
            "spark.eventLog.rolling.enabled": "true",
            "spark.eventLog.rolling.maxFileSize": "64m",
            "spark.eventLog.compress": "true",
        }
    if master.startswith("spark://"):
        # Unbounded, the first app on a standalone master takes every core and the rest wait.
        conf |= {
            "spark.cores.max": str(pipeline.cluster_cores_per_app),
            "spark.executor.cores": str(pipeline.cluster_cores_per_app),
            "spark.executor.memory": f"{pipeline.executor_memory_mb}m",
        }
    return conf


def driver_launch_conf(pipeline: PipelineSettings) -> dict[str, str]:
    """The settings' driver JVM options, with the class archive (and the class path it
    was made for) when there is one."""
    return class_archive_conf(pipeline.driver_java_options, pipeline.class_archive)


def spark_python_env(*, local_master: bool, submitted: bool = False) -> dict[str, str]:
    """The variables that start Spark's Python processes with this interpreter: its task
    workers (``PYSPARK_PYTHON``) and, under spark-submit (``submitted``), the driver.

    On this host — a local master's workers, a submitted job's driver — they go through
    the launcher that leaves out what :func:`redundant_spark_zips` names when this
    interpreter has the same installed: SPARK_HOME's zipped pyspark and py4j (each
    process would compile what it imports from them again) and Spark's core jar. A
    cluster's executors start the interpreter itself.
    """
    launcher = os.access(SPARK_PYTHON_LAUNCHER, os.X_OK)  # an install that has it
    drop = redundant_spark_zips() if launcher and (local_master or submitted) else []
    env = {"PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    if drop:
        env |= {
            "SPARK_PYTHON_INTERPRETER": sys.executable,
            "SPARK_PYTHON_DROP_PATHS": os.pathsep.join(drop),
        }
        if local_master:
            env["PYSPARK_PYTHON"] = str(SPARK_PYTHON_LAUNCHER)
        if submitted:
            env["PYSPARK_DRIVER_PYTHON"] = str(SPARK_PYTHON_LAUNCHER)
    return env


def use_project_interpreter(pipeline: PipelineSettings | None = None) -> None:
    # Executors must run this interpreter: it has the project and pyarrow (docs/deploy.md).
    if "PYSPARK_PYTHON" not in os.environ:
        local = pipeline is None or pipeline.spark_master.startswith("local")
        workers = spark_python_env(local_master=local)
        del workers["PYSPARK_DRIVER_PYTHON"]  # this driver runs already
        os.environ.update(workers)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    if pipeline is not None and ipaddress.ip_address(pipeline.driver_bind_address).is_loopback:
        # Spark's UI binds SPARK_LOCAL_IP, else every address: natively it stays on loopback.
        os.environ.setdefault("SPARK_LOCAL_IP", pipeline.driver_bind_address)


def start_fork_server(pipeline: PipelineSettings) -> fork_server.ForkServer | None:
    """Start the app's fork server (spark_apps/fork_server.py) when the settings want it
    and Spark's Python processes start through the launcher on this host; None if not."""
    use_project_interpreter(pipeline)
    if not pipeline.fork_server or os.environ.get("PYSPARK_PYTHON") != str(SPARK_PYTHON_LAUNCHER):
        return None
    return fork_server.start()


def redundant_spark_zips() -> list[str]:
    """What Spark puts on its Python processes' PYTHONPATH that this interpreter has
    already, when it has the very same installed (pip's pyspark is its own SPARK_HOME):
    SPARK_HOME's zipped pyspark and py4j (py4j of the zip's version), which Spark's
    Python processes can import from site-packages, compiled, instead; and Spark's core
    jar, which Spark adds for a build that packs PySpark in it, when it holds no Python
    module. A zip on the path costs a process reading its directory whenever the
    import system's caches are invalidated (PySpark's workers do so as they start):
    ~0.1 CPU-s each time for the core jar's 5,800 entries (docs/deploy.md, "Start-up")."""
    installed = Path(pyspark.__file__).parent
    home = Path(os.environ.get("SPARK_HOME") or installed)  # pip's pyspark: its own home
    if not installed.is_dir() or home.resolve() != installed.resolve():
        return []  # a Spark distribution of its own, or pyspark from a zip here too
    lib = home / "python" / "lib"
    drop = [lib / "pyspark.zip"]
    with contextlib.suppress(importlib.metadata.PackageNotFoundError):  # else its zip stays
        drop.append(lib / f"py4j-{importlib.metadata.version('py4j')}-src.zip")
    drop.extend(jar for jar in sorted((home / "jars").glob("spark-core_*.jar")) if _no_python(jar))
    return [str(path) for path in drop if path.is_file()]


@functools.cache
def _no_python(jar: Path) -> bool:
    """Whether ``jar`` holds no Python module (unreadable: assume it may). Read once a
    process: the driver asks on each session's start and each job's environment."""
    try:
        with zipfile.ZipFile(jar) as archive:
            return not any(name.endswith((".py", ".pyc")) for name in archive.namelist())
    except (OSError, zipfile.BadZipFile):
        return False


def prepared_event_log(event_log_dir: Path | None, app_name: str) -> Path | None:
    """The application's event log directory, ``<event_log_dir>/<app_name>``, made if
    missing (Spark refuses a missing one).

    One a name: Spark names an application's log by its id, ``local-<milliseconds>``
    on a local master, and refuses to start when that log exists already; two apps
    of a DC started in the same millisecond (as the chaos run starts them) would
    otherwise collide. An app's own restarts come one after the other.
    """
    if event_log_dir is None:
        return None
    directory = event_log_dir / "".join(c if c.isalnum() or c in "-_." else "_" for c in app_name)
    directory.mkdir(parents=True, exist_ok=True)
    return directory


class _NumpyConverterWhenNumpy:
    """PySpark's py4j converter of a NumPy value, asked only about NumPy values.

    PySpark's own ``can_convert`` imports ``pyspark.testing.utils`` (and pandas with it)
    the first time py4j converts any argument, which is while ``getOrCreate`` builds the
    driver's ``SparkConf``: ~0.5 CPU-s on every driver's start-up path, for a check a
    type test answers (docs/deploy.md, "Start-up")."""

    def __init__(self, converter: Any) -> None:
        self.converter = converter

    def can_convert(self, obj: Any) -> bool:
        numpy = sys.modules.get("numpy")  # a NumPy value means NumPy is imported
        return (
            numpy is not None
            and isinstance(obj, numpy.generic | numpy.ndarray)
            and bool(self.converter.can_convert(obj))
        )

    def convert(self, obj: Any, gateway_client: Any) -> Any:
        return self.converter.convert(obj, gateway_client)


def ask_numpy_converters_only_about_numpy() -> None:
    """Wrap PySpark's NumPy converters in py4j's list (once; idempotent)."""
    converters = py4j.protocol.INPUT_CONVERTER
    for n, converter in enumerate(converters):
        name = type(converter).__name__
        if name in ("NumpyArrayConverter", "NumpyScalarConverter"):
            converters[n] = _NumpyConverterWhenNumpy(converter)


_PYSPARK_DIR = str(Path(pyspark.traceback_utils.__file__).parent)


def _first_spark_call_from_frames() -> pyspark.traceback_utils.CallSite | None:
    """What ``pyspark.traceback_utils.first_spark_call`` answers (the outermost PySpark
    frame's function, at the line that called it), from the frames alone. PySpark's own
    builds ``traceback.extract_stack()``, which reads every frame's source line and
    stats its file, to label the job in Spark's UI: at each ``collect``, every batch's
    group job in the joiner's driver, ~5% of its samples in a profile of its steady
    batches."""
    frames: list[FrameType] = []
    frame: FrameType | None = sys._getframe(1)  # the caller's, as extract_stack's last
    while frame is not None:
        frames.append(frame)
        frame = frame.f_back
    frames.reverse()
    first = next(
        (n for n, f in enumerate(frames) if f.f_code.co_filename.startswith(_PYSPARK_DIR)),
        len(frames) - 1,
    )
    spark, caller = frames[first], frames[max(0, first - 1)]
    return pyspark.traceback_utils.CallSite(
        function=spark.f_code.co_name,
        file=caller.f_code.co_filename,
        linenum=caller.f_lineno,
    )


def find_call_sites_from_frames() -> None:
    """PySpark's call-site labels for Spark's UI, found without reading source files
    (idempotent)."""
    pyspark.traceback_utils.first_spark_call = _first_spark_call_from_frames


#: Spark's static set of installed Python data sources (``pyspark_*`` packages), on its
#: ``DataSourceManager`` object: Spark fills it on a session's first data-source lookup.
_STATIC_DATA_SOURCES = "org.apache.spark.sql.execution.datasources.DataSourceManager$"


def skip_static_data_source_search(spark: SparkSession) -> bool:
    """Tell Spark there are no installed ``pyspark_*`` data sources to register.

    On a session's first data-source lookup (registering Photon's log source, reading
    Parquet by name) Spark starts a Python process that imports PySpark and walks every
    module on the path for ``pyspark_*`` packages: ~2.5 s of a driver's start-up on two
    cores, before its first stream (docs/deploy.md, "Start-up"). Photon registers its one
    source itself and installs no such package, so the set is given as empty. Spark keeps
    it in a field of its own, not an API: where it is missing (another Spark version),
    this returns False and Spark searches as before."""
    jvm = spark._jvm
    if jvm is None:
        return False
    try:
        manager = getattr(getattr(jvm, _STATIC_DATA_SOURCES), "MODULE$")
        if not manager.dataSourceBuilders().isEmpty():
            return True  # searched or given already: nothing to skip
        empty = getattr(getattr(jvm, "scala.collection.immutable.Map$"), "MODULE$").empty()
        getattr(manager, "dataSourceBuilders_$eq")(jvm.scala.Some(empty))
    except py4j.protocol.Py4JError:
        return False
    return True


def photon_session(
    app_name: str,
    pipeline: PipelineSettings,
    *,
    ui_port: int = 0,
    event_log_dir: Path | None = None,
) -> SparkSession:
    """The session of a long-running app, on ``pipeline.spark_master``."""
    use_project_interpreter(pipeline)
    ask_numpy_converters_only_about_numpy()
    find_call_sites_from_frames()
    builder = SparkSession.builder.appName(app_name).master(pipeline.spark_master)
    conf = (
        session_conf(
            pipeline,
            pipeline.spark_master,
            ui_port=ui_port,
            event_log_dir=prepared_event_log(event_log_dir, app_name),
        )
        | {
            "spark.sql.streaming.stopTimeout": "30s",
            # Spark's default writes each batch's offset and commit files through Hadoop's
            # FileContext, which without Hadoop's native library runs `readlink` and `chmod`
            # as child processes of the driver's JVM: ~0.06 s a batch, serial, that no
            # executor takes over (docs/join.md, "Between two batches").
            CHECKPOINT_FILE_MANAGER_CONF: CHECKPOINT_FILE_MANAGER,
            "spark.python.worker.reuse": "true",
            # Its workers forked with their modules already imported (its docstring).
            "spark.python.daemon.module": preloading_daemon.MODULE,
        }
        | driver_launch_conf(pipeline)
    )
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    skip_static_data_source_search(spark)
    spark.dataSource.register(GrowingLogDataSource)
    return spark


def dc_session(session_name: str, settings: PhotonSettings, dc: str) -> SparkSession:
    """The session of a DC's long-running app: the settings' Spark UI port for the DC and
    event log (Photon's apps and the peer ``photon bench compare`` measures)."""
    return photon_session(
        session_name,
        settings.pipeline,
        ui_port=settings.spark_ui_port(dc),
        event_log_dir=settings.spark_event_log_dir,
    )


def submitted_session(
    app_name: str,
    pipeline: PipelineSettings,
    *,
    ui_port: int = 0,
    event_log_dir: Path | None = None,
) -> SparkSession:
    """A batch job's session: spark-submit's master and ``--conf`` win over the settings."""
    use_project_interpreter(pipeline)
    ask_numpy_converters_only_about_numpy()
    find_call_sites_from_frames()
    if "PYSPARK_GATEWAY_PORT" in os.environ:
        # Under spark-submit its JVM holds --master and --conf; a SparkConf sees them
        # only once the gateway to that JVM is up (before, it is an empty Python dict).
        SparkContext._ensure_initialized()
    submitted = SparkConf()
    master = submitted.get("spark.master", pipeline.spark_master) or pipeline.spark_master
    builder = SparkSession.builder.appName(app_name)
    if not submitted.contains("spark.master"):
        builder = builder.master(master)
    # Run directly (no spark-submit), this builder starts the driver JVM: its options count.
    conf = session_conf(
        pipeline, master, ui_port=ui_port, event_log_dir=prepared_event_log(event_log_dir, app_name)
    ) | driver_launch_conf(pipeline)
    for key, value in conf.items():
        if not submitted.contains(key):
            builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    skip_static_data_source_search(spark)
    return spark
