"""Spark's own stream-stream join of one DC's logs: the peer ``photon bench compare`` measures.

``python -m spark_apps.native_join --dc a --logs-root … --out …`` runs what a
Spark user would write instead of Photon (docs/join.md, "Against Spark's
own join"): each log read as JSON lines by Spark's file source, ids
checked, duplicates dropped within a watermark
(``dropDuplicatesWithinWatermark``), and an inner join of clicks to queries
on ``query_id`` within an event-time range, both sides watermarked. It runs
once over what the logs hold (``Trigger.AvailableNow``) and writes parquet
under ``<out>/dc=<dc>/``. Event times are the ids' timestamps. Its session is
Photon's apps' own (:func:`spark_apps.session.dc_session`), Spark's UI and
event log included, as the settings put them for the DC: the two systems pay
for the same operators' tools (docs/join.md, "Against Spark's own join").

It is not Photon and is not meant to be: it has no registry, so two DCs
running it each write every click they join (duplicates across DCs); a click
later than the watermark, or whose query is, is dropped for good; malformed
lines are dropped, not quarantined.

How it fails: a bad option exits 2 with the reason; Spark's errors propagate
(exit 1). On success it prints one JSON line: the DC, rows written, and the
seconds from the session's start to the query's end.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated

import typer
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StringType, StructField, StructType

from spark_apps.cli import ConfigOption, DcOption, MasterOption, settings_for
from spark_apps.session import dc_session

#: A canonical event id: ``<ip>:<pid>:<timestamp µs>`` (photon.events.ids).
_ID_PATTERN = r"^[0-9.]+:[0-9]+:[0-9]{1,19}$"


def _event_time(id_column: str) -> Column:
    return F.timestamp_micros(F.split(F.col(id_column), ":").getItem(2).cast("long"))


def _log(spark: SparkSession, directory: Path, id_column: str, ts_column: str) -> DataFrame:
    schema = StructType([StructField(id_column, StringType())])
    if id_column == "click_id":
        schema = schema.add(StructField("query_id", StringType()))
    lines = spark.readStream.schema(schema).json(str(directory))  # bad lines: null ids
    checked = lines.where(F.col(id_column).rlike(_ID_PATTERN))
    if id_column == "click_id":
        checked = checked.where(F.col("query_id").rlike(_ID_PATTERN))
    return checked.withColumn(ts_column, _event_time(id_column))


def native_join(spark: SparkSession, logs: Path, watermark_s: int) -> DataFrame:
    """The streaming join's result (not started): one DC's clicks joined to its queries."""
    delay = f"{watermark_s} seconds"
    queries = (
        _log(spark, logs / "queries", "query_id", "query_ts")
        .withWatermark("query_ts", delay)
        .dropDuplicatesWithinWatermark(["query_id"])
        .withColumnRenamed("query_id", "q_query_id")
    )
    clicks = (
        _log(spark, logs / "clicks", "click_id", "click_ts")
        .withWatermark("click_ts", delay)
        .dropDuplicatesWithinWatermark(["click_id"])
    )
    within = (
        (F.col("query_id") == F.col("q_query_id"))
        & (F.col("click_ts") >= F.col("query_ts"))
        & (F.col("click_ts") <= F.col("query_ts") + F.expr(f"INTERVAL {delay}"))
    )
    return clicks.join(queries, within, "inner").select("click_id", "query_id", "click_ts")


def main(
    dc: DcOption,
    logs_root: Annotated[Path, typer.Option("--logs-root", exists=True, file_okay=False)],
    out: Annotated[Path, typer.Option("--out", help="Parquet goes under <out>/dc=<dc>/.")],
    watermark_s: Annotated[
        int, typer.Option("--watermark-s", min=1, max=86_400, help="Watermark and join range.")
    ] = 600,
    config: ConfigOption = None,
    master: MasterOption = None,
) -> None:
    """Join the DC's clicks to its queries with Spark's own stream-stream join, once."""
    settings = settings_for(dc, config, master, "warning")
    started = time.monotonic()
    # A name a DC: one event log directory each, as Photon's apps have.
    spark = dc_session(f"spark-native-join-{dc}", settings, dc)
    try:
        joined = native_join(spark, logs_root / dc, watermark_s)
        query = (
            joined.writeStream.format("parquet")
            .option("path", str(out / f"dc={dc}"))
            .option("checkpointLocation", str(out / "_checkpoints" / dc))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        rows = sum(int(p.get("numInputRows", 0)) for p in query.recentProgress)
        print(
            json.dumps(
                {"dc": dc, "input_rows": rows, "seconds": round(time.monotonic() - started, 2)}
            ),
            flush=True,
        )
    finally:
        spark.stop()


if __name__ == "__main__":
    typer.run(main)
