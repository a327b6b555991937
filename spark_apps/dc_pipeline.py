"""A DC's whole pipeline in one Spark application: ``python -m spark_apps.dc_pipeline --dc a``.

Its query reader and its joiner run as two streaming queries of one Spark
session (one driver, one JVM), the layout ``photon run`` uses by default
(``pipeline.one_app_per_dc``; docs/join.md, "The apps"). Each keeps its own
state directory, checkpoint, metrics endpoint and summary, exactly as when it
runs alone (``spark_apps.joiner``, ``spark_apps.query_reader``), so the two
layouts can take over from each other on the same state.

With ``--until-idle`` the joiner decides when the run is idle, and the query
reader stops after it (a waiting click's query may still be on its way).

How it fails: either query failing stops both and the app exits non-zero;
restarted, each replays what it had not committed.
"""

from __future__ import annotations

import typer

from photon.apps import JOINER
from photon.join.runtime import build_joiner, build_query_reader
from spark_apps.app import run_apps
from spark_apps.cli import (
    ConfigOption,
    DcOption,
    LogLevelOption,
    MasterOption,
    UntilIdleOption,
    settings_for,
)
from spark_apps.joiner import joiner_stream
from spark_apps.query_reader import query_reader_stream
from spark_apps.session import start_fork_server

#: The Spark application's name prefix (``photon-pipeline-<dc>``).
APP_NAME = "pipeline"


def main(
    dc: DcOption,
    config: ConfigOption = None,
    master: MasterOption = None,
    until_idle: UntilIdleOption = None,
    log_level: LogLevelOption = "info",
) -> None:
    """Read the DC's queries and join its clicks, in one Spark application."""
    settings = settings_for(dc, config, master, log_level)
    start_fork_server(settings.pipeline)  # while this process is one thread
    reader_app = build_query_reader(settings, dc)
    try:
        joiner_app = build_joiner(settings, dc)
        try:
            reader = query_reader_stream(reader_app, until_idle_s=None)
            if until_idle is not None:
                reader.stops_with = JOINER
            joiner = joiner_stream(settings, joiner_app, until_idle)
            # The query reader's stream starts first: the joiner finds more in the cache.
            run_apps(settings, f"photon-{APP_NAME}-{dc}", [reader, joiner])
        finally:
            joiner_app.close()
    finally:
        reader_app.close()


if __name__ == "__main__":
    typer.run(main)
