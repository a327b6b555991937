"""The query reader app of one DC: ``python -m spark_apps.query_reader --dc a``
(or ``photon read-queries``).

Streams the DC's query logs through :class:`photon.join.query_reader.QueryReader`:
every query into the Redis cache, log-file-map runs to the object store.
State: ``<pipeline.state_root>/<dc>/query-reader/``.
"""

from __future__ import annotations

import typer

from photon.apps import QUERY_READER
from photon.join.runtime import QueryReaderApp, build_query_reader
from spark_apps.app import AppStream, run_app
from spark_apps.cli import (
    ConfigOption,
    DcOption,
    LogLevelOption,
    MasterOption,
    UntilIdleOption,
    settings_for,
)
from spark_apps.session import start_fork_server


def query_reader_stream(app: QueryReaderApp, until_idle_s: float | None) -> AppStream:
    """The DC query reader's stream, over what :func:`build_query_reader` built."""
    assert app.reader is not None
    reader = app.reader
    return AppStream(
        QUERY_READER,
        app,
        reader.process,
        totals=reader.totals.to_dict,
        until_idle_s=until_idle_s,
        idle=reader.publish_progress,
        settled=reader.settled,
    )


def main(
    dc: DcOption,
    config: ConfigOption = None,
    master: MasterOption = None,
    until_idle: UntilIdleOption = None,
    log_level: LogLevelOption = "info",
) -> None:
    """Read the DC's queries into the cache and the log-file map."""
    settings = settings_for(dc, config, master, log_level)
    start_fork_server(settings.pipeline)  # while this process is one thread
    app = build_query_reader(settings, dc)
    try:
        run_app(settings, query_reader_stream(app, until_idle))
    finally:
        app.close()


if __name__ == "__main__":
    typer.run(main)
