"""Operators of the operations DAGs. Each is thin: validate, call :mod:`photon.ops`, report.

Params are validated twice: by the trigger form (JSON schema from
:mod:`photon.ops.params`) and here, with the checks that need the settings or
the clock; an invalid value raises before anything is changed.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from airflow.sdk import BaseOperator, Context

from plugins.hooks.settings import OBJECT_STORE_CONN_ID, REGISTRY_CONN_ID
from plugins.links.reports import DataDocsLink, ReportLink


def checked_params(model: Any, context: Context, settings: Any) -> Any:
    """The run's params, parsed and checked; bad ones fail the task at once, never retried."""
    from airflow.exceptions import AirflowFailException

    from photon.ops.params import InvalidParamsError

    try:
        return model.parse(dict(context["params"])).check_settings(settings)
    except InvalidParamsError as exc:
        raise AirflowFailException(str(exc)) from None


def announced_hours(context: Context) -> list[str]:
    """The event hours the asset events that triggered the run announced (none: a run
    not triggered by ``photon_output_hours``)."""
    events = context.get("triggering_asset_events") or {}
    hours: set[str] = set()
    for asset_events in events.values():
        for event in asset_events:
            announced = (getattr(event, "extra", None) or {}).get("hours") or []
            listed = announced if isinstance(announced, list) else [announced]
            hours.update(str(h) for h in listed)
    return sorted(hours)


def _window(params: Any, context: Context | None = None) -> Any:
    """The run's window: from its params, the hours the triggering asset events
    announced, or a scheduled run's data interval."""
    from airflow.exceptions import AirflowFailException

    from photon.ops.landed import hours_window
    from photon.ops.params import InvalidParamsError, run_interval

    if context is not None and not params.window_start and not params.window_end:
        hours = announced_hours(context)
        try:
            if hours:  # settled already: no settle time to take off
                return hours_window(hours)
        except ValueError:
            raise AirflowFailException(
                f"the asset events that triggered this run name hours that are not event "
                f"hours like 2026-11-26T01: {hours[:5]}"
            ) from None
    interval = None
    if context is not None:
        dag_run = context.get("dag_run")
        interval = run_interval(
            getattr(dag_run, "run_type", None),
            context.get("data_interval_start"),
            context.get("data_interval_end"),
        )
    try:
        return params.window(interval=interval)
    except InvalidParamsError as exc:
        raise AirflowFailException(str(exc)) from None


