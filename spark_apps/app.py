"""What both apps do around their stream: metrics endpoint, Spark session, summary file."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import structlog
from prometheus_client import start_http_server
from pyspark.sql import SparkSession

from photon.join.runtime import AppParts
from photon.localfiles import write_whole
from photon.settings import PhotonSettings
from spark_apps import streaming
from spark_apps.session import photon_session

log = structlog.get_logger(__name__)

SUMMARY_FILE = "summary.json"


def serve_metrics(settings: PhotonSettings, dc: str, app: str) -> int | None:
    """Start the app's Prometheus endpoint (loopback unless pipeline.metrics_bind_address says
    otherwise); its port, or None when disabled."""
    port = settings.metrics_port(dc, app)
    if port is None:
        return None
    bind = settings.pipeline.metrics_bind_address or settings.stack.host
    try:
        start_http_server(port, addr=bind)
    except OSError as exc:  # the join matters more than its metrics: say so and go on
        log.error("app.metrics_unavailable", dc=dc, app=app, port=port, error=str(exc))
        return None
    log.info("app.metrics", dc=dc, app=app, url=f"http://{settings.stack.host}:{port}/metrics")
    return port


def write_summary(state_dir: Path, data: Mapping[str, Any]) -> Path:
    """The app's closing summary, read by ``photon run`` (written whole, then renamed)."""
    text = json.dumps(data, indent=2, sort_keys=True, default=str) + "\n"
    return write_whole(state_dir / SUMMARY_FILE, text.encode())


def run_app(
    settings: PhotonSettings,
    parts: AppParts,
    app: str,
    handle: streaming.Handler,
    *,
    until_idle_s: float | None,
    totals: Callable[[], Mapping[str, Any]],
    idle: Callable[[], Any] | None = None,
    settled: Callable[[], bool] = lambda: True,
    prepare: Callable[[SparkSession], Any] | None = None,
) -> dict[str, Any]:
    """Serve metrics, stream the app's logs into ``handle``, then write its summary.

    ``prepare`` gets the Spark session before the stream starts (the joiner's tasks).
    """
    dc = parts.dc
    serve_metrics(settings, dc, app)
    log.info("app.start", app=app, dc=dc, attempt=parts.attempt, logs=str(parts.logs_dir))
    spark = photon_session(f"photon-{app}-{dc}", settings.pipeline)
    try:
        if prepare is not None:
            prepare(spark)
        summary = streaming.run(
            spark,
            streaming.StreamOptions.from_settings(settings, parts, until_idle_s),
            handle,
            idle=idle,
            settled=settled,
            query_name=f"{app}-{dc}",
        )
    finally:
        spark.stop()
    data = {
        "app": app,
        "dc": dc,
        "attempt": parts.attempt,
        "stopped_by": summary.stopped_by,
        **totals(),
    }
    write_summary(parts.state_dir, data)
    log.info("app.stop", **data)
    return data
