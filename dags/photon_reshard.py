"""photon_reshard: append a sharding epoch at now + skew and confirm the pipelines use it."""

from __future__ import annotations

from datetime import timedelta

from airflow.sdk import DAG

from dags._common import DAG_ARGS, DEFAULT_ARGS, START, params_of
from photon.ops.params import ReshardParams
from plugins.operators.photon import ReshardOperator, SummaryOperator
from plugins.sensors.epoch import EpochStartedSensor, PipelinesOnConfigSensor

APPEND = "append_epoch"

with DAG(
    dag_id="photon_reshard",
    description="Resharding rollout: new shard count from now + skew, confirmed on every pipeline",
    schedule=None,
    start_date=START,
    catchup=False,
    max_active_runs=1,
    **DAG_ARGS,
    default_args={**DEFAULT_ARGS, "retries": 0},
    tags=["photon", "registry", "resharding"],
    params=params_of(ReshardParams),
    doc_md="""
### Resharding rollout

Trigger with the **new shard count** and the **skew** in seconds (at least the
configured maximum clock skew, `shards.max_clock_skew_s`; leave it empty for
that bound). The run:

1. validates the params (bad values fail here, before any change) and appends
   a sharding epoch starting at `now + skew` (compare-and-set: a concurrent
   change fails the run, nothing appended), creating its shard nodes; it
   refuses while a running pipeline has not picked up the current config
   (the error names it);
2. waits, deferred to the triggerer, until the epoch has started;
3. confirms every running pipeline announces the new config version
   (fails after 10 minutes if one does not: see the task log for which);
4. reports.

Ids never change shard: an id's epoch is fixed by its timestamp.
`dry_run` validates and reports only.
""",
) as dag:
    append = ReshardOperator(task_id=APPEND)
    started = EpochStartedSensor(
        task_id="wait_for_epoch_start",
        start_us=f"{{{{ ti.xcom_pull(task_ids='{APPEND}')['start_us'] }}}}",
        timeout=timedelta(days=1),
    )
    confirmed = PipelinesOnConfigSensor(
        task_id="confirm_pipelines",
        version=f"{{{{ ti.xcom_pull(task_ids='{APPEND}')['config_version'] }}}}",
        poke_interval=5,
        timeout=600,
        mode="poke",
    )
    report = SummaryOperator(task_id="report", task_ids=[APPEND, "confirm_pipelines"])
    append >> started >> confirmed >> report
