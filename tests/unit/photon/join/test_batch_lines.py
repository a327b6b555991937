"""Which group takes a line, read from its bytes, and what each group reads of a batch."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from photon.events.records import QuarantineReason, decode_click
from photon.join.batch_lines import (
    GroupLines,
    GroupReads,
    click_id_of,
    group_of_id,
    line_group,
    own_lines,
    read_group,
)
from photon.logs.ranges import FileRange, file_ranges
from registry.sharding import ShardingConfig, stable_hash, stable_hash_of_ascii

pytestmark = pytest.mark.unit

ids = st.builds(
    "{}.{}.{}.{}:{}:{}".format,
    *(st.integers(0, 255) for _ in range(4)),
    st.integers(1, 4_000_000),
    st.integers(1_000_000_000_000_000, 2_000_000_000_000_000),
)
#: Ways a line can name a click id besides the plain key: a nested key, the key spelt
#: with a \\u escape, twice, with blanks around the colon, a value that is no string.
spellings = st.sampled_from(
    [
        '"click_id":"{id}"',
        '"click_id" : "{id}"',
        '"click\\u005fid":"{id}"',
        '"click_id":"{other}","click_id":"{id}"',
        '"click_id":"{id}","click_id":"{other}"',
        '"nested":{{"click_id":"{other}"}},"click_id":"{id}"',
        '"click_id":"{id}","nested":{{"click_id":"{other}"}}',
        '"click_id":"{id}","note":"\\"click_id\\":\\"{other}\\""',
        '"click_id":"{id}","note":"\\u0022"',
        '"click_id":"0{id}"',
        '"click_id":{pid}',
        '"click_id":null',
        '"nested":{{"click_id":"{id}"}}',
    ]
)


def click_line(spelling: str, click_id: str, other: str) -> bytes:
    body = spelling.format(id=click_id, other=other, pid=click_id.split(":")[1])
    return ('{"ad_id":"ad1",' + body + ',"query_id":"10.1.0.1:2:1767225600000000"}').encode()


@given(spellings, ids, ids)
def test_the_id_read_from_the_bytes_is_the_one_decoding_gives(
    spelling: str, click_id: str, other: str
) -> None:
    raw = click_line(spelling, click_id, other)
    try:
        decoded = str(decode_click(raw).click_id)
    except ValueError:
        return  # not a click: whichever group takes it quarantines it
    assert click_id_of(raw) == decoded


@given(st.lists(st.tuples(spellings, ids, ids), max_size=30), st.integers(1, 8))
def test_every_group_agrees_on_each_lines_group_and_one_clicks_lines_go_to_one(
    lines: list[tuple[str, str, str]], groups: int
) -> None:
    by_click: dict[str, set[int]] = {}
    for spelling, click_id, other in lines:
        raw = click_line(spelling, click_id, other)
        group = line_group(raw, groups)
        assert 0 <= group < groups
        try:
            by_click.setdefault(str(decode_click(raw).click_id), set()).add(group)
        except ValueError:
            continue
    assert all(len(taken) == 1 for taken in by_click.values())


@given(st.lists(st.tuples(spellings, ids, ids), max_size=30), st.integers(1, 8))
def test_a_groups_own_lines_are_those_line_group_gives_it_in_their_order(
    lines: list[tuple[str, str, str]], groups: int
) -> None:
    raws = [click_line(spelling, click_id, other) for spelling, click_id, other in lines]
    raws += [b"", b"not json", b'{"click_id":"10.0.0.1:1:1767225600000000"', b"\\"]
    offsets = list(range(0, 10 * len(raws), 10))
    taken: list[tuple[str, int, bytes]] = []
    for group in range(groups):
        own = own_lines("f.log", offsets, raws, group, groups)
        assert own == [
            ("f.log", offset, raw)
            for offset, raw in zip(offsets, raws, strict=True)
            if line_group(raw, groups) == group
        ]
        taken += own
    assert sorted(taken) == sorted(zip(["f.log"] * len(raws), offsets, raws, strict=True))


@given(ids)
def test_the_hash_of_an_ids_bytes_is_the_hash_of_its_text(click_id: str) -> None:
    assert stable_hash_of_ascii(click_id.encode("ascii")) == stable_hash(click_id)


@given(ids, st.sampled_from([1, 2, 4, 8]), st.sampled_from([1, 2, 4, 8, 16, 32]))
def test_a_group_is_its_ids_registry_shards_group_when_the_count_divides_the_shards(
    click_id: str, groups: int, shards: int
) -> None:
    if shards % groups:
        return
    sharding = ShardingConfig.initial(shards)
    from photon.events.ids import EventId

    assert group_of_id(click_id, groups) == sharding.shard_of(EventId.parse(click_id)) % groups


def write_log(directory: Path, name: str, lines: list[bytes]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / name).write_bytes(b"".join(line + b"\n" for line in lines))


def whole_batch(directory: Path) -> list[FileRange]:
    end = {
        "files": {p.name: p.stat().st_size for p in sorted(directory.iterdir())},
        "heads": {},
    }
    return file_ranges(str(directory), {"files": {}, "heads": {}}, end)


def clicks(n: int, *, seed: int = 0) -> list[bytes]:
    return [
        json.dumps(
            {
                "click_id": f"10.2.0.1:{seed + 1}:{1_767_225_600_000_000 + i}",
                "query_id": f"10.1.0.1:1:{1_767_225_500_000_000 + i}",
            }
        ).encode()
        for i in range(n)
    ]


def test_the_groups_of_a_batch_take_each_line_once_and_drop_duplicates_within_one(
    tmp_path: Path,
) -> None:
    good = clicks(200)
    bad = [b"{not json", b'{"click_id": "1.2.3.4:5:6"}', b"\xff\xfe"]
    lines = [*good, *bad, *good[:20]]  # shipped twice: 20 duplicates
    write_log(tmp_path, "c.000000.log", lines)
    ranges = tuple(whole_batch(tmp_path))
    shares = [read_group(GroupReads(ranges, n, 3)) for n in range(3)]
    taken = Counter(str(event.click_id) for share in shares for event, _ in share.clicks)
    assert set(taken) == {json.loads(line)["click_id"] for line in good}
    assert set(taken.values()) == {1}
    assert sum(share.lines for share in shares) == len(lines)
    assert sum(share.duplicates for share in shares) == 20
    assert sum(len(share.quarantined) for share in shares) == len(bad)
    assert all(share.clicks for share in shares)  # 200 clicks split three ways
    first = {str(event.click_id): line.offset for share in shares for event, line in share.clicks}
    assert all(first[json.loads(line)["click_id"]] < 200 * 90 for line in good[:20])


def test_every_group_reports_what_its_read_lost(tmp_path: Path) -> None:
    write_log(tmp_path, "c.000000.log", clicks(10))
    ranges = tuple(whole_batch(tmp_path))
    (tmp_path / "c.000000.log").unlink()  # deleted after the plan, before the tasks read
    shares: list[GroupLines] = [read_group(GroupReads(ranges, n, 2)) for n in range(2)]
    for share in shares:
        assert share.clicks == [] and share.lines == 0
        assert [r.reason for r in share.reports] == [QuarantineReason.FILE_DELETED]


def test_a_group_outside_the_count_is_refused() -> None:
    with pytest.raises(ValueError, match="outside"):
        GroupReads((), 2, 2)
