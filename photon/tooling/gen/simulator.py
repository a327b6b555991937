"""A seeded simulator of ad servers writing query and click logs for every DC.

What it simulates (all from one ``random.Random(seed)``, so the same
:class:`GenConfig` always writes byte-identical files and manifest):

* query servers x pids logging queries at ``query_rate``; click servers logging
  clicks, a fraction ``ctr`` of queries being clicked (sometimes twice), the
  click delay log-normal around ``click_delay_median_s`` with a tail of hours;
* every DC receives every event (the logs are replicated), each later DC a
  little later (``dc_shipping_delay_s``), and one DC (``outage_dc``) receives
  nothing during its outage, then the whole backlog at once;
* a fraction of queries shipped after their clicks (the delayed primary
  stream), queries that never arrive (their clicks can never be joined),
  click lines shipped twice (at-least-once shipping), and malformed lines of
  every quarantine kind.

Ids keep the contract: timestamps strictly increase per (server, pid). Each
server writes its own rolling files ``<logs_root>/<dc>/<stream>/<ip>.<seq>.log``,
so lines in one file are only approximately sorted by event time.
"""

from __future__ import annotations

import json
import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from photon.errors import PhotonError
from photon.events.ids import EventId
from photon.events.records import QuarantineReason, Stream
from photon.logs.writer import GrowingLogWriter
from photon.tooling.gen.model import (
    MANIFEST_FILE,
    DcManifest,
    FileStats,
    GenConfig,
    MalformedLine,
    Manifest,
)

_WORDS = [
    "cheap",
    "flights",
    "hotel",
    "paris",
    "shoes",
    "running",
    "laptop",
    "phone",
    "case",
    "pizza",
    "near",
    "me",
    "weather",
    "tickets",
    "concert",
    "insurance",
    "car",
    "rental",
    "camera",
    "coffee",
    "maker",
    "garden",
    "chair",
    "books",
]
_COUNTRIES = ("US", "DE", "FR", "JP", "BR", "IN", "GB", "CA")
_US = 1_000_000

#: Called with (lines written so far, total lines) as the generator writes.
ProgressCallback = Callable[[int, int], None]


class LogsNotEmptyError(PhotonError, RuntimeError):
    pass


@dataclass(slots=True)
class _Delivery:
    ship_us: int
    dc: str
    seq: int  # creation order: breaks ties deterministically
    stream: Stream
    server: str
    line: bytes
    malformed: QuarantineReason | None = None
    duplicate: bool = False

    def sort_key(self) -> tuple[int, str, int]:
        return (self.ship_us, self.dc, self.seq)


@dataclass(slots=True)
class Simulation:
    """Everything the generator will write, before it writes it."""

    config: GenConfig
    deliveries: list[_Delivery]
    expected_joins: dict[str, str]
    never_joinable: dict[str, str]
    queries: int
    lost_queries: int
    clicks: int
    _seq: int = field(default=0, repr=False)


class _Ids:
    """Event ids with strictly increasing timestamps per (server, pid)."""

    def __init__(self) -> None:
        self._last: dict[tuple[str, int], int] = {}

    def next(self, ip: str, pid: int, ts_us: int) -> EventId:
        ts = max(ts_us, self._last.get((ip, pid), 0) + 1)
        self._last[(ip, pid)] = ts
        return EventId(ip, pid, ts)


