"""Spark wiring only (docs/ARCHITECTURE.md): the growing-log streaming source, the query
reader and joiner apps, and the batch jobs. The logic they run lives in
``photon`` and ``registry``.
"""

import os as _os

#: Set before numpy and Arrow load: neither may start a thread in a process that forks
#: (the task workers' daemon, spark_apps/preloading_daemon.py; an app's driver, which
#: forks its fork server, spark_apps/fork_server.py). numpy's OpenBLAS starts its
#: thread pool as it loads (no Spark process does linear algebra: one thread), Arrow's
#: bundled jemalloc its background purging thread. A value already set is kept; a
#: driver that runs threads anyway starts its fork server as a new interpreter.
SINGLE_THREADED_ENV = {
    "OPENBLAS_NUM_THREADS": "1",
    "JE_ARROW_MALLOC_CONF": "background_thread:false",
}
for _name, _value in SINGLE_THREADED_ENV.items():
    _os.environ.setdefault(_name, _value)
