"""Spark wiring only (docs/ARCHITECTURE.md): the growing-log streaming source, the query
reader and joiner apps, and the batch jobs. The logic they run lives in
``photon`` and ``registry``.
"""