def simulate(cfg: GenConfig) -> Simulation:
    rng = random.Random(cfg.seed)
    query_ips = [f"10.1.0.{i + 1}" for i in range(cfg.query_servers)]
    click_ips = [f"10.2.0.{i + 1}" for i in range(cfg.click_servers)]
    pids = {ip: rng.sample(range(1000, 60000), cfg.pids_per_server) for ip in query_ips + click_ips}
    ids = _Ids()

    # Queries, at query_rate with jitter inside each slot (so in order overall).
    interval_us = _US / cfg.query_rate
    queries: list[tuple[EventId, dict[str, Any]]] = []
    for i in range(cfg.queries):
        ip = rng.choice(query_ips)
        t = cfg.start_us + int(i * interval_us + rng.uniform(0, interval_us))
        qid = ids.next(ip, rng.choice(pids[ip]), t)
        fields = {
            "query": " ".join(rng.choice(_WORDS) for _ in range(rng.randint(1, 4))),
            "user_id": f"u{rng.randrange(100_000)}",
            "country": rng.choice(_COUNTRIES),
            "ad_ids": [f"ad{rng.randrange(5_000)}" for _ in range(rng.randint(1, 3))],
        }
        queries.append((qid, fields))

    # Clicks: when they happen, and which queries never arrive or arrive late.
    click_times: list[tuple[int, int, str]] = []  # (event time, query index, ad id)
    lost: set[int] = set()
    delayed: set[int] = set()
    for index, (qid, fields) in enumerate(queries):
        if rng.random() >= cfg.ctr:
            continue
        for _ in range(2 if rng.random() < 0.1 else 1):
            if rng.random() < cfg.click_delay_tail_fraction:
                delay_s = rng.uniform(60.0, max(60.0, cfg.click_delay_tail_max_s))
            else:
                delay_s = rng.lognormvariate(math.log(cfg.click_delay_median_s), 0.8)
            click_us = qid.ts_us + int(delay_s * _US)
            if cfg.clicks_until_us is not None and qid.ts_us < cfg.clicks_until_us:
                click_us = min(click_us, cfg.clicks_until_us)  # not logged before it happens
            click_times.append((click_us, index, rng.choice(fields["ad_ids"])))
        if rng.random() < cfg.orphan_click_fraction:
            lost.add(index)
        elif rng.random() < cfg.delayed_query_fraction:
            delayed.add(index)
    click_times.sort()

    sim = Simulation(
        cfg,
        [],
        {},
        {},
        queries=len(queries) - len(lost),
        lost_queries=len(lost),
        clicks=len(click_times),
    )
    last_click_us: dict[int, int] = {}
    for t, index, ad_id in click_times:
        ip = rng.choice(click_ips)
        cid = ids.next(ip, rng.choice(pids[ip]), t)
        qid = queries[index][0]
        (sim.never_joinable if index in lost else sim.expected_joins)[str(cid)] = str(qid)
        last_click_us[index] = max(last_click_us.get(index, 0), cid.ts_us)
        line = _dump(
            {
                "click_id": str(cid),
                "query_id": str(qid),
                "ad_id": ad_id,
                "cost_micros": rng.randrange(10_000, 2_000_000),
            }
        )
        _ship(sim, rng, Stream.CLICKS, ip, cid.ts_us, line)

    for index, (qid, fields) in enumerate(queries):
        if index in lost:
            continue
        base_us = qid.ts_us
        if index in delayed:  # the delayed primary stream: after its last click
            base_us = last_click_us[index] + int(rng.uniform(1.0, 30.0) * _US)
        _ship(
            sim,
            rng,
            Stream.QUERIES,
            qid.server_ip,
            base_us,
            _dump({**fields, "query_id": str(qid)}),
        )

    _add_malformed(sim, rng, query_ips, click_ips)
    sim.deliveries.sort(key=_Delivery.sort_key)
    return sim


def _ship(
    sim: Simulation, rng: random.Random, stream: Stream, server: str, event_us: int, line: bytes
) -> None:
    """Deliver one event's line to every DC, late, duplicated or held by an outage."""
    cfg = sim.config
    outage_dc = cfg.effective_outage_dc
    outage_from = cfg.start_us + int(cfg.outage_start_s * _US)
    outage_to = outage_from + int(cfg.outage_duration_s * _US)
    for k, dc in enumerate(cfg.dcs):
        ship = event_us + int((k * cfg.dc_shipping_delay_s + rng.uniform(0.0, 0.2)) * _US)
        if dc == outage_dc and outage_from <= ship < outage_to:
            ship = outage_to + int(rng.uniform(0.0, 1.0) * _US)  # the backlog, at once
        _deliver(sim, _Delivery(ship, dc, 0, stream, server, line))
        if stream is Stream.CLICKS and rng.random() < cfg.duplicate_click_fraction:
            again = ship + int(rng.uniform(0.0, 5.0) * _US)
            _deliver(sim, _Delivery(again, dc, 0, stream, server, line, duplicate=True))


def _deliver(sim: Simulation, delivery: _Delivery) -> None:
    delivery.seq = sim._seq
    sim._seq += 1
    sim.deliveries.append(delivery)


