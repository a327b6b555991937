"""Prometheus metrics shared by every Photon process.

Counters only grow; labels stay low-cardinality (DC, stream, reason).
Nothing here can fail a join: a process that serves no metrics endpoint still
counts, and nobody reads the counts.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from prometheus_client import REGISTRY, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

if TYPE_CHECKING:  # every process imports this module: no kazoo just for a type
    from registry.client import RegisterCounters

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
    "Clicks the joiner handled, by outcome: held (another DC is preferred: waits its grace), "
    "joined, already_joined (found in the registry "
    "before joining), wasted (joined, then another attempt had registered it), too_old, "
    "filtered (the adapter skipped it), deferred (to the retry store), behind_reader (deferred "
    "past the retry limits: the query reader has not read past its query yet), unjoinable, "
    "unwritable (its joined record cannot be written: quarantined before registration), "
    "too_new (stamped beyond the registry's clock plus the maximum skew: held until in "
    "range), future_stamped (beyond shards.max_future_s: quarantined).",
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

JOIN_LATENCY = Histogram(
    "photon_join_latency_seconds",
    "End to end: from a click's event time to its joined record being written.",
    ["dc"],
    buckets=(0.25, 0.5, 1, 2, 3, 5, 10, 30, 60, 300, 1800, 3600, 6 * 3600),
)
REGISTRY_BATCH_IDS = Histogram(
    "photon_registry_batch_ids",
    "Ids per IdRegistry register call made by a joiner batch.",
    ["dc"],
    buckets=(1, 10, 50, 100, 250, 500, 1000, 2500, 5000, 10000),
)
REGISTRY_CALL_SECONDS = Histogram(
    "photon_registry_call_seconds",
    "Duration of the IdRegistry calls a joiner batch makes, by call.",
    ["dc", "call"],
)
BATCH_SECONDS = Histogram(
    "photon_batch_seconds",
    "Duration of one micro-batch (or retry pass) of an app.",
    ["dc", "app"],
)
READER_PROGRESS = Gauge(
    "photon_query_reader_progress_seconds",
    "Event time (Unix seconds) up to which the DC's query reader has provably read every "
    "query file; a joiner declares no click unjoinable whose query lies past it.",
    ["dc"],
)
BEHIND_READER = Gauge(
    "photon_clicks_behind_reader",
    "Clicks past the retry limits that the joiner keeps pending because the DC's query "
    "reader has not read past their query yet (in the last batch).",
    ["dc"],
)
INPUT_BEHIND_BYTES = Gauge(
    "photon_input_behind_bytes",
    "Log bytes past the app's last committed batch: what it has yet to read.",
    ["dc", "app"],
)
INPUT_BEHIND_FILES = Gauge(
    "photon_input_behind_files",
    "Log files with bytes past the app's last committed batch.",
    ["dc", "app"],
)
INPUT_LAG_SECONDS = Gauge(
    "photon_input_lag_seconds",
    "How far behind the end of its logs the app is, in the logs' own time: per ad "
    "server, its newest line's event time less that of its oldest unread one (the "
    "largest over the servers; 0 when caught up).",
    ["dc", "app"],
)
APP_INFO = Gauge(
    "photon_app_info",
    "Always 1: where the app runs, as labels (its host, and its pid there): what on-call "
    "needs to find, stop or debug a DC's driver (`photon status` shows it).",
    ["dc", "app", "host", "pid"],
)
APP_RESTARTS = Gauge(
    "photon_app_restarts",
    "How many times the launcher (`photon run`) has restarted the app since it first "
    "started it: a DC that keeps dying shows here, while the others run on.",
    ["dc", "app"],
)
RETRIES_PENDING = Gauge(
    "photon_retries_pending",
    "Clicks in the joiner's retry store, waiting for their query.",
    ["dc"],
)

FAULTS_INJECTED = Counter(
    "photon_faults_injected_total",
    "Faults injected by the chaos settings (faults.*), by kind: crash_after_commit, "
    "crash_mid_write, s3_error, registry_delay.",
    ["kind"],
)

# -- the IdRegistry client (registry/ keeps plain counters; exported here) -------


class RegistryClientCollector(Collector):
    """The IdRegistry clients' own counters as ``photon_registry_*_total{dc}``.

    ``registry`` imports nothing of ours, so its client counts in plain
    integers (:class:`registry.client.RegisterCounters`); this collector reads
    them at scrape time. One instance serves the process: :meth:`track` names
    the counters of a DC's client (a rebuilt client replaces its predecessor).
    """

    def __init__(self) -> None:
        self._clients: dict[str, RegisterCounters] = {}

    def track(self, dc: str, counters: RegisterCounters) -> None:
        self._clients[dc] = counters

    def collect(self) -> Iterator[CounterMetricFamily]:
        fields = (
            ("photon_registry_register_calls", "register calls (one per joiner batch)", "calls"),
            ("photon_registry_register_ids", "Ids sent to register", "ids"),
            (
                "photon_registry_transactions",
                "ZooKeeper multi transactions committed",
                "transactions",
            ),
        )
        for name, documentation, attribute in fields:
            family = CounterMetricFamily(name, documentation + ".", labels=["dc"])
            for dc, counters in sorted(self._clients.items()):
                family.add_metric([dc], getattr(counters, attribute))
            yield family


REGISTRY_CLIENTS = RegistryClientCollector()
REGISTRY.register(REGISTRY_CLIENTS)


def observe_many(histogram: Histogram, values: Sequence[float], per_unit: int = 1) -> None:
    """``histogram.observe(value / per_unit)`` of each of ``values`` (a labelled child,
    no exemplars).

    A joiner batch observes the latency of every click it joined: thousands a
    batch, each ``observe`` taking the child's lock once per bucket it touches.
    Here each bucket and the sum move once for all of them, the buckets found by
    one vectorized search (no Python call a value: the driver's, every batch). It
    relies on the child's fields of the pinned ``prometheus_client``
    (``_upper_bounds``, ``_buckets``, ``_sum``: tests/unit/photon/test_metrics.py
    compares the exposition with ``observe``'s) and falls back to ``observe``
    without them.
    """
    bounds = getattr(histogram, "_upper_bounds", None)
    buckets = getattr(histogram, "_buckets", None)
    total = getattr(histogram, "_sum", None)
    if bounds is None or buckets is None or total is None:
        for value in values:
            histogram.observe(value / per_unit)
        return
    if not len(values):
        return
    # Each value converted exactly (an int below 2**53) and divided once, correctly
    # rounded: the float ``value / per_unit`` is, so a value on a bound counts where
    # ``observe`` counts it.
    import numpy as np  # here: every process imports this module, few observe many

    observed = np.asarray(values, dtype=np.float64)
    if per_unit != 1:
        observed = observed / per_unit
    total.inc(float(observed.sum()))
    # ``observe`` counts a value in the first bucket whose bound is at least it.
    counts = np.bincount(np.searchsorted(bounds, observed, side="left"), minlength=len(bounds))
    for index in np.flatnonzero(counts):
        buckets[index].inc(int(counts[index]))
