"""One supervisor for the processes a stack starts: the local stack's servers
(``photon up``) and local Airflow with its PostgreSQL (``photon airflow up``).

A supervisor keeps a JSON state file: for every process it started, its pid
*and* start time (:mod:`photon.tooling.stack.process`), its output file, and
what its stack needs to find it again (ports, directory, argv). Each start is
recorded at once, so a ``down`` finds the process even if the caller dies
right after. ``stop`` signals exactly the recorded processes, never one that
merely reuses a pid. ``locked`` keeps two ``up``/``down`` of one stack from
interleaving.

How it fails: :meth:`Supervisor.wait` raises the stack's error at once when a
process it started has exited, or when ``ready`` is still false at the deadline.
The message names the processes and quotes the tail of each one's output.
"""

from __future__ import annotations

import fcntl
import os
import pwd
import time
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Generic, TypeVar

import structlog
from pydantic import BaseModel

from photon.errors import PhotonError
from photon.localfiles import last_lines
from photon.tooling.stack import process

log = structlog.get_logger(__name__)


class ProcessRecord(BaseModel):
    """A process a supervisor started: how to find it again, and what it was."""

    name: str
    pid: int
    started_at: float
    #: process.ProcessIdentity.since_boot (None in a record from before it was kept).
    since_boot: float | None = None
    output: str
    ports: dict[str, int] = {}
    directory: str = ""
    argv: list[str] = []

    @property
    def identity(self) -> process.ProcessIdentity:
        return process.ProcessIdentity(self.pid, self.started_at, self.since_boot)


class SupervisedState(BaseModel):
    """What a stack records: its processes by name (a stack adds its own fields)."""

    services: dict[str, ProcessRecord] = {}


StateT = TypeVar("StateT", bound=SupervisedState)


class Supervisor(Generic[StateT]):
    """Starts, records, waits for and stops one stack's processes.

    ``what`` names the stack in messages ("local stack", "local Airflow");
    ``error`` is what :meth:`wait` raises.
    """

    def __init__(
        self,
        state_path: Path,
        model: type[StateT],
        *,
        what: str,
        error: type[PhotonError],
        tail_lines: int = 20,
    ) -> None:
        self.state_path = state_path
        self.model = model
        self.what = what
        self.error = error
        self.tail_lines = tail_lines

    # -- the state file -------------------------------------------------------------------

    def load(self) -> StateT | None:
        if not self.state_path.exists():
            return None
        return self.model.model_validate_json(self.state_path.read_text())

    def save(self, state: StateT) -> None:
        """Written whole, then renamed: a reader sees the old state or the new one."""
        self.state_path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.state_path.with_suffix(".json.tmp")
        tmp.write_text(state.model_dump_json(indent=2))
        tmp.replace(self.state_path)

    def forget(self) -> None:
        self.state_path.unlink(missing_ok=True)

    @contextmanager
    def locked(self) -> Iterator[None]:
        """Held for a whole ``up`` or ``down``: a second one waits for the first."""
        self.state_path.parent.mkdir(parents=True, exist_ok=True)
        with self.state_path.with_suffix(".lock").open("w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    # -- processes ------------------------------------------------------------------------

    def running(self, state: StateT) -> set[str]:
        return {n for n, r in state.services.items() if process.is_running(r.identity)}

    def start(
        self,
        state: StateT,
        name: str,
        argv: Sequence[str],
        *,
        output: Path,
        env: Mapping[str, str] | None = None,
        user: str | None = None,
        ports: Mapping[str, int] | None = None,
        directory: Path | None = None,
    ) -> ProcessRecord:
        """Start ``argv`` detached (as ``user``, when given: we must be root) and record it."""
        if user is not None:  # its output file must be the user's to write
            output.parent.mkdir(parents=True, exist_ok=True)
            output.touch()
            entry = pwd.getpwnam(user)
            os.chown(output, entry.pw_uid, entry.pw_gid)
        identity = process.start_detached(argv, output=output, env=env, user=user)
        record = ProcessRecord(
            name=name,
            pid=identity.pid,
            started_at=identity.started_at,
            since_boot=identity.since_boot,
            output=str(output),
            ports=dict(ports or {}),
            directory=str(directory or ""),
            argv=list(argv),
        )
        state.services[name] = record
        self.save(state)  # at once: a `down` finds it even if we die now
        # Not "stack=": structlog's console renderer prints that key as a stack trace.
        log.info("stack.started", of=self.what, service=name, pid=identity.pid)
        return record

    def stop(
        self, state: StateT, names: Sequence[str], *, timeout_s: float = 10.0
    ) -> tuple[list[str], list[str]]:
        """Stop ``names`` together and forget them: (stopped, already gone)."""
        records = {n: state.services.pop(n) for n in names if n in state.services}
        gone = process.stop_all([r.identity for r in records.values()], timeout_s=timeout_s)
        stopped = [name for name, was in zip(records, gone, strict=True) if was]
        already_gone = [name for name, was in zip(records, gone, strict=True) if not was]
        if state.services:
            self.save(state)
        else:
            self.forget()
        return stopped, already_gone

    def wait(
        self,
        state: StateT,
        ready: Callable[[], bool],
        what: str,
        *,
        timeout_s: float,
        poll_s: float = 0.25,
        detail: Callable[[], str] | None = None,
        watched: Collection[str] | None = None,
    ) -> None:
        """Until ``ready()``; raises at once if a watched process (by default every
        recorded one) has exited, and at ``timeout_s`` if it is still not ready (with
        ``detail()`` when given)."""
        deadline = time.monotonic() + timeout_s
        while True:
            names = set(state.services) if watched is None else set(watched)
            dead = sorted(names & set(state.services) - self.running(state))
            if dead:
                raise self.error(self.failure(state, dead, "exited during start"))
            if ready():
                return
            if time.monotonic() >= deadline:
                message = self.failure(state, list(state.services), f"{what} not ready in time")
                raise self.error(message + (f"\nproblems: {detail()}" if detail else ""))
            time.sleep(poll_s)

    def failure(self, state: StateT, names: Sequence[str], what: str) -> str:
        """``names`` and ``what`` happened, with the tail of each one's output."""
        parts = [f"{self.what} did not start: {', '.join(names)} {what}"]
        for name in names:
            record = state.services.get(name)
            if record is not None:
                tail = last_lines(Path(record.output), self.tail_lines)
                parts.append(f"--- last lines of {record.output} ---\n{tail}")
        return "\n".join(parts)
