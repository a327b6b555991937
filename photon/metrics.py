"""Prometheus metrics shared by every Photon process.

Counters only grow; labels stay low-cardinality (DC, stream, reason).
"""

from __future__ import annotations

from prometheus_client import Counter

LINES_READ = Counter(
    "photon_log_lines_read_total",
    "Complete log lines read from the growing logs.",
    ["dc", "stream"],
)
QUARANTINED_LINES = Counter(
    "photon_quarantined_lines_total",
    "Log lines (or lost stretches of files) set aside instead of processed, by reason.",
    ["dc", "stream", "reason"],
)
