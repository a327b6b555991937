"""The chaos run's sampler: the joined output and each joiner's backlog, every period.

A thread lists ``joined/`` every ``period_s`` (each click id counted across
DCs, so a duplicate shows at once), reads each DC joiner's backlog
(:mod:`photon.join.backlog`), and keeps the samples for the report's charts.

How it fails: a sample that cannot be taken (the S3 endpoint frozen by a
fault) is skipped and logged; the next one comes a period later.
"""

from __future__ import annotations

import threading
import time
from collections import Counter

import structlog

from photon.join.accounting import duplicate_rows
from photon.join.backlog import joiner_backlog
from photon.join.output import decode, output_prefix
from photon.settings import PhotonSettings
from photon.storage import ObjectStore
from photon.tooling.chaos import analysis
from photon.tooling.chaos.analysis import Sample

log = structlog.get_logger(__name__)

_US = 1_000_000


class Sampler:
    """Every period: lists ``joined/`` (each click id counted across DCs), reads each backlog."""

    def __init__(
        self,
        settings: PhotonSettings,
        store: ObjectStore,
        period_s: float,
        started: float,
        started_wall_us: int,
    ) -> None:
        self.settings = settings
        self.store = store
        self.period_s = period_s
        self.started = started
        self.started_wall_us = started_wall_us
        self.counts: Counter[str] = Counter()
        self.joins: analysis.JoinTimes = {dc: Counter() for dc in settings.dcs}
        self.by_dc: Counter[str] = Counter()
        self.duplicates_seen = 0
        self.samples: list[Sample] = []
        self._seen: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="chaos-sampler", daemon=True)

    def since_start(self) -> float:
        return time.monotonic() - self.started

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
        self.sample()

    def _run(self) -> None:
        while not self._stop.wait(self.period_s):
            try:
                self.sample()
            except Exception as exc:  # the S3 endpoint may be frozen: sample next time
                log.info("chaos.sample_skipped", error=str(exc))

    def sample(self) -> None:
        t_s = round(self.since_start(), 1)
        backlogs = {dc: joiner_backlog(self.settings, dc) for dc in self.settings.dcs}
        for key in self.store.keys(output_prefix("joined")):
            if key in self._seen:
                continue
            data = self.store.get(key)
            if data is None:
                continue
            self._seen.add(key)
            dc = key.split("/")[1].removeprefix("dc=")
            rows = decode(data)
            self.counts.update(r["click_id"] for r in rows)
            self.by_dc[dc] += len(rows)
            self.joins.setdefault(dc, Counter()).update(
                (r["joined_at_us"] - self.started_wall_us) // _US for r in rows
            )
        self.duplicates_seen = max(self.duplicates_seen, duplicate_rows(self.counts))
        self.samples.append(
            Sample(
                t_s=t_s,
                backlog_bytes={dc: b.bytes for dc, b in backlogs.items()},
                lag_s={dc: b.lag_s for dc, b in backlogs.items()},
            )
        )
