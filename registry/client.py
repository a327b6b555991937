"""The IdRegistry: at-most-once registration of event ids in ZooKeeper.

``register`` commits ids with the token of the attempt that processed them,
in ``multi`` transactions grouped by shard and time bucket; only the first
attempt to register an id wins, and a retry by the same attempt (same token)
is answered ``COMMITTED`` again. ``lookup`` answers ``ABSENT``/``PRESENT``,
listing a bucket once where many ids share it. Ids below their shard's GC
boundary answer ``TOO_OLD`` and are never written: every ``multi`` checks the
znode versions of the sharding config and of the GC boundary of each shard it
writes to, as ``register`` read them just before (not the watched copies,
which may lag). GC moving a boundary, or a new epoch moving ids to other
shards, between that read and the commit fails the transaction; the next
round reads them again. Buckets are created only at or above the boundary
just read. (``lookup`` answers from the watched boundary: a lagging one says
``ABSENT`` where ``TOO_OLD`` is true, and ``register`` then refuses the id.)
An id stamped beyond ZooKeeper's now plus ``max_clock_skew_s`` (when set) is
answered ``TOO_NEW`` and not written: epochs start at least that far ahead when
appended, so no registered id can ever change shard.
``registered`` lists a window's ids with their tokens (verification,
recovery); ``announce`` keeps
an ephemeral ``members/<name>`` node saying which sharding config version a
client uses (the resharding rollout reads them with ``members``).

Fences: a joiner's client ``hold_attempt(attempt)`` at start; from then on
every ``multi`` it sends also checks the version of the attempt's fence node,
and ``check_fence`` (called before each output write) reads it through
``sync``. Recovery fences a dead attempt (``fence_attempt``) before it
deletes the attempt's ids, so a zombie of that attempt (paused, cut off) that wakes up
later can neither commit nor write: :class:`AttemptFencedError`.

How it fails, and what it does then:

* a ``multi`` is all-or-nothing and kazoo's ``commit()`` does not raise: it
  returns one result per op, an exception instance where an op failed. After
  a failed transaction, ids already there are answered from their tokens, and
  the rest go into the next round (config and boundaries read again);
* GC or resharding that moves on every round exhausts the rounds:
  :class:`RegistryUnavailableError`;
* a connection loss during a commit may or may not have applied it: the ops
  are sent again, and the token makes the retry idempotent;
* ZooKeeper calls other than commits go through a ``KazooRetry`` with explicit
  limits; past them :class:`RegistryUnavailableError` is raised (kazoo's
  default command retry never gives up);
* a fenced attempt's commit, or fence check, raises :class:`AttemptFencedError`;
* bad ids and tokens raise before anything is written.
"""

from __future__ import annotations

import contextlib
import json
import re
import socket
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Self, TypeVar

import structlog
from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import (
    BadVersionError,
    ConnectionLoss,
    KazooException,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    OperationTimeoutError,
    SessionExpiredError,
)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.retry import KazooRetry, RetryFailedError
from kazoo.security import make_digest_acl

from registry.errors import (
    AttemptFencedError,
    BatchFencedError,
    EpochConflictError,
    GcBoundaryRegressionError,
    InvalidTokenError,
    RegistryUnavailableError,
)
from registry.ids import EventId
from registry.multi import MultiBuilder, check_path
from registry.paths import Layout
from registry.sharding import DEFAULT_BUCKET_US, HOUR_US, ShardingConfig

log = structlog.get_logger(__name__)
T = TypeVar("T")

MAX_TOKEN_BYTES = 255
# A request must stay under jute.maxbuffer (~1 MB); leave ample headroom.
MAX_REQUEST_BYTES = 512 * 1024
_OP_OVERHEAD_BYTES = 64  # per create: header, ACL, flags
_LIST_BUCKET_FROM = 8  # look up by listing a bucket when this many ids share it
_LISTINGS_IN_FLIGHT = 2_000  # buckets listed at once by GC and drop (async calls)

_MEMBER_NAME = re.compile(r"[A-Za-z0-9_.-]{1,128}")
#: What an attempt's fence node holds: it may commit, or recovery fenced it.
FENCE_OPEN = b"open"
FENCE_CLOSED = b"fenced"

_TRANSIENT = (ConnectionLoss, OperationTimeoutError, SessionExpiredError, KazooTimeoutError)


class RegisterResult(StrEnum):
    COMMITTED = "committed"
    ALREADY_REGISTERED = "already_registered"
    TOO_OLD = "too_old"
    #: Stamped beyond ZooKeeper's now plus the maximum clock skew: not written. An epoch
    #: appended later starts at or after that bound, so no id registered can change
    #: shard; the caller holds the id until it is in range.
    TOO_NEW = "too_new"


class LookupResult(StrEnum):
    ABSENT = "absent"
    PRESENT = "present"
    TOO_OLD = "too_old"


@dataclass(frozen=True, slots=True)
class RetryLimits:
    """Explicit limits for ZooKeeper calls and for re-sending commits."""

    max_tries: int = 5
    delay_s: float = 0.1
    max_delay_s: float = 2.0
    commit_attempts: int = 20

    def kazoo_retry(self) -> KazooRetry:
        return KazooRetry(
            max_tries=self.max_tries, delay=self.delay_s, backoff=2, max_delay=self.max_delay_s
        )


@dataclass(frozen=True, slots=True)
class ShardStats:
    shard: int
    gc_boundary_us: int
    hours: int
    buckets: int
    ids: int
    largest_bucket: int


@dataclass(frozen=True, slots=True)
class GcReport:
    shard: int
    boundary_us: int
    deleted_buckets: int
    deleted_ids: int


@dataclass(slots=True)
class _Op:
    event_id: EventId
    key: str
    token: bytes
    shard: int
    bucket: str
    path: str

    @property
    def size(self) -> int:
        return len(self.path) + len(self.token) + _OP_OVERHEAD_BYTES


@dataclass(frozen=True, slots=True)
class _Guards:
    """What every commit of a round checks: the sharding config (its znode version
    is ``config.version``) and, per shard, (GC boundary, its znode version)."""

    config: ShardingConfig
    boundaries: dict[int, tuple[int, int]]


def _place(
    event_id: EventId,
    token: bytes,
    config: ShardingConfig,
    layout: Layout,
    buckets: dict[tuple[int, int], str],
) -> _Op:
    shard = config.shard_of(event_id)
    bucket = _bucket_of(layout, shard, event_id, buckets)
    key = str(event_id)
    return _Op(event_id, key, token, shard, bucket, f"{bucket}/{key}")


