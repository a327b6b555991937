"""What the generator simulates, as plain data: its parameters and its manifest.

The manifest is the ground truth tests compare against: which clicks must
end up joined (exactly once, across all DCs), which can never be joined
(their query never arrives), and where every malformed line was written.
"""

from __future__ import annotations

from typing import Annotated, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

MANIFEST_FILE = "manifest.json"

Fraction = Annotated[float, Field(ge=0.0, le=1.0)]


class GenConfig(BaseModel):
    """Parameters of one simulated run; with the same values the output is identical."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    seed: int = 42
    dcs: list[str] = ["a", "b"]
    start_us: Annotated[int, Field(gt=0)]
    queries: Annotated[int, Field(ge=1, le=10_000_000)] = 2_000
    query_rate: Annotated[float, Field(gt=0, le=1_000_000)] = 50.0  # queries per second
    query_servers: Annotated[int, Field(ge=1, le=250)] = 4
    click_servers: Annotated[int, Field(ge=1, le=250)] = 2
    pids_per_server: Annotated[int, Field(ge=1, le=64)] = 2
    ctr: Annotated[float, Field(gt=0.0, le=1.0)] = 0.3
    click_delay_median_s: Annotated[float, Field(gt=0)] = 5.0
    click_delay_tail_fraction: Fraction = 0.02
    click_delay_tail_max_s: Annotated[float, Field(gt=0)] = 3 * 3600.0
    delayed_query_fraction: Fraction = 0.05
    orphan_click_fraction: Fraction = 0.03
    duplicate_click_fraction: Fraction = 0.02
    malformed_fraction: Fraction = 0.005
    dc_shipping_delay_s: Annotated[float, Field(ge=0)] = 1.0  # extra delay per later DC
    outage_dc: str | None = None  # None: the last DC when there are several
    outage_start_s: Annotated[float, Field(ge=0)] = 10.0
    outage_duration_s: Annotated[float, Field(ge=0)] = 20.0
    rollover_bytes: Annotated[int, Field(ge=1024)] = 256 * 1024
    #: No click is stamped later than this (None: no bound): the end of the run on the
    #: event clock. A click is logged once it has happened, so a generator that writes
    #: its late tail at once caps those clicks' delays here instead of writing them
    #: ahead of their time (the join holds what is stamped ahead: docs/join.md, "Time").
    clicks_until_us: Annotated[int, Field(gt=0)] | None = None

    @model_validator(mode="after")
    def _check(self) -> Self:
        if not self.dcs or len(set(self.dcs)) != len(self.dcs):
            raise ValueError(f"dcs must be distinct and non-empty, got {self.dcs}")
        if self.outage_dc is not None and self.outage_dc not in self.dcs:
            raise ValueError(f"outage_dc {self.outage_dc!r} is not one of {self.dcs}")
        if self.query_servers + self.click_servers > 250:
            raise ValueError("query_servers + click_servers must stay within 250 addresses")
        return self

    @property
    def effective_outage_dc(self) -> str | None:
        if self.outage_dc is not None:
            return self.outage_dc
        return self.dcs[-1] if len(self.dcs) > 1 and self.outage_duration_s > 0 else None


class MalformedLine(BaseModel):
    stream: str
    file: str
    offset: int
    kind: str


class FileStats(BaseModel):
    bytes: int = 0
    lines: int = 0


class DcManifest(BaseModel):
    query_lines: int = 0
    click_lines: int = 0
    duplicate_click_lines: int = 0
    malformed: list[MalformedLine] = []
    files: dict[str, dict[str, FileStats]] = {}  # stream -> file name -> stats


class Manifest(BaseModel):
    config: GenConfig
    queries: int  # distinct queries written (to every DC)
    lost_queries: int  # queries that never arrive anywhere
    clicks: int  # distinct clicks written (to every DC)
    expected_joins: dict[str, str]  # click_id -> query_id, joinable clicks
    never_joinable: dict[str, str]  # click_id -> query_id whose query never arrives
    dcs: dict[str, DcManifest]
    #: Live mode only: how much later than the times they carry every line was written,
    #: because the stream's start had passed when its simulation was ready. Lines keep
    #: their order and spacing; the event a line records happened this much later.
    live_start_shift_s: Annotated[float, Field(ge=0)] = 0.0
