"""photon_output_hours: announce each newly settled event hour of joined output (Assets)."""

from __future__ import annotations

from datetime import timedelta

from airflow.sdk import DAG

from dags._common import DAG_ARGS, DEFAULT_ARGS, START
from plugins.assets import JOINED_OUTPUT
from plugins.operators.photon import OutputHoursOperator

with DAG(
    dag_id="photon_output_hours",
    description="Announce each newly settled event hour of joined output: photon_verify runs on it",
    schedule=timedelta(minutes=15),
    start_date=START,
    catchup=False,
    max_active_runs=1,
    **DAG_ARGS,
    default_args={**DEFAULT_ARGS, "execution_timeout": timedelta(minutes=10)},
    tags=["photon", "verification", "assets"],
    doc_md="""
### Output hours

Every 15 minutes, lists the event hours that have joined output (the
`hour=` folders of `joined/dc=<dc>/`: one listing per DC) and announces those
whose end lies 120 s (the verification's settle time) in the past and that
were not announced before, as one event of the **photon_joined_output**
asset (extra `{"hours": [...]}`). `photon_verify` is scheduled on that asset
(and hourly): a run the event triggers verifies exactly the announced hours.
The first run announces only the newest settled hour. With nothing new, the
task is skipped and no event is sent.
""",
) as dag:
    OutputHoursOperator(task_id="announce_settled_hours", asset=JOINED_OUTPUT)
