"""Sensors of the resharding rollout.

:class:`EpochStartedSensor` waits until a new sharding epoch has started. A
wait of over :data:`INLINE_WAIT_S` is deferred: instead of holding a worker
slot, it hands the wait to the triggerer (a ``DateTimeTrigger`` at the epoch's
start) and resumes there. A shorter one (the default skew's few seconds) is
slept in the task: Airflow 3 marks a deferred task failed when its trigger
fires before the scheduler has handled the task's exit to deferral (the
resumed try is then told "TI was not in the running state"; Airflow's issue
72716), and a trigger due a second later fires at once.

:class:`PipelinesOnConfigSensor` pokes the registry until every running
pipeline announces the new config version (:mod:`photon.ops.reshard`), and
times out, failing the run, if one never does.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from airflow.providers.standard.triggers.temporal import DateTimeTrigger
from airflow.sdk import BaseSensorOperator, Context, PokeReturnValue

from plugins.hooks.settings import REGISTRY_CONN_ID

#: The longest wait slept in the task rather than deferred: far longer than the scheduler
#: takes to handle a task's exit to deferral (see the module's docstring).
INLINE_WAIT_S = 60.0


class EpochStartedSensor(BaseSensorOperator):
    """Succeeds once the epoch starting at ``start_us`` (templated) has started."""

    template_fields: Sequence[str] = ("start_us",)

    def __init__(self, *, start_us: str | int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.start_us = start_us

    def _start(self) -> datetime:
        start_us = int(self.start_us)
        return datetime.fromtimestamp(start_us / 1_000_000, tz=UTC)

    def poke(self, context: Context) -> bool:
        return int(self.start_us) <= 0 or datetime.now(UTC) >= self._start()

    def _seconds_left(self) -> float:
        return (self._start() - datetime.now(UTC)).total_seconds()

    def execute(self, context: Context) -> None:
        if self.poke(context):  # a dry run (start 0), or already started
            return
        if self._seconds_left() <= INLINE_WAIT_S:
            self.log.info("epoch starts at %s: waiting here", self._start().isoformat())
            while not self.poke(context):
                time.sleep(min(1.0, max(0.01, self._seconds_left())))
            self.log.info("epoch started at %s", self._start().isoformat())
            return
        self.log.info("epoch starts at %s: deferring until then", self._start().isoformat())
        self.defer(trigger=DateTimeTrigger(moment=self._start()), method_name="execute_complete")

    def execute_complete(self, context: Context, event: Any = None) -> None:
        if not self.poke(context):
            raise RuntimeError(f"woke before the epoch's start {self._start().isoformat()}")
        self.log.info("epoch started at %s", self._start().isoformat())


class PipelinesOnConfigSensor(BaseSensorOperator):
    """Succeeds when every announced pipeline uses config ``version`` (templated) or later."""

    template_fields: Sequence[str] = ("version",)

    def __init__(
        self, *, version: str | int, registry_conn_id: str = REGISTRY_CONN_ID, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self.version = version
        self.registry_conn_id = registry_conn_id

    def poke(self, context: Context) -> PokeReturnValue:
        from photon.ops.reshard import rollout_status
        from plugins.hooks.registry import PhotonRegistryHook

        version = int(self.version)
        if version < 0:  # a dry run: nothing to roll out
            return PokeReturnValue(is_done=True, xcom_value={"dry_run": True})
        with PhotonRegistryHook(self.registry_conn_id).get_conn() as registry:
            status = rollout_status(registry, version)
        self.log.info("rollout: %s", status.to_dict())
        return PokeReturnValue(is_done=status.complete, xcom_value=status.to_dict())
