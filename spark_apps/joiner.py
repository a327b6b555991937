"""The joiner app of one DC: ``python -m spark_apps.joiner --dc a`` (or ``photon join``).

Streams the DC's click logs through :class:`photon.join.joiner.Joiner`, one
micro-batch at a time, and runs retry passes between batches. The batch's
Spark id names it, so a replay after a crash is recognised (see
``docs/join.md``). State: ``<pipeline.state_root>/<dc>/joiner/``.
"""

from __future__ import annotations

import structlog
import typer

from photon.join.runtime import JOINER, build_joiner
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
    """Join the DC's clicks to their queries, at most once across all DCs."""
    settings = settings_for(dc, config, master, log_level)
    app = build_joiner(settings, dc)
    try:
        assert app.joiner is not None and app.retries is not None
        joiner, retries = app.joiner, app.retries
        serve_metrics(settings, dc, JOINER)
        log.info("joiner.start", dc=dc, attempt=app.attempt, logs=str(app.logs_dir))
        spark = photon_session(f"photon-joiner-{dc}", settings.pipeline.spark_master)
        try:
            summary = streaming.run(
                spark,
                streaming.StreamOptions.from_settings(settings, app, until_idle),
                joiner.process,
                idle=joiner.process_retries,
                settled=lambda: retries.pending() == 0,
                query_name=f"joiner-{dc}",
            )
        finally:
            spark.stop()
        data = {
            "app": JOINER,
            "dc": dc,
            "attempt": app.attempt,
            "stopped_by": summary.stopped_by,
            "retries_pending": retries.pending(),
            **joiner.totals.to_dict(),
        }
        write_summary(app.state_dir, data)
        log.info("joiner.stop", **data)
    finally:
        app.close()


if __name__ == "__main__":
    typer.run(main)
