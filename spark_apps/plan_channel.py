"""The plan channel: a batch's plan handed to group tasks that are running already.

With batches that overlap (docs/join.md, "Batches that overlap") the joiner's
driver starts a batch's Spark job before the batch ahead of it is settled. Its
tasks read and decode their lines, then ask the driver for their group's plan:
the due retries, the batch's clock and reader progress, everything the batch
journal begins the batch with. That plan exists only once the batch ahead is
settled and this one begun, so the journal still has one open batch at a time,
and Spark's round trip to start a job (and the tasks' reading) runs while the
driver settles and plans instead of after.

A task asks over a connection of its own to a listener in the driver
(:mod:`multiprocessing.connection`, authenticated with a key that only the
job's closure carries): it sends ``(batch, group)`` and gets its group's work,
or ``None``. ``None`` means run nothing: the driver gave the batch no plan its
tasks may run (a replay, another group count, an error), or none within
``wait_s``. Such a task returns at once, its core free again, and the driver
runs the group in a job of its own. So tasks waiting for a plan never hold
every core from the tasks of the batch ahead, whatever the scheduler's order.

How it fails: when the driver is gone its listener is too; a task's request
raises and fails the task (the driver's batch is replayed by its next run). A
driver that does not answer within ``wait_s`` plus a margin fails the task
the same way.
"""

from __future__ import annotations

import secrets
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from multiprocessing.connection import Client, Connection, Listener

import structlog

from photon.join.group import GroupWork

log = structlog.get_logger(__name__)

#: How much longer than ``wait_s`` a task waits for the driver's answer before it
#: takes the driver for hung.
_ANSWER_MARGIN_S = 30.0


@dataclass(frozen=True, slots=True)
class PlanAddress:
    """Where a task asks for its plan: the driver's listener and its key."""

    host: str
    port: int
    authkey: bytes
    wait_s: float


def ask_plan(address: PlanAddress, batch: str, group: int) -> GroupWork | None:
    """The work of ``group`` of ``batch``, or None: run nothing (the driver runs it)."""
    with Client((address.host, address.port), authkey=address.authkey) as conn:
        conn.send((batch, group))
        if not conn.poll(address.wait_s + _ANSWER_MARGIN_S):
            raise TimeoutError(f"the driver gave no answer for {batch} group {group}")
        work: GroupWork | None = conn.recv()
        return work


class PlanServer:
    """The driver's side: plans published by batch, answered to the tasks that ask.

    A batch's plan is its groups' work by group number, or None (its tasks run
    nothing); it stays until :meth:`forget`, so a task Spark runs again gets it too.
    """

    def __init__(self, bind_address: str, wait_s: float, host: str | None = None) -> None:
        """Listen on ``bind_address`` (a free port); tasks reach it at ``host`` (the
        driver's name as executors know it; None: ``bind_address``)."""
        if wait_s <= 0:
            raise ValueError(f"wait_s must be positive, not {wait_s}")
        self._authkey = secrets.token_bytes(32)
        self._listener = Listener((bind_address, 0), authkey=self._authkey)
        port = self._listener.address[1]
        self.address = PlanAddress(host or bind_address, int(port), self._authkey, wait_s)
        self._plans: dict[str, Mapping[int, GroupWork] | None] = {}
        self._changed = threading.Condition()
        self._closed = False
        self._acceptor = threading.Thread(
            target=self._accept, name=f"plan-channel-{port}", daemon=True
        )
        self._acceptor.start()

    def publish(self, batch: str, works: Mapping[int, GroupWork] | None) -> None:
        """Hand ``batch``'s tasks their work (None: they run nothing)."""
        with self._changed:
            self._plans[batch] = works
            self._changed.notify_all()

    def forget(self, batch: str) -> None:
        with self._changed:
            self._plans.pop(batch, None)

    def close(self) -> None:
        """Stop: tasks that wait for a plan, or ask for one from now on, run nothing."""
        with self._changed:
            self._closed = True
            self._changed.notify_all()
        self._listener.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                conn = self._listener.accept()
            except OSError:  # closed
                return
            except Exception as error:  # a bad key or a stray connection: not a task's
                log.warning("plan_channel.refused", error=str(error))
                continue
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: Connection) -> None:
        with conn:
            try:
                batch, group = conn.recv()
                with self._changed:
                    self._changed.wait_for(
                        lambda: self._closed or batch in self._plans, self.address.wait_s
                    )
                    works = self._plans.get(batch)
                conn.send(works.get(group) if works is not None else None)
            except (EOFError, OSError) as error:  # the task is gone: Spark runs it again
                log.info("plan_channel.task_gone", error=str(error))
