"""photon_gc_boundary: advance every shard's GC boundary to now - retention, then collect."""

from __future__ import annotations

from datetime import timedelta

from airflow.sdk import DAG

from dags._common import DAG_ARGS, DEFAULT_ARGS, START, params_of
from photon.ops.params import GcParams
from plugins.operators.photon import GcBoundaryOperator

with DAG(
    dag_id="photon_gc_boundary",
    description="Advance each registry shard's GC boundary (never back), delete expired buckets",
    schedule=timedelta(hours=1),
    start_date=START,
    catchup=False,
    max_active_runs=1,
    **DAG_ARGS,
    default_args=DEFAULT_ARGS,
    tags=["photon", "registry", "gc"],
    params=params_of(GcParams),
    doc_md="""
### GC boundary advancement

Every hour, each shard of the IdRegistry gets its GC boundary moved to
`now - retention` (`retention` in Photon's settings). A boundary **never goes
back**: a shard already past the target keeps its boundary. Buckets wholly
below the boundary are deleted; ids below it answer `too_old` to the
pipelines (their clicks go to the `too_old/` output).

The task's log and XCom list, per shard: the boundary before and after,
deleted buckets and ids, ids left. `dry_run` reports and changes nothing.
""",
) as dag:
    GcBoundaryOperator(task_id="advance_and_collect")
