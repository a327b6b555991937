"""The chaos run's faults that aim at the exactly-once protocol's own windows.

Each strikes the live run (:mod:`photon.tooling.chaos.harness`) and returns a
:class:`~photon.tooling.chaos.record.FaultRecord` whose ``struck`` says whether it
really hit what it aims at:

* :func:`replay_at_every_step` — a DC's joiner crashes at each step boundary of
  a batch in turn (:data:`photon.faults.STEPS`), on the same checkpoint and
  state, so Spark replays the batch later, after other queries arrived and
  other retries fell due;
* :func:`stale_epoch_partition` — a DC's joiner is frozen (SIGSTOP, its whole
  process tree) past the end of its registry session while a sharding epoch
  is appended and starts; thawed, it still holds the old config;
* :func:`zombie_during_recovery` — a DC's joiner stops itself right after a
  registry commit that won ids, before writing them; its attempt is replaced
  (driver killed, state lost) while the stopped worker stays; the other DC's
  joiner is frozen until it stopped, so that it wins a click however fast the
  machine is; at the end of the run recovery fences that attempt and takes its
  ids over, and only then :func:`resume_zombie` wakes the worker up;
* :func:`gc_during_catch_up` — after recovery, a DC's joiner starts afresh (a
  new attempt replays its click logs from their start) and GC moves every
  shard's boundary to the middle of the stream while it replays;
* :func:`log_file_faults` — files of a DC's click logs are truncated, replaced
  (truncated and regrown), rotated, deleted and left with a torn last line
  under the running joiner; :func:`log_file_reports` reads back the
  quarantine records the joiner wrote of them.

The files :func:`log_file_faults` makes hold copies of click lines already
in the logs: every copy is a duplicate, which the registry settles, so the
run's accounting does not change.

How they fail: a fault that cannot strike (no process to stop, nothing read)
says so with ``struck=False`` and a reason in its detail; errors propagate
to the harness, which records the fault as raised.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import structlog

from photon.apps import JOINER
from photon.events.records import FILE_REASONS, Stream
from photon.faults import CRASH_EXIT_CODE, STEPS
from photon.join.backlog import joiner_backlog
from photon.join.output import attempt_keys, decode, output_prefix
from photon.join.runtime import current_attempt
from photon.logs.offset_log import committed_offsets
from photon.logs.reader import HEAD_BYTES
from photon.registry_access import connect_registry
from photon.settings import PhotonSettings
from photon.storage import ObjectStore
from photon.tooling.chaos.analysis import json_lines
from photon.tooling.chaos.metered_stream import MeteredStream
from photon.tooling.chaos.record import FaultRecord
from photon.tooling.chaos.service_manager import ServiceManager
from photon.tooling.chaos.stack_faults import add_shards
from photon.tooling.runs import StreamClock, wait_until

log = structlog.get_logger(__name__)

_US = 1_000_000
#: What a crashed joiner exits with: its own hard exit, or the SIGKILL its Spark task's
#: Python worker sent it (spark_apps.join_tasks).
_CRASHED = (CRASH_EXIT_CODE, -9)
STEP_ENV = "PHOTON_FAULTS__CRASH_AT_STEP"
PAUSE_ENV = {"PHOTON_FAULTS__PAUSE_AFTER_COMMIT_P": "1"}
#: The prefix of the files log_file_faults makes in a DC's click logs.
FILE_PREFIX = "chaos-"


def step_env(step: str, *, streaming_only: bool = False) -> dict[str, str]:
    """The fault setting that crashes a joiner at ``step`` (``streaming_only``: of a batch
    of log lines, never a retry pass)."""
    env = {STEP_ENV: step}
    if streaming_only:
        env["PHOTON_FAULTS__CRASH_STREAMING_ONLY"] = "true"
    return env


class FrozenJoiner:
    """A DC's joiner frozen (SIGSTOP) as a stalled host is: its whole process tree,
    and every process the tree starts meanwhile. Thawed (SIGCONT) on exit.

    The faults whose armed joiner must win a click to strike freeze the other
    DC's joiner meanwhile: on a loaded machine the other could otherwise win
    every click for the rest of the stream. Two faults may freeze one joiner at
    once: each keeps it frozen for as long as it lasts.
    """

    def __init__(self, services: ServiceManager, dc: str, recheck_s: float = 0.5) -> None:
        self._services, self._dc, self._recheck_s = services, dc, recheck_s
        self._frozen: dict[int, psutil.Process] = {}
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._keep_frozen, name=f"freeze {dc}", daemon=True)
        self.since = 0.0  # time.monotonic() when it froze
        self.frozen_s = 0.0

    @property
    def processes(self) -> int:
        """How many processes it froze."""
        return len(self._frozen)

    def __enter__(self) -> FrozenJoiner:
        self.since = time.monotonic()
        self._freeze()
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._done.set()
        self._thread.join()
        for process in self._frozen.values():
            with contextlib.suppress(psutil.NoSuchProcess):
                process.resume()
        self.frozen_s = round(time.monotonic() - self.since, 1)

    def _keep_frozen(self) -> None:
        while not self._done.wait(self._recheck_s):
            self._freeze()

    def _freeze(self) -> None:
        # Also what another fault's freeze, ending first, thawed: each keeps the tree
        # frozen for as long as it lasts.
        for process in self._services.tree(self._dc, JOINER):
            if _status(process) not in (psutil.STATUS_STOPPED, None):
                with contextlib.suppress(psutil.NoSuchProcess):
                    process.suspend()
            self._frozen.setdefault(process.pid, process)


def replay_at_every_step(
    services: ServiceManager,
    clock: StreamClock,
    dc: str,
    rival: str,
    since: Callable[[], float],
    timeout_s: float,
) -> FaultRecord:
    """Crash ``dc``'s joiner at each step of a batch, one run each, on one state.

    The joiner must be on its faulty run armed with the first step
    (``ServiceManager.start(faulty=...)``). Each crash is followed by a run armed
    with the next step, which first replays the crashed batch; the last is
    followed by a run with no fault, which replays the batch to its end.
    While the joiner starts again the stream is held, so every step strikes
    with the stream flowing behind it. ``rival``'s joiner is frozen until then
    (:class:`FrozenJoiner`): the steps from ``registered`` on need a batch that
    wins ids, and this way the crashed batch's own clicks are left for its replay
    to win, however slow the machine.
    """
    exits: dict[str, int | None] = {}
    # Metered: on a slow machine the steps take minutes, which the stream must not run out in.
    with FrozenJoiner(services, rival) as frozen, MeteredStream(clock, services.settings, dc):
        for n, step in enumerate(STEPS):
            then = step_env(STEPS[n + 1]) if n + 1 < len(STEPS) else None
            exits[step] = services.await_exit(dc, JOINER, timeout_s, then=then)
            hold_until_streaming(services, clock, dc)
    crashed = [step for step, code in exits.items() if code in _CRASHED]
    return FaultRecord(
        "replay_at_every_step",
        f"joiner[{dc}]",
        ended_s=since(),
        affects=[dc],
        struck=len(crashed) == len(STEPS),
        detail={"exit_codes": exits, "crashed_at": crashed, "rival_frozen_s": frozen.frozen_s},
    )


def hold_until_streaming(
    services: ServiceManager,
    clock: StreamClock,
    dc: str,
    restart: Callable[[], object] = lambda: None,
) -> None:
    """Hold the stream while ``dc``'s joiner (re)starts, until it streams again."""
    clock.hold()
    try:
        restart()
        wait_until(lambda: services.streaming(dc, JOINER), 300.0)
    finally:
        clock.resume()


