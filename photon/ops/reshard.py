"""Resharding rollout: append a sharding epoch, then confirm the pipelines use it.

Steps, as the ``photon_reshard`` DAG runs them: :func:`plan` checks the
request against the settings and the current config (nothing changes);
:func:`apply` appends the epoch at ``now + skew`` with compare-and-set and
creates its shard nodes; once the epoch has started, :func:`rollout_status`
reads the config version every running pipeline announced
(:meth:`registry.IdRegistry.members`) and says which lag behind.

How it fails: a concurrent change of the config loses the compare-and-set
(:class:`registry.EpochConflictError`) and nothing is appended; an invalid
request raises :class:`photon.ops.params.InvalidParamsError` first; a
running pipeline that has not acknowledged the current config yet (its
member node says an older version) makes :func:`apply` refuse with
:class:`PipelinesBehindError`, before anything changes: one rollout at a
time, each confirmed on every pipeline before the next.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any

from photon.errors import PhotonError
from photon.ops.params import ReshardParams
from registry import IdRegistry


class PipelinesBehindError(PhotonError, RuntimeError):
    """A running pipeline still uses an older sharding config than the current one."""


@dataclass(frozen=True, slots=True)
class ReshardPlan:
    shards: int
    skew_s: float
    dry_run: bool
    current_version: int
    current_shards: int
    epochs: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class ReshardApplied:
    config_version: int
    start_us: int
    shards: int
    epochs: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(slots=True)
class RolloutStatus:
    config_version: int
    members: dict[str, int] = field(default_factory=dict)  # member -> its config version

    @property
    def lagging(self) -> list[str]:
        return sorted(m for m, v in self.members.items() if v < self.config_version)

    @property
    def complete(self) -> bool:
        return not self.lagging

    def to_dict(self) -> dict[str, Any]:
        return {
            "config_version": self.config_version,
            "members": self.members,
            "lagging": self.lagging,
            "complete": self.complete,
        }


def plan(registry: IdRegistry, params: ReshardParams, max_clock_skew_s: float) -> ReshardPlan:
    params.check(max_clock_skew_s)
    config = registry.sharding()
    return ReshardPlan(
        shards=params.shards,
        skew_s=params.skew_for(max_clock_skew_s),
        dry_run=params.dry_run,
        current_version=config.version,
        current_shards=config.epochs[-1].shards,
        epochs=len(config.epochs),
    )


def apply(
    registry: IdRegistry, request: ReshardPlan, *, now_us: int | None = None
) -> ReshardApplied:
    """Append the planned epoch (compare-and-set on the config node: a concurrent change fails)."""
    if request.dry_run:
        raise ValueError("a dry run changes nothing: do not apply it")
    check_acknowledged(registry)
    config = registry.append_epoch(request.shards, max_skew_s=request.skew_s, now_us=now_us)
    epoch = config.epochs[-1]
    return ReshardApplied(config.version, epoch.start_us, epoch.shards, len(config.epochs))


def started(start_us: int, now_us: int | None = None) -> bool:
    now = time.time_ns() // 1000 if now_us is None else now_us
    return now >= start_us


def check_acknowledged(registry: IdRegistry) -> None:
    """Raise :class:`PipelinesBehindError` unless every running pipeline announces the
    current config version: an epoch appended while one still runs an older config
    would be one more config it has not seen."""
    status = rollout_status(registry, registry.sharding().version)
    if not status.complete:
        raise PipelinesBehindError(
            f"{', '.join(status.lagging)} still use(s) an older sharding config than the "
            f"current version {status.config_version}: no epoch is appended until every "
            "running pipeline has picked the current one up (finish the last rollout: "
            "restart or stop a pipeline that does not pick it up)"
        )


def rollout_status(registry: IdRegistry, config_version: int) -> RolloutStatus:
    members = {
        name: int(info.get("config_version", -1)) for name, info in registry.members().items()
    }
    return RolloutStatus(config_version, members)
