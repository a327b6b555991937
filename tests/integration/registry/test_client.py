"""The IdRegistry on the real 3-node ensemble."""

from __future__ import annotations

import gc
import random
import threading
import time
import weakref
from collections.abc import Callable

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError

from photon.tooling.stack.manager import LocalStack
from registry import (
    AttemptFencedError,
    BatchFencedError,
    EpochConflictError,
    EventId,
    GcBoundaryRegressionError,
    IdRegistry,
    InvalidEventIdError,
    InvalidTokenError,
    LookupResult,
    RegisterResult,
)
from registry.sharding import stable_hash
from tests.integration.registry.conftest import Connect

pytestmark = pytest.mark.integration

NOW_US = time.time_ns() // 1000


def make_ids(n: int, *, start_us: int = NOW_US, spread_s: float = 60.0, seed: int = 1) -> list[str]:
    rng = random.Random(seed)
    ids: set[str] = set()
    while len(ids) < n:
        ts = start_us + rng.randrange(int(spread_s * 1_000_000))
        ids.add(
            str(
                EventId(
                    f"10.9.{rng.randrange(4)}.{rng.randrange(1, 250)}", rng.randrange(1, 99), ts
                )
            )
        )
    return sorted(ids)


def test_a_fenced_attempt_can_neither_commit_nor_pass_its_fence_check(connect: Connect) -> None:
    joiner, recovery = connect(), connect()
    joiner.hold_attempt("a-1234")
    joiner.check_fence()
    first, second, third = make_ids(3, seed=31)
    assert joiner.register([(first, "a/a-1234/0")]) == {first: RegisterResult.COMMITTED}

    assert recovery.fence_attempt("a-1234") is True
    assert recovery.attempt_fenced("a-1234")
    # The joiner's own view of the fence is as it was: the multi's check refuses it.
    with pytest.raises(AttemptFencedError, match="a-1234 was fenced by recovery"):
        joiner.register([(second, "a/a-1234/1")])
    assert recovery.read_token(second) is None
    with pytest.raises(AttemptFencedError):
        joiner.check_fence()
    # A restart of the fenced attempt is refused; another attempt is not touched.
    with pytest.raises(AttemptFencedError):
        connect().hold_attempt("a-1234")
    assert recovery.fence_attempt("a-1234") is False  # fenced already
    other = connect()
    other.hold_attempt("a-5678")
    assert other.register([(third, "a/a-5678/0")]) == {third: RegisterResult.COMMITTED}
    # An attempt that never held a fence (from before fences) is fenced all the same.
    assert recovery.fence_attempt("b-0000") is True
    with pytest.raises(AttemptFencedError):
        connect().hold_attempt("b-0000")
    with pytest.raises(ValueError, match="not an attempt name"):
        recovery.fence_attempt("a/b")


def test_first_token_wins_and_a_retry_with_it_is_committed(registry: IdRegistry) -> None:
    ids = make_ids(50)
    assert set(registry.register((i, "attempt-1") for i in ids).values()) == {
        RegisterResult.COMMITTED
    }
    assert set(registry.register((i, "attempt-1") for i in ids).values()) == {
        RegisterResult.COMMITTED
    }
    assert set(registry.register((i, "attempt-2") for i in ids).values()) == {
        RegisterResult.ALREADY_REGISTERED
    }
    assert {registry.read_token(i) for i in ids} == {"attempt-1"}


def test_a_mixed_batch_commits_every_fresh_id_once(registry: IdRegistry) -> None:
    held, fresh = make_ids(300, seed=2)[:100], make_ids(300, seed=2)[100:]
    registry.register((i, "other") for i in held)
    mine = make_ids(20, seed=3)
    registry.register((i, "mine") for i in mine)
    batch = [(i, "mine") for i in held + fresh + fresh[:50] + mine]  # duplicates inside the batch
    random.Random(4).shuffle(batch)
    results = registry.register(batch)
    assert len(results) == len(held) + len(fresh) + len(mine)
    assert {results[i] for i in held} == {RegisterResult.ALREADY_REGISTERED}
    assert {results[i] for i in fresh + mine} == {RegisterResult.COMMITTED}
    assert {registry.read_token(i) for i in held} == {"other"}
    assert {registry.read_token(i) for i in fresh} == {"mine"}
    assert sum(s.ids for s in registry.shard_stats()) == 300 + 20


