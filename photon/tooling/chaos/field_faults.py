"""The chaos run's field faults: what real ad servers and log shippers send, in every
DC's logs at once (every DC reads every click), while the pipelines run.

* :func:`poison_values` — clicks of a query the DCs have read, whose ``cost_micros``
  does not fit the output's int64: a DC must quarantine them (``unwritable``) and
  none register them;
* :func:`future_events` — a query and its click stamped an hour ahead of the
  clock, a query stamped a day ahead, and a click stamped three days ahead, before
  the run's reshard: the hour-ahead click must be held (registered by no DC), the
  three-day one quarantined (``future_stamped``) and registered by none, and no
  DC's query-reader progress may run ahead of the clock by more than the skew;
* :func:`torn_lines` — a query file whose writer left a torn last line and moved on
  to its next file: each DC's query reader must quarantine the torn bytes
  (``torn_line``) and count them read, so its progress does not freeze.

Each writes its files (named ``chaos-field-*``) and waits until every DC's apps have
read them; whether it struck is read back after the run (:func:`field_reports`),
from the quarantine, the registry and the readers' state.

How it fails: never raises on a missed fault; its record says ``struck=False`` and why.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from photon.apps import JOINER, QUERY_READER
from photon.events.ids import EventId
from photon.events.records import QueryEvent, Stream, decode_line
from photon.join.output import decode, output_prefix
from photon.join.progress import PROGRESS_FILE, STATE_FILE
from photon.logs.offset_log import committed_offsets
from photon.logs.reader import GrowingLogReader
from photon.registry_access import connect_registry
from photon.settings import PhotonSettings
from photon.storage import ObjectStore
from photon.tooling.chaos.record import FaultRecord
from registry import LookupResult

#: The prefix of the files these faults write into the DCs' logs.
FIELD_PREFIX = "chaos-field-"
_US = 1_000_000
_HOUR_US = 3_600 * _US
_DAY_US = 24 * _HOUR_US
#: The chaos run's own click servers' address: no generated click has it.
_SERVER = "10.2.250.1"


def poison_values(settings: PhotonSettings, since: Callable[[], float]) -> FaultRecord:
    query = _read_query(settings)
    if query is None:
        return FaultRecord("poison_values", "clicks", struck=False,
                           detail={"why": "no query read yet to click on"})  # fmt: skip
    now = time.time_ns() // 1000
    costs = (2**70, -(2**64), 2**63)
    clicks = [
        {"click_id": str(EventId(_SERVER, 4101, now - n)), "query_id": query,
         "ad_id": f"poison{n}", "cost_micros": cost}
        for n, cost in enumerate(costs)
    ]  # fmt: skip
    name = f"{FIELD_PREFIX}poison.log"
    _write_everywhere(settings, Stream.CLICKS, name, clicks)
    read = _wait_read(settings, JOINER, Stream.CLICKS, name)
    return FaultRecord(
        "poison_values",
        "clicks",
        ended_s=since(),
        struck=read,
        detail={"file": name, "ids": [c["click_id"] for c in clicks], "read": read},
    )


def future_events(settings: PhotonSettings, since: Callable[[], float]) -> FaultRecord:
    now = time.time_ns() // 1000
    hour_query = str(EventId(_SERVER, 4201, now + _HOUR_US))
    day_query = str(EventId(_SERVER, 4202, now + _DAY_US))
    held = str(EventId(_SERVER, 4203, now + _HOUR_US + _US))
    absurd = str(EventId(_SERVER, 4204, now + 3 * _DAY_US))
    queries = [{"query_id": hour_query, "query": "from an hour ahead"},
               {"query_id": day_query, "query": "from a day ahead"}]  # fmt: skip
    clicks = [{"click_id": held, "query_id": hour_query, "ad_id": "future"},
              {"click_id": absurd, "query_id": day_query, "ad_id": "absurd"}]  # fmt: skip
    query_file, click_file = f"{FIELD_PREFIX}future-q.log", f"{FIELD_PREFIX}future-c.log"
    _write_everywhere(settings, Stream.QUERIES, query_file, queries)
    read = _wait_read(settings, QUERY_READER, Stream.QUERIES, query_file)
    _write_everywhere(settings, Stream.CLICKS, click_file, clicks)
    read = _wait_read(settings, JOINER, Stream.CLICKS, click_file) and read
    return FaultRecord(
        "future_events",
        "queries, clicks",
        ended_s=since(),
        struck=read,
        detail={"held": held, "quarantined": absurd, "click_file": click_file,
                "written_at_us": now, "read": read},
    )  # fmt: skip


def torn_lines(settings: PhotonSettings, since: Callable[[], float]) -> FaultRecord:
    now = time.time_ns() // 1000
    torn = f"{FIELD_PREFIX}torn.000000.log"
    after = f"{FIELD_PREFIX}torn.000001.log"
    first = {"query_id": str(EventId(_SERVER, 4301, now - 2 * _US)), "query": "before the tear"}
    cut = json.dumps({"query_id": str(EventId(_SERVER, 4301, now - _US)), "query": "torn"})
    for dc in settings.dcs:
        directory = settings.dc_logs(dc) / Stream.QUERIES.value
        directory.mkdir(parents=True, exist_ok=True)
        (directory / torn).write_bytes(json.dumps(first).encode() + b"\n" + cut[:20].encode())
    _write_everywhere(settings, Stream.QUERIES, after, [{
        "query_id": str(EventId(_SERVER, 4302, now)), "query": "its writer moved on"}])  # fmt: skip
    read = _wait_read(settings, QUERY_READER, Stream.QUERIES, torn, whole=True)
    return FaultRecord(
        "torn_lines",
        "queries",
        ended_s=since(),
        struck=read,
        detail={"file": torn, "read": read},
    )


def field_reports(settings: PhotonSettings, store: ObjectStore, records: list[FaultRecord]) -> None:
    """Whether each field fault struck, read back once the run is over: every DC
    quarantined what it had to, and registered nothing it must not."""
    for record in records:
        if record.kind == "poison_values" and record.struck:
            ids = list(record.detail["ids"])
            reasons = _quarantined(store, settings.dcs, Stream.CLICKS, record.detail["file"])
            record.detail["reported"] = reasons
            # Quarantined by a DC that reached them (another may still hold them for their
            # preferred DC when a fault restarts it afresh: its retry store goes with its
            # state), and registered by none.
            record.struck = any(r.get("unwritable", 0) >= len(ids) for r in reasons.values())
            record.struck = _registered(settings, ids) == [] and record.struck
        elif record.kind == "future_events" and record.struck:
            held, absurd = record.detail["held"], record.detail["quarantined"]
            reasons = _quarantined(store, settings.dcs, Stream.CLICKS, record.detail["click_file"])
            progress = _reader_progress(settings)
            limit = time.time_ns() // 1000 + int(settings.shards.max_clock_skew_s * _US)
            record.detail |= {"reported": reasons, "reader_progress_us": progress}
            record.struck = (
                any(r.get("future_stamped", 0) >= 1 for r in reasons.values())
                and _registered(settings, [held, absurd]) == []
                and all(p <= limit for p in progress.values())
            )
        elif record.kind == "torn_lines" and record.struck:
            name = record.detail["file"]
            reasons = _quarantined(store, settings.dcs, Stream.QUERIES, name)
            record.detail["reported"] = reasons
            counted = {dc: _read_to_end(settings, dc, name) for dc in settings.dcs}
            record.detail["counted_read"] = counted
            record.struck = all(r.get("torn_line", 0) >= 1 for r in reasons.values()) and all(
                counted.values()
            )


def _read_query(settings: PhotonSettings) -> str | None:
    """A query id the DCs' query readers have read (the first of DC a's first file)."""
    directory = settings.dc_logs(settings.dcs[0]) / Stream.QUERIES.value
    for name in GrowingLogReader(directory).files():
        with (directory / name).open("rb") as f:
            for raw in f.read(1 << 16).split(b"\n")[:-1]:
                event = decode_line(Stream.QUERIES, name, 0, raw)
                if isinstance(event, QueryEvent):
                    return str(event.query_id)
    return None


def _write_everywhere(
    settings: PhotonSettings, stream: Stream, name: str, records: list[dict[str, Any]]
) -> None:
    data = b"".join(json.dumps(r).encode() + b"\n" for r in records)
    for dc in settings.dcs:
        directory = settings.dc_logs(dc) / stream.value
        directory.mkdir(parents=True, exist_ok=True)
        tmp = directory / f".{name}.tmp"
        tmp.write_bytes(data)
        tmp.replace(directory / name)  # whole at once: no reader sees half of it


def _wait_read(
    settings: PhotonSettings,
    app: str,
    stream: Stream,
    name: str,
    *,
    whole: bool = False,
    timeout_s: float = 600.0,  # past a joiner frozen or restarting for another fault
) -> bool:
    """Until every DC's ``app`` committed a batch past the file's complete lines (its
    whole size with ``whole``: a torn tail read too)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if all(_read_past(settings, dc, app, stream, name, whole) for dc in settings.dcs):
            return True
        time.sleep(0.5)
    return False


