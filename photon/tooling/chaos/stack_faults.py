"""The chaos run's faults on the stack and the pipelines' processes (docs/chaos.md).

Each strikes the live run and returns a :class:`~photon.tooling.chaos.record.FaultRecord`:
kill -9 of a joiner (its service manager restarts it), a DC's whole pipeline
down and back, the ZooKeeper leader killed and restarted, Redis restarted, the
S3 endpoint frozen (SIGSTOP) and thawed, a sharding epoch appended, and a
joiner armed to crash between its registry commit and its write. The
protocol's own faults are in :mod:`photon.tooling.chaos.protocol_faults`.

How it fails: a fault that finds nothing to strike (no process to kill, no
crash in time) is recorded with ``struck`` false; a stack service that does
not come back raises.
"""

from __future__ import annotations

import os
import re
import signal
import time
from collections import Counter
from collections.abc import Callable

from tenacity import (
    retry,
    retry_if_exception_type,
    retry_if_result,
    stop_after_attempt,
    stop_after_delay,
    wait_fixed,
)

from photon.apps import JOINER
from photon.faults import CRASH_EXIT_CODE
from photon.join.runtime import current_attempt
from photon.registry_access import connect_registry
from photon.settings import PhotonSettings
from photon.tooling.chaos import analysis
from photon.tooling.chaos.config import ChaosConfig
from photon.tooling.chaos.record import FaultRecord
from photon.tooling.chaos.sampler import Sampler
from photon.tooling.chaos.service_manager import ServiceManager
from photon.tooling.stack import process
from photon.tooling.stack.manager import LocalStack
from registry import EpochConflictError, IdRegistry
from registry.sharding import ShardingConfig


def killer(
    services: ServiceManager, dc: str, since: Callable[[], float]
) -> Callable[[], FaultRecord]:
    def kill() -> FaultRecord:
        pid = services.kill(dc, JOINER)
        return FaultRecord(
            "kill_joiner",
            f"joiner[{dc}]",
            ended_s=since(),
            affects=[dc],
            struck=pid is not None,
            detail={"pid": pid},
        )

    return kill


def crash_after_commit(
    settings: PhotonSettings,
    services: ServiceManager,
    dc: str,
    since: Callable[[], float],
    timeout_s: float,
) -> FaultRecord:
    """The joiner dies between a registry commit and its output write, and its disk is lost.

    It runs armed (:data:`CRASH_AFTER_COMMIT`) from the services's start.
    Its batch is then never replayed (the new attempt starts from a fresh
    checkpoint): the ids it registered are lost until recovery restores them.
    """
    attempt = current_attempt(settings, dc)  # the armed run's: it streams already
    code = services.await_crash(dc, JOINER, timeout_s)
    return FaultRecord(
        "crash_after_commit",
        f"joiner[{dc}]",
        ended_s=since(),
        affects=[dc],
        # Exit 137 (the process crashed itself), or killed by SIGKILL: the crash struck
        # in a Spark task, whose Python worker killed its driver (spark_apps.join_tasks).
        struck=code in (CRASH_EXIT_CODE, -signal.SIGKILL),
        # Its ids hold tokens "<dc>/<attempt>/<batch>" of this attempt, dead from now.
        detail={"exit_code": code, "lost_tokens": f"{dc}/{attempt}/" if attempt else None},
    )


def dc_outage(
    services: ServiceManager, config: ChaosConfig, since: Callable[[], float]
) -> FaultRecord:
    services.take_down(config.outage_dc)
    time.sleep(config.outage_s)
    services.bring_up(config.outage_dc)
    return FaultRecord(
        "dc_outage", f"{config.outage_dc} (both apps)", ended_s=since(), affects=[config.outage_dc]
    )


def kill_zk_leader(stack: LocalStack, config: ChaosConfig, sampler: Sampler) -> FaultRecord:
    """Kill the leader; while it is down joining must go on; restarted, it must rejoin."""
    leader = zookeeper_leader(stack)
    if leader is None:
        return FaultRecord("zookeeper_leader", "none found", struck=False)
    down_at = sampler.since_start()
    every = list(sampler.settings.dcs)

    def joined_since_down() -> bool:
        try:
            joins = {dc: Counter(seconds) for dc, seconds in list(sampler.joins.items())}
        except RuntimeError:  # the sampler thread added to it meanwhile: next time
            return False
        return analysis.joined_between(joins, down_at, sampler.since_start()) > 0

    # Down for restart_after_s, and on until some click was joined meanwhile (on a slow
    # machine a batch can take longer than that): what the check is about.
    record = restart(stack, leader, config.restart_after_s, sampler.since_start, every,
                      kind="zookeeper_leader", until=joined_since_down)  # fmt: skip
    # The stack is healthy again (one leader, every other node a follower): the node
    # rejoined the ensemble by itself, with no step but its process started again.
    mode_after = {s.name: s.detail for s in stack.status().services}.get(leader)
    restarted_at = record.detail["restarted_at_s"]
    record.detail |= {
        "down_at_s": round(down_at, 1),
        "mode_after": mode_after,
        "rejoined_after_s": round(record.ended_s - restarted_at, 1) if record.ended_s else None,
    }  # joined_while_down: once the run's output is all read (_recovery_times)
    return record


