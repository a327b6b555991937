"""The log-file map finds every query line from its id: a property over random logs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from photon.events.ids import EventId
from photon.join.logmap import (
    LogFileMap,
    LogFileMapBuilder,
    MapEntry,
    QueryLine,
    decode_run,
    encode_run,
)
from photon.join.logstore import LogsEventStore

pytestmark = pytest.mark.unit

BASE_US = 1_767_225_600_000_000
W_US = 2_000_000
M_BYTES = 600

# Per line: which process (0..2), time step (mostly forward, sometimes back), padding.
line_specs = st.lists(
    st.tuples(
        st.integers(0, 2),
        st.one_of(st.integers(0, 900_000), st.integers(-5_000_000, 0)),
        st.integers(0, 120),
    ),
    min_size=1,
    max_size=120,
)


def write_logs(directory: Path, specs: list[tuple[int, int, int]], files: int) -> list[QueryLine]:
    """Write query lines over ``files`` files; return their positions in file order."""
    positions: list[QueryLine] = []
    now = BASE_US
    seen: set[str] = set()
    per_file = max(1, len(specs) // files)
    for index, (process, step, padding) in enumerate(specs):
        now = max(BASE_US, now + step)
        ts = now
        while f"10.0.0.{process + 1}:{100 + process}:{ts}" in seen:
            ts += 1
        query_id = EventId(f"10.0.0.{process + 1}", 100 + process, ts)
        seen.add(str(query_id))
        name = f"q.{min(index // per_file, files - 1):03d}.log"
        path = directory / name
        offset = path.stat().st_size if path.exists() else 0
        line = json.dumps({"query_id": str(query_id), "pad": "x" * padding}).encode() + b"\n"
        with path.open("ab") as f:
            f.write(line)
        positions.append(QueryLine(query_id, name, offset))
    return positions


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(specs=line_specs, files=st.integers(1, 3), batch=st.integers(1, 40))
def test_every_query_is_found_from_its_id(
    tmp_path_factory: pytest.TempPathFactory,
    specs: list[tuple[int, int, int]],
    files: int,
    batch: int,
) -> None:
    directory = tmp_path_factory.mktemp("queries")
    positions = write_logs(directory, specs, files)
    builder = LogFileMapBuilder(W_US, M_BYTES)
    logmap = LogFileMap(None, "a")
    for start in range(0, len(positions), batch):  # micro-batches, each its own run
        entries, state = builder.plan(positions[start : start + batch])
        logmap.add(decode_run(encode_run(entries)))
        builder.commit(state)
    store = LogsEventStore(directory, logmap, window_us=W_US, max_bytes=M_BYTES)
    found = store.find_many(p.query_id for p in positions)
    assert set(found) == {str(p.query_id) for p in positions}
    for p in positions:
        assert json.loads(found[str(p.query_id)])["query_id"] == str(p.query_id)


def test_a_builder_restarted_mid_file_emits_again_at_the_first_line(tmp_path: Path) -> None:
    positions = write_logs(tmp_path, [(0, 100_000, 10)] * 20, 1)
    builder = LogFileMapBuilder(W_US, M_BYTES)
    builder.commit(builder.plan(positions[:10])[1])
    restarted = LogFileMapBuilder(W_US, M_BYTES)
    entries, _ = restarted.plan(positions[10:])
    assert entries[0].offset == positions[10].offset


def test_a_state_not_committed_is_not_used(tmp_path: Path) -> None:
    positions = write_logs(tmp_path, [(0, 100_000, 10)] * 5, 1)
    builder = LogFileMapBuilder(W_US, M_BYTES)
    first, _ = builder.plan(positions)  # the run was never stored: no commit
    again, _ = builder.plan(positions)
    assert again == first


def test_unknown_ids_and_entries_outside_the_logs_find_nothing(tmp_path: Path) -> None:
    positions = write_logs(tmp_path, [(0, 100_000, 10)] * 3, 1)
    logmap = LogFileMap(None, "a")
    entries, _ = LogFileMapBuilder(W_US, M_BYTES).plan(positions)
    logmap.add(entries)
    logmap.add([entries[0].__class__(entries[0].process, entries[0].ts_us, "../etc/passwd", 0)])
    store = LogsEventStore(tmp_path, logmap, window_us=W_US, max_bytes=M_BYTES)
    stranger = EventId("10.9.9.9", 1, BASE_US)
    assert store.find_many([stranger]) == {}
    assert set(store.find_many([positions[0].query_id])) == {str(positions[0].query_id)}


@pytest.mark.parametrize("how", ["rename", "copytruncate"])
def test_a_query_file_logrotate_moved_is_found_under_its_rotated_name(
    tmp_path: Path, how: str
) -> None:
    positions = write_logs(tmp_path, [(0, 100_000, 10)] * 12, 1)
    logmap = LogFileMap(None, "a")
    logmap.add(LogFileMapBuilder(W_US, M_BYTES).plan(positions)[0])
    path = tmp_path / "q.000.log"
    (tmp_path / "q.000.log.1").write_bytes(b"not these\n")  # rotated before: shifted on
    (tmp_path / "q.000.log.1").rename(tmp_path / "q.000.log.2")
    if how == "rename":
        path.rename(tmp_path / "q.000.log.1")
        path.write_bytes(b'{"query_id": "10.0.0.1:100:1"}\n' * 40)  # its writer reopened it
    else:
        (tmp_path / "q.000.log.1").write_bytes(path.read_bytes())
        path.write_bytes(b"")
    store = LogsEventStore(tmp_path, logmap, window_us=W_US, max_bytes=M_BYTES)
    found = store.find_many(p.query_id for p in positions)
    assert set(found) == {str(p.query_id) for p in positions}


def test_w_and_m_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        LogFileMapBuilder(0, 10)


def test_a_lookup_reads_at_most_m_bytes_plus_the_line_that_straddles_m(tmp_path: Path) -> None:
    """One entry at offset 0; the query lies just inside or just past M bytes from it."""
    process_ip, pid = "10.0.0.1", 100
    filler = [
        json.dumps({"query_id": f"{process_ip}:{pid}:{BASE_US + n}", "pad": "x" * 40}).encode()
        for n in range(20)
    ]
    target_id = EventId(process_ip, pid, BASE_US + 100)
    target = json.dumps({"query_id": str(target_id)}).encode()
    path = tmp_path / "q.000000.log"
    path.write_bytes(b"\n".join([*filler, target]) + b"\n")
    offset_of_target = sum(len(line) + 1 for line in filler)
    logmap = LogFileMap(None, "a")
    logmap.add([MapEntry(f"{process_ip}:{pid}", BASE_US, path.name, 0)])

    def find(max_bytes: int) -> dict[str, bytes]:
        store = LogsEventStore(tmp_path, logmap, window_us=W_US, max_bytes=max_bytes)
        return store.find_many([target_id])

    assert find(offset_of_target + 1) == {str(target_id): target}  # straddles M: read whole
    assert find(offset_of_target) == {}  # starts exactly at M: beyond the bound, not read


def test_a_search_passes_lines_the_query_reader_would_not_take(tmp_path: Path) -> None:
    """A line naming the query's id that the reader quarantined — nested deeper than any
    decoder takes (it raised RecursionError in the search, failing the batch on every
    replay), or not JSON the reader takes — is no query: the search goes on to the
    query's own line."""
    first, wanted = EventId("10.0.0.1", 100, BASE_US), EventId("10.0.0.1", 100, BASE_US + 1_000)
    key = json.dumps(str(wanted)).encode()
    records = [
        json.dumps({"query_id": str(first)}).encode(),
        b'{"query_id": %s, "x": %s}' % (key, b"[" * 50_000 + b"]" * 50_000),
        b'{"query_id": %s, "x": NaN}' % key,
        json.dumps({"query_id": str(wanted), "query": "the one"}).encode(),
    ]
    path = tmp_path / "q.log"
    path.write_bytes(b"".join(r + b"\n" for r in records))
    offsets = [sum(len(r) + 1 for r in records[:n]) for n in range(len(records))]
    positions = [QueryLine(first, "q.log", offsets[0]), QueryLine(wanted, "q.log", offsets[3])]
    entries, _ = LogFileMapBuilder(W_US, 1 << 20).plan(positions)
    logmap = LogFileMap(None, "a")
    logmap.add(entries)
    store = LogsEventStore(tmp_path, logmap, window_us=W_US, max_bytes=1 << 20)
    assert store.find_many([wanted]) == {str(wanted): records[3]}
