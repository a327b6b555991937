"""The pipeline's apps, by name: each DC runs a query reader and a joiner.

Their names key what is kept per app: state directories, metrics ports and
labels, S3 users and policies, summaries and dashboards. Defined here, below
everything that keys by them (settings included); nothing here can fail.
"""

from __future__ import annotations

JOINER = "joiner"
QUERY_READER = "query-reader"
#: In the order a DC starts them.
APP_NAMES = (QUERY_READER, JOINER)