def _bucket_of(
    layout: Layout, shard: int, event_id: EventId, buckets: dict[tuple[int, int], str]
) -> str:
    """The id's bucket path; ``buckets`` holds those of the call's ids so far, by (shard,
    bucket number): a call's thousands of ids fall into a handful of buckets."""
    where = (shard, event_id.ts_us // layout.bucket_us)
    bucket = buckets.get(where)
    if bucket is None:
        bucket = buckets[where] = layout.bucket_of(shard, event_id)
    return bucket


def check_token(token: str) -> bytes:
    if not isinstance(token, str) or not token:
        raise InvalidTokenError("a token must be a non-empty string")
    data = token.encode("utf-8")
    if len(data) > MAX_TOKEN_BYTES:
        raise InvalidTokenError(f"a token must be at most {MAX_TOKEN_BYTES} bytes, not {len(data)}")
    return data


@dataclass
class RegisterCounters:
    calls: int = 0
    ids: int = 0
    transactions: int = 0

    def to_dict(self) -> dict[str, int]:
        return {
            "register_calls": self.calls,
            "register_ids": self.ids,
            "register_transactions": self.transactions,
        }


class IdRegistry:
    """A connected IdRegistry; use :meth:`connect` and close it (or use ``with``)."""

    def __init__(
        self,
        client: KazooClient,
        root: str,
        *,
        retry: RetryLimits,
        max_ops_per_txn: int,
        max_in_flight: int,
        max_clock_skew_us: int | None = None,
    ) -> None:
        if not 1 <= max_ops_per_txn <= 10_000:
            raise ValueError(f"max_ops_per_txn must be in 1..10000, not {max_ops_per_txn}")
        if not 1 <= max_in_flight <= 256:
            raise ValueError(f"max_in_flight must be in 1..256, not {max_in_flight}")
        self._zk = client
        self.root = root
        self._limits = retry
        self._retry = retry.kazoo_retry()
        self.max_ops_per_txn = max_ops_per_txn
        self.max_in_flight = max_in_flight
        if max_clock_skew_us is not None and max_clock_skew_us <= 0:
            raise ValueError(f"max_clock_skew_us must be positive, not {max_clock_skew_us}")
        #: Ids stamped beyond ZooKeeper's now plus this are not registered (None: any).
        self.max_clock_skew_us = max_clock_skew_us
        #: The newest time read from ZooKeeper's clock by this client (0: none yet).
        self.zk_now_seen_us = 0
        self._lock = threading.Lock()
        self._config: ShardingConfig | None = None
        self._closing = False
        self._boundaries: dict[int, int] = {}
        self._watched_boundaries: set[int] = set()
        self._known_buckets: set[str] = set()
        self.state = KazooState.CONNECTED
        #: What :meth:`register` sent since connecting: calls, ids, multi transactions.
        self.counters = RegisterCounters()
        self._member: tuple[str, dict[str, Any]] | None = None
        #: The attempt this client registers for: (name, fence path, version read).
        self._fence: tuple[str, str, int] | None = None

    # -- connecting -----------------------------------------------------------

    @classmethod
    def connect(
        cls,
        hosts: str | Sequence[str],
        root: str = "/photon",
        *,
        default_shards: int = 8,
        bucket_us: int = DEFAULT_BUCKET_US,
        session_timeout_s: float = 10.0,
        connect_timeout_s: float = 15.0,
        retry: RetryLimits | None = None,
        auth: tuple[str, str] | None = None,
        max_ops_per_txn: int = 1000,
        max_in_flight: int = 8,
        max_clock_skew_s: float | None = None,
    ) -> IdRegistry:
        """Connect, and create the registry's config on first use.

        ``auth`` = (user, password): every znode created gets a digest ACL for
        that user only, and this client authenticates with it. ``max_clock_skew_s``:
        ids stamped further ahead of ZooKeeper's clock are answered ``TOO_NEW``
        by :meth:`register` (None: no bound; the pipelines always set one).
        """
        limits = retry or RetryLimits()
        host_list = hosts.split(",") if isinstance(hosts, str) else list(hosts)
        if not any_listening(host_list, timeout_s=min(2.0, connect_timeout_s)):
            # Nothing to wait for: kazoo would retry (and log each refusal) until the timeout.
            raise RegistryUnavailableError(
                f"no ZooKeeper server of {', '.join(host_list)} accepts connections "
                "(refused or unreachable): is the ensemble up? (`photon up` starts the "
                "local one; settings zookeeper.hosts)"
            )
        acl = None
        auth_data = None
        if auth is not None:
            user, password = auth
            acl = [make_digest_acl(user, password, all=True)]
            auth_data = [("digest", f"{user}:{password}")]
        client = KazooClient(
            hosts=hosts if isinstance(hosts, str) else ",".join(hosts),
            timeout=session_timeout_s,
            # Reconnecting in the background never stops while we are open; the calls
            # made on behalf of callers (command_retry) do stop, at explicit limits.
            connection_retry=KazooRetry(max_tries=-1, delay=0.1, backoff=2, max_delay=2.0),
            command_retry=limits.kazoo_retry(),
            default_acl=acl,
            auth_data=auth_data,
        )
        try:
            client.start(timeout=connect_timeout_s)
        except KazooTimeoutError as exc:
            client.close()
            raise RegistryUnavailableError(
                f"no ZooKeeper server of {hosts} answered within {connect_timeout_s} s"
            ) from exc
        skew_us = None if max_clock_skew_s is None else int(max_clock_skew_s * 1_000_000)
        registry = cls(
            client,
            root,
            retry=limits,
            max_ops_per_txn=max_ops_per_txn,
            max_in_flight=max_in_flight,
            max_clock_skew_us=skew_us,
        )
        client.add_listener(registry._on_state)
        try:
            registry._bootstrap(default_shards, bucket_us)
        except BaseException:
            registry.close()
            raise
        return registry

    def close(self) -> None:
        self._closing = True  # the LOST that follows is ours: not worth a line at info
        self._zk.stop()
        self._zk.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def layout(self) -> Layout:
        return Layout(self.root, self.sharding().bucket_us)

    def _on_state(self, state: str) -> None:
        # Runs on kazoo's event thread: record, log and send async calls only, never block.
        lost = self.state == KazooState.LOST
        self.state = state
        (log.debug if self._closing else log.info)("registry.connection", state=state)
        if lost and state == KazooState.CONNECTED and self._member is not None:
            # A new session: the ephemeral member node went with the old one.
            self._zk.create_async(
                self._member_path(self._member[0]), self._member_data(), ephemeral=True
            )

    def _bootstrap(self, default_shards: int, bucket_us: int) -> None:
        initial = ShardingConfig.initial(default_shards, bucket_us)
        layout = Layout(self.root, bucket_us)
        self._call(self._zk.ensure_path, f"{self.root}/config")
        with contextlib.suppress(NodeExistsError):  # another client's is the config then
            self._call(self._zk.create, layout.config, initial.to_json())
        self._call(self._zk.ensure_path, layout.ids_root)
        self._call(self._zk.ensure_path, layout.gc_root)
        # The watch keeps the config fresh: new epochs are picked up without restart.
        self._zk.DataWatch(layout.config, self._on_config)
        if self._config is None:
            raise RegistryUnavailableError(f"could not read {layout.config}")
        for shard in range(self._config.max_shards):
            self._ensure_shard(shard)

    def _on_config(self, data: bytes | None, stat: Any) -> None:
        if data is None:
            return
        config = ShardingConfig.from_json(data, stat.version)
        with self._lock:
            first = self._config is None
            self._adopt_config(config)  # a registration may have read it first
        # A change is news; the first read of every connection is not.
        (log.debug if first else log.info)(
            "registry.config", version=stat.version, epochs=len(config.epochs)
        )
        if self._member is not None:  # tell operators this client now uses the new version
            self._zk.set_async(self._member_path(self._member[0]), self._member_data())

    def _ensure_shard(self, shard: int) -> None:
        layout = Layout(self.root, self.sharding().bucket_us)
        self._call(self._zk.ensure_path, layout.shard(shard))
        with contextlib.suppress(NodeExistsError):
            self._call(self._zk.create, layout.boundary(shard), b"0")

    # -- sharding -------------------------------------------------------------

    def sharding(self) -> ShardingConfig:
        with self._lock:
            assert self._config is not None
            return self._config

    def shard_of(self, event_id: EventId) -> int:
        return self.sharding().shard_of(event_id)

    def append_epoch(
        self, shards: int, *, max_skew_s: float, now_us: int | None = None
    ) -> ShardingConfig:
        """Append an epoch of ``shards`` starting at now + ``max_skew_s``; compare-and-set.

        Now is ZooKeeper's (:meth:`zk_now_us`) unless ``now_us`` is given.
        Raises :class:`EpochConflictError` when another client changed the
        config since it was read; :meth:`sharding` then gives the changed one.
        This client shards by the appended config as soon as this returns.
        """
        if max_skew_s <= 0:
            raise ValueError(f"max_skew_s must be positive, not {max_skew_s}")
        if self.max_clock_skew_us is not None and max_skew_s * 1_000_000 < self.max_clock_skew_us:
            # Ids up to ZooKeeper's now plus that skew may be registered already: an
            # epoch starting sooner could move one of them to another shard.
            raise ValueError(
                f"max_skew_s ({max_skew_s}) is below the maximum clock skew ids are "
                f"registered within ({self.max_clock_skew_us / 1_000_000} s)"
            )
        now = now_us if now_us is not None else self.zk_now_us()
        data, stat = self._call(self._zk.get, self.layout.config)
        current = ShardingConfig.from_json(data, stat.version)
        new = current.appended(now + int(max_skew_s * 1_000_000), shards)
        for shard in range(new.max_shards):
            self._ensure_shard(shard)
        try:
            written = self._call(
                self._zk.set, self.layout.config, new.to_json(), version=stat.version
            )
        except BadVersionError as exc:
            data, stat_now = self._call(self._zk.get, self.layout.config)
            with self._lock:  # sharding() now gives the config that won, to retry from
                self._adopt_config(ShardingConfig.from_json(data, stat_now.version))
            raise EpochConflictError(
                "the sharding config changed while this epoch was being added "
                f"(read at version {stat.version}); read it again and retry if still wanted"
            ) from exc
        appended = ShardingConfig(new.epochs, written.version, new.bucket_us)
        with self._lock:
            # The watch says so too, but later: this client's next shard_of is the new one's.
            self._adopt_config(appended)
        return appended

    def _adopt_config(self, config: ShardingConfig) -> None:
        """Use ``config`` if it is newer than this client's (call under ``_lock``).

        The watch, a registration's guards and :meth:`append_epoch` each read the
        config; whichever comes last must not put an older version back.
        """
        if self._config is None or config.version > self._config.version:
            self._config = config

    # -- time -------------------------------------------------------------------

    def zk_now_us(self) -> int:
        """Now by the ensemble's clock, in microseconds (millisecond precision).

        The time the protocol decides by (epoch starts, GC boundaries) comes from
        ZooKeeper, not from the host that asks: a write to ``<root>/clock`` is
        stamped by the leader (the znode's mtime), so an operator host or GC host
        whose clock runs ahead or behind cannot move ids or collect live ones.
        """
        path = self.layout.clock
        try:
            stat = self._call(self._zk.set, path, b"")
        except NoNodeError:
            with contextlib.suppress(NodeExistsError):
                self._call(self._zk.create, path, b"")
            stat = self._call(self._zk.set, path, b"")
        now = int(stat.mtime) * 1000
        self.zk_now_seen_us = max(self.zk_now_seen_us, now)
        return now

    # -- GC boundaries ------------------------------------------------------------

    def gc_boundary(self, shard: int) -> int:
        """The shard's GC boundary in microseconds (0: nothing collected yet)."""
        self._check_shard(shard)
        with self._lock:
            if shard in self._boundaries:
                return self._boundaries[shard]
        path = self.layout.boundary(shard)

        def on_change(data: bytes | None, _stat: Any) -> None:
            if data is not None:
                with self._lock:
                    self._boundaries[shard] = max(self._boundaries.get(shard, 0), int(data))

        if shard not in self._watched_boundaries:
            self._watched_boundaries.add(shard)
            self._zk.DataWatch(path, on_change)
        with self._lock:
            if shard not in self._boundaries:  # the watch has not fired yet
                data, _ = self._call(self._zk.get, path)
                self._boundaries[shard] = int(data)
            return self._boundaries[shard]

    def advance_gc_boundary(self, shard: int, boundary_us: int) -> int:
        """Move the boundary forward to ``boundary_us`` (compare-and-set); never back."""
        self._check_shard(shard)
        path = self.layout.boundary(shard)
        for _ in range(self._limits.commit_attempts):
            data, stat = self._call(self._zk.get, path)
            current = int(data)
            if boundary_us < current:
                raise GcBoundaryRegressionError(
                    f"shard {shard}'s GC boundary is {current}; "
                    f"it cannot move back to {boundary_us}"
                )
            if boundary_us == current:
                return current
            try:
                self._call(self._zk.set, path, str(boundary_us).encode(), version=stat.version)
            except BadVersionError:
                continue  # another client moved it: read again
            with self._lock:
                self._boundaries[shard] = max(self._boundaries.get(shard, 0), boundary_us)
            return boundary_us
        raise RegistryUnavailableError(f"shard {shard}'s GC boundary kept changing under us")

    def gc(self, shard: int) -> GcReport:
        """Delete the buckets of ``shard`` that lie wholly below its GC boundary."""
        self._check_shard(shard)
        layout = self.layout
        boundary = self._fresh_boundary(shard)
        deleted_buckets = deleted_ids = 0
        for hour_name in self._children(layout.shard(shard)):
            hour = int(hour_name)
            if hour * HOUR_US >= boundary:
                continue
            hour_path = layout.hour(shard, hour)
            expired = [
                f"{hour_path}/{bucket_name}"
                for bucket_name in self._children(hour_path)
                if layout.bucket_end_us(int(bucket_name)) <= boundary
            ]
            deleted_ids += self._delete_buckets(expired)
            deleted_buckets += len(expired)
            if (hour + 1) * HOUR_US <= boundary:
                # NotEmpty: a racing register re-created a bucket; the next GC takes it.
                with contextlib.suppress(NoNodeError, NotEmptyError):
                    self._call(self._zk.delete, hour_path)
        log.info("registry.gc", shard=shard, buckets=deleted_buckets, ids=deleted_ids)
        return GcReport(shard, boundary, deleted_buckets, deleted_ids)

    def drop(self) -> int:
        """Delete this registry's whole tree; returns how many ids went with it.

        For throwaway roots only (benchmarks, tests): every id goes, whatever
        its GC boundary. Buckets go by multi-op deletes, as in GC, so a root
        of a million ids takes seconds, not a delete a node.
        """
        ids_root = self.layout.ids_root
        deleted = 0
        for shard in self._children(ids_root):
            for hour in self._children(f"{ids_root}/{shard}"):
                hour_path = f"{ids_root}/{shard}/{hour}"
                buckets = [f"{hour_path}/{bucket}" for bucket in self._children(hour_path)]
                deleted += self._delete_buckets(buckets)
        with contextlib.suppress(NoNodeError):
            self._call(self._zk.delete, self.root, recursive=True)
        log.info("registry.drop", root=self.root, ids=deleted)
        return deleted

    def _delete_buckets(self, buckets: list[str]) -> int:
        """Delete buckets with their ids, many buckets to a transaction; returns how
        many ids went.

        Their ids are listed together (async calls: one round trip, not one a bucket),
        then deleted in transactions of up to ``max_ops_per_txn`` operations, each
        bucket's ids before the bucket itself: GC's buckets hold a few ids each, and a
        round trip per bucket made a million-id GC or drop take minutes. A transaction
        that fails changed nothing (a racing register or recovery's delete): its
        buckets go one at a time (:meth:`_delete_bucket`), which lists them again.
        """
        deleted = 0
        group: list[tuple[str, list[str]]] = []
        ops = 0

        def commit(group: list[tuple[str, list[str]]]) -> int:
            paths = [p for bucket, ids in group for p in (*ids, bucket)]
            results = self._call(self._delete_all, paths)
            if all(r is True for r in results):
                self._known_buckets.difference_update(bucket for bucket, _ in group)
                return sum(len(ids) for _, ids in group)
            return sum(self._delete_bucket(bucket) for bucket, _ in group)

        for start in range(0, len(buckets), _LISTINGS_IN_FLIGHT):
            listed = self._reconnecting(
                self._list_buckets, buckets[start : start + _LISTINGS_IN_FLIGHT]
            )
            for bucket, names in listed.items():
                ids = [f"{bucket}/{name}" for name in names]
                if len(ids) + 1 > self.max_ops_per_txn:
                    deleted += self._delete_bucket(bucket)
                    continue
                if ops + len(ids) + 1 > self.max_ops_per_txn:
                    deleted += commit(group)
                    group, ops = [], 0
                group.append((bucket, ids))
                ops += len(ids) + 1
        if group:
            deleted += commit(group)
        return deleted

    def _list_buckets(self, buckets: list[str]) -> dict[str, list[str]]:
        """Each bucket's ids, listed together; a bucket gone already is left out."""
        pending = [(bucket, self._zk.get_children_async(bucket)) for bucket in buckets]
        listed = {bucket: self._get(names, None) for bucket, names in pending}
        return {bucket: names for bucket, names in listed.items() if names is not None}

    def _delete_bucket(self, bucket: str) -> int:
        deleted = 0
        for _ in range(3):
            children = self._children(bucket)
            for chunk in _chunks(children, self.max_ops_per_txn):
                results = self._call(self._delete_all, [f"{bucket}/{name}" for name in chunk])
                if all(r is True for r in results):
                    deleted += len(chunk)
                else:  # someone deleted one first (recovery): delete one by one
                    for name in chunk:
                        try:
                            self._call(self._zk.delete, f"{bucket}/{name}")
                            deleted += 1
                        except NoNodeError:
                            pass
            try:
                self._call(self._zk.delete, bucket)
                self._known_buckets.discard(bucket)
                return deleted
            except NoNodeError:
                return deleted
            except NotEmptyError:
                continue  # registered into while we deleted: list again
        return deleted

    def _delete_all(self, paths: list[str]) -> list[Any]:
        # A transaction object commits once: a retry must build a new one.
        txn = self._zk.transaction()
        for path in paths:
            txn.delete(path)
        return list(txn.commit())

    def _fresh_boundary(self, shard: int) -> int:
        data, _ = self._call(self._zk.get, self.layout.boundary(shard))
        boundary = int(data)
        with self._lock:
            self._boundaries[shard] = max(self._boundaries.get(shard, 0), boundary)
        return boundary

    # -- register -------------------------------------------------------------

    def register(self, items: Iterable[tuple[str | EventId, str]]) -> dict[str, RegisterResult]:
        """Register each id with its token; see the module docstring.

        Ids are validated and tokens checked before anything is written. An id
        given twice with the same token counts once; with two different tokens
        it is a caller error (``ValueError``).
        """
        config = self.sharding()
        ops = list(self._plan(items, config).values())
        self.counters.calls += 1
        self.counters.ids += len(ops)
        results: dict[str, RegisterResult] = {}
        ops = self._in_range(ops, results)
        attempts = 0
        txn_size = self.max_ops_per_txn
        while ops:
            attempts += 1
            if attempts > self._limits.commit_attempts:
                raise RegistryUnavailableError(
                    f"{len(ops)} ids still not committed after {attempts - 1} rounds"
                )
            guards = self._read_guards(ops)
            if guards.config.version != config.version:  # a new epoch may move ids
                config = guards.config
                layout = Layout(self.root, config.bucket_us)
                buckets: dict[tuple[int, int], str] = {}
                ops = [_place(op.event_id, op.token, config, layout, buckets) for op in ops]
                guards = self._read_guards(ops)
            fresh: list[_Op] = []
            for op in ops:
                if op.event_id.ts_us < guards.boundaries[op.shard][0]:
                    results[op.key] = RegisterResult.TOO_OLD
                else:
                    fresh.append(op)
            # Only buckets at or above the boundary just read are (re-)created.
            self._ensure_buckets({op.bucket for op in fresh})
            ops = self._commit_round(fresh, results, txn_size, guards)
            # Under contention a big multi keeps failing on whichever id another
            # writer took last; smaller ones then commit. One-op transactions always
            # end in COMMITTED or a token to answer from, so this loop terminates
            # unless GC or resharding moves on every round (then: unavailable).
            txn_size = max(1, txn_size // 4)
        return results

    def _in_range(self, ops: list[_Op], results: dict[str, RegisterResult]) -> list[_Op]:
        """The ops whose ids are stamped no further ahead than ZooKeeper's now plus the
        maximum clock skew; the others are answered ``TOO_NEW`` (:meth:`too_new`)."""
        ahead = self.too_new(op.event_id for op in ops)
        for op in ops:
            if op.key in ahead:
                results[op.key] = RegisterResult.TOO_NEW
        return [op for op in ops if op.key not in ahead]

    def too_new(self, ids: Iterable[str | EventId]) -> set[str]:
        """The ids stamped further ahead than ZooKeeper's now plus the maximum clock
        skew: :meth:`register` answers them ``TOO_NEW`` (none without a skew set).

        An epoch starts at ZooKeeper's now plus at least that skew when it is
        appended (:meth:`append_epoch`), so an id registered within the bound is
        before every epoch appended later: its shard never changes. Ids within the
        bound of the newest clock this client read pass without a read (ZooKeeper's
        clock has moved on since, which only widens the bound); otherwise the clock
        is read once, fresh.
        """
        if self.max_clock_skew_us is None:
            return set()
        event_ids = [i if isinstance(i, EventId) else EventId.parse(i) for i in ids]
        if not event_ids:
            return set()
        if max(e.ts_us for e in event_ids) > self.zk_now_seen_us + self.max_clock_skew_us:
            self.zk_now_us()
        bound = self.zk_now_seen_us + self.max_clock_skew_us
        return {str(e) for e in event_ids if e.ts_us > bound}

    def _plan(
        self, items: Iterable[tuple[str | EventId, str]], config: ShardingConfig
    ) -> dict[str, _Op]:
        ops: dict[str, _Op] = {}
        layout = Layout(self.root, config.bucket_us)
        tokens: dict[str, bytes] = {}  # a batch's ids share one token: checked once
        buckets: dict[tuple[int, int], str] = {}
        for raw_id, token in items:
            event_id = raw_id if isinstance(raw_id, EventId) else EventId.parse(raw_id)
            data = tokens.get(token) if isinstance(token, str) else None
            if data is None:
                data = tokens[token] = check_token(token)
            key = str(event_id)
            if key in ops:
                if ops[key].token != data:
                    raise ValueError(f"id {key} appears twice in one batch with different tokens")
                continue
            ops[key] = _place(event_id, data, config, layout, buckets)
        return ops

    def _read_guards(self, ops: list[_Op]) -> _Guards:
        """The sharding config and the GC boundaries of the shards ``ops`` touch, read
        now from ZooKeeper with their znode versions (not the watched copies, which
        may lag): every commit checks these versions, so an id is never committed
        under a config or a boundary that moved since.

        A ``sync`` goes first, in the same pipeline: a follower answers a session's
        requests in order, so the reads see every write the leader had committed by
        then (another client's GC advance or epoch), not only the follower's copy. A
        stale read would still be caught by the commit's checks, but only after the
        buckets below the new boundary were re-made and a round was spent.
        """
        layout = self.layout

        def read() -> _Guards:
            synced = self._zk.sync_async(layout.config)
            config_read = self._zk.get_async(layout.config)
            shards = sorted({op.shard for op in ops})
            reads = {shard: self._zk.get_async(layout.boundary(shard)) for shard in shards}
            synced.get()
            data, stat = config_read.get()
            boundaries = {}
            for shard, pending in reads.items():
                value, boundary_stat = pending.get()
                boundaries[shard] = (int(value), boundary_stat.version)
            return _Guards(ShardingConfig.from_json(data, stat.version), boundaries)

        guards = self._reconnecting(read)
        with self._lock:
            for shard, (boundary, _) in guards.boundaries.items():
                if shard in self._watched_boundaries:  # else gc_boundary sets its watch up
                    self._boundaries[shard] = max(self._boundaries.get(shard, 0), boundary)
            self._adopt_config(guards.config)  # the watch will say so too, later
        return guards

    def _ensure_buckets(self, buckets: set[str]) -> None:
        """Create missing hour and bucket znodes, each level in one pipelined burst."""
        missing = sorted(b for b in buckets if b not in self._known_buckets)
        if not missing:
            return
        hours = sorted({b.rsplit("/", 1)[0] for b in missing} - self._known_buckets)
        for level in (hours, missing):
            pending = [(path, self._zk.create_async(path, b"")) for path in level]
            for path, result in pending:
                try:
                    result.get()
                except NodeExistsError as exc:
                    _drop_frames(exc)
                except (NoNodeError, *_TRANSIENT) as exc:  # parent collected, or a hiccup
                    _drop_frames(exc)
                    self._call(self._zk.ensure_path, path)
            self._known_buckets.update(level)

    def _commit_round(
        self, ops: list[_Op], results: dict[str, RegisterResult], txn_size: int, guards: _Guards
    ) -> list[_Op]:
        """Commit ``ops`` in transactions; return the ops to try again.

        Each transaction first checks the config's version and the boundary
        version of every shard it writes to: if either moved since ``guards``
        were read, nothing in it is committed.
        """
        again: list[_Op] = []
        layout = Layout(self.root, guards.config.bucket_us)
        ops.sort(key=lambda op: (op.shard, op.bucket, op.key))
        for bucket in {op.bucket for op in ops}:
            check_path(bucket)  # once a bucket, not once an id
        in_flight: list[tuple[list[_Op], Any]] = []
        for txn_ops in self._transactions(ops, txn_size):
            if len(in_flight) >= self.max_in_flight:
                again += self._settle(*in_flight.pop(0), results)
            txn = MultiBuilder(self._zk)
            txn.check(layout.config, guards.config.version)
            if self._fence is not None:  # op 1: see _settle
                txn.check(self._fence[1], self._fence[2])
            for shard in sorted({op.shard for op in txn_ops}):
                txn.check(layout.boundary(shard), guards.boundaries[shard][1])
            for op in txn_ops:
                txn.create(op.bucket, op.key, op.token)
            in_flight.append((txn_ops, txn.commit_async()))
            self.counters.transactions += 1
        for txn_ops, pending in in_flight:
            again += self._settle(txn_ops, pending, results)
        return again

    def _transactions(self, ops: list[_Op], txn_size: int) -> Iterator[list[_Op]]:
        batch: list[_Op] = []
        size = 0
        for op in ops:
            op_size = op.size
            if batch and (len(batch) >= txn_size or size + op_size > MAX_REQUEST_BYTES):
                yield batch
                batch, size = [], 0
            batch.append(op)
            size += op_size
        if batch:
            yield batch

    def _settle(
        self, ops: list[_Op], pending: Any, results: dict[str, RegisterResult]
    ) -> list[_Op]:
        try:
            outcome = pending.get()
        except _TRANSIENT as exc:
            log.warning("registry.commit_lost", ops=len(ops), error=type(exc).__name__)
            self._wait_connected()
            return self._reconnecting(self._resolve, ops, results)  # applied or not: tokens tell
        failures = [r for r in outcome if isinstance(r, Exception)]
        if (
            self._fence is not None
            and len(outcome) > 1
            and isinstance(outcome[1], (BadVersionError, NoNodeError))
        ):
            raise self._fenced_error()
        if not failures:
            for op in ops:
                results[op.key] = RegisterResult.COMMITTED
            return []
        if any(isinstance(f, BadVersionError) for f in failures):
            log.info("registry.guard_moved", ops=len(ops))  # GC or resharding: read again
        if any(isinstance(f, NoNodeError) for f in failures):
            for bucket in {op.bucket for op in ops}:
                self._known_buckets.discard(bucket)  # GC took it: re-create, or TOO_OLD
        return self._reconnecting(self._resolve, ops, results)

    def _resolve(self, ops: list[_Op], results: dict[str, RegisterResult]) -> list[_Op]:
        """Answer ids already registered from their tokens; return the rest to commit
        (the next round reads the guards again: some may be too old by then).

        One pipelined get per id tells both whether it is there and whose it is.
        """
        retry: list[_Op] = []
        tokens = [(op, self._zk.get_async(op.path)) for op in ops]
        for op, pending in tokens:
            try:
                data, _ = pending.get()
            except NoNodeError as exc:
                _drop_frames(exc)
                retry.append(op)
                continue
            same = data == op.token
            results[op.key] = (
                RegisterResult.COMMITTED if same else RegisterResult.ALREADY_REGISTERED
            )
        return retry

    # -- lookup ---------------------------------------------------------------

    def lookup(self, ids: Iterable[str | EventId]) -> dict[str, LookupResult]:
        """Whether each id is registered; ids below their shard's GC boundary are TOO_OLD."""
        event_ids = [i if isinstance(i, EventId) else EventId.parse(i) for i in ids]
        return self._reconnecting(self._lookup, event_ids)

    def _lookup(self, event_ids: list[EventId]) -> dict[str, LookupResult]:
        config = self.sharding()
        layout = Layout(self.root, config.bucket_us)
        results: dict[str, LookupResult] = {}
        by_bucket: dict[str, list[tuple[str, str]]] = defaultdict(list)
        boundaries: dict[int, int] = {}  # this call's, a shard's read once
        buckets: dict[tuple[int, int], str] = {}
        for event_id in event_ids:
            key = str(event_id)
            shard = config.shard_of(event_id)
            boundary = boundaries.get(shard)
            if boundary is None:
                boundary = boundaries[shard] = self.gc_boundary(shard)
            if event_id.ts_us < boundary:
                results[key] = LookupResult.TOO_OLD
            else:
                bucket = _bucket_of(layout, shard, event_id, buckets)
                by_bucket[bucket].append((key, f"{bucket}/{key}"))
        listings = {
            bucket: self._zk.get_children_async(bucket)
            for bucket, entries in by_bucket.items()
            if len(entries) >= _LIST_BUCKET_FROM
        }
        probes = {
            key: self._zk.exists_async(path)
            for bucket, entries in by_bucket.items()
            if bucket not in listings
            for key, path in entries
        }
        for bucket, pending in listings.items():
            names = set(self._get(pending, default=[]))
            for key, _ in by_bucket[bucket]:
                results[key] = LookupResult.PRESENT if key in names else LookupResult.ABSENT
        for key, pending in probes.items():
            stat = self._get(pending, default=None)
            results[key] = LookupResult.PRESENT if stat is not None else LookupResult.ABSENT
        return results

    # -- tokens and recovery --------------------------------------------------

    def read_token(self, event_id: str | EventId) -> str | None:
        """The token an id holds; ``""`` once cleared; None when not registered."""
        path = self._node(event_id)
        try:
            data, _ = self._call(self._zk.get, path)
        except NoNodeError:
            return None
        return bytes(data).decode("utf-8")

    def clear_tokens(self, ids: Iterable[str | EventId]) -> int:
        """Clear the tokens of ids confirmed in the output; returns how many were cleared."""
        paths = [self._node(i) for i in ids]

        def clear() -> int:
            pending = [self._zk.set_async(path, b"") for path in paths]
            return sum(1 for p in pending if self._get(p, default=None) is not None)

        return self._reconnecting(clear)

    def delete_if_token(self, event_id: str | EventId, token: str) -> bool:
        """Delete an id only while it still holds ``token`` (recovery). True if deleted."""
        expected = check_token(token)
        path = self._node(event_id)
        try:
            data, stat = self._call(self._zk.get, path)
        except NoNodeError:
            return False
        if data != expected:
            return False
        try:
            self._call(self._zk.delete, path, version=stat.version)
        except (BadVersionError, NoNodeError):
            return False  # its token changed (or it went) since we read it
        return True

    def _node(self, raw_id: str | EventId) -> str:
        event_id = raw_id if isinstance(raw_id, EventId) else EventId.parse(raw_id)
        return self.layout.node(self.shard_of(event_id), event_id)

    def registered(self, start_us: int, end_us: int) -> dict[str, str]:
        """Every id registered with a timestamp in ``[start_us, end_us)``, with its token.

        Reads the buckets that overlap the window in every shard (an id's shard
        depends on its epoch); for verification and recovery, not the hot path.
        """
        if end_us <= start_us:
            return {}
        layout = self.layout
        buckets: list[str] = []
        for shard in range(self.sharding().max_shards):
            for hour_name in self._children(layout.shard(shard)):
                hour = int(hour_name)
                if (hour + 1) * HOUR_US <= start_us or hour * HOUR_US >= end_us:
                    continue
                hour_path = layout.hour(shard, hour)
                for bucket_name in self._children(hour_path):
                    number = int(bucket_name)
                    if (
                        layout.bucket_end_us(number) > start_us
                        and number * layout.bucket_us < end_us
                    ):
                        buckets.append(f"{hour_path}/{bucket_name}")
        found: dict[str, str] = {}
        for path in buckets:
            names = [n for n in self._children(path) if start_us <= EventId.parse(n).ts_us < end_us]
            tokens = self._read_nodes({n: f"{path}/{n}" for n in names})
            found.update((n, token.decode("utf-8")) for n, token in tokens.items())
        return found

    # -- attempt fences ---------------------------------------------------------------

    def hold_attempt(self, attempt: str) -> None:
        """Register for ``attempt`` from now on: every commit checks its fence.

        Creates the attempt's fence node (``open``) on its first start and
        remembers its version. Raises :class:`AttemptFencedError` when recovery
        fenced the attempt: its ids were taken over, it must not run again.
        """
        if not _MEMBER_NAME.fullmatch(attempt):
            raise ValueError(f"{attempt!r} is not an attempt name (letters, digits, '.', '_', '-')")
        layout = self.layout
        self._call(self._zk.ensure_path, layout.attempts_root)
        path = layout.attempt(attempt)
        with contextlib.suppress(NodeExistsError):
            self._call(self._zk.create, path, FENCE_OPEN)
        data, stat = self._call(self._zk.get, path)
        self._fence = (attempt, path, stat.version)
        if data != FENCE_OPEN:
            raise self._fenced_error()

    def check_fence(self, batch: str | None = None) -> None:
        """Raise :class:`AttemptFencedError` if the attempt held was fenced since, or
        :class:`BatchFencedError` if ``batch`` of it was (:meth:`fence_batch`).

        Read through ``sync``, so not a lagging follower's copy: a joiner calls
        it just before it writes what it registered. (A pause between this
        check and the write is the one window left; recovery waits
        ``FENCE_SETTLE_S`` after fencing and looks at the output again before
        it takes any id over: docs/ARCHITECTURE.md.)
        """
        if self._fence is None:
            return
        attempt, path, version = self._fence
        try:
            self._call(self._zk.sync, path)
            data, stat = self._call(self._zk.get, path)
        except NoNodeError:
            raise self._fenced_error() from None
        if data != FENCE_OPEN or stat.version != version:
            raise self._fenced_error()
        if batch is not None and self._call(
            self._zk.exists, self.layout.closed_batch(attempt, batch)
        ):
            raise BatchFencedError(
                f"batch {batch} of attempt {attempt} was taken over by recovery (it had ended "
                "without writing some of its ids): this task of it may not write"
            )

    def fence_batch(self, attempt: str, batch: str) -> bool:
        """Fence one batch of a live attempt: a task of it still running (a zombie: a
        lost executor's) fails its fence check before it writes. Recovery does this
        before it takes over the ids such a batch registered and never wrote. True if
        this call closed it."""
        for name, what in ((attempt, "attempt"), (batch, "batch")):
            if not _MEMBER_NAME.fullmatch(name):
                raise ValueError(f"{name!r} is not a{'n' if what == 'attempt' else ''} {what} name")
        layout = self.layout
        self._call(self._zk.ensure_path, layout.attempts_root)
        with contextlib.suppress(NodeExistsError):  # an attempt that never held one: open
            self._call(self._zk.create, layout.attempt(attempt), FENCE_OPEN)
        path = layout.closed_batch(attempt, batch)
        self._call(self._zk.ensure_path, path.rsplit("/", 1)[0])
        try:
            self._call(self._zk.create, path, b"")
        except NodeExistsError:
            return False
        log.warning("registry.batch_fenced", attempt=attempt, batch=batch)
        return True

    def fence_attempt(self, attempt: str) -> bool:
        """Fence ``attempt``: none of its commits succeeds from now on, and its
        joiner's fence check fails. True if this call closed it (it was open, or
        had no fence node: an attempt that never held one)."""
        if not _MEMBER_NAME.fullmatch(attempt):
            raise ValueError(f"{attempt!r} is not an attempt name (letters, digits, '.', '_', '-')")
        layout = self.layout
        self._call(self._zk.ensure_path, layout.attempts_root)
        path = layout.attempt(attempt)
        try:
            self._call(self._zk.create, path, FENCE_CLOSED)
            return True
        except NodeExistsError:
            pass
        data, _ = self._call(self._zk.get, path)
        if data == FENCE_CLOSED:
            return False
        self._call(self._zk.set, path, FENCE_CLOSED)  # a new version: every check of the old fails
        log.warning("registry.attempt_fenced", attempt=attempt)
        return True

    def attempt_fenced(self, attempt: str) -> bool:
        """Whether ``attempt``'s fence is closed."""
        try:
            data, _ = self._call(self._zk.get, self.layout.attempt(attempt))
        except NoNodeError:
            return False
        return bool(data == FENCE_CLOSED)

    def _fenced_error(self) -> AttemptFencedError:
        name = self._fence[0] if self._fence is not None else "?"
        return AttemptFencedError(
            f"attempt {name} was fenced by recovery, which took its registered ids over: it "
            "may no longer commit or write. Start the pipeline afresh (new state, so a new "
            "attempt); its checkpoint and retry store belong to the fenced attempt"
        )

    # -- members: the clients that announce themselves -------------------------------

    def announce(self, name: str, info: dict[str, Any]) -> None:
        """Keep an ephemeral ``members/<name>`` node saying this client's config version.

        Pipelines announce themselves so an operator (the resharding rollout)
        can confirm that every running one uses a new sharding config: the node
        is rewritten on every config change and goes away with the session.
        """
        if not _MEMBER_NAME.fullmatch(name):
            raise ValueError(f"{name!r} is not a member name (letters, digits, '.', '_', '-')")
        self._member = (name, dict(info))
        self._call(self._zk.ensure_path, f"{self.root}/members")
        path = self._member_path(name)
        for _ in range(self._limits.max_tries + 1):
            try:
                self._call(self._zk.create, path, self._member_data(), ephemeral=True)
                return
            except NodeExistsError:
                pass
            try:
                _, stat = self._call(self._zk.get, path)
            except NoNodeError:
                continue
            if stat.ephemeralOwner == self._zk.client_id[0]:  # ours, from before a retry
                self._call(self._zk.set, path, self._member_data())
                return
            # A session that has not ended yet holds it: the process this one restarts,
            # killed moments ago. Its node would go with that session, and ours with it.
            with contextlib.suppress(NoNodeError, BadVersionError):
                self._call(self._zk.delete, path, version=stat.version)
        raise RegistryUnavailableError(f"could not announce {name}: its node kept coming back")

    def members(self) -> dict[str, dict[str, Any]]:
        """The announced clients that are connected now, with what they said.

        A ``sync`` goes first: this session's server may be a follower that has not
        yet applied another client's announcement, and recovery (which must not fence
        a connected attempt) and the rollout (which waits for every pipeline) read
        this to decide.
        """
        self._call(self._zk.sync, f"{self.root}/members")
        names = self._children(f"{self.root}/members")
        # A member missing now (its session ended since the listing) is left out.
        found = self._read_nodes({name: self._member_path(name) for name in names})
        return {name: json.loads(data) for name, data in found.items()}

    def _member_path(self, name: str) -> str:
        return f"{self.root}/members/{name}"

    def _member_data(self) -> bytes:
        assert self._member is not None
        version = self._config.version if self._config is not None else -1
        return json.dumps({**self._member[1], "config_version": version}).encode()

    # -- stats ----------------------------------------------------------------

    def shard_stats(self) -> list[ShardStats]:
        layout = self.layout
        stats = []
        for shard in range(self.sharding().max_shards):
            hours = self._children(layout.shard(shard))
            bucket_paths = [
                f"{layout.hour(shard, int(h))}/{b}"
                for h in hours
                for b in self._children(layout.hour(shard, int(h)))
            ]
            sizes = [
                stat.numChildren
                for stat in (self._get(self._zk.exists_async(p), None) for p in bucket_paths)
                if stat is not None
            ]
            stats.append(
                ShardStats(
                    shard,
                    self._fresh_boundary(shard),
                    len(hours),
                    len(bucket_paths),
                    sum(sizes),
                    max(sizes, default=0),
                )
            )
        return stats

    # -- plumbing -------------------------------------------------------------

    def _check_shard(self, shard: int) -> None:
        if not 0 <= shard < self.sharding().max_shards:
            raise ValueError(f"shard {shard} does not exist (0..{self.sharding().max_shards - 1})")

    def _children(self, path: str) -> list[str]:
        try:
            children: list[str] = self._call(self._zk.get_children, path)
        except NoNodeError:
            return []
        return children

    def _call(self, func: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return self._retry(func, *args, **kwargs)
        except RetryFailedError as exc:
            raise RegistryUnavailableError(
                f"ZooKeeper did not answer after {self._limits.max_tries} tries: {exc}"
            ) from exc
        except KazooException as exc:  # an async result's, raised again: _drop_frames
            _drop_frames(exc)
            raise

    def _read_nodes(self, paths: dict[str, str]) -> dict[str, bytes]:
        """The data of each node of ``paths`` (key: path) that exists, every read in flight
        at once: one round trip, not one a node; again after a connection loss."""

        def read() -> dict[str, bytes]:
            pending = {key: self._zk.get_async(path) for key, path in paths.items()}
            got = {key: self._get(result, default=None) for key, result in pending.items()}
            return {key: bytes(data[0]) for key, data in got.items() if data is not None}

        return self._reconnecting(read)

    def _get(self, pending: Any, default: Any) -> Any:
        try:
            return pending.get()
        except NoNodeError as exc:
            _drop_frames(exc)
            return default

    def _reconnecting(self, func: Callable[..., T], *args: Any) -> T:
        """Run a batch of async calls again after a connection loss, within the limits."""
        for attempt in range(1, self._limits.max_tries + 1):
            try:
                return func(*args)
            except _TRANSIENT as exc:
                log.warning("registry.retry", attempt=attempt, error=type(exc).__name__)
                self._wait_connected()
        raise RegistryUnavailableError(f"ZooKeeper calls failed {self._limits.max_tries} times")

    def _wait_connected(self) -> None:
        deadline = time.monotonic() + self._limits.max_tries * self._limits.max_delay_s + 10
        while self._zk.state != KazooState.CONNECTED:
            if time.monotonic() > deadline:
                raise RegistryUnavailableError("the ZooKeeper connection did not come back in time")
            time.sleep(0.05)


def _drop_frames(error: BaseException) -> None:
    """Forget the frames an error a kazoo async result stored took when ``get()`` raised
    it here. The result keeps the error, the error its traceback, the traceback these
    frames and every caller's up the stack, and a frame the result: a reference cycle
    that only the cyclic collector frees, with the callers' locals in it (a group
    task's clicks and their queries: docs/join.md, "Where a group task's time goes")."""
    error.__traceback__ = None


def any_listening(hosts: Sequence[str], *, timeout_s: float) -> bool:
    """Whether any of ``hosts`` (``host[:port]``, the last may carry kazoo's
    ``/chroot``) accepts a TCP connection within ``timeout_s``."""
    for entry in hosts:
        address = entry.strip().split("/", 1)[0]
        host, port = address, "2181"
        if address.count(":") == 1 or "]:" in address:  # host:port, [v6]:port
            host, _, port = address.rpartition(":")
        try:
            with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s):
                return True
        except (OSError, ValueError):
            continue
    return False


def _chunks(items: list[str], size: int) -> Iterator[list[str]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


__all__ = [
    "GcReport",
    "IdRegistry",
    "LookupResult",
    "RegisterResult",
    "RetryLimits",
    "ShardStats",
]
