"""The output's layout on a real S3 endpoint: one object per batch and event hour,
replays that add only what a batch's objects lack, and window reads that touch
only the window's objects."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from photon.events.records import QuarantineReason, QuarantineRecord
from photon.join.output import (
    JOINED_BASE,
    OutputWriter,
    attempt_keys,
    check_rows,
    decode,
    event_hour,
)
from photon.ops.params import Window
from photon.ops.verify import read_outputs
from photon.storage import ObjectStore

pytestmark = pytest.mark.integration

H = 3600 * 1_000_000
T0 = int(datetime(2026, 11, 25, 10, tzinfo=UTC).timestamp()) * 1_000_000
HOUR_10, HOUR_11 = "2026-11-25T10", "2026-11-25T11"


def joined_row(ts_us: int, dc: str = "a") -> dict[str, object]:
    return {
        "click_id": f"10.0.0.1:8080:{ts_us}",
        "query_id": f"10.0.0.2:8080:{ts_us - 1_000_000}",
        "dc": dc,
        "joined_at_us": ts_us + 1_000_000,
        "token": f"{dc}/run1/000000000003",
    }


def test_a_batch_of_two_hours_writes_an_object_per_hour_and_a_replay_only_what_they_lack(
    store: ObjectStore,
) -> None:
    writer = OutputWriter(store, "a", "run1")
    rows = [joined_row(T0 + 5), joined_row(T0 + H - 1), joined_row(T0 + H + 7)]
    keys = writer.joined("000000000003", rows, JOINED_BASE)
    assert keys == [
        f"joined/dc=a/hour={HOUR_10}/run1/000000000003.parquet",
        f"joined/dc=a/hour={HOUR_11}/run1/000000000003.parquet",
    ]
    ids = [str(r["click_id"]) for r in rows]
    assert writer.written_ids("000000000003", [HOUR_10, HOUR_11]) == set(ids)
    assert writer.written_ids("000000000003", [HOUR_11]) == {ids[2]}
    assert sorted(attempt_keys(store, "joined", "a", "run1")) == keys

    # The replay decided one more click of hour 11: only that goes, to that hour's next part.
    late = joined_row(T0 + H + 9)
    again = writer.joined("000000000003", [*rows, late], JOINED_BASE)
    assert again == [keys[0], f"joined/dc=a/hour={HOUR_11}/run1/000000000003.r1.parquet"]
    assert writer.written_ids("000000000003", [HOUR_11]) == {ids[2], str(late["click_id"])}
    assert len(attempt_keys(store, "joined", "a", "run1")) == 3


def test_rows_written_from_their_checked_table_are_the_rows_themselves_hour_by_hour(
    store: ObjectStore,
) -> None:
    # Out of hour order, as a group's registered clicks come: each hour's object holds
    # its own rows, as when the table is built from the rows again.
    rows = [joined_row(T0 + H + 7), joined_row(T0 + 5), joined_row(T0 + H + 9)]
    bad, schema, table = check_rows(rows, JOINED_BASE)
    assert not bad and table is not None
    from_table = OutputWriter(store, "a", "run1").joined("000000000003", rows, schema, table)
    from_rows = OutputWriter(store, "a", "run2").joined("000000000003", rows, schema)
    assert len(from_table) == len(from_rows) == 2
    for with_table, without in zip(from_table, from_rows, strict=True):
        assert decode(store.get(with_table) or b"") == decode(store.get(without) or b"")
    assert [r["click_id"] for r in decode(store.get(from_table[1]) or b"")] == [
        rows[0]["click_id"],
        rows[2]["click_id"],
    ]
    # A replay's next part holds only what the first lacks, whatever table it is given.
    late = joined_row(T0 + H + 11)
    again = [*rows, late]
    _, _, whole = check_rows(again, JOINED_BASE)
    keys = OutputWriter(store, "a", "run1").joined("000000000003", again, schema, whole)
    assert keys[1].endswith(".r1.parquet")
    assert decode(store.get(keys[1]) or b"") == [late]


def test_a_table_that_is_not_the_rows_is_refused(store: ObjectStore) -> None:
    rows = [joined_row(T0 + 5), joined_row(T0 + 6)]
    _, schema, table = check_rows(rows[:1], JOINED_BASE)
    with pytest.raises(ValueError, match="a table of 1 rows for 2 rows"):
        OutputWriter(store, "a", "run1").joined("000000000003", rows, schema, table)
    assert attempt_keys(store, "joined", "a", "run1") == []


def test_a_groups_quarantine_part_in_a_replay_adds_only_what_no_object_of_the_batch_has(
    store: ObjectStore,
) -> None:
    writer = OutputWriter(store, "a", "run1")
    bad = [
        QuarantineRecord(
            f"clicks/10.2.0.1.{n:06d}.log", 100 * n, QuarantineReason.INVALID_JSON, "x"
        )
        for n in range(3)
    ]
    # A first try written under the batch's own name (every group's records at once, as
    # a driver that wrote them did), then the replay's group 1 with one record more.
    first = writer.quarantine("000000000007", "clicks", bad[:2])
    prefix = "quarantine/dc=a/stream=clicks/run1/000000000007"
    assert first == f"{prefix}.parquet"
    again = writer.quarantine("000000000007.g001", "clicks", bad, replay_of="000000000007")
    assert again == f"{prefix}.g001.parquet"
    objects = [decode(store.get(key) or b"") for key in sorted(store.keys(prefix))]
    written = [(r["file"], r["offset"]) for rows in objects for r in rows]
    assert sorted(written) == sorted((r.file, r.offset) for r in bad)  # each once
    # Another replay of it: nothing new, nothing written.
    assert writer.quarantine("000000000007.g001", "clicks", bad, replay_of="000000000007") is None
    # Not a replay: the group's part is its own (a retried task's try dedupes within it).
    assert writer.quarantine("000000000008.g000", "clicks", bad[:1]) is not None
    assert writer.quarantine("000000000008.g000", "clicks", bad[:1]) == (
        "quarantine/dc=a/stream=clicks/run1/000000000008.g000.parquet"
    )
    assert len(list(store.keys("quarantine/dc=a/stream=clicks/run1/000000000008"))) == 1


def test_a_window_is_read_from_its_own_hours_objects_only(store: ObjectStore) -> None:
    a, b = OutputWriter(store, "a", "run1"), OutputWriter(store, "b", "run7")
    inside = [joined_row(T0 + n * 1_000_000) for n in range(5)]
    a.joined("000000000001", inside, JOINED_BASE)
    b.joined("000000000004", [joined_row(T0 + 2_000_000, dc="b")], JOINED_BASE)  # a duplicate
    a.unjoinable("000000000001", [{"click_id": "10.0.0.1:8080:" + str(T0 + 9), "dc": "a"}])
    a.unjoinable(
        "000000000001", [{"click_id": "10.0.0.1:8080:" + str(T0 + 11), "dc": "a"}], too_old=True
    )
    # Objects of other hours that no reader could decode: reading one would fail the test.
    for kind in ("joined", "unjoinable", "too_old"):
        for hour in ("2026-11-25T09", HOUR_11, "2026-11-24T10"):
            assert store.put(f"{kind}/dc=a/hour={hour}/run1/000000000009.parquet", b"not parquet")

    window = Window(start=datetime.fromtimestamp(T0 / 1e6, UTC),
                    end=datetime.fromtimestamp((T0 + H) / 1e6, UTC))  # fmt: skip
    outputs = read_outputs(store, window)

    assert sorted(str(r["click_id"]) for r in outputs.joined) == sorted(
        [str(r["click_id"]) for r in inside] + [str(joined_row(T0 + 2_000_000)["click_id"])]
    )
    duplicate = str(joined_row(T0 + 2_000_000)["click_id"])
    assert sorted(outputs.joined_in[duplicate]) == [
        f"joined/dc=a/hour={HOUR_10}/run1/000000000001.parquet",
        f"joined/dc=b/hour={HOUR_10}/run7/000000000004.parquet",
    ]
    assert outputs.unjoinable == {"10.0.0.1:8080:" + str(T0 + 9)}
    assert outputs.too_old == {"10.0.0.1:8080:" + str(T0 + 11)}
    assert event_hour(duplicate) == HOUR_10