def test_a_batch_over_a_megabyte_is_split_and_fully_committed(registry: IdRegistry) -> None:
    ids = make_ids(6_000, seed=5)
    token = "t" * 255
    encoded = sum(len(i) * 2 + len(token) for i in ids)  # path holds the id twice over
    assert encoded > 1_000_000
    before = registry.counters.to_dict()
    results = registry.register((i, token) for i in ids)
    assert set(results.values()) == {RegisterResult.COMMITTED}
    assert set(registry.lookup(ids).values()) == {LookupResult.PRESENT}
    after = registry.counters.to_dict()
    assert after["register_calls"] - before["register_calls"] == 1
    assert after["register_ids"] - before["register_ids"] == len(ids)
    # One id a transaction would be 6,000; size-bounded multis need only a handful.
    assert 2 <= after["register_transactions"] - before["register_transactions"] <= 60


def test_lookup_by_listing_and_by_probing(registry: IdRegistry) -> None:
    dense = make_ids(200, spread_s=5, seed=6)  # many per bucket: listed
    sparse = make_ids(5, start_us=NOW_US + 3_600_000_000, spread_s=3600, seed=7)  # probed
    registry.register((i, "x") for i in dense[:100] + sparse[:2])
    found = registry.lookup(dense + sparse)
    assert {found[i] for i in dense[:100] + sparse[:2]} == {LookupResult.PRESENT}
    assert {found[i] for i in dense[100:] + sparse[2:]} == {LookupResult.ABSENT}


def test_gc_boundary_moves_only_forward_and_gc_removes_what_lies_below(
    registry: IdRegistry,
) -> None:
    old = make_ids(400, start_us=NOW_US - 7_200_000_000, spread_s=600, seed=8)
    new = make_ids(400, start_us=NOW_US, spread_s=600, seed=9)
    registry.register((i, "t") for i in old + new)
    boundary = NOW_US - 3_600_000_000
    for shard in range(registry.sharding().max_shards):
        assert registry.advance_gc_boundary(shard, boundary) == boundary
        with pytest.raises(GcBoundaryRegressionError, match="cannot move back"):
            registry.advance_gc_boundary(shard, boundary - 1)
        report = registry.gc(shard)
        assert report.deleted_ids > 0
    assert sum(s.ids for s in registry.shard_stats()) == len(new)
    assert set(registry.lookup(old).values()) == {LookupResult.TOO_OLD}
    assert set(registry.register((i, "t2") for i in old).values()) == {RegisterResult.TOO_OLD}
    assert set(registry.lookup(new).values()) == {LookupResult.PRESENT}
    assert {registry.read_token(i) for i in new} == {"t"}


