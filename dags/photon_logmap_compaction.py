"""photon_logmap_compaction: merge log-file-map delta runs into sorted runs (a Spark job)."""

from __future__ import annotations

from datetime import timedelta

from airflow.sdk import DAG
from airflow.timetables.interval import DeltaDataIntervalTimetable

from dags._common import DAG_ARGS, DEFAULT_ARGS, START, params_of
from photon.ops.params import CompactionParams
from plugins.operators.photon import ReportOperator, ValidateParamsOperator
from plugins.operators.spark import PhotonSparkSubmitOperator

PARAMS = "validate_params"
XCOM = f"ti.xcom_pull(task_ids='{PARAMS}')"

with DAG(
    dag_id="photon_logmap_compaction",
    description="Merge each DC's log-file-map delta runs into one sorted run; verify lookups",
    # Each run about its data interval (its end: the GC window's), not the clock's now.
    schedule=DeltaDataIntervalTimetable(timedelta(minutes=30)),
    start_date=START,
    catchup=False,
    max_active_runs=1,
    **DAG_ARGS,
    default_args=DEFAULT_ARGS,
    tags=["photon", "logmap", "spark"],
    params=params_of(CompactionParams),
    doc_md="""
### Log-file-map compaction

The query readers write one small *delta run* of log-file-map entries per
micro-batch. This Spark batch job (submitted through the `spark_default`
connection) merges each DC's runs into one sorted run, dropping duplicate
entries, entries older than the GC window (`now - retention`; a scheduled
run: its data interval's end `- retention`) and entries
of log files that no longer exist. Before deleting the old runs it checks
`sample` lookups give the same query lines through the new run as through
the old ones; if not, the new run is deleted, the old ones kept, and the run
fails. The report is in the object store under `reports/compaction/`.
""",
) as dag:
    validated = ValidateParamsOperator(task_id=PARAMS, model="CompactionParams")
    compact = PhotonSparkSubmitOperator(
        task_id="compact",
        job="compact_logmap",
        name="photon-logmap-compaction",
        application_args=[
            "--run",
            f"{{{{ {XCOM}['run'] }}}}",
            "--dc",
            f"{{{{ {XCOM}['dc'] or '' }}}}",
            "--sample",
            f"{{{{ {XCOM}['sample'] }}}}",
            "--as-of",
            f"{{{{ {XCOM}['as_of'] }}}}",
        ],
    )
    report = ReportOperator(
        task_id="report", key=f"reports/compaction/{{{{ {XCOM}['run'] }}}}.json"
    )
    validated >> compact >> report