def stale_epoch_partition(
    settings: PhotonSettings, services: ServiceManager, dc: str, since: Callable[[], float]
) -> FaultRecord:
    """Freeze ``dc``'s joiner past its session; append an epoch that starts meanwhile."""
    attempt = current_attempt(settings, dc)
    if not services.tree(dc, JOINER) or attempt is None:
        return FaultRecord("stale_epoch_partition", f"joiner[{dc}]", struck=False,
                           detail={"why": "no joiner running"})  # fmt: skip
    member = f"{JOINER}-{attempt}"
    with connect_registry(settings) as registry:
        announced = member in registry.members()
    with FrozenJoiner(services, dc) as frozen, connect_registry(settings) as registry:
        longest_s = 3 * settings.zookeeper.session_timeout_s + 10

        def gone() -> bool:
            return member not in registry.members()

        session_ended = announced and wait_until(gone, longest_s)
        session_s = round(time.monotonic() - frozen.since, 1)
        before, after = add_shards(registry, 1, settings.shards.max_clock_skew_s)
        start_us = after.epochs[-1].start_us
        started = wait_until(lambda: registry.zk_now_us() > start_us + _US, 120.0, 0.5)
    return FaultRecord(
        "stale_epoch_partition",
        f"joiner[{dc}]",
        ended_s=since(),
        affects=[dc],
        struck=session_ended and started,
        detail={
            "frozen_processes": frozen.processes,
            "announced": announced,
            "session_ended": session_ended,
            "session_ended_after_s": session_s,
            "config_version_before": before.version,
            "config_version_after": after.version,
            "shards": f"{before.epochs[-1].shards} -> {after.epochs[-1].shards}",
            "epoch_start_us": start_us,
        },
    )


