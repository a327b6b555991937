"""The verification batch job: ``spark-submit spark_apps/verify_output.py --start ... --end ...``.

Spark reads every DC's click logs in parallel (the files spread over up to 64
tasks, each read with Arrow batches out: ``mapInArrow``) and keeps the clicks of
the window once each (``dropDuplicates``): DataFrame operations only, which Spark
Connect runs too. The rest is :func:`photon.ops.verify.verify`:
output, registry and retry stores against those inputs, the Great
Expectations suite, the report in the object store, token clearing.
Exits 0 when verification passes, 1 when it fails (the report says why),
2 on bad arguments or settings.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Annotated

import pyarrow as pa
import typer
from pyspark.sql import SparkSession

from photon.ops.params import InvalidParamsError, Window, resolve_window
from photon.ops.verify import (
    VerifyReport,
    click_files,
    clicks_in_file,
    load_expectations_meanwhile,
    verify,
)
from photon.registry_access import connect_registry
from photon.settings import PhotonSettings
from photon.storage import ObjectStore
from spark_apps.batch import ConfigOption, RunOption, batch_session, batch_settings

_CLICKS = pa.schema([("click_id", pa.string()), ("query_id", pa.string())])


def window_clicks(
    spark: SparkSession, files: list[str], start_us: int, end_us: int
) -> dict[str, str]:
    """click_id -> query_id of every click in the window, once each (a click shipped twice
    counts once), read by Spark tasks from ``files``."""

    def read(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for path in batch.column("path").to_pylist():
                pairs = list(clicks_in_file(Path(path), start_us, end_us))
                yield pa.RecordBatch.from_arrays(
                    [pa.array([c for c, _ in pairs], pa.string()),
                     pa.array([q for _, q in pairs], pa.string())],
                    schema=_CLICKS,
                )  # fmt: skip

    table = (
        spark.createDataFrame([(path,) for path in files], "path string")
        .repartition(max(1, min(len(files), 64)))
        .mapInArrow(read, "click_id string, query_id string")
        .dropDuplicates(["click_id"])
        .toArrow()
    )
    return dict(zip(table["click_id"].to_pylist(), table["query_id"].to_pylist(), strict=True))


def run_verification(
    settings: PhotonSettings,
    window: Window,
    *,
    run: str,
    latency_bound_s: float,
    clear_tokens: bool,
) -> VerifyReport:
    """The job: the window's clicks read by Spark, then :func:`photon.ops.verify.verify`
    (the report written to the object store)."""
    expectations = load_expectations_meanwhile()  # seconds of imports, beside the JVM's
    spark = batch_session("photon-verify", settings)
    try:
        files = [str(path) for path in click_files(settings)]
        clicks = window_clicks(spark, files, window.start_us, window.end_us) if files else {}
    finally:
        spark.stop()
    expectations.join()
    store = ObjectStore.from_settings(settings)
    registry = connect_registry(settings)
    try:
        report = verify(
            settings,
            store,
            registry,
            window,
            run=run,
            latency_bound_s=latency_bound_s,
            clear_tokens=clear_tokens,
            inputs=clicks,
        )
    finally:
        registry.close()
    return report


def main(
    start: Annotated[str, typer.Option(help="Window start, ISO-8601 (event time).")],
    end: Annotated[str, typer.Option(help="Window end, ISO-8601, not in the future.")],
    run: RunOption,
    latency_bound_s: Annotated[float, typer.Option(min=0.001)] = 4 * 3600.0,
    clear_tokens: Annotated[bool, typer.Option(help="Clear tokens of ids in output.")] = True,
    config: ConfigOption = None,
) -> None:
    """Verify the joined output of the window; write the report; exit 1 if it fails."""
    settings = batch_settings(config)
    try:
        window = resolve_window(start, end, 0, datetime.now().astimezone())
    except InvalidParamsError as exc:
        raise typer.BadParameter(str(exc)) from None
    report = run_verification(
        settings, window, run=run, latency_bound_s=latency_bound_s, clear_tokens=clear_tokens
    )
    typer.echo(f"verification {run}: {'passed' if report.passed else 'FAILED'}")
    for failure in report.failures:
        typer.echo(f"  {failure}")
    if not report.passed:
        raise typer.Exit(1)


if __name__ == "__main__":
    typer.run(main)
