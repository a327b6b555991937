"""The verification batch job: ``spark-submit spark_apps/verify_output.py --start ... --end ...``.

Spark reads every DC's click logs in parallel (one task per file) and keeps
the clicks of the window once each; the rest is :func:`photon.ops.verify.verify`:
output, registry and retry stores against those inputs, the Great
Expectations suite, the report in the object store, token clearing.
Exits 0 when verification passes, 1 when it fails (the report says why),
2 on bad arguments or settings.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Annotated

import typer

from photon.ops.params import InvalidParamsError, resolve_window
from photon.ops.verify import click_files, clicks_in_file, verify
from photon.registry_access import connect_registry
from photon.storage import ObjectStore
from spark_apps.batch import ConfigOption, RunOption, batch_session, batch_settings


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
    spark = batch_session("photon-verify", settings)
    try:
        files = [str(path) for path in click_files(settings)]
        start_us, end_us = window.start_us, window.end_us
        clicks = (
            spark.sparkContext.parallelize(files, max(1, min(len(files), 64)))
            .flatMap(lambda path: clicks_in_file(Path(path), start_us, end_us))
            .reduceByKey(lambda first, _: first)  # a click shipped twice counts once
            .collect()
            if files
            else []
        )
    finally:
        spark.stop()
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
            inputs=dict(clicks),
        )
    finally:
        registry.close()
    typer.echo(f"verification {run}: {'passed' if report.passed else 'FAILED'}")
    for failure in report.failures:
        typer.echo(f"  {failure}")
    if not report.passed:
        raise typer.Exit(1)


if __name__ == "__main__":
    typer.run(main)
