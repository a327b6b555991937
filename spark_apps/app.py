"""What both apps do around their stream: metrics endpoint, summary file, logging."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import structlog
from prometheus_client import start_http_server

from photon.settings import PhotonSettings

log = structlog.get_logger(__name__)

SUMMARY_FILE = "summary.json"


def serve_metrics(settings: PhotonSettings, dc: str, app: str) -> int | None:
    """Start the app's Prometheus endpoint on loopback; its port, or None when disabled."""
    port = settings.metrics_port(dc, app)
    if port is None:
        return None
    try:
        start_http_server(port, addr=settings.stack.host)
    except OSError as exc:  # the join matters more than its metrics: say so and go on
        log.error("app.metrics_unavailable", dc=dc, app=app, port=port, error=str(exc))
        return None
    log.info("app.metrics", dc=dc, app=app, url=f"http://{settings.stack.host}:{port}/metrics")
    return port


def write_summary(state_dir: Path, data: Mapping[str, Any]) -> Path:
    """The app's closing summary, read by ``photon run`` (written whole, then renamed)."""
    path = state_dir / SUMMARY_FILE
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")
    tmp.replace(path)
    return path
