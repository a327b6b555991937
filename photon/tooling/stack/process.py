"""Start and stop the local stack's server processes, and only ours.

A server is started detached (own session, so a Ctrl-C in the shell that ran
``photon up`` does not take the stack down) with its output in a log file.
Its pid *and* its start time are recorded: a pid alone can be reused by an
unrelated process after ours died, and ``photon down`` must never signal a
process it did not start. The start time compared is the one counted from the
machine's boot: one in wall-clock time moves whenever the clock is stepped
(NTP, a VM's clock sync), and a step of more than a clock tick made ``photon
down`` take every server for gone and leave it running. Stopping sends SIGTERM,
waits, then SIGKILL.
"""

from __future__ import annotations

import contextlib
import ipaddress
import pwd
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import psutil

# psutil reports start times rounded to the clock tick; allow for that.
_START_TIME_TOLERANCE_S = 0.05


@dataclass(frozen=True, slots=True)
class ProcessIdentity:
    pid: int
    started_at: float  # psutil create_time(), seconds since the epoch
    #: Seconds after the machine's boot it started: unmoved by wall-clock steps (None:
    #: recorded before this was, then ``started_at`` is compared).
    since_boot: float | None = None


def identity_of(pid: int) -> ProcessIdentity:
    """The identity of the live process ``pid`` (``psutil.NoSuchProcess`` if none)."""
    started_at = psutil.Process(pid).create_time()
    return ProcessIdentity(pid, started_at, _since_boot(started_at))


def _since_boot(create_time: float) -> float:
    # Both in wall-clock time, read now: a clock step moves them alike.
    return create_time - psutil.boot_time()


def start_detached(
    argv: Sequence[str],
    *,
    output: Path,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    user: str | None = None,
) -> ProcessIdentity:
    """Start ``argv`` detached; ``user``: run it as that user (we must be root)."""
    output.parent.mkdir(parents=True, exist_ok=True)
    with output.open("ab") as out:
        proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            env=dict(env) if env is not None else None,
            start_new_session=True,
            user=user,
            group=user and pwd.getpwnam(user).pw_gid,
        )
    return identity_of(proc.pid)


def listening(identity: ProcessIdentity) -> list[tuple[str, int]]:
    """The (address, port) pairs the process and its descendants listen on (TCP)."""
    proc = find(identity)
    if proc is None:
        return []
    found: set[tuple[str, int]] = set()
    with contextlib.suppress(psutil.NoSuchProcess):
        for each in (proc, *proc.children(recursive=True)):
            with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
                for conn in each.net_connections(kind="tcp"):
                    if conn.status == psutil.CONN_LISTEN and conn.laddr:
                        found.add((conn.laddr.ip, conn.laddr.port))
    return sorted(found)


def is_loopback(address: str) -> bool:
    """True for 127.0.0.0/8, ::1 and IPv4-mapped loopback (``::ffff:127.0.0.1``)."""
    ip = ipaddress.ip_address(address)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped.is_loopback
    return ip.is_loopback


def find(identity: ProcessIdentity) -> psutil.Process | None:
    """The live process with this identity, or None (gone, a zombie, or a reused pid)."""
    try:
        proc = psutil.Process(identity.pid)
        started_at = proc.create_time()
        if identity.since_boot is not None:
            started, recorded = _since_boot(started_at), identity.since_boot
        else:
            started, recorded = started_at, identity.started_at
        if abs(started - recorded) > _START_TIME_TOLERANCE_S:
            return None
        if proc.status() == psutil.STATUS_ZOMBIE:
            _reap(proc)
            return None
    except psutil.NoSuchProcess:
        return None
    return proc


def is_running(identity: ProcessIdentity) -> bool:
    return find(identity) is not None


def stop(identity: ProcessIdentity, *, timeout_s: float = 10.0) -> bool:
    """Stop our process: SIGTERM, then SIGKILL after ``timeout_s``. False if it was gone."""
    return stop_all([identity], timeout_s=timeout_s)[0]


def stop_all(identities: Sequence[ProcessIdentity], *, timeout_s: float = 10.0) -> list[bool]:
    """Stop our processes together (SIGTERM to all, one wait, then SIGKILL to the
    stragglers): each one's slow shutdown overlaps the others'. False for those gone."""
    found = [find(identity) for identity in identities]
    terminate_then_kill([proc for proc in found if proc is not None], timeout_s=timeout_s)
    return [proc is not None for proc in found]


def terminate_then_kill(processes: Sequence[psutil.Process], *, timeout_s: float) -> None:
    """SIGTERM to all, one wait of ``timeout_s``, SIGKILL to the stragglers (and a wait)."""
    for proc in processes:
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.terminate()
    _, alive = psutil.wait_procs(processes, timeout=timeout_s)
    for straggler in alive:
        with contextlib.suppress(psutil.NoSuchProcess):
            straggler.kill()
    psutil.wait_procs(alive, timeout=timeout_s)


def kill(identity: ProcessIdentity) -> bool:
    """SIGKILL our process at once (fault injection). False if it was gone."""
    proc = find(identity)
    if proc is None:
        return False
    try:
        proc.kill()
        psutil.wait_procs([proc], timeout=10)
    except psutil.NoSuchProcess:
        pass
    return True


def _reap(proc: psutil.Process) -> None:
    # A zombie that is our own child stays in the table until we wait for it.
    with contextlib.suppress(psutil.TimeoutExpired, psutil.NoSuchProcess, ChildProcessError):
        proc.wait(timeout=0)
