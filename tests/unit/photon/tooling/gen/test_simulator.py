from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pytest
from pydantic import ValidationError

from photon.events.ids import EventId
from photon.events.records import FILE_REASONS, JOIN_REASONS, QuarantineReason, Stream
from photon.logs.scan import scan_dc
from photon.tooling.gen.model import GenConfig
from photon.tooling.gen.simulator import LogsNotEmptyError, load_manifest, simulate, write

pytestmark = pytest.mark.unit

START_US = 1_767_225_600_000_000  # 2026-01-01T00:00:00Z


def config(**changes: object) -> GenConfig:
    base: dict[str, object] = {
        "start_us": START_US,
        "queries": 800,
        "query_rate": 100.0,
        "rollover_bytes": 8 * 1024,
    }
    return GenConfig.model_validate(base | changes)


def tree(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


def logs(root: Path) -> dict[str, bytes]:
    return {name: data for name, data in tree(root).items() if name.endswith(".log")}


def test_the_same_seed_writes_identical_files(tmp_path: Path) -> None:
    write(simulate(config(seed=7)), tmp_path / "one")
    write(simulate(config(seed=7)), tmp_path / "two")
    write(simulate(config(seed=8)), tmp_path / "three")
    one = tree(tmp_path / "one")
    assert len(one) > 10  # several servers, rolled-over files, the manifest
    assert one == tree(tmp_path / "two")
    assert one != tree(tmp_path / "three")


def test_the_manifest_counts_match_the_files(tmp_path: Path) -> None:
    manifest = write(
        simulate(config(seed=3, malformed_fraction=0.03, duplicate_click_fraction=0.05)), tmp_path
    )
    assert manifest == load_manifest(tmp_path)
    assert manifest.never_joinable and manifest.expected_joins
    kinds_seen: set[str] = set()
    for dc in manifest.config.dcs:
        scan, m = scan_dc(tmp_path, dc), manifest.dcs[dc]
        queries, clicks = scan.streams[Stream.QUERIES], scan.streams[Stream.CLICKS]
        assert queries.events == m.query_lines == manifest.queries == len(queries.distinct_ids)
        assert clicks.events == m.click_lines
        assert len(clicks.distinct_ids) == manifest.clicks
        assert clicks.duplicates == m.duplicate_click_lines > 0
        # every click in the logs is in the manifest, joinable exactly when its query is there
        assert scan.click_query_ids == manifest.expected_joins | manifest.never_joinable
        joinable = {c for c, q in scan.click_query_ids.items() if q in queries.distinct_ids}
        assert joinable == set(manifest.expected_joins)
        # every malformed line is quarantined where the manifest says, for the reason it says
        quarantined = {
            (stream.value, r.file, r.offset, r.reason.value)
            for stream, s in scan.streams.items()
            for r in s.quarantined
        }
        assert quarantined == {(x.stream, x.file, x.offset, x.kind) for x in m.malformed}
        kinds_seen |= {x.kind for x in m.malformed}
        for stream, files in m.files.items():
            for name, stats in files.items():
                path = tmp_path / dc / stream / name
                assert path.stat().st_size == stats.bytes
                assert path.read_bytes().count(b"\n") == stats.lines
    assert kinds_seen == {r.value for r in QuarantineReason} - FILE_REASONS - JOIN_REASONS


def test_no_two_events_of_one_server_process_share_a_timestamp() -> None:
    sim = simulate(config(seed=5, queries=3_000, query_rate=50_000.0))  # many per microsecond slot
    events = {EventId.parse(c) for c in sim.expected_joins | sim.never_joinable}
    events |= {EventId.parse(q) for q in (sim.expected_joins | sim.never_joinable).values()}
    stamps: dict[str, list[int]] = defaultdict(list)
    for event_id in events:
        stamps[event_id.process].append(event_id.ts_us)
    assert all(len(set(ts)) == len(ts) for ts in stamps.values())


def test_some_queries_ship_after_their_clicks() -> None:
    sim = simulate(config(seed=11, delayed_query_fraction=0.3))
    first_seen: dict[tuple[str, str], int] = {}
    for i, d in enumerate(sim.deliveries):
        if d.dc == "a" and d.malformed is None:
            record = json.loads(d.line)
            key = record.get("click_id", record["query_id"])
            first_seen.setdefault((d.stream.value, key), i)
    late = sum(
        1
        for click_id, query_id in sim.expected_joins.items()
        if first_seen[("queries", query_id)] > first_seen[("clicks", click_id)]
    )
    assert late > 10


def test_the_outage_dc_receives_nothing_during_its_outage_then_the_backlog() -> None:
    cfg = config(seed=2, outage_start_s=2.0, outage_duration_s=3.0)
    sim = simulate(cfg)
    start, end = START_US + 2_000_000, START_US + 5_000_000
    b = [d.ship_us for d in sim.deliveries if d.dc == "b" and d.malformed is None]
    a = [d.ship_us for d in sim.deliveries if d.dc == "a" and d.malformed is None]
    assert not [t for t in b if start <= t < end]
    assert len([t for t in a if start <= t < end]) > 100
    assert len([t for t in b if end <= t < end + 1_000_000]) > 100  # the backlog at once
    assert len(a) == len(b) or abs(len(a) - len(b)) < len(a) * 0.1  # same events, own duplicates


def test_live_mode_paces_by_the_clock_and_writes_the_same_files(tmp_path: Path) -> None:
    now = [START_US / 1e6 + 5.0]  # started a little late: shifted to now
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        now[0] += seconds

    cfg = config(seed=9, queries=300, query_rate=100.0)
    write(simulate(cfg), tmp_path / "live", live=True, sleep=sleep, clock=lambda: now[0])
    write(simulate(cfg), tmp_path / "burst")
    live, burst = load_manifest(tmp_path / "live"), load_manifest(tmp_path / "burst")
    assert live.live_start_shift_s == pytest.approx(5.0)
    assert live.model_copy(update={"live_start_shift_s": 0.0}) == burst
    assert logs(tmp_path / "live") == logs(tmp_path / "burst")
    span_s = cfg.queries / cfg.query_rate
    assert span_s * 0.8 < sum(slept) < span_s + 10 * cfg.click_delay_median_s + 5


def test_live_mode_writes_nothing_while_its_clock_stands_still(tmp_path: Path) -> None:
    wall = [START_US / 1e6]
    hold_from, hold_until = wall[0] + 1.0, wall[0] + 11.0  # the run holds the stream 10 s
    written_at: list[float] = []

    def clock() -> float:  # the wall clock less the hold (runs.StreamClock's arithmetic)
        return wall[0] - max(0.0, min(wall[0], hold_until) - hold_from)

    def sleep(seconds: float) -> None:
        wall[0] += seconds

    def progress(done: int, _total: int) -> None:
        written_at.append(wall[0])

    cfg = config(seed=9, queries=3000, query_rate=1000.0)
    write(simulate(cfg), tmp_path / "live", live=True, sleep=sleep, clock=clock, progress=progress)
    write(simulate(cfg), tmp_path / "burst")
    assert tree(tmp_path / "live") == tree(tmp_path / "burst")
    assert not [t for t in written_at if hold_from + 0.1 < t < hold_until]
    assert [t for t in written_at if t < hold_from] and [t for t in written_at if t > hold_until]


def test_live_mode_waits_for_a_start_in_the_future(tmp_path: Path) -> None:
    now = [START_US / 1e6 - 30.0]  # the first query is due in 30 s
    written_at: list[float] = []

    def sleep(seconds: float) -> None:
        now[0] += seconds

    def progress(done: int, _total: int) -> None:
        written_at.append(now[0])

    cfg = config(seed=9, queries=300, query_rate=100.0)
    write(simulate(cfg), tmp_path, live=True, sleep=sleep, clock=lambda: now[0], progress=progress)
    assert written_at[0] >= START_US / 1e6  # nothing before its time
    assert written_at[0] < START_US / 1e6 + 10


def test_existing_logs_are_never_appended_to(tmp_path: Path) -> None:
    write(simulate(config()), tmp_path)
    with pytest.raises(LogsNotEmptyError, match="--clean"):
        write(simulate(config()), tmp_path)


@pytest.mark.parametrize(
    "bad",
    [
        {"ctr": 0.0},
        {"ctr": 1.5},
        {"queries": 0},
        {"query_rate": -1.0},
        {"outage_dc": "z"},
        {"dcs": ["a", "a"]},
        {"dcs": []},
        {"malformed_fraction": 2.0},
        {"start_us": 0},
    ],
)
def test_bad_parameters_are_refused(bad: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        config(**bad)


def test_a_live_stream_started_late_records_by_how_much(tmp_path: Path) -> None:
    cfg = config(seed=9, queries=300, query_rate=100.0)
    late = [START_US / 1e6 + 4.0]  # the simulation was ready 4 s after the planned start

    def sleep(seconds: float) -> None:
        late[0] += seconds

    write(simulate(cfg), tmp_path / "late", live=True, sleep=sleep, clock=lambda: late[0])
    assert load_manifest(tmp_path / "late").live_start_shift_s == pytest.approx(4.0)

    early = [START_US / 1e6 - 2.0]  # ready before it: lines go out at their times

    def sleep_early(seconds: float) -> None:
        early[0] += seconds

    write(simulate(cfg), tmp_path / "early", live=True, sleep=sleep_early, clock=lambda: early[0])
    assert load_manifest(tmp_path / "early").live_start_shift_s == 0.0
    write(simulate(cfg), tmp_path / "burst")  # not live: written at once, no shift to speak of
    assert load_manifest(tmp_path / "burst").live_start_shift_s == 0.0


def test_no_click_is_stamped_after_the_runs_end_when_the_run_says_when_it_ends() -> None:
    """A click is logged once it happened: a generator that writes its late tail at once
    caps those delays at the run's end rather than write clicks ahead of their time."""
    start = 1_767_225_600_000_000
    free = simulate(GenConfig(start_us=start, queries=2_000, click_delay_tail_fraction=0.2))
    until = start + 120_000_000
    capped = simulate(
        GenConfig(
            start_us=start, queries=2_000, click_delay_tail_fraction=0.2, clicks_until_us=until
        )
    )
    late = [c for c in free.expected_joins if EventId.parse(c).ts_us > until]
    assert late  # the tail reaches hours past the run
    times = [EventId.parse(c).ts_us for c in (*capped.expected_joins, *capped.never_joinable)]
    assert max(times) <= until + 1_000  # a µs apart per process: ids are unique
    assert len(capped.expected_joins) == len(free.expected_joins)  # the same clicks, sooner
