"""Fault injection points of the pipelines, for the chaos suite: off unless configured.

Settings ``faults.*`` (environment ``PHOTON_FAULTS__*``) switch them on in a
process; each is a probability per opportunity, drawn from a generator
seeded by ``faults.seed`` (unset: random):

* ``crash_after_commit_p`` — the joiner exits hard (``os._exit``, as kill -9
  would: no cleanup, no flush) right after its registry commit and before
  its output write: the ids are registered with the batch's token and in no
  output;
* ``fail_task_after_commit_p`` — at the same point, a group's first try raises
  :class:`InjectedTaskFailure` (as a lost executor or an object store down past
  its retries would fail its task): on a master with task retries Spark runs the
  task again, which must join the group as a replay (docs/join.md, "Why none is
  lost"); without them the batch fails and is replayed. A retry never fails so;
* ``pause_after_commit_p`` — at the same point the process stops itself
  (SIGSTOP), as a hung or paused joiner would: a zombie that may wake up (SIGCONT)
  after its attempt was replaced and recovered;
* ``crash_at_step`` — the joiner exits hard the first time a batch with clicks
  reaches that step boundary (:data:`STEPS`): ``planned`` (its journal entry
  written), ``looked_up`` (a group's registry lookup done), ``registered`` (a
  group's commit won ids), ``written`` (a group's output written),
  ``settled`` (the retry store settled and the batch closed in the journal),
  ``returned`` (the batch handed back to Spark, which has yet to commit it:
  the process dies right after). The chaos run arms each in turn, keeping the
  state, so Spark replays the batch later; with ``crash_streaming_only`` a
  retry pass never strikes it, only a batch of log lines;
* ``crash_mid_write_p`` — the process exits hard while an object store write
  is in flight: the object may or may not exist;
* ``s3_error_p`` — an object store call fails with a connection timeout
  before it is sent (the store's bounded retries then take over);
  ``s3_delay_s`` — every object store call waits this long first;
* ``registry_delay_s`` — every registry call a joiner makes waits this long
  first (a slow ensemble).

How it fails: never on its own; each fault counts in
``photon_faults_injected_total{kind}`` and is logged before it strikes.
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from collections.abc import Callable
from typing import Any, NoReturn

import structlog
from botocore.exceptions import ConnectTimeoutError

from photon import metrics
from photon.errors import PhotonError
from photon.settings import FaultSettings

log = structlog.get_logger(__name__)

#: The exit status of an injected crash (what a SIGKILL'd process reports, 128 + 9).
CRASH_EXIT_CODE = 137

#: The step boundaries of a joiner batch, in order (``faults.crash_at_step``).
STEPS = ("planned", "looked_up", "registered", "written", "settled", "returned")


def _hard_exit(code: int) -> NoReturn:
    os._exit(code)


def _stop_self() -> None:
    os.kill(os.getpid(), signal.SIGSTOP)  # returns once someone sends SIGCONT


class InjectedTaskFailure(PhotonError, RuntimeError):
    """A group's first try failing after its registry commit (``fail_task_after_commit_p``)."""


class FaultInjector:
    def __init__(
        self,
        settings: FaultSettings,
        *,
        exit: Callable[[int], NoReturn] = _hard_exit,
        sleep: Callable[[float], None] = time.sleep,
        pause: Callable[[], None] = _stop_self,
    ) -> None:
        self.settings = settings
        self._pause = pause
        self._random = random.Random(settings.seed)
        self._lock = threading.Lock()
        self._exit = exit
        self._sleep = sleep

    @property
    def active(self) -> bool:
        s = self.settings
        return any(
            (
                s.crash_after_commit_p,
                s.fail_task_after_commit_p,
                s.pause_after_commit_p,
                s.crash_at_step,
                s.crash_mid_write_p,
                s.s3_error_p,
                s.s3_delay_s,
                s.registry_delay_s,
            )
        )

    def _hit(self, probability: float) -> bool:
        if probability <= 0:
            return False
        with self._lock:
            return self._random.random() < probability

    def _crash(self, kind: str, **context: Any) -> NoReturn:
        metrics.FAULTS_INJECTED.labels(kind).inc()
        log.warning("fault.crash", kind=kind, **context)
        self._exit(CRASH_EXIT_CODE)

    def after_commit(self, batch: str, *, first_try: bool = True) -> None:
        """Called between a batch's registry commit (that won some ids) and its output
        write; ``first_try``: not a replay of the batch, nor a retried task of it."""
        if self._hit(self.settings.crash_after_commit_p):
            self._crash("crash_after_commit", batch=batch)
        if first_try and self._hit(self.settings.fail_task_after_commit_p):
            metrics.FAULTS_INJECTED.labels("fail_task_after_commit").inc()
            log.warning("fault.task_failure", kind="fail_task_after_commit", batch=batch)
            raise InjectedTaskFailure(f"injected: batch {batch}'s task failed after its commit")
        self.at_step("registered", batch)
        if self._hit(self.settings.pause_after_commit_p):
            metrics.FAULTS_INJECTED.labels("pause_after_commit").inc()
            log.warning("fault.pause", kind="pause_after_commit", batch=batch, pid=os.getpid())
            self._pause()

    def at_step(self, step: str, batch: str) -> None:
        """Called when a batch with clicks reaches ``step`` (one of :data:`STEPS`)."""
        if step == self.settings.crash_at_step:
            if self.settings.crash_streaming_only and not batch.isdigit():
                return  # a retry pass: it read no log file
            if step == "returned":  # after the caller returns: Spark has yet to commit
                context = {"step": step, "batch": batch}
                threading.Thread(
                    target=self._crash, args=("crash_at_step",), kwargs=context, daemon=True
                ).start()
                return
            self._crash("crash_at_step", step=step, batch=batch)

    def write(self, key: str, put: Callable[[], Any]) -> Any:
        """Run an object store write, or crash while it is in flight."""
        if not self._hit(self.settings.crash_mid_write_p):
            return put()
        writer = threading.Thread(target=put, daemon=True)
        writer.start()
        writer.join(timeout=self._random.uniform(0.0, 0.02))  # the write may finish, or not
        self._crash("crash_mid_write", key=key)

    def before_s3_call(self, operation: str) -> None:
        if self.settings.s3_delay_s:
            self._sleep(self.settings.s3_delay_s)
        if self._hit(self.settings.s3_error_p):
            metrics.FAULTS_INJECTED.labels("s3_error").inc()
            log.warning("fault.s3_error", operation=operation)
            raise ConnectTimeoutError(endpoint_url=f"injected fault in {operation}")

    def before_registry_call(self) -> None:
        if self.settings.registry_delay_s:
            metrics.FAULTS_INJECTED.labels("registry_delay").inc()
            self._sleep(self.settings.registry_delay_s)


NO_FAULTS = FaultInjector(FaultSettings())
