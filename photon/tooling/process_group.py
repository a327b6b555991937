"""An app's processes as one group: started in a session of their own, reaped whole.

A Spark app is a Python driver, the JVM it starts and the JVM's Python workers.
A driver killed by a signal (a crash, the OOM killer, a fault) leaves its JVM and
workers behind for a moment: the JVM exits once it sees its driver's pipe close,
and until then its streaming thread goes on. With batches that overlap
(docs/join.md, "Batches that overlap") the driver has already handed its batch
back to Spark, so that thread may commit the batch and write the next one's
offsets into the checkpoint after the driver died. A supervisor that starts the
app again, or wipes its state, while they are still there puts two writers on
one checkpoint (a wiped one came back as offsets without Spark's metadata file,
and every later start of the app failed on it).

So the supervisors (``photon run``, the chaos suite's service manager) start
each app as the leader of a process group of its own (:func:`start_app`) and,
once the leader has exited, kill what is left of its group and wait until it is
gone (:func:`reap_group`) before they start it again or touch its state. Its
own group also keeps a terminal's Ctrl-C from reaching the app directly: the
supervisor stops its apps itself (SIGTERM).

How it fails: a process left in the group that SIGKILL does not end within
``timeout_s`` (stuck in uninterruptible I/O) is given up on with a warning; its
pid is among those :func:`reap_group` returns.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Collection, Mapping, Sequence
from typing import IO

import psutil
import structlog

log = structlog.get_logger(__name__)


def start_app(
    argv: Sequence[str], *, output: IO[bytes], env: Mapping[str, str]
) -> subprocess.Popen[bytes]:
    """Start ``argv`` as the leader of a new session and process group (its group id
    is its pid), its output to ``output``, no input."""
    return subprocess.Popen(
        list(argv),
        stdout=output,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        env=dict(env),
        start_new_session=True,
    )


def group_members(pgid: int) -> list[psutil.Process]:
    """The live processes of process group ``pgid`` (zombies, already dead, left out)."""
    members = []
    for process in psutil.process_iter():
        with contextlib.suppress(psutil.Error, ProcessLookupError, PermissionError):
            if os.getpgid(process.pid) == pgid and process.status() != psutil.STATUS_ZOMBIE:
                members.append(process)
    return members


def reap_group(
    leader: subprocess.Popen[bytes], *, keep: Collection[int] = (), timeout_s: float = 30.0
) -> list[int]:
    """Once ``leader`` (started by :func:`start_app`) has exited: SIGKILL what is left of
    its process group but the pids in ``keep``, and wait until they are gone. Returns
    the pids it killed (none: the group ended with its leader)."""
    if leader.poll() is None:
        raise ValueError(f"process {leader.pid} still runs: reap its group once it exited")
    left = [p for p in group_members(leader.pid) if p.pid not in keep]
    for process in left:
        with contextlib.suppress(psutil.NoSuchProcess):
            process.send_signal(signal.SIGKILL)
    deadline = time.monotonic() + timeout_s
    pids = {p.pid for p in left}
    while pids and time.monotonic() < deadline:
        time.sleep(0.05)
        pids &= {p.pid for p in group_members(leader.pid)}
    if pids:
        log.warning("process_group.left_running", leader=leader.pid, pids=sorted(pids))
    return sorted(p.pid for p in left)
