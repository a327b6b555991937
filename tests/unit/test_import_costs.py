"""What a process pays to import the modules it starts with.

Every Spark app starts a dozen Python processes (its driver, the log source's
planning and reading processes, its workers), and on a one-core machine their
imports come before the first batch (docs/deploy.md, "Start-up"). These keep
the heavy libraries out of the processes that never use them. Each runs in a
fresh interpreter: this one has everything loaded already.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.unit


def _loaded_after(module: str, *candidates: str) -> set[str]:
    code = f"import sys, {module}; print(' '.join(m for m in {candidates!r} if m in sys.modules))"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    return set(result.stdout.split())


def test_the_apps_drivers_do_not_load_pandas() -> None:
    # pyarrow.dataset loads pandas; only reads of many objects use it (photon.storage).
    assert _loaded_after("spark_apps.dc_pipeline", "pandas", "pyarrow.dataset") == set()


def test_the_log_sources_processes_do_not_load_the_registry_client() -> None:
    # They parse ids (registry.ids); ZooKeeper's client is the joiner's.
    assert _loaded_after("spark_apps.growing_log_source", "kazoo", "registry.client") == set()


def test_creating_the_log_source_does_not_load_pyarrow() -> None:
    # Spark's create_data_source processes ask the source for its schema, nothing more.
    assert _loaded_after(
        "pyspark.sql.worker.create_data_source, spark_apps.growing_log_source",
        "pyarrow", "numpy", "structlog",
    ) == set()  # fmt: skip


def test_the_joiners_log_source_paces_its_plan_without_redis_s_client() -> None:
    # It reads the query reader's published progress (a file), never the cache.
    assert _loaded_after("spark_apps.growing_log_source, photon.join.progress", "redis") == set()


def test_every_name_the_registry_exports_is_there() -> None:
    import registry

    for name in registry.__all__:
        assert getattr(registry, name).__name__ == name
    with pytest.raises(AttributeError, match="no attribute 'Nothing'"):
        registry.Nothing  # noqa: B018
