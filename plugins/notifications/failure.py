"""Tell on-call that an operations DAG run failed: a log line always, one mail when set up.

:class:`FailureNotifier` is every Photon DAG's ``on_failure_callback`` (a run
that failed, or ran past its ``dagrun_timeout``). It logs one line naming the
DAG, the run and its failed tasks, and, when the settings name recipients
(``alerts.email_to``) and the Airflow connection ``photon_smtp`` exists (made
by ``photon airflow up`` from ``alerts.smtp_host``), sends one mail through the
SMTP provider's hook. (A plain callable, not a ``BaseNotifier``: it renders no
template, so it runs the same under ``dag.test()``, whose DAG cannot.)

How it fails: never on the run's behalf. A mail that cannot be sent (no SMTP
server answering, a bad connection) is logged as such, and the run stays as
it was: failed.
"""

from __future__ import annotations

import logging
from typing import Any

SMTP_CONN_ID = "photon_smtp"

log = logging.getLogger(__name__)


class FailureNotifier:
    """A failed Photon DAG run: a log line, and a mail to ``alerts.email_to``."""

    def __call__(self, context: Any) -> None:
        dag_run = context.get("dag_run")
        dag_id = str(getattr(dag_run, "dag_id", None) or getattr(context.get("dag"), "dag_id", "?"))
        run_id = str(getattr(dag_run, "run_id", "?"))
        failed = _failed_tasks(context)
        reason = context.get("reason") or "a task failed"
        log.error(
            "photon.dag_failed dag=%s run=%s failed_task=%s reason=%s",
            dag_id, run_id, ",".join(failed) or "-", reason,
        )  # fmt: skip
        try:
            self._mail(dag_id, run_id, failed, reason)
        except Exception:  # the run has failed already: this must not hide why
            log.exception("photon.dag_failed_mail_not_sent dag=%s run=%s", dag_id, run_id)

    def _mail(self, dag_id: str, run_id: str, failed: list[str], reason: str) -> None:
        from airflow.providers.smtp.hooks.smtp import SmtpHook

        from photon.settings import load_settings

        alerts = load_settings().alerts
        if not alerts.email_to:
            return
        try:
            SmtpHook.get_connection(SMTP_CONN_ID)
        except Exception:
            log.warning("photon.dag_failed_no_smtp conn_id=%s: no mail sent", SMTP_CONN_ID)
            return
        tasks = "".join(f"<li><code>{task}</code></li>" for task in failed) or "<li>-</li>"
        with SmtpHook(smtp_conn_id=SMTP_CONN_ID) as smtp:
            smtp.send_email_smtp(
                to=alerts.email_to,
                from_email=alerts.email_from,
                subject=f"[photon] {dag_id} failed: run {run_id}",
                html_content=(
                    f"<p>The Airflow DAG <b>{dag_id}</b> failed (run <code>{run_id}</code>):"
                    f" {reason}.</p><p>Failed task:</p><ul>{tasks}</ul>"
                    "<p>What to do: docs/RUNBOOK.md, the section of the DAG.</p>"
                ),
            )
        log.info("photon.dag_failed_mail_sent dag=%s to=%s", dag_id, ",".join(alerts.email_to))


def _failed_tasks(context: Any) -> list[str]:
    """The task the run failed by: Airflow hands a DAG's failure callback the task
    instance that failed it (``ti``)."""
    ti = context.get("ti") or context.get("task_instance")
    task_id = getattr(ti, "task_id", None)
    return [task_id] if task_id else []
