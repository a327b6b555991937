"""Recovery and compaction against the real stack: the cases the DAG tests do not reach."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path

import pytest

from photon.apps import JOINER
from photon.join.logmap import MapEntry, delta_prefix, sorted_prefix
from photon.join.output import attempt_keys, rows_under
from photon.join.runtime import current_attempt
from photon.ops import compaction
from photon.ops import recover as recover_module
from photon.ops.params import RecoverParams
from photon.ops.recover import RecoveryStateError, recover
from registry import BatchFencedError
from tests.integration.ops_pipelines import OpsPhoton

pytestmark = pytest.mark.integration


def test_ids_of_a_batch_still_open_are_left_to_its_replay(ops_photon: OpsPhoton) -> None:
    ops_photon.generate()
    ops_photon.crash_between_commit_and_write("a", 1)  # batch 1 stays open: Spark replays it
    window = RecoverParams.parse({"lookback_s": 3600, "settle_s": 0}).window()
    registered = ops_photon.registry.registered(window.start_us, window.end_us)

    report = recover(
        ops_photon.settings, ops_photon.store, ops_photon.registry, window, dry_run=False
    )

    assert report.lost > 0 and report.alive == report.lost and report.dead == 0
    assert report.why == {"batch open: its replay writes it": report.lost}
    assert report.deleted == report.reinjected == 0
    assert ops_photon.registry.registered(window.start_us, window.end_us) == registered


def _lose_batch_two(ops_photon: OpsPhoton) -> None:
    """DC a's joiner dies between batch 2's registry commit and its write; the pipeline
    then goes on from a new batch, so batch 2 is never replayed: its ids are lost."""
    ops_photon.generate()
    ops_photon.crash_between_commit_and_write("a", 2)
    ops_photon.run("a")


def test_a_recovery_that_dies_after_deleting_is_finished_by_the_next_run(
    ops_photon: OpsPhoton, monkeypatch: pytest.MonkeyPatch
) -> None:
    _lose_batch_two(ops_photon)
    window = RecoverParams.parse({"lookback_s": 3600, "settle_s": 0}).window()
    settings, store, registry = ops_photon.settings, ops_photon.store, ops_photon.registry
    clicks_dir = settings.dc_logs("a") / "clicks"
    write_whole = recover_module._write_whole

    def die_before_the_log(path: Path, lines: Iterable[bytes]) -> Path:
        if path.suffix == ".log":
            raise SystemExit("killed after the registry deletes, before the recovery log")
        return write_whole(path, lines)

    monkeypatch.setattr(recover_module, "_write_whole", die_before_the_log)
    with pytest.raises(SystemExit):
        recover(settings, store, registry, window, dry_run=False, run="first")
    monkeypatch.undo()
    [journal] = clicks_dir.glob("recovery-*.pending")
    lost = len([line for line in journal.read_bytes().split(b"\n") if line])
    assert lost > 0 and not list(clicks_dir.glob("recovery-*.log"))
    assert registry.registered(window.start_us, window.end_us)  # the rest is still registered

    # The next run finishes the journal first; nothing of it is lost or doubled.
    report = recover(settings, store, registry, window, dry_run=False, run="second")

    assert report.resumed == lost and report.lost == 0
    assert not list(clicks_dir.glob("recovery-*.pending"))
    assert ops_photon.read_recovery_logs("a") == lost
    joined = Counter(r["click_id"] for r in rows_under(store, "joined/"))
    assert ops_photon.manifest is not None
    assert set(joined) == set(ops_photon.manifest.expected_joins)
    assert set(joined.values()) == {1}


def test_a_replaced_attempt_is_left_alone_while_its_joiner_is_still_connected(
    ops_photon: OpsPhoton,
) -> None:
    _lose_batch_two(ops_photon)  # DC a's joiner (its attempt) stays connected: a zombie
    settings, store, registry = ops_photon.settings, ops_photon.store, ops_photon.registry
    (settings.pipeline_dir("a", JOINER) / "attempt").write_text("a-replacement\n")
    window = RecoverParams.parse({"lookback_s": 3600, "settle_s": 0}).window()
    registered = registry.registered(window.start_us, window.end_us)

    report = recover(settings, store, registry, window, dry_run=False, run="zombie")

    assert report.lost > 0 and report.dead == 0
    assert report.why == {"attempt replaced, its joiner still connected: left": report.lost}
    assert registry.registered(window.start_us, window.end_us) == registered

    ops_photon.joiners.pop("a").close()  # its session ends: now the attempt is dead
    report = recover(settings, store, registry, window, dry_run=False, run="after")

    assert report.dead == report.lost == report.reinjected > 0
    assert report.why == {"attempt replaced": report.lost}
    assert ops_photon.read_recovery_logs("a") == report.reinjected
    joined = Counter(r["click_id"] for r in rows_under(store, "joined/"))
    assert ops_photon.manifest is not None
    assert set(joined) == set(ops_photon.manifest.expected_joins)
    assert set(joined.values()) == {1}


#: DC a's query reader and joiner, run batch by batch as OpsPhoton runs them; with
#: faults.pause_after_commit_p = 1 its joiner stops itself (SIGSTOP) right after its
#: first registry commit that wins ids, before that batch's output write.
_ZOMBIE = """
import sys
from photon.registry_access import connect_registry
from photon.settings import load_settings
from photon.storage import ObjectStore
from tests.integration.ops_pipelines import OpsPhoton
from tests.integration.photon.join.conftest import Clock
settings = load_settings()
photon = OpsPhoton(settings, ObjectStore.from_settings(settings), connect_registry(settings),
                   int(sys.argv[1]), Clock(int(sys.argv[2])))
