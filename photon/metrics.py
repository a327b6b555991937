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

# -- the join (photon.join) ----------------------------------------------------

CACHE_LOOKUPS = Counter(
    "photon_cache_lookups_total",
    "Query lookups in the CacheEventStore (Redis), by result: hit or miss.",
    ["dc", "result"],
)
CACHE_ERRORS = Counter(
    "photon_cache_errors_total",
    "Redis calls that failed or timed out; the join fell back to the logs.",
    ["dc"],
)
LOGMAP_LOOKUPS = Counter(
    "photon_logmap_lookups_total",
    "Query lookups in the LogsEventStore (log-file map, then the log), by result.",
    ["dc", "result"],
)
CLICKS = Counter(
    "photon_clicks_total",
    "Clicks the joiner handled, by outcome: joined, already_joined (found in the registry "
    "before joining), wasted (joined, then another attempt had registered it), too_old, "
    "filtered (the adapter skipped it), deferred (to the retry store), unjoinable.",
    ["dc", "outcome"],
)
OUTPUT_OBJECTS = Counter(
    "photon_output_objects_total",
    "Objects written to the object store, by kind: joined, unjoinable, too_old, "
    "quarantine, logmap; and skipped (already there: a replayed batch).",
    ["dc", "kind"],
)
QUERIES_CACHED = Counter(
    "photon_queries_cached_total",
    "Queries the query reader put into the CacheEventStore.",
    ["dc"],
)
LOGMAP_ENTRIES = Counter(
    "photon_logmap_entries_total",
    "Log-file-map entries the query reader emitted.",
    ["dc"],
)
