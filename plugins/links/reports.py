"""Extra links from a task to what it reported: the HTML report and the Data Docs page.

Airflow 3 computes a task's extra links in the worker when the task ends (whatever
its state) and keeps them as XComs, which the UI shows as buttons on the task.
Each link here is a presigned GET URL of an object in the bucket, signed for the
endpoint as browsers reach it (``s3.public_endpoint_url``; the connection's
``extra.public_url``) and valid for a week (docs/operations.md, "Links from the
task to its report"): the bucket stays private and nobody needs S3 keys to read
a report. A task
that found no report has no link (an empty one, which the UI hides).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperatorLink

if TYPE_CHECKING:
    from airflow.models.taskinstancekey import TaskInstanceKey
    from airflow.sdk import BaseOperator


def report_url(settings: Any, key: str) -> str:
    """The presigned URL of ``key`` for browsers (see the module docstring)."""
    from photon.storage import browser_url

    return browser_url(settings, key)


class _ReportObjectLink(BaseOperatorLink):
    #: The attribute of the operator naming the object, set when it ran.
    attribute = ""

    def get_link(self, operator: BaseOperator, *, ti_key: TaskInstanceKey) -> str:
        key = getattr(operator, self.attribute, "")
        if not key:
            return ""
        return report_url(operator.report_settings(), key)  # type: ignore[attr-defined]


class ReportLink(_ReportObjectLink):
    """The run's report: its HTML page, or its JSON when it has no page."""

    name = "Report"
    attribute = "report_page_key"


class DataDocsLink(_ReportObjectLink):
    """The run's Great Expectations validation result, in its Data Docs site."""

    name = "Data Docs"
    attribute = "data_docs_key"
