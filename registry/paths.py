"""Where the IdRegistry keeps things in ZooKeeper, under its root:

* ``<root>/config/sharding`` — the sharding epochs and bucket width (JSON);
* ``<root>/gc/<shard>`` — the shard's GC boundary, microseconds (ASCII);
* ``<root>/clock`` — empty; written to read the ensemble's time (its mtime);
* ``<root>/attempts/<attempt>`` — a joiner attempt's fence: ``open`` while it
  may commit, ``fenced`` once recovery took its ids over (every commit of the
  attempt checks the version it read at start, so a fenced one fails);
* ``<root>/attempts/<attempt>/closed/<batch>`` — a batch of a live attempt that
  recovery took over (it had ended without writing some ids): a zombie task of
  that batch may no longer write;
* ``<root>/ids/<shard>/<hour>/<bucket>/<event id>`` — one znode per registered
  id, holding the token of the attempt that registered it.

``hour`` is the id's timestamp in whole hours and ``bucket`` in whole bucket
widths (seconds by default): a shard holds one child per hour of retention,
an hour at most 3,600 buckets, and a bucket the ids of one shard in one
bucket width, which the bucket width keeps under 10,000 at the planned rate.
GC deletes whole buckets and hours.
"""

from __future__ import annotations

from dataclasses import dataclass

from registry.ids import EventId
from registry.sharding import HOUR_US


@dataclass(frozen=True, slots=True)
class Layout:
    root: str
    bucket_us: int

    @property
    def config(self) -> str:
        return f"{self.root}/config/sharding"

    @property
    def clock(self) -> str:
        return f"{self.root}/clock"

    @property
    def attempts_root(self) -> str:
        return f"{self.root}/attempts"

    def attempt(self, name: str) -> str:
        return f"{self.attempts_root}/{name}"

    def closed_batch(self, attempt: str, batch: str) -> str:
        return f"{self.attempt(attempt)}/closed/{batch}"

    @property
    def ids_root(self) -> str:
        return f"{self.root}/ids"

    @property
    def gc_root(self) -> str:
        return f"{self.root}/gc"

    def shard(self, shard: int) -> str:
        return f"{self.ids_root}/{shard}"

    def boundary(self, shard: int) -> str:
        return f"{self.gc_root}/{shard}"

    def hour(self, shard: int, hour: int) -> str:
        return f"{self.shard(shard)}/{hour}"

    def bucket_of(self, shard: int, event_id: EventId) -> str:
        ts = event_id.ts_us
        return f"{self.hour(shard, ts // HOUR_US)}/{ts // self.bucket_us}"

    def node(self, shard: int, event_id: EventId) -> str:
        return f"{self.bucket_of(shard, event_id)}/{event_id}"

    def bucket_end_us(self, bucket: int) -> int:
        """First microsecond after the bucket named ``bucket``."""
        return (bucket + 1) * self.bucket_us
