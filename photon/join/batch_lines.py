"""A joiner batch's click lines, read and decoded by the shard groups that join them.

The driver hands each of a batch's groups the batch's file ranges
(:class:`GroupReads`), not its clicks: every group's task reads the ranges
itself (:func:`photon.logs.ranges.read_range`), keeps the lines of its own
group, and decodes only those (docs/join.md, "The join on executors"). So the
per-click work of reading, decoding, dropping duplicates and splitting by
shard runs on the executors, as many at once as there are groups, and the
driver's work per batch does not grow with the batch.

Which group a line belongs to (:func:`line_group`) must not depend on which
task asks: every task reads every line and each line must be taken by exactly
one group, or a click is lost (taken by none) or output twice (two groups
registering it with the batch's one token both win). So it is a function of
the line's bytes alone, and of nothing a task holds (not the registry's
epochs, which a reshard changes under a running batch): the group of the
click's id, ``stable_hash(id) % groups`` — the registry shard's group whenever
the group count divides the shard count. The id is read from the bytes
without decoding the line when that cannot differ from what decoding gives
(exactly one ``"click_id"`` in the line, no ``\\u`` escape that could spell
another, and a plain id string as its value); any other line is decoded in
every task to find its id, and a line without a click id belongs to group 0,
which quarantines it.

How it fails: a file deleted or shrunk under a task's read gives that task a
report of the lost bytes (never an error); every group reports what it saw,
and the driver writes each report once. Other unreadable files raise
``OSError`` and fail the task, hence the batch, which is replayed.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from operator import itemgetter

from photon.events.records import (
    ClickEvent,
    QuarantineRecord,
    Stream,
    decode_click,
    decode_line,
)
from photon.heap import collector_paused
from photon.join.retry import PendingClick, pending_click
from photon.logs.ranges import FileRange, read_range
from photon.logs.reader import LogLine
from registry.sharding import stable_hash, stable_hash_of_ascii

_CLICK_ID_KEY = b'"click_id"'
#: The click id of a line, read without decoding it (see :func:`click_id_of`).
_PLAIN_CLICK_ID = re.compile(rb'"click_id"[ \t\r\n]*:[ \t\r\n]*"([0-9.:]{1,64})"')


def group_of_id(click_id: str, groups: int) -> int:
    """The shard group of a click id among ``groups``: that of its registry shard
    (``stable_hash(id) % shards``) whenever ``groups`` divides the shard count."""
    return 0 if groups <= 1 else stable_hash(click_id) % groups


def click_id_of(raw: bytes) -> str | None:
    """The click id a line decodes to, or None when it decodes to no click.

    Read from the bytes alone when that gives what decoding gives: the line names
    ``"click_id"`` once (so that is the object's key, not a second one or a
    nested one), has no ``\\u`` escape (which could spell the key another way),
    and its value is a plain id string. Else the line is decoded.
    """
    if raw.count(_CLICK_ID_KEY) == 1 and b"\\u" not in raw:
        plain = _PLAIN_CLICK_ID.search(raw)
        if plain is not None:
            return plain.group(1).decode("ascii")
    try:
        return str(decode_click(raw).click_id)
    except ValueError:  # not a click: quarantined by the group that takes it
        return None


def line_group(raw: bytes, groups: int) -> int:
    """The group that takes a line: its click id's, or 0 for a line without one."""
    if groups <= 1:
        return 0
    click_id = click_id_of(raw)
    return 0 if click_id is None else group_of_id(click_id, groups)


def own_lines(
    file: str, offsets: Sequence[int], raws: Sequence[bytes], group: int, groups: int
) -> list[tuple[str, int, bytes]]:
    """The lines of ``group`` among a range's, as (file, offset, raw): those whose
    :func:`line_group` it is.

    Every task of a batch classifies every line of it, so this is the one per-line
    cost that grows with the group count (docs/join.md, "The join on executors"):
    the common line's group is computed inline, from the id's bytes, without the
    calls, the text and the cache of :func:`line_group` (the same id, the same hash:
    :func:`registry.sharding.stable_hash_of_ascii`). A line without a backslash
    cannot hold a ``\\u`` escape; any other line takes :func:`line_group`'s way.
    """
    if groups <= 1:
        return [(file, offset, raw) for offset, raw in zip(offsets, raws, strict=True)]
    own: list[tuple[str, int, bytes]] = []
    search, key = _PLAIN_CLICK_ID.search, _CLICK_ID_KEY
    for offset, raw in zip(offsets, raws, strict=True):
        if raw.count(key) == 1 and not raw.count(b"\\") and (plain := search(raw)) is not None:
            taker = stable_hash_of_ascii(plain.group(1)) % groups
        else:
            taker = line_group(raw, groups)
        if taker == group:
            own.append((file, offset, raw))
    return own


@dataclass(frozen=True, slots=True)
class GroupReads:
    """What a group's task reads: the batch's file ranges, and which group it is."""

    ranges: tuple[FileRange, ...]
    group: int
    groups: int

    def __post_init__(self) -> None:
        if not 0 <= self.group < self.groups:
            raise ValueError(f"group {self.group} is outside 0..{self.groups - 1}")


@dataclass(slots=True)
class GroupLines:
    """A group's share of its batch: its clicks once each, in the lines' order, with
    where each was read; its bad lines; and the reports of what its reads lost."""

    clicks: list[tuple[ClickEvent, PendingClick]] = field(default_factory=list)
    quarantined: list[QuarantineRecord] = field(default_factory=list)
    reports: list[QuarantineRecord] = field(default_factory=list)
    lines: int = 0  # the group's lines, good and bad
    duplicates: int = 0  # its lines whose click came earlier in the batch


def read_group(reads: GroupReads) -> GroupLines:
    """Read the batch's ranges and decode the lines of ``reads.group``."""
    own: list[tuple[str, int, bytes]] = []  # (file, offset, raw): no LogLine a line
    reports: list[QuarantineRecord] = []
    groups, group = reads.groups, reads.group
    with collector_paused():  # a few objects a line, none of them garbage
        for part in reads.ranges:
            for rows in read_range(part):
                if rows.reports:
                    reports += rows.report_records()
                    continue
                own += own_lines(rows.file, rows.offsets, rows.raws, group, groups)
        own.sort(key=itemgetter(0, 1))  # by file, then offset
        decoded = _decoded(own)
    decoded.reports = reports
    return decoded


def decode_lines(lines: Sequence[LogLine]) -> GroupLines:
    """Lines' clicks, once each (log shipping duplicates lines: the first is kept), and
    their bad lines as quarantine records."""
    return _decoded([(line.file, line.offset, line.raw) for line in lines])


def _decoded(lines: Sequence[tuple[str, int, bytes]]) -> GroupLines:
    """:func:`decode_lines` of (file, offset, raw) triples."""
    clicks: dict[str, tuple[ClickEvent, PendingClick]] = {}
    out = GroupLines(lines=len(lines))
    for file, offset, raw in lines:
        decoded = decode_line(Stream.CLICKS, file, offset, raw)
        if isinstance(decoded, QuarantineRecord):
            out.quarantined.append(decoded)
            continue
        assert isinstance(decoded, ClickEvent)
        key = str(decoded.click_id)
        if key in clicks:
            out.duplicates += 1
            continue
        clicks[key] = (decoded, pending_click(key, raw, file, offset))
    out.clicks = list(clicks.values())
    return out
