"""The join of the Photon paper, as plain functions over batches (docs/join.md).

Spark only wires these together (``spark_apps/``); everything here runs, and
is tested, without Spark:

* :mod:`photon.join.adapter` — the business logic combining a click and its query;
* :mod:`photon.join.eventstore` — the EventStore protocol: where a click's query is found;
* :mod:`photon.join.cache` — the CacheEventStore (recent queries in Redis);
* :mod:`photon.join.logmap` — the log-file map (id prefix → file, offset), in runs on S3;
* :mod:`photon.join.logstore` — the LogsEventStore (find a query in the logs via the map);
* :mod:`photon.join.retry` — the retry store of clicks whose query has not arrived yet;
* :mod:`photon.join.output` — joined, unjoinable and quarantined records as Parquet on S3;
* :mod:`photon.join.dispatcher` — the dispatcher: one micro-batch of clicks, split by registry
  shard into groups, its retries and its unjoinable clicks settled;
* :mod:`photon.join.group` — one shard group (a joiner): lookup, find, adapt, register, write;
* :mod:`photon.join.query_reader` — one micro-batch of queries: cache and log-file map.
"""
