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

if TYPE_CHECKING:
    from registry.client import (
        GcReport,
        IdRegistry,
        LookupResult,
        RegisterResult,
        RetryLimits,
        ShardStats,
    )
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

#: Where each export lives. Imported on first use (PEP 562): a process that needs only
#: ``registry.ids`` (the log source's planning workers) does not load kazoo.
_EXPORTS = {
    "GcReport": "registry.client",
    "IdRegistry": "registry.client",
    "LookupResult": "registry.client",
    "RegisterResult": "registry.client",
    "RetryLimits": "registry.client",
    "ShardStats": "registry.client",
    "AttemptFencedError": "registry.errors",
    "BatchFencedError": "registry.errors",
    "EpochConflictError": "registry.errors",
    "GcBoundaryRegressionError": "registry.errors",
    "InvalidTokenError": "registry.errors",
    "RegistryError": "registry.errors",
    "RegistryUnavailableError": "registry.errors",
    "EventId": "registry.ids",
    "InvalidEventIdError": "registry.ids",
}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'registry' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


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
