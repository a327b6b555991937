"""photon_recover: on-call's repair of ids registered but missing from the output."""

from __future__ import annotations

from airflow.sdk import DAG

from dags._common import DAG_ARGS, DEFAULT_ARGS, START, params_of
from photon.ops.params import RecoverParams
from plugins.operators.photon import RecoverOperator

with DAG(
    dag_id="photon_recover",
    description="On-call: re-inject clicks registered by a dead attempt but never written",
    schedule=None,
    start_date=START,
    catchup=False,
    max_active_runs=1,
    **DAG_ARGS,
    default_args={**DEFAULT_ARGS, "retries": 0},
    tags=["photon", "recovery", "on-call"],
    params=params_of(RecoverParams),
    doc_md="""
### Recovery (on-call)

Run this when `photon_verify` reports **lost** ids (registered in the
IdRegistry, in no output). For the clicks of the window it finds those ids
and, for each whose attempt is dead (its DC runs another attempt now, or the
batch that registered it ended without writing it), deletes the id from the
registry *only while it still holds that attempt's token* and re-injects
the click as the DC's input (a recovery log file in its click logs), which
its joiner reads and joins again.
Ids whose batch is still open are left: the batch's replay writes them.

Run it too when `photon_verify` lists **unjoinable clicks whose query is in
the logs now** (it came after they were given up on) or **joined all the
same**: it re-injects the first into a DC whose query logs hold the query,
and marks the unjoinable records of both superseded.

Every field may be left as it opens: the window is then the hour ending
two minutes ago, each click goes back to the DC that registered it, and it
is a dry run. Start with *Dry run* on (the default): the log lists what
would be done. Then run again with *Dry run* off, and trigger
`photon_verify` for the same window to confirm: 100% complete,
0 duplicates. *Datacenter* sends every click to one DC's joiner instead
(e.g. when the DC that registered it is down).
""",
) as dag:
    RecoverOperator(task_id="recover")