def _add_malformed(
    sim: Simulation, rng: random.Random, query_ips: list[str], click_ips: list[str]
) -> None:
    cfg = sim.config
    if cfg.malformed_fraction <= 0 or not sim.deliveries:
        return
    last_ship = max(d.ship_us for d in sim.deliveries)
    for dc in cfg.dcs:
        for stream, servers in ((Stream.QUERIES, query_ips), (Stream.CLICKS, click_ips)):
            lines = sum(1 for d in sim.deliveries if d.dc == dc and d.stream is stream)
            for _ in range(round(lines * cfg.malformed_fraction)):
                kind = rng.choice(list(_MALFORMED_KINDS))
                server = rng.choice(servers)
                line = _MALFORMED_KINDS[kind](
                    stream, server, rng.randrange(cfg.start_us, last_ship + 1)
                )
                ship = rng.randrange(cfg.start_us, last_ship + 1)
                _deliver(sim, _Delivery(ship, dc, 0, stream, server, line, malformed=kind))


def _bad_json(stream: Stream, server: str, ts: int) -> bytes:
    key = "query_id" if stream is Stream.QUERIES else "click_id"
    return f'{{"{key}": "{server}:4242:{ts}", "query": '.encode()


def _missing_field(stream: Stream, server: str, ts: int) -> bytes:
    if stream is Stream.QUERIES:
        return _dump({"query": "no id here", "user_id": "u1"})
    return _dump({"click_id": f"{server}:4242:{ts}", "ad_id": "ad1"})


def _bad_id(stream: Stream, server: str, ts: int) -> bytes:
    bad = f"{server}:4242:{ts // _US}"  # seconds, not microseconds
    if stream is Stream.QUERIES:
        return _dump({"query_id": bad, "query": "skewed"})
    return _dump({"click_id": f"{server}:-1:{ts}", "query_id": bad})


def _not_utf8(stream: Stream, server: str, ts: int) -> bytes:
    return b'{"query_id": "\xff\xfe' + str(ts).encode() + b'"}'


def _not_object(stream: Stream, server: str, ts: int) -> bytes:
    return _dump([server, ts])


_MALFORMED_KINDS: dict[QuarantineReason, Callable[[Stream, str, int], bytes]] = {
    QuarantineReason.INVALID_JSON: _bad_json,
    QuarantineReason.MISSING_FIELD: _missing_field,
    QuarantineReason.MALFORMED_ID: _bad_id,
    QuarantineReason.NOT_UTF8: _not_utf8,
    QuarantineReason.NOT_AN_OBJECT: _not_object,
}


def _dump(obj: object) -> bytes:
    return json.dumps(obj, separators=(",", ":"), sort_keys=True).encode()


# -- writing ----------------------------------------------------------------


def ensure_empty(logs_root: Path, dcs: list[str]) -> None:
    """Refuse to add a run to logs that already hold one: the manifest would lie."""
    for dc in dcs:
        for stream in Stream:
            directory = logs_root / dc / stream.value
            if directory.is_dir() and any(directory.iterdir()):
                raise LogsNotEmptyError(
                    f"{directory} already holds logs; pass --clean to replace them"
                )


#: Live mode writes the lines due within this long at once (one sleep, not one a line).
_LIVE_TICK_S = 0.01
#: The longest live mode sleeps before it looks at its clock again.
_LIVE_RECHECK_S = 0.5
#: The most lines held before they are written (all of a run is due at once unless live).
_WRITE_CHUNK = 10_000


def live_until(cfg: GenConfig) -> int:
    """Until when (on the event clock) live mode writes in real time: the last query's
    time plus the median click delay several times over; the rest goes out at once."""
    return cfg.start_us + int((cfg.queries / cfg.query_rate + 10 * cfg.click_delay_median_s) * _US)


