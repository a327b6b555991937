"""The log-file-map compaction batch job: ``spark-submit spark_apps/compact_logmap.py``.

For each DC (or ``--dc``): the runs are read, merged by Spark (filter
expired entries and entries of deleted files, drop duplicates, sort), and
installed by :func:`photon.ops.compaction.install`, which checks a sample of
lookups before deleting the old runs. Writes its report (JSON) to
``reports/compaction/<run>.json``. Exits 1 when a check fails, 2 on bad input.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Annotated

import pyarrow as pa
import typer
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from photon.join.logmap import SCHEMA, MapEntry
from photon.ops.compaction import CompactionCheckError, CompactionReport, compact_dc
from photon.ops.gc import gc_target_us
from photon.ops.params import InvalidParamsError, instant
from photon.storage import ObjectStore
from spark_apps.batch import ConfigOption, RunOption, batch_session, batch_settings


def report_key(run: str) -> str:
    return f"reports/compaction/{run}.json"


def spark_merge(
    spark: SparkSession,
) -> Callable[
    [list[MapEntry], int, Callable[[str], bool]], tuple[list[MapEntry], CompactionReport]
]:
    def merge(
        entries: list[MapEntry], boundary_us: int, file_exists: Callable[[str], bool]
    ) -> tuple[list[MapEntry], CompactionReport]:
        report = CompactionReport(dc="", entries_before=len(entries))
        table = pa.table(
            {
                "process": [e.process for e in entries],
                "ts_us": [e.ts_us for e in entries],
                "file": [e.file for e in entries],
                "offset": [e.offset for e in entries],
            },
            schema=SCHEMA,
        )
        frame = spark.createDataFrame(table)
        live = frame.where(F.col("ts_us") >= boundary_us)
        report.dropped_expired = len(entries) - live.count()
        files = [r["file"] for r in live.select("file").distinct().collect()]
        existing = [name for name in files if file_exists(name)]
        present = live.where(F.col("file").isin(existing))
        kept = present.dropDuplicates()
        present_count = present.count()
        report.dropped_missing_file = len(entries) - report.dropped_expired - present_count
        columns = kept.orderBy("process", "ts_us", "file", "offset").toArrow().to_pydict()
        merged = [
            MapEntry(p, t, f, o)
            for p, t, f, o in zip(
                columns["process"],
                columns["ts_us"],
                columns["file"],
                columns["offset"],
                strict=True,
            )
        ]
        report.duplicates = present_count - len(merged)
        report.entries_after = len(merged)
        return merged, report

    return merge


def main(
    run: RunOption,
    dc: Annotated[str, typer.Option(help="Only this DC ('' = every DC).")] = "",
    sample: Annotated[int, typer.Option(min=0, max=100_000)] = 200,
    as_of: Annotated[
        str,
        typer.Option(
            help="The time the run is about, ISO-8601 ('' = now): entries older than it "
            "less the retention are dropped (a scheduled run's data interval end)."
        ),
    ] = "",
    config: ConfigOption = None,
) -> None:
    """Compact each DC's log-file map; exit 1 if a lookup check fails."""
    settings = batch_settings(config)
    now_us = time.time_ns() // 1000
    try:
        moment = instant(as_of or None, "--as-of")
    except InvalidParamsError as exc:
        raise typer.BadParameter(str(exc), param_hint="--as-of") from None
    as_of_us = now_us if moment is None else min(now_us, int(moment.timestamp() * 1_000_000))
    dcs = [dc] if dc else settings.dcs
    for name in dcs:
        if name not in settings.dcs:
            raise typer.BadParameter(f"{name!r} is not a configured DC", param_hint="--dc")
    store = ObjectStore.from_settings(settings)
    spark = batch_session("photon-logmap-compaction", settings)
    reports: list[dict[str, object]] = []
    failed = ""
    try:
        for name in dcs:
            try:
                report = compact_dc(
                    store,
                    name,
                    settings.dc_logs(name) / "queries",
                    boundary_us=gc_target_us(settings.retention, now_us=as_of_us),
                    window_us=int(settings.log_file_map.window_s * 1_000_000),
                    max_bytes=settings.log_file_map.max_bytes,
                    sample=sample,
                    merge_entries=spark_merge(spark),
                )
                reports.append(report.to_dict())
            except CompactionCheckError as exc:
                failed = str(exc)
                reports.append({"dc": name, "error": failed})
    finally:
        spark.stop()
    store.put(report_key(run), json.dumps({"run": run, "dcs": reports}, indent=2).encode())
    typer.echo(json.dumps(reports))
    if failed:
        typer.echo(f"compaction check failed: {failed}", err=True)
        raise typer.Exit(1)


if __name__ == "__main__":
    typer.run(main)
