"""The query reader app of one DC: ``python -m spark_apps.query_reader --dc a``
(or ``photon read-queries``).

Streams the DC's query logs through :class:`photon.join.query_reader.QueryReader`:
every query into the Redis cache, log-file-map runs to the object store.
State: ``<pipeline.state_root>/<dc>/query-reader/``.
"""

from __future__ import annotations

import structlog
import typer

from photon.join.runtime import QUERY_READER, build_query_reader
from spark_apps import streaming
from spark_apps.app import serve_metrics, write_summary
from spark_apps.cli import (
    ConfigOption,
    DcOption,
    LogLevelOption,
    MasterOption,
    UntilIdleOption,
    settings_for,
)
from spark_apps.session import photon_session

log = structlog.get_logger(__name__)


def main(
    dc: DcOption,
    config: ConfigOption = None,
    master: MasterOption = None,
    until_idle: UntilIdleOption = None,
    log_level: LogLevelOption = "info",
) -> None:
    """Read the DC's queries into the cache and the log-file map."""
    settings = settings_for(dc, config, master, log_level)
    app = build_query_reader(settings, dc)
    try:
        assert app.reader is not None
        reader = app.reader
        serve_metrics(settings, dc, QUERY_READER)
        log.info("query_reader.start", dc=dc, attempt=app.attempt, logs=str(app.logs_dir))
        spark = photon_session(f"photon-query-reader-{dc}", settings.pipeline.spark_master)
        try:
            summary = streaming.run(
                spark,
                streaming.StreamOptions.from_settings(settings, app, until_idle),
                reader.process,
                query_name=f"query-reader-{dc}",
            )
        finally:
            spark.stop()
        data = {
            "app": QUERY_READER,
            "dc": dc,
            "attempt": app.attempt,
            "stopped_by": summary.stopped_by,
            **reader.totals.to_dict(),
        }
        write_summary(app.state_dir, data)
        log.info("query_reader.stop", **data)
    finally:
        app.close()


if __name__ == "__main__":
    typer.run(main)