def zombie_during_recovery(
    settings: PhotonSettings,
    services: ServiceManager,
    clock: StreamClock,
    dc: str,
    rival: str,
    since: Callable[[], float],
    timeout_s: float,
) -> FaultRecord:
    """Make ``dc``'s joiner a zombie: stopped between a winning commit and its write,
    its attempt replaced. :func:`resume_zombie` wakes it once recovery ran.

    To win a click, ``dc``'s joiner must commit it before ``rival``'s does, a race
    that a loaded machine can hand to the rival for the rest of the stream. So the
    rival's joiner is frozen (:class:`FrozenJoiner`) from the moment ``dc``'s streams
    again until ``dc``'s has won a click and stopped: the fault strikes on its first
    new click, however the machine's speed splits the race.
    """
    attempt = current_attempt(settings, dc)
    # The armed joiner starts again with the stream still to come.
    hold_until_streaming(services, clock, dc, lambda: services.rearm(dc, JOINER, PAUSE_ENV))
    stopped: list[psutil.Process] = []

    def paused() -> bool:
        stopped[:] = [p for p in services.tree(dc, JOINER) if _status(p) == psutil.STATUS_STOPPED]
        return bool(stopped)

    # thawed at once if it stopped already; the stream metered to what dc's joiner reads
    with FrozenJoiner(services, rival) as frozen, MeteredStream(clock, settings, dc):
        found = wait_until(paused, timeout_s, 0.5)
    zombie = stopped[0] if found else None
    if zombie is not None:  # its driver, JVM and other workers go; the stopped one stays
        for process in services.tree(dc, JOINER):
            if process.pid != zombie.pid:
                with contextlib.suppress(psutil.NoSuchProcess):
                    process.kill()
    # Its state lost: a new attempt. A joiner that never stopped is ended at once.
    code = services.await_crash(
        dc,
        JOINER,
        timeout_s if zombie is not None else 0.0,
        keep=(zombie.pid,) if zombie is not None else (),
    )
    return FaultRecord(
        "zombie_during_recovery",
        f"joiner[{dc}]",
        ended_s=since(),
        affects=[],  # what it is judged by comes after recovery (resume_zombie)
        struck=zombie is not None,
        detail={
            "pid": zombie.pid if zombie is not None else None,
            "attempt": attempt,
            "exit_code": code,
            "rival_frozen_s": frozen.frozen_s,
            # Its registered ids hold tokens "<dc>/<attempt>/<batch>": lost until recovery.
            "lost_tokens": f"{dc}/{attempt}/" if attempt else None,
        },
    )


def _status(process: psutil.Process) -> str | None:
    try:
        status: str = process.status()
    except psutil.NoSuchProcess:
        return None
    return status


