"""The joiner app of one DC: ``python -m spark_apps.joiner --dc a`` (or ``photon join``).

Streams the DC's click logs through :class:`photon.join.dispatcher.Dispatcher`, one
micro-batch at a time, and runs retry passes between batches. The driver plans
and settles each batch; its shard groups are joined by Spark tasks on the
executors (:mod:`spark_apps.join_tasks`) unless ``pipeline.join_on_executors``
is off. The batch's
Spark id names it, so a replay after a crash is recognised (see
``docs/join.md``). State: ``<pipeline.state_root>/<dc>/joiner/``.
"""

from __future__ import annotations

import typer
from pyspark.sql import SparkSession

from photon.apps import JOINER
from photon.join.pacing import Pacer
from photon.join.runtime import JoinerApp, build_joiner, reader_pacing
from photon.settings import PhotonSettings
from spark_apps.app import AppStream, run_app
from spark_apps.cli import (
    ConfigOption,
    DcOption,
    LogLevelOption,
    MasterOption,
    UntilIdleOption,
    settings_for,
)
from spark_apps.join_tasks import (
    SparkGroupJobs,
    default_groups,
    spark_group_runner,
    warm_up_workers,
)
from spark_apps.session import start_fork_server
from spark_apps.streaming import committed_batch_lines


def joiner_stream(settings: PhotonSettings, app: JoinerApp, until_idle: float | None) -> AppStream:
    """The DC joiner's stream, over what :func:`build_joiner` built."""
    assert app.joiner is not None and app.retries is not None
    joiner, retries = app.joiner, app.retries
    pacing = reader_pacing(settings, app.dc)
    # Paced, the source leaves clicks unread while the reader reads a backlog, and
    # reads them at its first trigger after: not idle until a few triggers after that.
    caught_up_s = max(5.0, 3 * settings.pipeline.trigger_s)
    pacer: Pacer | None = None

    def reader_was_behind() -> bool:
        nonlocal pacer
        if pacing is None:
            return False
        if pacer is None:  # made at the first look, after the source's: never stale before it
            pacer = Pacer(pacing)
        return pacer.behind_within(caught_up_s)

    def look() -> int:
        """At every look of the app's watch: retry passes between batches, and, for a
        run until idle, a look at the reader. Every look, not only once the joiner has
        been quiet long enough: a joiner paced to a reader reading its backlog reads no
        line meanwhile, and a first look made just after the reader caught up, before
        the source's next trigger read the clicks it let through, found the reader
        never behind and the joiner idle (a run that stopped having joined nothing)."""
        if until_idle is not None:
            reader_was_behind()
        return joiner.process_retry_passes()

    def on_executors(spark: SparkSession) -> None:
        joiner.join_groups = settings.pipeline.join_groups or default_groups(spark)
        joiner.committed_batch_lines = committed_batch_lines(
            app.logs_dir.resolve(), app.checkpoint.resolve()
        )
        if settings.pipeline.join_on_executors:
            joiner.run_groups = spark_group_runner(spark, settings, app.dc, app.attempt)
            if settings.pipeline.warm_up_workers:
                warm_up_workers(spark, settings, app.dc, app.attempt)
            if settings.pipeline.overlap_batches:
                prestart = settings.pipeline.prestart_groups and settings.pipeline.tasks_read_lines
                jobs = SparkGroupJobs(spark, settings, app.dc, app.attempt, prestart=prestart)
                joiner.submit_groups = jobs.submit
                if prestart:
                    joiner.prestart_groups = jobs.prestart

    return AppStream(
        JOINER,
        app,
        joiner.process,
        handle_ranges=joiner.process_ranges if settings.pipeline.tasks_read_lines else None,
        totals=lambda: {
            "retries_pending": retries.pending(),
            # stamped ahead of the registry's clock: a later run joins them (docs/join.md)
            "held_too_new": retries.too_new(joiner.clock()),
            **joiner.totals.to_dict(),
            **joiner.register_counters.to_dict(),
        },
        until_idle_s=until_idle,
        idle=look,
        settled=lambda: (
            joiner.in_flight is None
            and retries.settleable(joiner.clock()) == 0
            and not reader_was_behind()
        ),
        source_options=pacing.to_options() if pacing is not None else {},
        prepare=on_executors,
        drain=joiner.finish_in_flight,
    )


def main(
    dc: DcOption,
    config: ConfigOption = None,
    master: MasterOption = None,
    until_idle: UntilIdleOption = None,
    log_level: LogLevelOption = "info",
) -> None:
    """Join the DC's clicks to their queries, at most once across all DCs."""
    settings = settings_for(dc, config, master, log_level)
    start_fork_server(settings.pipeline)  # while this process is one thread
    app = build_joiner(settings, dc)
    try:
        run_app(settings, joiner_stream(settings, app, until_idle))
    finally:
        app.close()


if __name__ == "__main__":
    typer.run(main)
