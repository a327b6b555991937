"""The chaos run's log rotation: logrotate moving the live logs under the running apps.

:func:`log_rotation` strikes twice:

* **mid-stream**, in every DC's query and click logs: of each directory's
  writers' current files, one is renamed (``x.log`` -> ``x.log.1``; its writer,
  not told to reopen, writes on there) and the next is copied to ``x.log.1``
  and truncated (``copytruncate``; its writer writes on at the start of the
  emptied file). The stream is held meanwhile: ``copytruncate`` loses what a
  writer appends between the copy and the truncation, a loss of logrotate's
  own that no reader can undo, so the run's writers pause for it;
* **between a try and its replay**: one DC's joiner crashes right after a
  registry commit that won ids (``faults.crash_at_step=registered``), keeping
  its state; while it is down, the click files its crashed batch read are
  rotated (renamed, and copied then truncated, in turn); started again, Spark
  replays the batch (or, one Spark had committed with its groups running, the
  joiner does, from Spark's offset log), which must read its lines where their bytes went and
  write the ids the crash left registered. The other DC's joiner is frozen
  until the crash (:class:`~photon.tooling.chaos.protocol_faults.FrozenJoiner`),
  so that the armed batch wins ids however the machine splits the race.

Whether the replay wrote those ids is read back before recovery runs
(:func:`replayed_batch_written`): the ids holding the crashed batch's token
must all be in the output. A reader that followed files by name would leave
them registered and unwritten (docs/join.md, "Files by identity").

How it fails: never raises on a missed strike; its record says ``struck=False``
and why. Errors propagate to the harness, which records the fault as raised.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Callable, Iterable
from pathlib import Path

from photon.apps import JOINER
from photon.events.records import Stream
from photon.faults import CRASH_EXIT_CODE
from photon.join.retry import RETRY_STORE, open_streaming_batches
from photon.join.runtime import current_attempt
from photon.logs.offset_log import logged_batches, logged_position
from photon.logs.reader import RECOVERY_LOG_PREFIX, GrowingLogReader, unrotated
from photon.settings import PhotonSettings
from photon.tooling.chaos.metered_stream import MeteredStream
from photon.tooling.chaos.protocol_faults import (
    FILE_PREFIX,
    FrozenJoiner,
    hold_until_streaming,
    step_env,
)
from photon.tooling.chaos.record import FaultRecord
from photon.tooling.chaos.service_manager import ServiceManager
from photon.tooling.runs import StreamClock

_WRITER_FILE = re.compile(r"(?P<writer>.+)\.(?P<seq>[0-9]+)\.log")


def log_rotation(
    settings: PhotonSettings,
    services: ServiceManager,
    clock: StreamClock,
    dc: str,
    rival: str,
    since: Callable[[], float],
    timeout_s: float,
) -> FaultRecord:
    clock.hold()
    try:
        live = {
            f"{each}/{stream.value}": rotate_current(settings.dc_logs(each) / stream.value)
            for each in settings.dcs
            for stream in (Stream.QUERIES, Stream.CLICKS)
        }
    finally:
        clock.resume()
    attempt = current_attempt(settings, dc)
    state_dir = settings.pipeline_dir(dc, JOINER)
    checkpoint = state_dir / "checkpoint"
    crashed: dict[str, object] = {}

    def rotate_the_crashed_batch() -> None:
        batch = _crashed_batch(state_dir)
        crashed["batch"] = batch
        if batch is not None:
            directory = settings.dc_logs(dc) / Stream.CLICKS.value
            crashed["rotated"] = rotate(directory, _files_read(checkpoint, batch))

    # The armed joiner starts again with the stream held: the crash has new clicks to win.
    # In a batch of log lines: a retry pass (held clicks come due while the rival is
    # frozen) reads no file to rotate.
    armed = step_env("registered", streaming_only=True)
    hold_until_streaming(services, clock, dc, lambda: services.rearm(dc, JOINER, armed))
    with FrozenJoiner(services, rival) as frozen, MeteredStream(clock, settings, dc):
        code = services.await_exit(dc, JOINER, timeout_s, before_restart=rotate_the_crashed_batch)
    hold_until_streaming(services, clock, dc)
    batch = crashed.get("batch")
    rotated_at_replay = crashed.get("rotated", [])
    struck_live = all(live.values())
    # The batch is named as Spark numbered it (spark_apps.streaming.batch_key).
    token = f"{dc}/{attempt}/{batch:012d}" if isinstance(batch, int) and attempt else None
    crashed_so = code in (CRASH_EXIT_CODE, -9)  # its own hard exit, or its worker's SIGKILL
    return FaultRecord(
        "log_rotation",
        f"logs, joiner[{dc}]",
        ended_s=since(),
        affects=[dc],
        # and, before recovery, the replay wrote what the crash left (replayed_batch_written)
        struck=struck_live and crashed_so and bool(rotated_at_replay) and token is not None,
        detail={
            "rotated_live": live,
            "exit_code": code,
            "crashed_batch_token": token,
            "rotated_before_replay": rotated_at_replay,
            "rival_frozen_s": frozen.frozen_s,
        },
    )


def replayed_batch_written(
    record: FaultRecord, tokens: dict[str, str], joined: Iterable[str]
) -> None:
    """Whether the crashed batch's replay wrote every id it left registered: ``tokens``
    are the registry's (id -> token, before verification clears them), ``joined`` every
    click id in the output."""
    token = record.detail.get("crashed_batch_token")
    if not record.struck or not token:
        return
    held = sorted(i for i, t in tokens.items() if t == token)
    output = set(joined)
    unwritten = [i for i in held if i not in output]
    record.detail |= {"registered_by_the_batch": len(held), "unwritten": unwritten[:20]}
    record.struck = bool(held) and not unwritten


def rotate_current(directory: Path) -> list[str]:
    """Rotate the current file (highest sequence number) of each ad server writing in
    ``directory`` (not the files other faults or recovery made), renaming and
    copy-truncating in turn; the names rotated, as ``old -> new``."""
    newest: dict[str, tuple[int, str]] = {}
    for name in GrowingLogReader(directory).files():
        if name.startswith((FILE_PREFIX, RECOVERY_LOG_PREFIX)):
            continue
        if match := _WRITER_FILE.fullmatch(name):
            seq = int(match["seq"])
            if seq >= newest.get(match["writer"], (-1, ""))[0]:
                newest[match["writer"]] = (seq, name)
    return rotate(directory, [name for _, name in sorted(newest.values())])


def rotate(directory: Path, names: Iterable[str]) -> list[str]:
    """logrotate on ``names``: the first renamed, the next copied then truncated, and so on."""
    done: list[str] = []
    for n, name in enumerate(sorted(names)):
        path = directory / name
        if not path.is_file():
            continue
        target = directory / _next_free(directory, name)
        if n % 2 == 0:
            path.rename(target)
        else:
            # The copy appears whole under its name (as a reader would see logrotate's,
            # finished), and the original is emptied right after.
            tmp = directory / f".{target.name}.tmp"
            shutil.copyfile(path, tmp)
            tmp.replace(target)
            os.truncate(path, 0)
        done.append(f"{name} -> {target.name}")
    return done


def _next_free(directory: Path, name: str) -> str:
    """The rotated name for ``name``: ``x.log`` -> ``x.log.1``, ``x.log.1`` -> ``x.log.2``
    (the first such name not taken)."""
    base, rotation = unrotated(name)
    n = rotation + 1
    while (directory / f"{base}.{n}").exists():
        n += 1
    return f"{base}.{n}"


def _crashed_batch(state_dir: Path) -> int | None:
    """The streaming batch the crash left open in the joiner's journal: one Spark had
    committed with its groups running (docs/join.md, "Batches that overlap"), or else
    the one Spark logged and did not commit."""
    left_open = open_streaming_batches(state_dir / RETRY_STORE)
    return max(left_open) if left_open else _uncommitted_batch(state_dir / "checkpoint")


def _uncommitted_batch(checkpoint: Path) -> int | None:
    """The batch Spark logged offsets for and has not committed (the crashed one)."""
    logged = logged_batches(checkpoint / "offsets")
    if not logged:
        return None
    batch = logged[0]
    return None if (checkpoint / "commits" / str(batch)).exists() else batch


def _files_read(checkpoint: Path, batch: int) -> list[str]:
    """The files batch ``batch`` reads: those its end offsets moved past its start."""
    try:
        end, _ = logged_position(checkpoint, batch)
        start, _ = logged_position(checkpoint, batch - 1) if batch > 0 else ({}, {})
    except (OSError, ValueError):
        return []
    return sorted(name for name, offset in end.items() if offset > start.get(name, 0))


__all__ = ["log_rotation", "replayed_batch_written", "rotate", "rotate_current"]