def _read_past(
    settings: PhotonSettings, dc: str, app: str, stream: Stream, name: str, whole: bool
) -> bool:
    path = settings.dc_logs(dc) / stream.value / name
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return False
    end = len(data) if whole else data.rfind(b"\n") + 1
    offsets = committed_offsets(settings.pipeline_dir(dc, app) / "checkpoint")
    return offsets.get(name, -1) >= end


def _quarantined(
    store: ObjectStore, dcs: list[str], stream: Stream, name: str
) -> dict[str, dict[str, int]]:
    """Per DC, how many quarantine records of each reason name the file."""
    found: dict[str, dict[str, int]] = {}
    for dc in dcs:
        reasons: dict[str, int] = {}
        for key in store.keys(f"{output_prefix('quarantine', dc)}stream={stream.value}/"):
            data = store.get(key)
            for row in decode(data) if data is not None else []:
                if row["file"] == name:
                    reasons[row["reason"]] = reasons.get(row["reason"], 0) + 1
        found[dc] = reasons
    return found


def _registered(settings: PhotonSettings, ids: list[str]) -> list[str]:
    with connect_registry(settings) as registry:
        found = registry.lookup(ids)
    return [i for i in ids if found[i] is LookupResult.PRESENT]


def _reader_progress(settings: PhotonSettings) -> dict[str, int]:
    progress: dict[str, int] = {}
    for dc in settings.dcs:
        path = settings.pipeline_dir(dc, QUERY_READER) / PROGRESS_FILE
        try:
            progress[dc] = int(json.loads(path.read_text())["progress_us"])
        except (OSError, ValueError, KeyError):
            progress[dc] = 0
    return progress


def _read_to_end(settings: PhotonSettings, dc: str, name: str) -> bool:
    """Whether the DC's query reader counts the torn file read to its end."""
    path = settings.pipeline_dir(dc, QUERY_READER) / STATE_FILE
    try:
        files = json.loads(path.read_text())["files"]
        size = (settings.dc_logs(dc) / Stream.QUERIES.value / name).stat().st_size
    except (OSError, ValueError, KeyError):
        return False
    return bool(name in files and int(files[name]["read_end"]) >= size)


__all__ = ["FIELD_PREFIX", "field_reports", "future_events", "poison_values", "torn_lines"]