@retry(
    retry=retry_if_result(lambda leader: leader is None),
    stop=stop_after_delay(60),
    wait=wait_fixed(1),
    retry_error_callback=lambda _: None,
)
def zookeeper_leader(stack: LocalStack) -> str | None:
    """The leader's service name, asked until one answers: on a loaded machine a node's
    ``srvr`` can time out, or an election still runs after the last fault."""
    nodes = [s for s in stack.status().services if re.fullmatch(r"zk\d+", s.name)]
    modes = {s.name: s.detail for s in nodes}  # the ensemble's nodes, not its exporter
    return next((name for name, mode in modes.items() if mode == "leader"), None)


@retry(stop=stop_after_delay(120), wait=wait_fixed(1), reraise=True)
def bring_up(stack: LocalStack) -> None:
    """Start what is not running and wait until the stack is healthy, asked again until
    it is: a fault beside this one (the S3 server frozen) can fail a try."""
    stack.up()


def restart(
    stack: LocalStack,
    service: str,
    restart_after_s: float,
    since: Callable[[], float],
    affects: list[str],
    *,
    kind: str | None = None,
    until: Callable[[], bool] = lambda: True,
    longest_s: float = 180.0,
) -> FaultRecord:
    """Kill ``service``; start it again after ``restart_after_s`` once ``until()`` holds
    (or ``longest_s`` passed); wait until the stack is healthy."""
    record = stack.records()[service]
    process.kill(record.identity)
    time.sleep(restart_after_s)
    deadline = time.monotonic() + longest_s - restart_after_s
    while not until() and time.monotonic() < deadline:
        time.sleep(0.5)
    restarted_at = since()
    bring_up(stack)
    return FaultRecord(
        kind or f"{service}_restart",
        service,
        ended_s=since(),
        affects=affects,
        detail={"restarted_at_s": round(restarted_at, 1)},
    )


def freeze_s3(
    stack: LocalStack, freeze_s: float, since: Callable[[], float], affects: list[str]
) -> FaultRecord:
    record = stack.records()["s3"]
    os.kill(record.pid, signal.SIGSTOP)
    try:
        time.sleep(freeze_s)
    finally:
        os.kill(record.pid, signal.SIGCONT)
    return FaultRecord("s3_unavailable", "s3 (frozen)", ended_s=since(), affects=affects)


def thaw_s3(stack: LocalStack) -> None:
    record = stack.records().get("s3")
    if record is not None and process.is_running(record.identity):
        os.kill(record.pid, signal.SIGCONT)


@retry(
    retry=retry_if_exception_type(EpochConflictError),
    stop=stop_after_attempt(5),
    wait=wait_fixed(0.5),
    reraise=True,
)
def add_shards(
    registry: IdRegistry, more: int, max_skew_s: float
) -> tuple[ShardingConfig, ShardingConfig]:
    """Append an epoch of ``more`` shards than the last one's: (before, after).

    Two faults may append at once (a reshard while a stale-epoch partition is
    struck): the loser's conflict is read again and retried, as an operator would.
    """
    before = registry.sharding()
    after = registry.append_epoch(before.epochs[-1].shards + more, max_skew_s=max_skew_s)
    return before, after


def append_epoch(
    settings: PhotonSettings, since: Callable[[], float], affects: list[str]
) -> FaultRecord:
    with connect_registry(settings) as registry:
        before, after = add_shards(registry, 2, settings.shards.max_clock_skew_s)
    shards = f"{before.epochs[-1].shards} -> {after.epochs[-1].shards} shards"
    return FaultRecord("reshard", shards, ended_s=since(), affects=affects)


def wait_crashed(services: ServiceManager, timeout_s: float = 300.0) -> None:
    """Until no joiner armed to crash is still on its faulty run."""
    deadline = time.monotonic() + timeout_s
    while services.crashing() and time.monotonic() < deadline:
        time.sleep(0.5)