def write(
    sim: Simulation,
    logs_root: Path,
    *,
    live: bool = False,
    progress: ProgressCallback | None = None,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.time,
) -> Manifest:
    """Write every delivery; in live mode each at its ship time on the wall clock.

    When ``start_us`` lies ahead, live mode waits for it, so each line lands at
    the time it carries; a start in the past is shifted to now.

    Live mode writes in real time until the last query has shipped plus the
    median click delay several times over; the tail of very late clicks left
    after that is flushed at once (a log shipper catching up), so a live run
    takes about ``queries / query_rate`` seconds, not hours.
    """
    cfg = sim.config
    ensure_empty(logs_root, cfg.dcs)
    tallies = {dc: _Tally() for dc in cfg.dcs}
    writers: dict[tuple[str, Stream, str], GrowingLogWriter] = {}
    total = len(sim.deliveries)
    live_until_us = live_until(cfg)
    # A start in the future is waited for; one in the past is taken as now, and every
    # line goes out that much later than its time (recorded: live_start_shift_s).
    wall_start = max(clock(), cfg.start_us / _US)
    start_shift_s = wall_start - cfg.start_us / _US if live else 0.0
    pending: list[_Delivery] = []
    done = 0

    def flush() -> None:
        """Write the pending lines: one write a file (GrowingLogWriter.append_many)."""
        nonlocal done
        if not pending:
            return
        by_writer: dict[tuple[str, Stream, str], list[_Delivery]] = {}
        for d in pending:
            by_writer.setdefault((d.dc, d.stream, d.server), []).append(d)
        for key, deliveries in by_writer.items():
            writer = writers.get(key)
            if writer is None:
                dc, stream, server = key
                directory = logs_root / dc / stream.value
                writer = writers[key] = GrowingLogWriter(
                    directory, server, max_bytes=cfg.rollover_bytes
                )
            placed = writer.append_many([d.line for d in deliveries])
            for d, (path, offset) in zip(deliveries, placed, strict=True):
                tallies[d.dc].add(d, path, offset)
        done += len(pending)
        pending.clear()
        if progress is not None:
            progress(done, total)

    try:
        for d in sim.deliveries:
            if live and d.ship_us <= live_until_us:
                due_s = (d.ship_us - cfg.start_us) / _US
                # Lines due within a tick go out together, before the wait for the
                # next; the clock may stand still a while (a held stream:
                # runs.StreamClock), so look at it again.
                if due_s - (clock() - wall_start) > _LIVE_TICK_S:
                    flush()
                    while (wait_s := due_s - (clock() - wall_start)) > _LIVE_TICK_S:
                        sleep(min(wait_s, _LIVE_RECHECK_S))
            pending.append(d)
            if len(pending) >= _WRITE_CHUNK:
                flush()
        flush()
    finally:
        for writer in writers.values():
            writer.close()
    manifest = Manifest(
        config=cfg,
        queries=sim.queries,
        lost_queries=sim.lost_queries,
        clicks=sim.clicks,
        expected_joins=sim.expected_joins,
        never_joinable=sim.never_joinable,
        dcs={dc: tally.manifest() for dc, tally in tallies.items()},
        live_start_shift_s=round(max(0.0, start_shift_s), 6),
    )
    tmp = logs_root / (MANIFEST_FILE + ".tmp")
    tmp.write_text(manifest.model_dump_json(indent=1))
    tmp.replace(logs_root / MANIFEST_FILE)
    return manifest


@dataclass(slots=True)
class _Tally:
    """A DC's manifest as its lines are written, in plain counters: a pydantic model
    updated a line at a time validated every assignment (a third of the writer's CPU
    at 4,000 clicks/s, where it shares the machine with the apps it feeds)."""

    query_lines: int = 0
    click_lines: int = 0
    duplicate_click_lines: int = 0
    malformed: list[MalformedLine] = field(default_factory=list)
    #: (stream, file) -> [bytes, lines]
    files: dict[tuple[str, Path], list[int]] = field(default_factory=dict)

    def add(self, d: _Delivery, file: Path, offset: int) -> None:
        key = (d.stream.value, file)
        stats = self.files.get(key)
        if stats is None:
            stats = self.files[key] = [0, 0]
        stats[0] += len(d.line) + 1
        stats[1] += 1
        if d.malformed is not None:
            self.malformed.append(
                MalformedLine(
                    stream=d.stream.value, file=file.name, offset=offset, kind=d.malformed.value
                )
            )
        elif d.stream is Stream.QUERIES:
            self.query_lines += 1
        else:
            self.click_lines += 1
            self.duplicate_click_lines += d.duplicate

    def manifest(self) -> DcManifest:
        """In an order of its own (streams, files, offsets), not the writing order: the
        same manifest however the lines were grouped into writes."""
        files: dict[str, dict[str, FileStats]] = {}
        for (stream, file), (size, lines) in sorted(self.files.items()):
            files.setdefault(stream, {})[file.name] = FileStats(bytes=size, lines=lines)
        return DcManifest(
            query_lines=self.query_lines,
            click_lines=self.click_lines,
            duplicate_click_lines=self.duplicate_click_lines,
            malformed=sorted(self.malformed, key=lambda m: (m.stream, m.file, m.offset)),
            files=files,
        )


def load_manifest(logs_root: Path) -> Manifest:
    return Manifest.model_validate_json((logs_root / MANIFEST_FILE).read_text())
