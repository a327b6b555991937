"""A class-data-sharing archive of the Spark driver's classes.

A Spark driver loads and verifies some ten thousand classes at every start; the
JVM maps them from this archive instead (JDK's AppCDS). On a 2-core machine that
halves a driver's start-up: about 10 CPU-seconds instead of 19, and the first
micro-batch sooner (docs/deploy.md, "Start-up"). Photon starts many drivers: four
apps per run, each restart after a crash, every batch job.

Built once per installation by ``python -m spark_apps.class_archive`` (``make
install`` runs it): a short local Spark job, batch and streaming, with Spark's UI
and event log as the apps run, whose JVM writes the classes it loaded when it
exits. The archive lives in the virtualenv, named by the PySpark version.

The JVM leaves out of an archive every class of a signed jar. PySpark ships two:
Janino's, the compiler of Spark's generated code, which every app's first query
loads (some 350 classes, on the path to its first batch). The build writes
unsigned copies of them beside the archive, and a driver that maps the archive
finds them first on its class path (``spark.driver.extraClassPath``).

How it fails: an archive that is missing (not built, or ``pipeline.class_archive``
off), or whose jar copies are, is not used; one made by another JDK or for another
classpath is refused by the JVM, which says so in one warning line and loads the
classes as usual. Nothing else changes either way. A failed build leaves no archive
behind (it is written aside and renamed into place, after its jar copies).
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Annotated

import pyspark
import typer

from spark_apps.growing_log_source import GrowingLogDataSource


def archive_path() -> Path:
    """Where this installation's archive is (or would be)."""
    return Path(sys.prefix) / "share" / "photon" / f"spark-{pyspark.__version__}-driver.jsa"


def unsigned_jars_dir(path: Path | None = None) -> Path:
    """Where the build of the archive at ``path`` puts its unsigned jar copies."""
    path = archive_path() if path is None else path
    return path.with_name(f"{path.stem}-unsigned-jars")


def class_archive_conf(
    options: str, enabled: bool = True, path: Path | None = None
) -> dict[str, str]:
    """A driver's JVM options, with the archive when it is there and may be used, and
    the class path its jar copies take (the archive was made with them first)."""
    path = archive_path() if path is None else path
    copies = unsigned_jars_dir(path)
    # JVM options are split at spaces: a path with one cannot be passed
    if not enabled or " " in str(path) or not path.is_file() or not copies.is_dir():
        return {"spark.driver.extraJavaOptions": options}
    options = f"{options} -XX:SharedArchiveFile={path}".strip()
    return {"spark.driver.extraJavaOptions": options} | _class_path_conf(copies)


def _class_path_conf(copies: Path) -> dict[str, str]:
    class_path = os.pathsep.join(str(jar) for jar in sorted(copies.glob("*.jar")))
    return {"spark.driver.extraClassPath": class_path} if class_path else {}


def signed_jars(jars_dir: Path) -> list[Path]:
    """The jars in ``jars_dir`` that carry a signature (whose classes no archive holds)."""
    signed = []
    for jar in sorted(jars_dir.glob("*.jar")):
        with zipfile.ZipFile(jar) as archive:
            if any(_is_signature(name) for name in archive.namelist()):
                signed.append(jar)
    return signed


def write_unsigned_copy(jar: Path, out_dir: Path) -> Path:
    """``jar`` without its signature files, in ``out_dir`` under the same name."""
    copy = out_dir / jar.name
    with zipfile.ZipFile(jar) as source, zipfile.ZipFile(copy, "w", zipfile.ZIP_DEFLATED) as out:
        for entry in source.infolist():
            if not _is_signature(entry.filename):
                out.writestr(entry, source.read(entry))
    return copy


def _is_signature(name: str) -> bool:
    directory, _, file_name = name.rpartition("/")
    return directory == "META-INF" and file_name.upper().endswith((".SF", ".DSA", ".RSA", ".EC"))


