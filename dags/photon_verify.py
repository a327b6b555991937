"""photon_verify: completeness and Great Expectations over the joined output (a Spark job)."""

from __future__ import annotations

from datetime import timedelta

from airflow.sdk import DAG
from airflow.timetables.assets import AssetOrTimeSchedule
from airflow.timetables.interval import DeltaDataIntervalTimetable

from dags._common import DAG_ARGS, DEFAULT_ARGS, START, params_of
from photon.ops.params import VerifyParams
from plugins.assets import JOINED_OUTPUT, VERIFY_REPORTS
from plugins.operators.photon import ReportOperator, ValidateParamsOperator
from plugins.operators.spark import PhotonSparkSubmitOperator

PARAMS = "validate_params"
XCOM = f"ti.xcom_pull(task_ids='{PARAMS}')"

with DAG(
    dag_id="photon_verify",
    description="Verify the joined output: complete, unique across DCs, consistent (GX suite)",
    # Hourly, each run about its data interval; and on each announcement of settled
    # hours of output (photon_output_hours), about those hours.
    schedule=AssetOrTimeSchedule(
        timetable=DeltaDataIntervalTimetable(timedelta(hours=1)), assets=JOINED_OUTPUT
    ),
    start_date=START,
    catchup=False,
    max_active_runs=1,
    **DAG_ARGS,
    default_args={**DEFAULT_ARGS, "retries": 0},
    tags=["photon", "verification", "great-expectations", "spark"],
    params=params_of(VerifyParams),
    doc_md="""
### Verification

For the clicks whose event time lies in the window (a scheduled run: its data
interval, moved back by `settle_s`; a run triggered by `photon_output_hours`'
asset event: the settled hours it announced; a run triggered by hand: the
form's, by default the hour ending `settle_s` ago), a Spark batch job compares
every DC's input click logs with the joined output of every DC, the unjoinable
and too-old outputs, the joiners' retry stores and the registry, and runs a
Great Expectations suite over the joined rows: `click_id` unique across all
DCs, required fields not null, `query_id` well formed and equal to the
input's, latency within `latency_bound_s`.

The run **fails** when an expectation fails or a click is missing or lost
(pending clicks are reported only);
the report (JSON + HTML) is in the object store under
`reports/verify/<run>/`. Ids registered but in no output (*lost*) are what
`photon_recover` repairs. Tokens of ids confirmed in the output are cleared.
""",
) as dag:
    validated = ValidateParamsOperator(task_id=PARAMS, model="VerifyParams")
    verify = PhotonSparkSubmitOperator(
        task_id="verify",
        inlets=[JOINED_OUTPUT],
        job="verify_output",
        name="photon-verify",
        application_args=[
            "--start",
            f"{{{{ {XCOM}['start'] }}}}",
            "--end",
            f"{{{{ {XCOM}['end'] }}}}",
            "--run",
            f"{{{{ {XCOM}['run'] }}}}",
            "--latency-bound-s",
            f"{{{{ {XCOM}['latency_bound_s'] }}}}",
            f"{{{{ '--clear-tokens' if {XCOM}['clear_tokens'] else '--no-clear-tokens' }}}}",
        ],
    )
    report = ReportOperator(
        task_id="report",
        key=f"reports/verify/{{{{ {XCOM}['run'] }}}}/report.json",
        fail_unless_passed=True,
        trigger_rule="all_done",
        outlets=[VERIFY_REPORTS],
    )
    validated >> verify >> report
