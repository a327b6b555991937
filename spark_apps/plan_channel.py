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
(:mod:`multiprocessing.connection`'s messages and its challenge with a key
that only the job's closure carries): it sends ``(batch, group)`` and gets
its group's work, or ``None``. ``None`` means run nothing: the driver gave the batch no plan its
tasks may run (a replay, another group count, an error), or none within
``wait_s``. Such a task returns at once, its core free again, and the driver
runs the group in a job of its own. So tasks waiting for a plan never hold
every core from the tasks of the batch ahead, whatever the scheduler's order.

How it fails: when the driver is gone its listener is too; a task's request
raises and fails the task (the driver's batch is replayed by its next run). A
driver that does not answer within ``wait_s`` plus a margin fails the task
the same way. Every read on either side has a time limit, and each connection
is answered (its challenge included) in a thread of its own, so a peer that
stops half-way (a host gone without closing its connections) holds up nothing
but its own connection.
"""

from __future__ import annotations

import contextlib
import secrets
import socket
import struct
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from multiprocessing import AuthenticationError
from multiprocessing.connection import Connection, answer_challenge, deliver_challenge

import structlog

from photon.join.group import GroupWork

log = structlog.get_logger(__name__)

#: How much longer than ``wait_s`` a task waits for the driver's answer before it
#: takes the driver for hung.
_ANSWER_MARGIN_S = 30.0
#: How long the driver waits for a task's challenge answers and its ask.
_ASK_S = 30.0


@dataclass(frozen=True, slots=True)
class PlanAddress:
    """Where a task asks for its plan: the driver's listener and its key."""

    host: str
    port: int
    authkey: bytes
    wait_s: float


def _connection(sock: socket.socket, limit_s: float) -> Connection:
    """``sock`` as a message connection whose every read and write gives up after
    ``limit_s`` (an ``OSError``), blocking until then, and sends each write at once.

    Without ``TCP_NODELAY`` an ask took ~44 ms however ready its plan: the task's
    ask follows its last handshake message with no reply between, so Nagle's
    algorithm held it until the driver's kernel acknowledged that message, which
    it delays by 40 ms when it has nothing to send (docs/join.md, "Groups started
    before their plan")."""
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.settimeout(None)
    limit = struct.pack("ll", int(limit_s), int(limit_s % 1 * 1_000_000))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, limit)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, limit)
    return Connection(sock.detach())


def ask_plan(address: PlanAddress, batch: str, group: int) -> GroupWork | None:
    """The work of ``group`` of ``batch``, or None: run nothing (the driver runs it)."""
    limit_s = address.wait_s + _ANSWER_MARGIN_S
    sock = socket.create_connection((address.host, address.port), timeout=_ASK_S)
    with _connection(sock, limit_s) as conn:
        answer_challenge(conn, address.authkey)
        deliver_challenge(conn, address.authkey)
        conn.send((batch, group))
        try:
            work: GroupWork | None = conn.recv()
        except BlockingIOError as error:  # the read's limit
            raise TimeoutError(f"the driver gave no answer for {batch} group {group}") from error
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
        self._listener = socket.create_server((bind_address, 0))
        port = self._listener.getsockname()[1]
        self.address = PlanAddress(host or bind_address, int(port), self._authkey, wait_s)
        self._plans: dict[str, Mapping[int, GroupWork] | None] = {}
        self._changed = threading.Condition()
        self._closed = threading.Event()
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
            self._closed.set()
            self._changed.notify_all()
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)  # wakes the acceptor
        self._listener.close()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                sock, _ = self._listener.accept()
            except OSError as error:
                if self._closed.is_set():
                    return
                log.warning("plan_channel.accept_failed", error=str(error))
                continue
            threading.Thread(target=self._answer, args=(sock,), daemon=True).start()

    def _answer(self, sock: socket.socket) -> None:
        try:
            with _connection(sock, _ASK_S) as conn:
                deliver_challenge(conn, self._authkey)
                answer_challenge(conn, self._authkey)
                batch, group = conn.recv()
                with self._changed:
                    self._changed.wait_for(
                        lambda: self._closed.is_set() or batch in self._plans, self.address.wait_s
                    )
                    works = self._plans.get(batch)
                conn.send(works.get(group) if works is not None else None)
        except AuthenticationError as error:  # not a task of this driver's jobs
            log.warning("plan_channel.refused", error=str(error))
        except (EOFError, OSError) as error:  # the task is gone: Spark runs it again
            log.info("plan_channel.task_gone", error=str(error))
        except Exception as error:  # not an ask (its sender had the key): no answer
            log.warning("plan_channel.bad_ask", error=str(error))
