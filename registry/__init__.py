"""The IdRegistry on a ZooKeeper ensemble, through kazoo (docs/ARCHITECTURE.md).

``IdRegistry.connect(hosts, root)`` gives a client that registers event ids
at most once across every pipeline (batched conditional ``multi`` commits
with tokens), looks them up, shards them by time-based epochs and garbage
collects them below a per-shard boundary that only moves forward. This
package imports nothing of ours, nor Spark or Airflow.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from registry.errors import (
    AttemptFencedError,
    BatchFencedError,
    EpochConflictError,
    GcBoundaryRegressionError,
    InvalidTokenError,
    RegistryError,
    RegistryUnavailableError,
)
from registry.ids import EventId, InvalidEventIdError

if TYPE_CHECKING:
    from registry.client import (
        GcReport,
        IdRegistry,
        LookupResult,
        RegisterResult,
        RetryLimits,
        ShardStats,
    )

#: The client's names, imported on first use (PEP 562): a process that only parses ids
#: (the log source's planning workers) does not load kazoo.
_FROM_CLIENT = frozenset(
    {"GcReport", "IdRegistry", "LookupResult", "RegisterResult", "RetryLimits", "ShardStats"}
)


def __getattr__(name: str) -> Any:
    if name not in _FROM_CLIENT:
        raise AttributeError(f"module 'registry' has no attribute {name!r}")
    return getattr(importlib.import_module("registry.client"), name)


__all__ = [
    "AttemptFencedError",
    "BatchFencedError",
    "EpochConflictError",
    "EventId",
    "GcBoundaryRegressionError",
    "GcReport",
    "IdRegistry",
    "InvalidEventIdError",
    "InvalidTokenError",
    "LookupResult",
    "RegisterResult",
    "RegistryError",
    "RegistryUnavailableError",
    "RetryLimits",
    "ShardStats",
]