def test_gc_deletes_many_buckets_a_transaction_and_one_at_a_time_when_one_fails(
    connect: Connect, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Transactions of 16 operations: buckets of one id or two go several to one, and
    # a bucket of more ids than that goes alone, in chunks.
    gc, recovery = connect(max_ops_per_txn=16), connect()
    old = make_ids(300, start_us=NOW_US - 7_200_000_000, spread_s=600, seed=41)
    crowded = [f"10.9.9.{n}:1:{NOW_US - 7_000_000_000 + n}" for n in range(1, 101)]
    gc.register((i, "t") for i in old + crowded)
    listed = gc._list_buckets
    taken: list[str] = []

    def list_then_race(buckets: list[str]) -> dict[str, list[str]]:
        # Recovery deletes a listed id before GC's transaction: it fails, changing nothing.
        found = listed(buckets)
        if not taken:
            victim = next(i for i in old if any(b in gc._node(i) for b in found))
            assert recovery.delete_if_token(victim, "t")
            taken.append(victim)
        return found

    monkeypatch.setattr(gc, "_list_buckets", list_then_race)
    deleted = 0
    for shard in range(gc.sharding().max_shards):
        gc.advance_gc_boundary(shard, NOW_US - 3_600_000_000)
        deleted += gc.gc(shard).deleted_ids
    assert taken and deleted == len(old) + len(crowded) - 1
    assert sum(s.ids for s in gc.shard_stats()) == 0
    assert set(gc.lookup(old + crowded).values()) == {LookupResult.TOO_OLD}


def test_epochs_append_by_compare_and_set_and_clients_pick_them_up(connect: Connect) -> None:
    first, second = connect(), connect()
    before = first.sharding()
    ids = make_ids(100, seed=10)
    shards = {i: first.shard_of(EventId.parse(i)) for i in ids}
    new = first.append_epoch(16, max_skew_s=60)
    assert new.epochs[-1].shards == 16
    assert new.epochs[-1].start_us >= NOW_US + 60_000_000
    deadline = time.monotonic() + 5
    while second.sharding().version != new.version and time.monotonic() < deadline:
        time.sleep(0.05)
    assert second.sharding().epochs == new.epochs  # seen through the watch, no restart
    assert {i: second.shard_of(EventId.parse(i)) for i in ids} == shards
    assert len(before.epochs) + 1 == len(new.epochs)
    assert second.gc_boundary(15) == 0  # the new shards exist


def test_the_client_that_appends_an_epoch_shards_by_it_before_its_watch_fires(
    connect: Connect,
) -> None:
    operator = connect(default_shards=4)
    candidates = make_ids(50, start_us=NOW_US + 120_000_000, spread_s=60, seed=23)
    moved = EventId.parse(next(i for i in candidates if stable_hash(i) % 4 != stable_hash(i) % 7))
    # Hold the client's watch callbacks: its DataWatch on the config cannot fire.
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        held.set()
        release.wait(30)

    operator._zk.handler.callback_queue.put(hold)
    assert held.wait(5)
    try:
        appended = operator.append_epoch(7, max_skew_s=1, now_us=moved.ts_us - 2_000_000)
        assert operator.sharding() == appended
        assert operator.shard_of(moved) == stable_hash(str(moved)) % 7
    finally:
        release.set()
    time.sleep(0.5)  # the watch fires now, with the same version: nothing goes back
    assert operator.sharding().version == appended.version


def test_concurrent_epoch_appends_one_wins_the_others_get_a_clear_conflict(
    connect: Connect,
) -> None:
    clients = [connect() for _ in range(6)]
    barrier = threading.Barrier(len(clients))
    outcomes: list[str] = []

    def append(reg: IdRegistry) -> None:
        barrier.wait()
        try:
            reg.append_epoch(8, max_skew_s=30)
            outcomes.append("won")
        except EpochConflictError as exc:
            assert "changed while this epoch was being added" in str(exc)
            assert len(reg.sharding().epochs) >= 2  # the loser reads what won at once
            outcomes.append("conflict")

    threads = [threading.Thread(target=append, args=(c,)) for c in clients]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wins = outcomes.count("won")
    assert wins >= 1 and len(outcomes) == len(clients)
    time.sleep(0.5)
    assert len(clients[0].sharding().epochs) == 1 + wins


def _after_buckets(
    monkeypatch: pytest.MonkeyPatch, reg: IdRegistry, meanwhile: Callable[[], object]
) -> None:
    """Run ``meanwhile`` once, after ``reg`` has read its guards and made its buckets
    and before it commits: another client's move in between."""
    made = reg._ensure_buckets
    done: list[bool] = []

    def ensure_then(buckets: set[str]) -> None:
        made(buckets)
        if not done:
            done.append(True)
            meanwhile()

    monkeypatch.setattr(reg, "_ensure_buckets", ensure_then)


def _exists(reg: IdRegistry, path: str) -> bool:
    """Whether ``path`` exists as the leader has it: ``reg``'s server may be a
    follower that has not applied another client's write yet."""
    reg._zk.sync(path)
    return reg._zk.exists(path) is not None


def test_gc_racing_a_registration_leaves_the_id_too_old_and_never_committed(
    connect: Connect, monkeypatch: pytest.MonkeyPatch
) -> None:
    reg, gc = connect(), connect()
    stale, racing = make_ids(2, start_us=NOW_US - 7_200_000_000, spread_s=600, seed=21)
    for event_id in (stale, racing):
        assert reg.lookup([event_id]) == {event_id: LookupResult.ABSENT}  # the watch is set
    # GC has moved past ``stale``, and reg's boundary watch lags on purpose.
    shard = gc.shard_of(EventId.parse(stale))
    gc.advance_gc_boundary(shard, EventId.parse(stale).ts_us + 1)
    monkeypatch.setattr(reg, "gc_boundary", lambda _shard: 0)
    assert reg.lookup([stale]) == {stale: LookupResult.ABSENT}  # what the lag says
    assert reg.register([(stale, "b")]) == {stale: RegisterResult.TOO_OLD}
    assert not _exists(reg, reg.layout.bucket_of(shard, EventId.parse(stale)))  # not re-made
    # GC moves past ``racing`` after reg read the boundary, before its commit.
    racing_id = EventId.parse(racing)
    racing_shard = gc.shard_of(racing_id)
    _after_buckets(
        monkeypatch, reg, lambda: gc.advance_gc_boundary(racing_shard, racing_id.ts_us + 1)
    )
    assert reg.register([(racing, "b")]) == {racing: RegisterResult.TOO_OLD}
    assert gc.read_token(racing) is None


def test_an_epoch_appended_before_a_commit_moves_the_id_to_its_new_shard(
    connect: Connect, monkeypatch: pytest.MonkeyPatch
) -> None:
    reg, operator = connect(default_shards=4), connect()
    # An id whose shard differs under 4 shards and under the new epoch's 7.
    candidates = make_ids(50, start_us=NOW_US + 5_000_000, spread_s=60, seed=22)
    moved = next(i for i in candidates if stable_hash(i) % 4 != stable_hash(i) % 7)
    moved_id = EventId.parse(moved)
    old_path = reg.layout.node(reg.shard_of(moved_id), moved_id)
    _after_buckets(
        monkeypatch,
        reg,
        lambda: operator.append_epoch(7, max_skew_s=1, now_us=moved_id.ts_us - 2_000_000),
    )
    assert reg.register([(moved, "a")]) == {moved: RegisterResult.COMMITTED}
    assert reg.sharding().epochs[-1].shards == 7
    assert not _exists(reg, old_path)  # refused under the old config, not committed there
    new_path = operator.layout.node(operator.shard_of(moved_id), moved_id)
    assert new_path != old_path and _exists(operator, new_path)
    assert operator.lookup([moved]) == {moved: LookupResult.PRESENT}
    assert operator.register([(moved, "b")]) == {moved: RegisterResult.ALREADY_REGISTERED}


def test_a_boundary_read_by_a_registration_is_still_watched_afterwards(
    connect: Connect,
) -> None:
    reg, gc = connect(), connect()
    [event_id] = make_ids(1, seed=24)
    shard = reg.shard_of(EventId.parse(event_id))
    reg.register([(event_id, "a")])  # reads the boundary fresh, before any gc_boundary()
    gc.advance_gc_boundary(shard, 1_000)
    deadline = time.monotonic() + 5
    while reg.gc_boundary(shard) != 1_000 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert reg.gc_boundary(shard) == 1_000


def test_epoch_starts_follow_zookeepers_clock_not_the_hosts(
    registry: IdRegistry, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_now = time.time_ns() // 1000
    ahead = time.time_ns() + 86_400 * 10**9
    monkeypatch.setattr(time, "time_ns", lambda: ahead)  # this host's clock: a day ahead
    zk_now = registry.zk_now_us()
    assert abs(zk_now - real_now) < 60_000_000
    assert registry.zk_now_us() >= zk_now  # a fresh stamp each time
    epoch = registry.append_epoch(8, max_skew_s=60).epochs[-1]
    assert real_now + 60_000_000 <= epoch.start_us < real_now + 180_000_000


def test_delete_if_token_and_clear_tokens(registry: IdRegistry) -> None:
    ids = make_ids(10, seed=11)
    registry.register((i, "attempt-7") for i in ids)
    assert not registry.delete_if_token(ids[0], "attempt-8")
    assert registry.delete_if_token(ids[0], "attempt-7")
    assert registry.lookup([ids[0]])[ids[0]] is LookupResult.ABSENT
    assert registry.clear_tokens(ids[1:5]) == 4
    assert registry.read_token(ids[1]) == ""
    assert not registry.delete_if_token(ids[1], "attempt-7")  # confirmed in output: keep it
    assert registry.read_token(ids[5]) == "attempt-7"


def test_bad_ids_and_tokens_are_refused_before_anything_is_written(registry: IdRegistry) -> None:
    good = make_ids(3, seed=12)
    with pytest.raises(InvalidEventIdError):
        registry.register([(good[0], "t"), ("not-an-id", "t")])
    with pytest.raises(InvalidTokenError):
        registry.register([(good[0], "t"), (good[1], "")])
    with pytest.raises(InvalidTokenError):
        registry.register([(good[0], "x" * 256)])
    with pytest.raises(ValueError, match="different tokens"):
        registry.register([(good[0], "a"), (good[0], "b")])
    assert set(registry.lookup(good).values()) == {LookupResult.ABSENT}


def test_with_credentials_an_unauthenticated_client_can_neither_read_nor_write(
    connect: Connect, local_stack: LocalStack, registry_root: str
) -> None:
    secured = connect(auth=("photon", "s3cret-pass"))
    ids = make_ids(5, seed=13)
    secured.register((i, "t") for i in ids)
    node = secured.layout.node(secured.shard_of(EventId.parse(ids[0])), EventId.parse(ids[0]))
    stranger = KazooClient(hosts=",".join(local_stack.settings.zk_hosts))
    stranger.start(timeout=15)
    try:
        with pytest.raises(NoAuthError):
            stranger.get(node)
        with pytest.raises(NoAuthError):
            stranger.get(f"{registry_root}/config/sharding")
        with pytest.raises(NoAuthError):
            stranger.create(f"{registry_root}/ids/0/intruder", b"x")
        with pytest.raises(NoAuthError):
            stranger.set(f"{registry_root}/gc/0", b"999999999999999999")
    finally:
        stranger.stop()
        stranger.close()
    assert secured.read_token(ids[0]) == "t"


def test_drop_deletes_the_whole_tree(connect: Connect, registry_root: str) -> None:
    registry = connect()
    ids = make_ids(3_000, spread_s=7_200, seed=12)  # several hours and buckets
    registry.register((i, "t") for i in ids)
    assert registry.drop() == len(ids)
    assert registry._zk.exists(registry_root) is None
    again = connect()  # a fresh registry on the same root starts empty
    assert set(again.lookup(ids).values()) == {LookupResult.ABSENT}


def test_registered_lists_the_ids_of_a_window_with_their_tokens(registry: IdRegistry) -> None:
    base = 1_767_225_600_000_000
    ids = {f"10.0.0.{n}:7:{base + n * 4_000_000}": f"a/run/{n}" for n in range(1, 30)}
    for event_id, token in ids.items():
        registry.register([(event_id, token)])
    registry.clear_tokens([next(iter(ids))])
    window = registry.registered(base + 20_000_000, base + 60_000_000)
    expected = {
        i: t
        for i, t in ids.items()
        if base + 20_000_000 <= int(i.rsplit(":")[-1]) < base + 60_000_000
    }
    first = next(iter(ids))
    assert window == {i: ("" if i == first else t) for i, t in expected.items()}
    assert len(registry.registered(0, 2**62)) == len(ids)
    assert registry.registered(base, base) == {}


def test_members_announce_the_config_version_they_use_and_leave_with_their_session(
    connect: Connect,
) -> None:
    pipeline = connect()
    operator = connect()
    pipeline.announce("joiner-a-1234", {"dc": "a"})
    assert operator.members() == {
        "joiner-a-1234": {"dc": "a", "config_version": pipeline.sharding().version}
    }
    config = operator.append_epoch(6, max_skew_s=1)
    deadline = time.monotonic() + 10
    while operator.members()["joiner-a-1234"]["config_version"] != config.version:
        assert time.monotonic() < deadline, "the member never reported the new version"
        time.sleep(0.05)
    with pytest.raises(ValueError, match="member name"):
        pipeline.announce("a/b", {})
    pipeline.close()
    assert operator.members() == {}  # ephemeral: gone with the session


def test_a_restarted_pipeline_stays_announced_after_its_old_session_ends(
    connect: Connect,
) -> None:
    """Restarted at once (kill -9), a pipeline finds its old session's node still there:
    the node must become the new session's, not go when the old session ends."""
    killed, restarted, operator = connect(), connect(), connect()
    killed.announce("joiner-a-1234", {"pid": 1})
    restarted.announce("joiner-a-1234", {"pid": 2})
    assert operator.members()["joiner-a-1234"]["pid"] == 2
    killed.close()  # the old session ends
    assert operator.members()["joiner-a-1234"]["pid"] == 2
    restarted.announce("joiner-a-1234", {"pid": 2})  # announcing again: still its own
    assert operator.members()["joiner-a-1234"]["pid"] == 2


def test_members_read_on_another_server_sees_an_announcement_made_just_before(
    local_stack: LocalStack, registry_root: str
) -> None:
    """Recovery and the rollout decide on ``members``: read through a follower, it must
    still see what another client announced a moment ago on another server."""
    hosts = local_stack.settings.zk_hosts
    assert len(hosts) >= 2
    opened = [IdRegistry.connect([host], registry_root, default_shards=4) for host in hosts]
    try:
        # New nodes, as a starting pipeline makes. A follower's lag is short: without
        # the sync, two runs in six failed here, so many rounds.
        for round_ in range(30):
            for number, announcer in enumerate(opened):
                name = f"joiner-{round_}-{number}"
                announcer.announce(name, {"pid": round_})
                for reader in opened:
                    assert name in reader.members(), f"{name} announced, not listed"
    finally:
        for registry in opened:
            registry.close()


def test_an_id_stamped_beyond_zookeepers_clock_plus_the_skew_is_refused_until_in_range(
    connect: Connect, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whatever the host's clock says: the bound is ZooKeeper's now plus the skew."""
    reg = connect(max_clock_skew_s=2)
    monkeypatch.setattr(time, "time_ns", lambda: 0)  # this host's clock: no help
    zk_now = reg.zk_now_us()
    near, far = (
        str(EventId("10.9.0.1", 7, zk_now + 1_000_000)),
        str(EventId("10.9.0.1", 7, zk_now + 4_000_000)),
    )
    assert reg.register([(near, "a"), (far, "a")]) == {
        near: RegisterResult.COMMITTED,
        far: RegisterResult.TOO_NEW,
    }
    assert reg.lookup([far]) == {far: LookupResult.ABSENT}  # nothing written
    while reg.zk_now_us() < zk_now + 2_100_000:  # ZooKeeper's clock catches up with it
        time.sleep(0.1)
    assert reg.register([(far, "a")]) == {far: RegisterResult.COMMITTED}
    assert connect().register([(far, "b")]) == {far: RegisterResult.ALREADY_REGISTERED}
    with pytest.raises(ValueError, match="below the maximum clock skew"):
        reg.append_epoch(8, max_skew_s=1)  # could start before an id registered already


def test_a_fenced_batch_stops_its_writers_and_leaves_the_attempt_and_its_other_batches(
    connect: Connect,
) -> None:
    joiner, recovery = connect(), connect()
    joiner.hold_attempt("a-77")
    assert recovery.fence_batch("a-77", "000000000009") is True
    assert recovery.fence_batch("a-77", "000000000009") is False  # fenced already
    with pytest.raises(BatchFencedError, match="000000000009"):
        joiner.check_fence("000000000009")
    joiner.check_fence("000000000010")
    joiner.check_fence()
    [event_id] = make_ids(1, seed=31)
    assert joiner.register([(event_id, "a/a-77/000000000010")]) == {
        event_id: RegisterResult.COMMITTED
    }
    assert recovery.attempt_fenced("a-77") is False
    with pytest.raises(ValueError, match="batch name"):
        recovery.fence_batch("a-77", "../x")


def test_a_missing_node_keeps_no_callers_locals_alive(registry: IdRegistry) -> None:
    """kazoo raises the error an async result stored. Raised in the client, it took the
    frames up the stack into a reference cycle with the result, and a caller's locals
    (a group task's clicks and queries) lived until the next full collection: tens of
    milliseconds after every task of Spark's Python workers (docs/join.md, "Where a
    group task's time goes"). Freed by reference counting alone, none is left."""

    class Local:
        pass

    later = NOW_US + 7_200_000_000  # buckets nothing was registered in: no node

    def caller() -> weakref.ref[Local]:
        local = Local()
        listed = make_ids(200, start_us=later, spread_s=5, seed=8)  # a bucket listed
        probed = make_ids(3, start_us=later + 3_600_000_000, spread_s=3600, seed=9)
        assert set(registry.lookup(listed + probed).values()) == {LookupResult.ABSENT}
        assert registry.read_token(probed[0]) is None  # a synchronous call's error
        return weakref.ref(local)

    gc.collect()
    gc.disable()
    try:
        assert caller()() is None
    finally:
        gc.enable()