def resume_zombie(record: FaultRecord, store: ObjectStore, timeout_s: float = 60.0) -> None:
    """Wake the zombie (after recovery fenced its attempt) and wait until it is gone;
    record whether it wrote anything after it woke up (it must not)."""
    pid, attempt = record.detail.get("pid"), record.detail.get("attempt")
    if pid is None or attempt is None:
        return
    dc = record.target.removeprefix("joiner[").removesuffix("]")
    before = set(attempt_keys(store, "joined", dc, attempt))
    try:
        zombie = psutil.Process(pid)
        zombie.resume()
        zombie.wait(timeout=timeout_s)
        record.detail["exited"] = True
    except psutil.NoSuchProcess:
        record.detail["exited"] = True
    except psutil.TimeoutExpired:
        record.detail["exited"] = False
        zombie.kill()
    written = sorted(set(attempt_keys(store, "joined", dc, attempt)) - before)
    record.detail["written_after_waking"] = written
    record.struck = record.struck and not written


def gc_during_catch_up(
    settings: PhotonSettings,
    services: ServiceManager,
    dc: str,
    boundary_us: int,
    since: Callable[[], float],
) -> FaultRecord:
    """Start ``dc``'s joiner afresh (a new attempt replays its logs from their start)
    and, while it replays, move every shard's GC boundary to ``boundary_us`` (never
    back) and collect: what it replays below the boundary must come out too old,
    never registered again."""
    services.restart_afresh(dc, JOINER)
    streaming = wait_until(lambda: services.streaming(dc, JOINER), 300.0)
    behind = joiner_backlog(settings, dc).bytes
    deleted = 0
    with connect_registry(settings) as registry:
        for shard in range(registry.sharding().max_shards):
            if registry.gc_boundary(shard) < boundary_us:
                registry.advance_gc_boundary(shard, boundary_us)
            deleted += registry.gc(shard).deleted_ids
    return FaultRecord(
        "gc_during_catch_up",
        f"joiner[{dc}]",
        ended_s=since(),
        affects=[],  # after the run's output is in: judged by duplicates, none
        struck=streaming and behind > 0 and deleted > 0,
        detail={"boundary_us": boundary_us, "deleted_ids": deleted, "backlog_bytes": behind},
    )


def task_retries(services: ServiceManager, dcs: list[str], master: str) -> FaultRecord:
    """Whether join tasks whose first try failed after its registry commit
    (``faults.fail_task_after_commit_p``, all run long) were tried again by Spark: each
    retry joins as a replay of its group (docs/join.md, "Why none is lost"). Read from
    the joiners' logs once the run is over; a DC that won few clicks (frozen, down or
    crashing for other faults) may have had no first try fail, so any DC's count."""
    retried = {
        dc: sum(
            1
            for line in json_lines(services.log_path(dc, JOINER))
            if line.get("event") == "joiner.task_retried"
        )
        for dc in dcs
    }
    return FaultRecord(
        "task_retry_after_commit",
        "join tasks",
        affects=[],  # all run long: judged by the run's duplicates and losses
        struck=sum(retried.values()) > 0,
        detail={"retried_tasks": retried, "spark_master": master},
    )


