"""What every app does around its streams: metrics endpoints, one Spark session, summaries.

An app process runs one or more streams (:class:`AppStream`) in one Spark
session: the query reader or the joiner of a DC alone, or both of a DC side by
side (``spark_apps.dc_pipeline``, docs/join.md, "The apps"). Each stream runs
in a thread of its own; the main thread turns SIGTERM/SIGINT into a clean stop
of every stream (running batches finish).

How it fails: a stream whose query fails stops the others of its process, and
the first failure is raised once all have stopped (the app exits non-zero;
what was not committed is replayed on restart). A stream that ends on its own
(idle) stops the streams that were told to follow it (``stops_with``).
"""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import structlog
from prometheus_client import start_http_server
from pyspark.sql import SparkSession

from photon import metrics
from photon.apps import JOINER
from photon.events.records import Stream
from photon.join.backlog import backlog, joiner_offsets
from photon.join.runtime import AppParts
from photon.logs.offset_log import committed_offsets
from photon.settings import PhotonSettings
from spark_apps import streaming
from spark_apps.contracts import RESTARTS_ENV, write_summary
from spark_apps.session import dc_session
from spark_apps.without_pandas import pandas_hidden
from spark_apps.worker_heap import freeze_once

log = structlog.get_logger(__name__)


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
    try:
        restarts = max(0, int(os.environ.get(RESTARTS_ENV, "0")))
    except ValueError:
        restarts = 0
    metrics.APP_RESTARTS.labels(dc, app).set(restarts)
    metrics.APP_INFO.labels(dc, app, socket.gethostname(), str(os.getpid())).set(1)
    return port


@dataclass
class AppStream:
    """One app's stream: its parts, its batch handler and what it reports at the end.

    ``prepare`` gets the Spark session before the stream starts (the joiner's tasks);
    ``drain`` runs once the stream has stopped, while the session still runs (the
    joiner's batch in flight is settled);
    ``stops_with`` names the stream whose end also ends this one (a query reader
    follows its DC's joiner in a run until idle).
    """

    app: str
    parts: AppParts
    handle: streaming.Handler
    totals: Callable[[], Mapping[str, Any]]
    #: Takes each batch as its file ranges, unread (``streaming.run``'s ``handle_ranges``).
    handle_ranges: streaming.RangesHandler | None = None
    until_idle_s: float | None = None
    idle: Callable[[], Any] | None = None
    settled: Callable[[], bool] = lambda: True
    prepare: Callable[[SparkSession], Any] | None = None
    drain: Callable[[], Any] | None = None
    stops_with: str | None = None
    #: More options of its log source (the joiner's pacing to its query reader).
    source_options: Mapping[str, str] = field(default_factory=dict)
    stop: streaming.Stop = field(default_factory=streaming.Stop)


def run_app(settings: PhotonSettings, stream: AppStream) -> dict[str, Any]:
    """One app alone in its process (``photon join``, ``photon read-queries``)."""
    return run_apps(settings, f"photon-{stream.app}-{stream.parts.dc}", [stream])[0]


def run_apps(
    settings: PhotonSettings, session_name: str, streams: Sequence[AppStream]
) -> list[dict[str, Any]]:
    """Serve each app's metrics, run their streams in one Spark session until they stop,
    then write each app's summary; the summaries, in the order of ``streams``."""
    for stream in streams:
        serve_metrics(settings, stream.parts.dc, stream.app)
        log.info("app.start", app=stream.app, dc=stream.parts.dc, attempt=stream.parts.attempt,
                 logs=str(stream.parts.logs_dir))  # fmt: skip
    spark = dc_session(session_name, settings, streams[0].parts.dc)
    results: dict[str, streaming.RunSummary] = {}
    errors: list[BaseException] = []
    try:
        # pyarrow would import pandas at the driver's first conversion: in the query
        # reader's first batch, which the joiner's waits for (spark_apps/without_pandas.py).
        with pandas_hidden():
            _run_streams(spark, settings, streams, results, errors)
    finally:
        spark.stop()
    if errors:
        raise errors[0]
    summaries = []
    for stream in streams:
        data = {
            "app": stream.app,
            "dc": stream.parts.dc,
            "attempt": stream.parts.attempt,
            "stopped_by": results[stream.app].stopped_by,
            **stream.totals(),
        }
        write_summary(stream.parts.state_dir, data)
        log.info("app.stop", **data)
        summaries.append(data)
    return summaries


def _run_streams(
    spark: SparkSession,
    settings: PhotonSettings,
    streams: Sequence[AppStream],
    results: dict[str, streaming.RunSummary],
    errors: list[BaseException],
) -> None:
    """Each stream in a thread of its own, until all have stopped."""
    for stream in streams:
        if stream.prepare is not None:
            stream.prepare(spark)
    # The session, the apps' clients and settings live as long as the process: out of
    # the way of every later collection (as a Python worker's, spark_apps/worker_heap.py).
    freeze_once("app driver")
    threads = [
        threading.Thread(
            target=_stream_thread,
            args=(spark, settings, stream, streams, results, errors),
            name=f"stream-{stream.app}",
        )
        for stream in streams
    ]
    with streaming.stop_on_signals(*(s.stop for s in streams)):
        for thread in threads:
            thread.start()
        for thread in threads:
            while thread.is_alive():  # joined in steps: the main thread takes signals
                thread.join(timeout=0.5)


def lag_gauges(app: str, parts: AppParts) -> Callable[[], None]:
    """Set the app's input lag gauges (docs/metrics.md) from its committed checkpoint
    and its logs (:mod:`photon.join.backlog`)."""
    stream = Stream.CLICKS if app == JOINER else Stream.QUERIES

    def update() -> None:
        done = (
            joiner_offsets(parts.state_dir)  # its batch in flight is not done yet
            if app == JOINER
            else committed_offsets(parts.checkpoint)
        )
        behind = backlog(parts.logs_dir, done, stream)
        metrics.INPUT_BEHIND_BYTES.labels(parts.dc, app).set(behind.bytes)
        metrics.INPUT_BEHIND_FILES.labels(parts.dc, app).set(behind.files)
        metrics.INPUT_LAG_SECONDS.labels(parts.dc, app).set(behind.lag_s)

    return update


def _stream_thread(
    spark: SparkSession,
    settings: PhotonSettings,
    stream: AppStream,
    streams: Sequence[AppStream],
    results: dict[str, streaming.RunSummary],
    errors: list[BaseException],
) -> None:
    try:
        results[stream.app] = streaming.run(
            spark,
            streaming.StreamOptions.from_settings(
                settings,
                stream.parts,
                stream.until_idle_s,
                stream.source_options,
                app_name=stream.app,
            ),
            stream.handle,
            stream.stop,
            idle=stream.idle,
            settled=stream.settled,
            query_name=f"{stream.app}-{stream.parts.dc}",
            watch=lag_gauges(stream.app, stream.parts),
            handle_ranges=stream.handle_ranges,
        )
        if stream.drain is not None:
            stream.drain()
    except BaseException as exc:
        log.error("app.stream_failed", app=stream.app, dc=stream.parts.dc, error=str(exc)[:500])
        errors.append(exc)
        for other in streams:  # one failed: the process stops, and restarts whole
            other.stop.set(f"{stream.app} failed")
        return
    for other in streams:
        if other.stops_with == stream.app:
            other.stop.set(f"{stream.app} stopped")
