"""Spark wiring only (DESIGN §4): the growing-log streaming source, the query
reader and joiner apps, and the batch jobs. The logic they run lives in
``photon`` and ``registry``. Built from issue 4 on.
"""
