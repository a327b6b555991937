"""Many writers, one winner per id: processes racing over overlapping ids, and a
ZooKeeper leader killed in the middle of registration."""

from __future__ import annotations

import json
import multiprocessing
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from photon.tooling.stack import process
from photon.tooling.stack.manager import LocalStack
from photon.tooling.stack.zookeeper import srvr_mode
from registry import EventId, IdRegistry, LookupResult, RegisterResult
from registry.sharding import stable_hash
from tests.integration.registry.conftest import Connect
from tests.integration.registry.test_client import make_ids

pytestmark = pytest.mark.integration

PROCESSES = 8
POOL = 20_000  # 2,500 ids of its own per process, beside 2,000 of the others'
CONTESTED = 2_000  # ids each process also takes from the others' slices: 16,000 races


def register_share(hosts: list[str], root: str, worker: int, ids: list[str]) -> list[str]:
    """One process: register its ids in batches of 1,000; return those it won."""
    won: list[str] = []
    with IdRegistry.connect(hosts, root, default_shards=4) as reg:
        token = f"proc-{worker}"
        for start in range(0, len(ids), 1000):
            results = reg.register((i, token) for i in ids[start : start + 1000])
            won += [i for i, r in results.items() if r is RegisterResult.COMMITTED]
    return won


def test_eight_processes_one_winner_per_id(
    local_stack: LocalStack, connect: Connect, registry_root: str
) -> None:
    pool = make_ids(POOL, spread_s=600, seed=21)
    rng = random.Random(22)
    shares = []
    for w in range(PROCESSES):
        own = pool[w::PROCESSES]
        mine = set(own)
        others = [i for i in rng.sample(pool, 2 * CONTESTED) if i not in mine][:CONTESTED]
        shares.append(rng.sample(own + others, len(own) + len(others)))  # in random order
    union = set().union(*shares)
    assert len(union) == POOL  # every id of the pool is in its own slice
    assert sum(map(len, shares)) - len(union) >= PROCESSES * CONTESTED * 0.9  # real overlap
    connect()  # create the registry once, before the race
    hosts = local_stack.settings.zk_hosts
    started = time.monotonic()
    with ProcessPoolExecutor(PROCESSES, mp_context=multiprocessing.get_context("spawn")) as ex:
        futures = [
            ex.submit(register_share, hosts, registry_root, w, s) for w, s in enumerate(shares)
        ]
        won = [f.result() for f in futures]
    elapsed = time.monotonic() - started
    print(f"\n{sum(map(len, shares))} registrations by {PROCESSES} processes in {elapsed:.1f} s")

    winners = Counter(i for ids in won for i in ids)
    assert set(winners) == union  # every id was won ...
    assert set(winners.values()) == {1}  # ... by exactly one process
    owner = {i: f"proc-{w}" for w, ids in enumerate(won) for i in ids}

    reg = connect()
    tokens = {i: reg.read_token(i) for i in rng.sample(sorted(union), 2_000)}
    assert all(tokens[i] == owner[i] for i in tokens)
    for w in range(PROCESSES):
        again = reg.register((i, f"proc-{w}") for i in won[w][:500])
        assert set(again.values()) == {RegisterResult.COMMITTED}
    assert sum(s.ids for s in reg.shard_stats()) == len(union)


