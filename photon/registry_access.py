"""Open the IdRegistry the settings describe: hosts, root, limits, credentials.

How it fails: no node answering within ``zookeeper.connect_timeout_s`` raises
:class:`registry.RegistryUnavailableError`, whose message says which hosts were
tried and what to check.
"""

from __future__ import annotations

from typing import Any

from photon.settings import PhotonSettings
from registry import IdRegistry, RetryLimits


def connect_registry(settings: PhotonSettings, **overrides: Any) -> IdRegistry:
    zk = settings.zookeeper
    auth = None
    if zk.auth_user is not None and zk.auth_password is not None:
        auth = (zk.auth_user, zk.auth_password.get_secret_value())
    options: dict[str, Any] = {
        "default_shards": settings.shards.default_count,
        "bucket_us": zk.bucket_s * 1_000_000,
        "session_timeout_s": zk.session_timeout_s,
        "connect_timeout_s": zk.connect_timeout_s,
        "retry": RetryLimits(max_tries=zk.retry_max_tries, max_delay_s=zk.retry_max_delay_s),
        "auth": auth,
        "max_ops_per_txn": zk.max_ops_per_txn,
        "max_in_flight": zk.max_in_flight,
        # Ids stamped further ahead are held, not registered (docs/join.md, "Time").
        "max_clock_skew_s": settings.shards.max_clock_skew_s,
    }
    root = overrides.pop("root", zk.root)
    return IdRegistry.connect(settings.zk_hosts, root, **(options | overrides))