def build(path: Path, java_options: str = "") -> Path:
    """Run the short job whose driver writes the archive, then move it to ``path``.

    Run it in a process of its own: the archive is written when the driver JVM
    exits, and this waits for that exit.
    """
    from photon.settings import PipelineSettings
    from spark_apps.session import session_conf, use_project_interpreter

    use_project_interpreter()
    path.parent.mkdir(parents=True, exist_ok=True)
    aside = path.with_name(f".{path.name}.{os.getpid()}")
    copies = unsigned_jars_dir(path)
    # An archive is made for one class path: the copies are replaced before it is.
    path.unlink(missing_ok=True)
    shutil.rmtree(copies, ignore_errors=True)
    copies.mkdir()
    for jar in signed_jars(Path(pyspark.__file__).parent / "jars"):
        write_unsigned_copy(jar, copies)
    # (it would warn of each class it leaves out: hundreds of lines)
    options = f"{java_options} -XX:ArchiveClassesAtExit={aside} -Xlog:cds=error".strip()
    with tempfile.TemporaryDirectory(prefix="photon-class-archive-events-") as events:
        # The apps' own configuration, their UI and event log included, so that the
        # archive holds the classes they load. (The UI on any free port: Spark's 0.)
        conf = (
            session_conf(PipelineSettings(), "local[2]", ui_port=1, event_log_dir=Path(events))
            | {"spark.ui.port": "0", "spark.driver.extraJavaOptions": options}
            | _class_path_conf(copies)
        )
        _run_the_apps_job(conf, aside)
    if not aside.is_file():
        raise RuntimeError(f"the driver JVM wrote no archive at {aside}")
    aside.replace(path)
    return path


def _run_the_apps_job(conf: dict[str, str], aside: Path) -> None:
    """Start a driver with ``conf``, run the apps' job and wait for its JVM's exit."""
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName("photon-class-archive").master("local[2]")
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")  # a one-off job: its warnings tell nobody anything
    gateway = spark.sparkContext._gateway
    assert gateway is not None
    jvm = gateway.proc
    try:
        _load_the_apps_classes(spark, GrowingLogDataSource)
    except BaseException:
        spark.stop()
        jvm.kill()
        jvm.wait(timeout=60)
        aside.unlink(missing_ok=True)  # a half-written one would be refused at every start
        raise
    spark.stop()
    gateway.shutdown()
    jvm.stdin.close()  # the gateway's JVM exits when its stdin closes, writing the archive
    jvm.wait(timeout=300)


def _load_the_apps_classes(spark: object, source: type[GrowingLogDataSource]) -> None:
    """What the apps do: a batch job, and a streaming query over growing logs with
    Python in its tasks."""
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    assert isinstance(spark, SparkSession)
    spark.dataSource.register(source)
    spark.range(1000).groupBy((F.col("id") % 7).alias("k")).count().collect()
    with tempfile.TemporaryDirectory(prefix="photon-class-archive-") as tmp:
        logs, checkpoint = Path(tmp) / "logs", Path(tmp) / "checkpoint"
        logs.mkdir()
        (logs / "0.log").write_text("".join(f'{{"n": {n}}}\n' for n in range(100)))
        seen: list[int] = []

        def batch(frame: object, batch_id: int) -> None:
            seen.append(len(frame.toArrow()))  # type: ignore[attr-defined]

        query = (
            spark.readStream.format(source.name())
            .option("path", str(logs))
            .load()
            .writeStream.foreachBatch(batch)
            .option("checkpointLocation", str(checkpoint))
            .trigger(processingTime="1 second")
            .start()
        )
        deadline = time.monotonic() + 120
        while not seen and time.monotonic() < deadline and query.isActive:
            time.sleep(0.5)
        query.stop()


def main(
    out: Annotated[
        Path | None, typer.Option(help="Where to write it (default: the installation's).")
    ] = None,
) -> None:
    """Build the Spark driver's class archive (once per installation)."""
    from photon.settings import PipelineSettings

    target = archive_path() if out is None else out
    started = time.monotonic()
    build(target, PipelineSettings().driver_java_options)
    size_mb = target.stat().st_size / 1e6
    typer.echo(f"class archive: {target} ({size_mb:.0f} MB, {time.monotonic() - started:.0f} s)")


if __name__ == "__main__":
    typer.run(main)
