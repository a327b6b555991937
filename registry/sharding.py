"""Time-based sharding of event ids across sharding epochs (docs/ARCHITECTURE.md).

An id's shard is ``stable_hash(id) % shards`` where ``shards`` is the count of
the *epoch* that contains the id's timestamp. Epochs are ``[start_us, next
epoch's start)`` with the last one open-ended, and the first starting at 0.
Changing the shard count appends an epoch that starts in the future (now plus
the maximum clock skew), so no id that exists — or may yet arrive with a
timestamp before that start — ever changes shard.

``stable_hash`` is BLAKE2b-64 of the id's ASCII bytes: the same on every
machine, process and Python version (Python's ``hash`` is salted per process).
A joiner's group hashes each of its clicks three times (its group, then its
shard for the look-up and for the registration): the recent ids' hashes are
kept.

How it fails: an epoch that does not start after the last one, a shard count
outside 1..4096, or a config whose first epoch does not start at 0 raise
:class:`InvalidShardingError`.
"""

from __future__ import annotations

import bisect
import functools
import hashlib
import itertools
import json
from dataclasses import dataclass, field

from registry.errors import RegistryError
from registry.ids import EventId

MAX_SHARDS = 4096
HOUR_US = 3_600_000_000
DEFAULT_BUCKET_US = 10_000_000


class InvalidShardingError(RegistryError, ValueError):
    """A sharding config or epoch that is not valid (shard count, start, order)."""


@functools.lru_cache(maxsize=1 << 15)  # a few batches of ids: ~6 MiB
def stable_hash(event_id: str) -> int:
    return stable_hash_of_ascii(event_id.encode("ascii"))


def stable_hash_of_ascii(event_id: bytes) -> int:
    """:func:`stable_hash` of the id these ASCII bytes spell, with no text made and no
    cache: for ids seen once, as a batch's lines are when its tasks split them."""
    return int.from_bytes(hashlib.blake2b(event_id, digest_size=8).digest(), "big")


@dataclass(frozen=True, slots=True)
class Epoch:
    start_us: int
    shards: int

    def __post_init__(self) -> None:
        if self.start_us < 0:
            raise InvalidShardingError(f"epoch start {self.start_us} is negative")
        if not 1 <= self.shards <= MAX_SHARDS:
            raise InvalidShardingError(f"shard count {self.shards} is outside 1..{MAX_SHARDS}")


@dataclass(frozen=True, slots=True)
class ShardingConfig:
    """The epochs, oldest first, and the width of the registry's time buckets.

    ``version`` is the znode version it was read at (-1: not read from ZooKeeper).
    The bucket width is fixed when the registry is created: every client must
    place ids in the same buckets.
    """

    epochs: tuple[Epoch, ...]
    version: int = -1
    bucket_us: int = DEFAULT_BUCKET_US
    #: The epochs' starts, for ``epoch_at`` (every id the registry places asks it).
    _starts: tuple[int, ...] = field(default=(), init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        if not self.epochs or self.epochs[0].start_us != 0:
            raise InvalidShardingError("the first sharding epoch must start at 0")
        if not 1_000 <= self.bucket_us <= HOUR_US or HOUR_US % self.bucket_us:
            raise InvalidShardingError(
                f"bucket width {self.bucket_us} us must divide an hour and be at least 1 ms"
            )
        starts = tuple(e.start_us for e in self.epochs)
        if any(b <= a for a, b in itertools.pairwise(starts)):
            raise InvalidShardingError(f"epoch starts must strictly increase: {list(starts)}")
        object.__setattr__(self, "_starts", starts)

    @classmethod
    def initial(cls, shards: int, bucket_us: int = DEFAULT_BUCKET_US) -> ShardingConfig:
        return cls((Epoch(0, shards),), bucket_us=bucket_us)

    @property
    def max_shards(self) -> int:
        """How many shard directories exist across all epochs."""
        return max(e.shards for e in self.epochs)

    def epoch_at(self, ts_us: int) -> Epoch:
        return self.epochs[bisect.bisect_right(self._starts, ts_us) - 1]

    def shard_of(self, event_id: EventId) -> int:
        return stable_hash(str(event_id)) % self.epoch_at(event_id.ts_us).shards

    def appended(self, start_us: int, shards: int) -> ShardingConfig:
        last = self.epochs[-1]
        if start_us <= last.start_us:
            raise InvalidShardingError(
                f"a new epoch must start after the last one ({last.start_us}), not at {start_us}"
            )
        return ShardingConfig((*self.epochs, Epoch(start_us, shards)), self.version, self.bucket_us)

    def to_json(self) -> bytes:
        epochs = [{"start_us": e.start_us, "shards": e.shards} for e in self.epochs]
        doc = {"bucket_us": self.bucket_us, "epochs": epochs}
        return json.dumps(doc, separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, data: bytes, version: int = -1) -> ShardingConfig:
        try:
            raw = json.loads(data)
            epochs = tuple(Epoch(int(e["start_us"]), int(e["shards"])) for e in raw["epochs"])
            bucket_us = int(raw["bucket_us"])
        except (ValueError, KeyError, TypeError) as exc:
            raise InvalidShardingError(f"sharding config is not valid JSON epochs: {exc}") from exc
        return cls(epochs, version, bucket_us)