photon.run("a")
"""


def _stopped(pid: int) -> bool:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "T"


def _wait_for(condition: Callable[[], bool], what: str, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"no {what} within {timeout_s:g} s")
        time.sleep(0.1)


def test_a_zombie_joiner_resumed_after_its_attempt_was_replaced_and_recovered_writes_nothing(
    ops_photon: OpsPhoton, tmp_path: Path
) -> None:
    """Paused after registering and before writing; its attempt replaced and recovered;
    resumed: 0 duplicates, 0 lost."""
    ops_photon.generate()
    settings, store, registry = ops_photon.settings, ops_photon.store, ops_photon.registry
    stderr = tmp_path / "zombie.err"
    with stderr.open("wb") as err:
        zombie = subprocess.Popen(
            [sys.executable, "-c", _ZOMBIE, str(ops_photon.start_us), str(ops_photon.clock.now_us)],
            stdout=subprocess.DEVNULL,
            stderr=err,
            env={
                **os.environ,
                "PYTHONPATH": str(Path.cwd()),
                "PHOTON_FAULTS__PAUSE_AFTER_COMMIT_P": "1",
                "PHOTON_ZOOKEEPER__SESSION_TIMEOUT_S": "4",
            },
        )
    try:
        _wait_for(lambda: zombie.poll() is not None or _stopped(zombie.pid), "pause")
        assert zombie.poll() is None, stderr.read_text()
        attempt = current_attempt(settings, "a")
        assert attempt is not None
        held = {c for c, t in registry.registered(0, 2**62).items() if f"/{attempt}/" in t}
        assert held  # registered by the paused batch, in no output
        assert not attempt_keys(store, "joined", "a", attempt)

        # The operator replaces the attempt (new state); its session ends meanwhile.
        state = settings.pipeline_dir("a", JOINER)
        state.rename(tmp_path / "zombie-state")
        _wait_for(lambda: f"{JOINER}-{attempt}" not in registry.members(), "session end", 30)
        ops_photon.run("a")  # the new attempt joins the rest; the zombie's ids look joined
        window = RecoverParams.parse({"lookback_s": 3600, "settle_s": 0}).window()
        report = recover(settings, store, registry, window, dry_run=False, run="zombie")
        assert report.fenced == [attempt]
        assert report.dead == report.reinjected == len(held)
        assert ops_photon.read_recovery_logs("a") == len(held)

        zombie.send_signal(signal.SIGCONT)  # it goes on to write what it registered
        assert zombie.wait(timeout=60) != 0
    finally:
        if zombie.poll() is None:
            zombie.send_signal(signal.SIGCONT)
            zombie.kill()
            zombie.wait()
    assert "AttemptFencedError" in stderr.read_text()
    assert not attempt_keys(store, "joined", "a", attempt)
    joined = Counter(r["click_id"] for r in rows_under(store, "joined/"))
    assert ops_photon.manifest is not None
    assert set(joined) == set(ops_photon.manifest.expected_joins)
    assert set(joined.values()) == {1}


def test_recovery_without_the_joiners_state_stops_before_touching_anything(
    ops_photon: OpsPhoton,
) -> None:
    _lose_batch_two(ops_photon)
    settings, store, registry = ops_photon.settings, ops_photon.store, ops_photon.registry
    ops_photon.joiners.pop("a").close()
    state = settings.pipeline_dir("a", JOINER)
    state.rename(state.with_name("joiner-on-another-host"))
    window = RecoverParams.parse({"lookback_s": 3600, "settle_s": 0}).window()
    registered = registry.registered(window.start_us, window.end_us)

    with pytest.raises(RecoveryStateError, match=r"DC a's joiner state is not at .*joiner"):
        recover(settings, store, registry, window, dry_run=False)

    assert registry.registered(window.start_us, window.end_us) == registered
    assert not list((settings.dc_logs("a") / "clicks").glob("recovery-*"))


def test_a_compaction_whose_lookups_differ_keeps_the_old_runs(
    ops_photon: OpsPhoton, monkeypatch: pytest.MonkeyPatch
) -> None:
    ops_photon.generate()
    ops_photon.run("a")
    store, settings = ops_photon.store, ops_photon.settings
    deltas = sorted(store.keys(delta_prefix("a")))
    real = compaction.lookups
    calls = []

    def lookups_that_lose_a_line(*args: object, **kwargs: object) -> dict[str, bytes | None]:
        found = real(*args, **kwargs)  # type: ignore[arg-type]
        calls.append(found)
        if len(calls) == 2:  # the check through the new run loses one query
            found[next(iter(found))] = None
        return found

    monkeypatch.setattr(compaction, "lookups", lookups_that_lose_a_line)
    with pytest.raises(compaction.CompactionCheckError, match="old runs were kept"):
        compaction.compact_dc(
            store,
            "a",
            settings.dc_logs("a") / "queries",
            boundary_us=0,
            window_us=int(settings.log_file_map.window_s * 1_000_000),
            max_bytes=settings.log_file_map.max_bytes,
            sample=20,
        )
    assert sorted(store.keys(delta_prefix("a"))) == deltas
    assert list(store.keys(sorted_prefix("a"))) == []


def test_compaction_drops_expired_entries_and_entries_of_deleted_files(
    ops_photon: OpsPhoton,
) -> None:
    ops_photon.generate()
    ops_photon.run("a")
    store, settings = ops_photon.store, ops_photon.settings
    query_dir = settings.dc_logs("a") / "queries"
    before = compaction.read_runs(store, "a")
    gone = sorted({e.file for e in before.entries})[0]
    (query_dir / gone).unlink()
    cutoff = sorted(e.ts_us for e in before.entries)[len(before.entries) // 4]

    report = compaction.compact_dc(
        store,
        "a",
        query_dir,
        boundary_us=cutoff,
        window_us=int(settings.log_file_map.window_s * 1_000_000),
        max_bytes=settings.log_file_map.max_bytes,
        sample=50,
    )

    after = compaction.read_runs(store, "a")
    assert after.delta_keys == [] and len(after.sorted_keys) == 1
    assert all(e.ts_us >= cutoff and e.file != gone for e in after.entries)
    assert report.dropped_expired > 0 and report.dropped_missing_file > 0
    assert report.entries_after == len(after.entries) == len(set(after.entries))
    assert report.mismatches == []


def _compact(
    ops_photon: OpsPhoton, query_dir: Path, **kwargs: object
) -> compaction.CompactionReport:
    settings = ops_photon.settings
    return compaction.compact_dc(
        ops_photon.store,
        "a",
        query_dir,
        boundary_us=0,
        window_us=int(settings.log_file_map.window_s * 1_000_000),
        max_bytes=settings.log_file_map.max_bytes,
        sample=20,
        **kwargs,  # type: ignore[arg-type]
    )


def test_a_merge_that_drops_an_entry_the_sample_never_sees_keeps_the_old_runs(
    ops_photon: OpsPhoton,
) -> None:
    ops_photon.generate()
    ops_photon.run("a")
    store = ops_photon.store
    deltas = sorted(store.keys(delta_prefix("a")))

    def merge_losing_one(
        entries: list[MapEntry], boundary_us: int, exists: Callable[[str], bool]
    ) -> tuple[list[MapEntry], compaction.CompactionReport]:
        merged, report = compaction.merge(entries, boundary_us, exists)
        sampled = set(compaction.sample_entries(merged, 20))
        lost = next(e for e in merged if e not in sampled)  # one a check of samples misses
        return [e for e in merged if e != lost], report

    with pytest.raises(compaction.CompactionCheckError, match=r"lacks 1 of the input runs"):
        _compact(ops_photon, ops_photon.settings.dc_logs("a") / "queries",
                 merge_entries=merge_losing_one)  # fmt: skip
    assert sorted(store.keys(delta_prefix("a"))) == deltas
    assert list(store.keys(sorted_prefix("a"))) == []


@pytest.mark.parametrize("where", ["missing", "empty"])
def test_compaction_where_the_logs_are_not_mounted_changes_nothing(
    ops_photon: OpsPhoton, tmp_path: Path, where: str
) -> None:
    ops_photon.generate()
    ops_photon.run("a")
    store = ops_photon.store
    deltas = sorted(store.keys(delta_prefix("a")))
    elsewhere = tmp_path / "not-mounted"
    if where == "empty":
        elsewhere.mkdir()

    with pytest.raises(compaction.LogsNotVisibleError, match="nothing changed"):
        _compact(ops_photon, elsewhere)
    assert sorted(store.keys(delta_prefix("a"))) == deltas
    assert list(store.keys(sorted_prefix("a"))) == []


def test_an_ended_batch_of_the_live_attempt_is_fenced_before_its_ids_are_taken_over(
    ops_photon: OpsPhoton,
) -> None:
    """Batch 2 of DC a's running attempt ended without writing its ids; a task of it may
    still run on a lost executor. Recovery fences that batch (not the attempt: the
    joiner runs on) before re-injecting: such a task fails its fence check instead of
    writing the clicks a second time, and the attempt's other batches write as ever."""
    _lose_batch_two(ops_photon)
    settings, store, registry = ops_photon.settings, ops_photon.store, ops_photon.registry
    attempt = current_attempt(settings, "a")
    assert attempt is not None
    window = RecoverParams.parse({"lookback_s": 3600, "settle_s": 0}).window()

    report = recover(settings, store, registry, window, dry_run=False, run="live")

    assert report.dead > 0 and report.fenced == []
    assert report.fenced_batches == [f"{attempt}/000000000002"]
    dispatcher = ops_photon.joiner("a").joiner
    assert dispatcher is not None
    zombie = dispatcher.registry  # a client holding the live attempt
    with pytest.raises(BatchFencedError, match="000000000002"):
        zombie.check_fence("000000000002")
    zombie.check_fence("000000000003")  # the attempt's other batches go on
    zombie.check_fence()
    assert ops_photon.read_recovery_logs("a") == report.reinjected
    joined = Counter(r["click_id"] for r in rows_under(store, "joined/"))
    assert ops_photon.manifest is not None
    assert set(joined) == set(ops_photon.manifest.expected_joins)
    assert set(joined.values()) == {1}