class _PhotonOperator(BaseOperator):
    ui_color = "#e8f1fb"

    def __init__(
        self,
        *,
        registry_conn_id: str = REGISTRY_CONN_ID,
        object_store_conn_id: str = OBJECT_STORE_CONN_ID,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.registry_conn_id = registry_conn_id
        self.object_store_conn_id = object_store_conn_id

    def _registry(self) -> Any:
        """A connected registry, through the task's registry hook (close it, or ``with``)."""
        from plugins.hooks.registry import PhotonRegistryHook

        return PhotonRegistryHook(self.registry_conn_id).get_conn()

    def _object_store(self) -> Any:
        """The object store, through the task's object store hook."""
        from plugins.hooks.object_store import PhotonObjectStoreHook

        return PhotonObjectStoreHook(self.object_store_conn_id).get_conn()

    def _settings(self) -> Any:
        from plugins.hooks.settings import task_settings

        return task_settings(self.registry_conn_id, self.object_store_conn_id)

    def _log_table(self, title: str, data: Any) -> None:
        self.log.info("%s:\n%s", title, json.dumps(data, indent=2, default=str))


class GcBoundaryOperator(_PhotonOperator):
    """Advance every shard's GC boundary to now - retention (never back) and collect."""

    def execute(self, context: Context) -> dict[str, Any]:
        from photon.ops.gc import advance_and_collect
        from photon.ops.params import GcParams

        settings = self._settings()
        params = checked_params(GcParams, context, settings)
        with self._registry() as registry:
            run = advance_and_collect(registry, settings.retention, dry_run=params.dry_run)
        result = run.to_dict()
        self._log_table("GC per shard", result)
        return result


class ReshardOperator(_PhotonOperator):
    """Validate the request and append the epoch at now + skew (unless a dry run)."""

    def execute(self, context: Context) -> dict[str, Any]:
        from photon.ops import reshard
        from photon.ops.params import ReshardParams

        settings = self._settings()
        params = checked_params(ReshardParams, context, settings)  # before connecting
        with self._registry() as registry:
            plan = reshard.plan(registry, params, settings.shards.max_clock_skew_s)
            self._log_table("resharding plan", plan.to_dict())
            if plan.dry_run:
                return {"dry_run": True, **plan.to_dict(), "start_us": 0, "config_version": -1}
            applied = reshard.apply(registry, plan)
        self._log_table("epoch appended", applied.to_dict())
        return {"dry_run": False, **plan.to_dict(), **applied.to_dict()}


class RecoverOperator(_PhotonOperator):
    """Find lost ids of a window; re-inject the dead ones (unless a dry run)."""

    def execute(self, context: Context) -> dict[str, Any]:
        from photon.ops.params import RecoverParams
        from photon.ops.recover import recover

        settings = self._settings()
        params = checked_params(RecoverParams, context, settings)
        window = _window(params, context)
        with self._registry() as registry:
            report = recover(
                settings,
                self._object_store(),
                registry,
                window,
                dc=params.dc,
                dry_run=params.dry_run,
                run=str(context["run_id"]),
            )
        result = report.to_dict()
        self._log_table("recovery", {k: v for k, v in result.items() if k != "actions"})
        for action in result["actions"][:200]:
            self.log.info("%s", action)
        return result


def _as_of(context: Context) -> str:
    """The time a run is about: a scheduled run's data interval end; '' (now) otherwise."""
    from photon.ops.params import run_interval

    interval = run_interval(
        getattr(context.get("dag_run"), "run_type", None),
        context.get("data_interval_start"),
        context.get("data_interval_end"),
    )
    return interval[1].isoformat() if interval else ""


class OutputHoursOperator(_PhotonOperator):
    """Announce the settled event hours of joined output not announced before: one event
    of ``asset`` whose extra is ``{"hours": [...]}`` (photon.ops.landed). Skipped (no
    event) when no hour has settled since the last announcement."""

    def __init__(self, *, asset: Any, settle_s: float = 120.0, **kwargs: Any) -> None:
        super().__init__(inlets=[asset], outlets=[asset], **kwargs)
        if settle_s < 0:
            raise ValueError(f"settle_s must be >= 0, not {settle_s}")
        self.asset = asset
        self.settle_s = settle_s

    def execute(self, context: Context) -> dict[str, Any]:
        from datetime import UTC, datetime

        from airflow.exceptions import AirflowSkipException

        from photon.ops.landed import hours_to_announce, output_hours

        before: list[str] = []
        for event in context["inlet_events"][self.asset]:
            announced = (event.extra or {}).get("hours")
            before += [str(h) for h in announced] if isinstance(announced, list) else []
        store = self._object_store()
        hours = hours_to_announce(
            output_hours(store), datetime.now(UTC), self.settle_s, max(before, default=None)
        )
        if not hours:
            raise AirflowSkipException("no event hour of output has settled since the last")
        extra: dict[str, Any] = {"hours": hours}
        context["outlet_events"][self.asset].extra = extra
        self.log.info("announcing the settled hours %s", ", ".join(hours))
        return {"hours": hours}


class ValidateParamsOperator(BaseOperator):
    """Validate a run's params with their model; return them (XCom) for the next tasks.

    For a model with a window, the window is fixed here (``start``/``end``), so
    every later task of the run sees the same one; ``run`` names the run's reports.
    """

    ui_color = "#e8f1fb"

    def __init__(self, *, model: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.model = model

    def execute(self, context: Context) -> dict[str, Any]:
        from photon.ops import params as models
        from plugins.hooks.settings import task_settings

        model = getattr(models, self.model)
        params = checked_params(model, context, task_settings(None, None))
        run_id = str(context["run_id"])
        result: dict[str, Any] = {
            **params.model_dump(),
            "run": "".join(c if c.isalnum() or c in "._-+" else "_" for c in run_id),
        }
        if hasattr(params, "window"):
            window = _window(params, context)
            result |= {"start": window.start.isoformat(), "end": window.end.isoformat()}
        result["as_of"] = _as_of(context)
        self.log.info("params: %s", result)
        return result


class ReportOperator(_PhotonOperator):
    """Read a batch job's JSON report from the object store, log it, return it (XCom).

    The task links the report (its HTML page beside the JSON, when there is one) and
    a verification's Data Docs page: extra links, in the UI (plugins.links.reports).
    """

    template_fields: Sequence[str] = ("key",)
    operator_extra_links = (ReportLink(), DataDocsLink())

    def __init__(self, *, key: str, fail_unless_passed: bool = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.key = key
        self.fail_unless_passed = fail_unless_passed
        #: What the links point at, set once the report is read ("": no link).
        self.report_page_key = ""
        self.data_docs_key = ""

    def report_settings(self) -> Any:
        return self._settings()

    def execute(self, context: Context) -> dict[str, Any]:
        store = self._object_store()
        data = store.get(self.key)
        if data is None:
            raise FileNotFoundError(f"no report at {self.key} in the object store")
        report: dict[str, Any] = json.loads(data)
        folder = self.key.rpartition("/")[0]
        page = f"{folder}/report.html"
        self.report_page_key = page if store.exists(page) else self.key
        if report.get("data_docs"):
            self.data_docs_key = f"{folder}/{report['data_docs']}"
        self._log_table(f"report {self.key}", report)
        for asset in self.outlets:  # the report as an asset event (plugins.assets)
            context["outlet_events"][asset].extra = {
                "run": report.get("run", ""),
                "passed": bool(report.get("passed", False)),
                "report": self.report_page_key,
            }
        if self.fail_unless_passed and not report.get("passed", False):
            raise RuntimeError(
                f"verification failed: {'; '.join(report.get('failures', [])) or 'see the report'}"
            )
        return report


class SummaryOperator(BaseOperator):
    """Log and return the results of earlier tasks of the run, as one report."""

    ui_color = "#e8f1fb"

    def __init__(self, *, task_ids: Sequence[str], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.task_ids = list(task_ids)

    def execute(self, context: Context) -> dict[str, Any]:
        ti = context["ti"]
        summary = {task_id: ti.xcom_pull(task_ids=task_id) for task_id in self.task_ids}
        self.log.info("summary:\n%s", json.dumps(summary, indent=2, default=str))
        return summary
