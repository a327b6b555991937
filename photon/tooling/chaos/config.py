"""What a chaos run is asked to do and what it reports (docs/chaos.md).

:class:`ChaosConfig` is the run's size and timing, checked before anything
starts; :data:`SCHEDULE` says when each fault strikes, as a share of the
stream; :class:`ChaosReport` holds what the run saw and its acceptance checks.

How it fails: a config no run could keep (an outage that cannot end by half
of the stream, too few queries) raises ``ValueError`` naming the field.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from photon.tooling.chaos.analysis import CatchUp, Sample
from photon.tooling.chaos.record import FaultRecord

CHAOS_ENV = {
    "PHOTON_RETRY__INITIAL_BACKOFF_S": "0.5",
    "PHOTON_RETRY__MAX_BACKOFF_S": "4",
    "PHOTON_RETRY__MAX_ATTEMPTS": "6",
    # Above the stream's holds in all (docs/chaos.md): a click written before a hold
    # whose query comes after it is not given up on while every query file is idle. A
    # loaded 2-core machine held the short run's stream for over 230 s.
    "PHOTON_RETRY__MAX_AGE_S": "900",
    "PHOTON_PIPELINE__METRICS_BASE_PORT": "0",
    # Query files that stopped growing let the reader's progress go after 10 s, not 30.
    "PHOTON_PIPELINE__QUERY_FILE_IDLE_S": "10",
    "PHOTON_SHARDS__MAX_CLOCK_SKEW_S": "5",
    # The joiners' writes go to a loopback S3: in flight for well under this.
    "PHOTON_PIPELINE__FENCE_SETTLE_S": "5",
    # Spark tries a failed task again, up to 4 times, as a standalone master does
    # (`photon chaos --spark-cluster` runs the apps on one): task_retry_after_commit.
    "PHOTON_PIPELINE__SPARK_MASTER": "local[*,4]",
    # A join task's first try fails after its registry commit this often, all run
    # long, in every DC (task_retry_after_commit): the retry must join as a replay.
    "PHOTON_FAULTS__FAIL_TASK_AFTER_COMMIT_P": "0.05",
}


#: When each fault strikes, as a share of the stream's duration. The joiner
#: kills alternate DCs, the outage DC first; its outage starts once it has
#: restarted from that kill and must end by :data:`OUTAGE_ENDS_BY`, so that it
#: has caught up before its second kill (at 60%). The zombie strikes with much of
#: the stream still to come: its joiner must win a click after it starts again.
SCHEDULE = {
    "kill_joiner_1": 0.2,
    "dc_outage": 0.27,
    "zookeeper_leader": 0.3,
    "log_file_faults": 0.35,
    "kill_joiner_2": 0.4,
    "redis_restart": 0.45,
    "log_rotation": 0.47,
    "poison_values": 0.5,
    "future_events": 0.52,
    "stale_epoch_partition": 0.55,
    "zombie_during_recovery": 0.58,
    "kill_joiner_3": 0.6,
    "torn_lines": 0.62,
    "s3_unavailable": 0.65,
    "reshard": 0.7,
    "kill_joiner_4": 0.8,
}


OUTAGE_ENDS_BY = 0.5


JOINER_KILLS = sum(name.startswith("kill_joiner_") for name in SCHEDULE)


#: The crash after commit is not on the schedule: the outage DC's joiner runs with
#: this setting from the stream's start and crashes on its first batch that wins an
#: id; the scheduled faults wait until it has started again.
CRASH_AFTER_COMMIT = {"PHOTON_FAULTS__CRASH_AFTER_COMMIT_P": "1"}


#: Every kind of fault a run must strike.
FAULT_KINDS = (
    "kill_joiner",
    "dc_outage",
    "zookeeper_leader",
    "redis_restart",
    "s3_unavailable",
    "reshard",
    "crash_after_commit",
    "replay_at_every_step",
    "stale_epoch_partition",
    "zombie_during_recovery",
    "gc_during_catch_up",
    "log_file_faults",
    "poison_values",
    "future_events",
    "torn_lines",
    "task_retry_after_commit",
    "log_rotation",
)


#: The faults that leave ids registered by a dead attempt and in no output, for recovery.
LOSING_FAULTS = ("crash_after_commit", "zombie_during_recovery")


#: How long one faulty run (a crash to come, a pause) may take before it counts as missed.
FAULTY_RUN_TIMEOUT_S = 240.0


#: The bounds docs/chaos.md sets for the returning DC.
MIN_CATCH_UP_SPEED_X = 5.0


MAX_WASTED_SHARE = 0.10


@dataclass(frozen=True)
class ChaosConfig:
    queries: int = 800_000
    query_rate: float = 1_000.0  # queries/s; clicks are ~0.3 of them
    outage_dc: str = "b"
    outage_s: float = 180.0
    restart_after_s: float = 20.0  # ZooKeeper node and Redis down this long
    s3_freeze_s: float = 10.0
    sample_s: float = 2.0
    idle_s: float = 30.0
    #: The returning DC has caught up once its lag (photon.join.backlog) is this short.
    caught_up_lag_s: float = 15.0
    #: How many of the schedule's joiner kills strike (the first ones: 20%, 40%, ...):
    #: each is a joiner restart to wait for; a short run takes fewer.
    joiner_kills: int = JOINER_KILLS
    seed: int = 2026
    keep: bool = False
    report_dir: Path | None = None  # charts and report.json; None: no files

    def __post_init__(self) -> None:
        for name in ("query_rate", "outage_s", "restart_after_s", "s3_freeze_s", "sample_s",
                     "idle_s", "caught_up_lag_s"):  # fmt: skip
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, not {getattr(self, name)}")
        if not 1 <= self.joiner_kills <= JOINER_KILLS:
            raise ValueError(f"joiner_kills must be 1 to {JOINER_KILLS}, not {self.joiner_kills}")
        if self.queries < 1_000:
            raise ValueError(f"queries must be at least 1000, not {self.queries}")
        longest = (OUTAGE_ENDS_BY - SCHEDULE["dc_outage"]) * self.duration_s
        if self.outage_s > longest:
            raise ValueError(
                f"an outage of {self.outage_s:g} s does not end by {OUTAGE_ENDS_BY:.0%} of a "
                f"{self.duration_s:.0f} s stream: at most {math.floor(longest * 10) / 10:g} s "
                "(or more queries)"
            )

    @property
    def duration_s(self) -> float:
        return self.queries / self.query_rate


@dataclass
class ChaosReport:
    clicks_in: int = 0
    expected_joins: int = 0
    joined: int = 0
    unjoinable: int = 0
    duplicates_seen: int = 0  # at any sample
    samples: int = 0
    missing_before_recovery: int = 0
    lost_to_crash: int = 0  # of those, held by the crashed attempt's token
    missing_after_recovery: int = 0
    recovered: int = 0
    catch_up: CatchUp | None = None
    verification_before: dict[str, Any] = field(default_factory=dict)
    verification_after: dict[str, Any] = field(default_factory=dict)
    faults: list[FaultRecord] = field(default_factory=list)
    app_starts: dict[str, int] = field(default_factory=dict)
    #: Each app's exit statuses, in order, as its service manager saw them die on their
    #: own (-9: a kill; 1 again and again: a crash loop); the faults' planned crashes are
    #: in their records.
    app_exits: dict[str, list[int]] = field(default_factory=dict)
    charts: list[str] = field(default_factory=list)
    timeline: list[Sample] = field(default_factory=list)
    #: Where every click ended (:func:`photon.tooling.chaos.harness.accounting`).
    accounting: dict[str, Any] = field(default_factory=dict)
    joined_per_second: dict[str, dict[int, int]] = field(default_factory=dict)
    stream_held_s: float = 0.0  # while faults waited for pipelines to stream again
    seconds: float = 0.0

    def checks(self) -> dict[str, bool]:
        """The acceptance checks of docs/chaos.md, as this run shows them."""
        struck = {f.kind for f in self.faults if f.struck}
        zk = next((f for f in self.faults if f.kind == "zookeeper_leader"), None)
        catch = self.catch_up
        return {
            "no_duplicate_at_any_sample": self.duplicates_seen == 0,
            "nothing_missing_after_recovery": self.missing_after_recovery == 0,
            "every_fault_struck": struck >= set(FAULT_KINDS),
            "crash_loss_confined_and_restored": 0
            < self.lost_to_crash
            == self.missing_before_recovery
            == self.recovered,
            "catch_up_at_least_5x": bool(
                catch and catch.speed_x is not None and catch.speed_x >= MIN_CATCH_UP_SPEED_X
            ),
            "wasted_joins_at_most_10pct": bool(
                catch and catch.wasted_share is not None and catch.wasted_share <= MAX_WASTED_SHARE
            ),
            "joining_went_on_with_a_zookeeper_node_down": bool(
                zk and zk.detail.get("joined_while_down", 0) > 0
            ),
            "zookeeper_node_rejoined": bool(
                zk and zk.detail.get("mode_after") in ("leader", "follower")
            ),
            "every_click_accounted_for_once": bool(self.accounting)
            and self.accounting["unaccounted"] == 0
            and self.accounting["joined_and_unjoinable"] == 0,
            "unjoinable_is_the_never_joinable_set": bool(self.accounting)
            and self.accounting["unjoinable_not_never_joinable"] == 0
            and self.accounting["never_joinable_not_unjoinable"] == 0,
        }

    def to_dict(self, *, with_timeline: bool = False) -> dict[str, Any]:
        data = asdict(self)
        if not with_timeline:
            del data["timeline"], data["joined_per_second"]
        data["faults_injected"] = dict(Counter(f.kind for f in self.faults))
        data["checks"] = self.checks()
        data["passed"] = all(data["checks"].values())
        return data


def scheduled(config: ChaosConfig) -> list[tuple[str, float]]:
    """The faults that strike and their shares of the stream, in order: the schedule's,
    with the first ``config.joiner_kills`` of its joiner kills."""
    kills = [name for name in SCHEDULE if name.startswith("kill_joiner_")]
    left_out = set(kills[config.joiner_kills :])
    faults = [(name, share) for name, share in SCHEDULE.items() if name not in left_out]
    return sorted(faults, key=lambda fault: fault[1])