def log_file_faults(settings: PhotonSettings, dc: str, since: Callable[[], float]) -> FaultRecord:
    """Files of ``dc``'s click logs, changed under its running joiner in every way the
    reader must tell: truncated, replaced, rotated, deleted, and a torn last line."""
    clicks = settings.dc_logs(dc) / Stream.CLICKS.value
    lines = _copied_lines(clicks, 12)
    if len(lines) < 12:
        return FaultRecord("log_file_faults", f"clicks[{dc}]", struck=False,
                           detail={"why": "too few click lines to copy"})  # fmt: skip
    checkpoint = settings.pipeline_dir(dc, JOINER) / "checkpoint"
    names = {
        reason: f"{FILE_PREFIX}{reason}.log"
        for reason in ("file_truncated", "file_replaced", "file_rotated", "file_deleted")
    }
    torn = (f"{FILE_PREFIX}torn.000000.log", f"{FILE_PREFIX}torn.000001.log")
    _write(clicks / names["file_truncated"], lines[0:3])
    _write(clicks / names["file_replaced"], lines[3:5])
    _write(clicks / names["file_rotated"], lines[5:7])
    _write(clicks / names["file_deleted"], lines[7:9])
    _write(clicks / torn[0], [lines[9]], tail=lines[10][: len(lines[10]) // 2])
    made = [*names.values(), torn[0]]
    read = wait_until(lambda: _all_read(checkpoint, clicks, made), 120.0, 0.5)
    # Each change between two of the joiner's plans: the next plan must tell it.
    truncated = clicks / names["file_truncated"]
    os.truncate(truncated, len(lines[0]) + 1)  # shrinks below what was read
    _write(clicks / names["file_replaced"], lines[0:4])  # a new file, past the old offset
    with (clicks / names["file_rotated"]).open("ab") as f:
        f.write(lines[7] + b"\n")  # written before the rotation, not read yet
    (clicks / names["file_rotated"]).rename(clicks / f"{FILE_PREFIX}file_rotated-1.log")
    (clicks / names["file_deleted"]).unlink()
    _write(clicks / torn[1], [lines[11]])  # its writer moved on: the torn line is final
    return FaultRecord(
        "log_file_faults",
        f"clicks[{dc}]",
        ended_s=since(),
        affects=[],
        struck=read,  # and, once the run is over, every reason reported (log_file_reports)
        detail={"files": sorted([*made, torn[1]]), "read_before_the_changes": read},
    )


def log_file_reports(record: FaultRecord, store: ObjectStore) -> None:
    """What the joiner quarantined of the files :func:`log_file_faults` changed: it
    struck only if every kind of change was reported, each once."""
    dc = record.target.removeprefix("clicks[").removesuffix("]")
    reasons: dict[str, int] = {}
    for key in store.keys(f"{output_prefix('quarantine', dc)}stream={Stream.CLICKS.value}/"):
        data = store.get(key)
        for row in decode(data) if data is not None else []:
            if row["file"].startswith(FILE_PREFIX) and row["reason"] in FILE_REASONS:
                reasons[row["reason"]] = reasons.get(row["reason"], 0) + 1
    record.detail["reported"] = reasons
    wanted = {"file_truncated", "file_replaced", "file_rotated", "file_deleted", "torn_line"}
    record.struck = record.struck and set(reasons) >= wanted


def _copied_lines(clicks: Path, count: int) -> list[bytes]:
    """The first ``count`` complete lines of the DC's oldest click file that are at least
    :data:`~photon.logs.reader.HEAD_BYTES` long: a file cut after its first line keeps its
    head, so the reader can tell it truncated (a shorter file has no head, and is read
    again as a replaced one: docs/join.md, "Files by identity")."""
    files = sorted(p for p in clicks.glob("*.log") if not p.name.startswith(FILE_PREFIX))
    lines: list[bytes] = []
    for path in files:
        with path.open("rb") as f:
            data = f.read(1 << 20)
        lines += [
            line
            for line in data.split(b"\n")[:-1]
            if line.startswith(b"{") and len(line) >= HEAD_BYTES
        ]
        if len(lines) >= count:
            break
    return lines[:count]


def _write(path: Path, lines: list[bytes], tail: bytes = b"") -> None:
    path.write_bytes(b"".join(line + b"\n" for line in lines) + tail)


def _all_read(checkpoint: Path, clicks: Path, names: list[str]) -> bool:
    offsets = committed_offsets(checkpoint)
    for name in names:
        size = (clicks / name).stat().st_size
        complete = (clicks / name).read_bytes().rfind(b"\n") + 1
        if offsets.get(name, -1) < min(size, complete):
            return False
    return True


__all__ = [
    "FILE_PREFIX",
    "FrozenJoiner",
    "gc_during_catch_up",
    "hold_until_streaming",
    "log_file_faults",
    "log_file_reports",
    "replay_at_every_step",
    "resume_zombie",
    "stale_epoch_partition",
    "task_retries",
    "zombie_during_recovery",
]
