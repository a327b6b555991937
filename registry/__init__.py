"""The IdRegistry on a ZooKeeper ensemble, through kazoo (docs/ARCHITECTURE.md).

``IdRegistry.connect(hosts, root)`` gives a client that registers event ids
at most once across every pipeline (batched conditional ``multi`` commits
with tokens), looks them up, shards them by time-based epochs and garbage
collects them below a per-shard boundary that only moves forward. This
package imports nothing of ours, nor Spark or Airflow.
"""

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