def test_killing_the_zookeeper_leader_loses_no_acknowledged_id(
    local_stack: LocalStack, connect: Connect
) -> None:
    stack = local_stack.settings.stack
    ids = make_ids(20_000, spread_s=300, seed=31)
    regs = [connect(session_timeout_s=10.0) for _ in range(2)]
    acknowledged: dict[str, str] = {}
    lock = threading.Lock()
    gaps: list[float] = []

    def writer(n: int) -> None:
        token = f"writer-{n}"
        mine = ids[n::2]
        last = time.monotonic()
        for start in range(0, len(mine), 250):
            results = regs[n].register((i, token) for i in mine[start : start + 250])
            now = time.monotonic()
            gaps.append(now - last)
            last = now
            with lock:
                acknowledged.update(
                    {i: token for i, r in results.items() if r is RegisterResult.COMMITTED}
                )

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(2)]
    for t in threads:
        t.start()
    while len(acknowledged) < 4_000:
        time.sleep(0.01)
    leader = next(
        name
        for i, name in enumerate(("zk1", "zk2", "zk3"))
        if srvr_mode(stack.host, stack.zk_client_ports[i]) == "leader"
    )
    assert process.kill(local_stack.records()[leader].identity)
    for t in threads:
        t.join(timeout=120)
    print(f"\nkilled the leader {leader}; longest wait for one batch: {max(gaps):.1f} s")
    try:
        assert len(acknowledged) == len(ids)  # both writers finished everything
        assert max(gaps) < 10.0, f"a batch waited {max(gaps):.1f} s across the leader's death"
        check = connect()
        assert set(check.lookup(ids).values()) == {LookupResult.PRESENT}
        sample = random.Random(32).sample(ids, 2_000)
        assert all(check.read_token(i) == acknowledged[i] for i in sample)
    finally:
        assert local_stack.up().healthy  # the killed node rejoins


#: A joiner's registry client in a process of its own: connects, says so, and on
#: "go" registers one id and prints the result. Its logs go to stderr: on stdout, a
#: line kazoo's thread logged (the reconnection) could split a result line.
_PAUSED_JOINER = """
import json, sys
from photon.logconfig import configure_logging
from registry import IdRegistry
configure_logging("info")
reg = IdRegistry.connect(sys.argv[1].split(","), sys.argv[2], default_shards=4,
                         session_timeout_s=4.0)
print("RESULT", json.dumps({"config_version": reg.sharding().version}), flush=True)
sys.stdin.readline()
results = reg.register([(sys.argv[3], "paused/run/0")])
print("RESULT", json.dumps({k: str(v) for k, v in results.items()}), flush=True)
reg.close()
"""


def _result(process: subprocess.Popen[str]) -> Any:
    """The next line the process printed as its result."""
    assert process.stdout is not None
    for line in process.stdout:
        if line.startswith("RESULT "):
            return json.loads(line.removeprefix("RESULT "))
    # A negative code is the signal that ended it (its traceback, if any, is on stderr).
    raise AssertionError(f"the process ended without a result: exit {process.wait(timeout=30)}")


def test_a_joiner_paused_past_its_session_across_an_epoch_start_never_commits_in_the_old_shard(
    local_stack: LocalStack, connect: Connect, registry_root: str
) -> None:
    operator = connect(default_shards=4)
    # An id whose shard under the new epoch's 7 shards differs from its shard under 4.
    candidates = make_ids(50, start_us=time.time_ns() // 1000 + 5_000_000, seed=25)
    moved = next(i for i in candidates if stable_hash(i) % 4 != stable_hash(i) % 7)
    moved_id = EventId.parse(moved)
    old_path = operator.layout.node(operator.shard_of(moved_id), moved_id)
    hosts = ",".join(local_stack.settings.zk_hosts)
    joiner = subprocess.Popen(
        [sys.executable, "-c", _PAUSED_JOINER, hosts, registry_root, moved],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(Path.cwd())},
    )
    try:
        assert joiner.stdout is not None and joiner.stdin is not None
        assert _result(joiner)["config_version"] == 0
        joiner.send_signal(signal.SIGSTOP)  # paused, its config as it was
        operator.append_epoch(7, max_skew_s=1, now_us=moved_id.ts_us - 2_000_000)
        time.sleep(6)  # past its 4 s session: ZooKeeper ends it meanwhile
        joiner.send_signal(signal.SIGCONT)
        joiner.stdin.write("go\n")
        joiner.stdin.flush()
        assert _result(joiner) == {moved: "committed"}
        assert joiner.wait(timeout=30) == 0
    finally:
        if joiner.poll() is None:
            joiner.kill()
            joiner.wait()
    assert operator._zk.exists(old_path) is None  # not in the shard the epoch moved it from
    new_path = operator.layout.node(operator.shard_of(moved_id), moved_id)
    assert new_path != old_path and operator._zk.exists(new_path) is not None
    assert operator.read_token(moved) == "paused/run/0"
