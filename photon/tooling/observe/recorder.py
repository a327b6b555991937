"""A run's metrics on disk, for ``photon report``: every interval, every app's samples
and a status snapshot, one JSON line each.

:class:`MetricsRecorder` runs beside a run (``photon run --record DIR``,
``photon demo``): a daemon thread that, every ``interval_s``, scrapes each
app's Prometheus endpoint and takes a :func:`photon.tooling.observe.status.collect`
snapshot (input lag, registry shards, cache), and appends
``{"t": <unix s>, "apps": {"<dc>/<app>": [[name, labels, value], ...]}, "status": {...}}``
to ``<dir>/metrics.jsonl``. Counters are recorded as they are (cumulative):
the report takes differences between lines.

How it fails: a scrape or snapshot that fails is logged and the line is
written with what was had (an app that is starting has no samples yet); the
recorder never stops the run it watches. A line is written whole (one
``write`` of a complete line) so a reader never sees half of one.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from types import TracebackType
from typing import Any

import structlog

from photon.settings import PhotonSettings
from photon.tooling.observe.status import RegistryProbe, Snapshot, collect, scrape_apps

log = structlog.get_logger(__name__)

METRICS_FILE = "metrics.jsonl"


class MetricsRecorder:
    def __init__(self, settings: PhotonSettings, directory: Path, interval_s: float = 2.0) -> None:
        if interval_s <= 0:
            raise ValueError(f"interval_s must be positive, not {interval_s}")
        self.settings = settings
        self.directory = directory
        self.path = directory / METRICS_FILE
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="metrics-recorder", daemon=True)
        self._previous: Snapshot | None = None
        self._probe = RegistryProbe(settings)  # one registry session for the whole run

    def __enter__(self) -> MetricsRecorder:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        self._thread.start()

    def stop(self) -> None:
        """Record a last line (the run's final counters), then stop."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=60)
        self._probe.close()

    def _run(self) -> None:
        while True:
            stopping = self._stop.is_set()
            started = time.monotonic()
            try:
                self.record_once()
            except Exception as exc:
                log.error("recorder.failed", error=str(exc))
            if stopping:
                return
            self._stop.wait(max(0.0, self.interval_s - (time.monotonic() - started)))

    def record_once(self) -> None:
        settings = self.settings
        pages = scrape_apps(settings)
        apps: dict[str, list[list[Any]]] = {
            f"{dc}/{app}": [
                [s.name, s.labels, s.value] for s in page.samples if s.name.startswith("photon_")
            ]
            for (dc, app), page in pages.items()
            if page is not None
        }
        snapshot = collect(settings, self._previous, pages, self._probe)
        self._previous = snapshot
        line = json.dumps({"t": time.time(), "apps": apps, "status": snapshot.to_dict()})
        with self.path.open("a") as f:
            f.write(line + "\n")


def read_records(directory: Path) -> list[dict[str, Any]]:
    """The recorded lines of a run, oldest first (a torn last line is left out)."""
    path = directory / METRICS_FILE if directory.is_dir() else directory
    records = []
    for raw in path.read_text().splitlines():
        try:
            records.append(json.loads(raw))
        except ValueError:
            continue
    return records
