"""The parameters of each operations DAG: one pydantic model per DAG.

The same model gives the trigger form its JSON schema (Airflow validates the
form against it) and validates the values again inside the task, together
with the checks that need the settings (the configured clock-skew bound, the
configured DCs, the clock). Invalid values raise :class:`InvalidParamsError`
before anything is changed.

Light on purpose: DAG files import this module at parse time.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Self

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic.config import JsonDict

if TYPE_CHECKING:
    from photon.settings import PhotonSettings


class InvalidParamsError(ValueError):
    """A DAG run's parameters that cannot be used; nothing was changed."""


class _Params(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    def check_settings(self, settings: PhotonSettings) -> Self:
        """The checks that need the settings; raises :class:`InvalidParamsError`."""
        dc = getattr(self, "dc", "")
        if dc and dc not in settings.dcs:
            raise InvalidParamsError(
                f"dc {dc!r} is not a configured DC ({', '.join(settings.dcs)})"
            )
        return self

    @classmethod
    def parse(cls, values: dict[str, Any]) -> Self:
        """Validate a run's params (the task's check; the form checked the schema)."""
        try:
            return cls.model_validate(values)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or 'params'}: {e['msg']}"
                for e in exc.errors()
            )
            raise InvalidParamsError(f"invalid params: {problems}") from None

    @classmethod
    def form(cls) -> dict[str, dict[str, Any]]:
        """Per param: the keyword arguments of an Airflow ``Param`` (default and schema)."""
        schema = cls.model_json_schema()
        fields: dict[str, dict[str, Any]] = {}
        for name, prop in schema["properties"].items():
            prop = dict(prop)
            default = prop.pop("default", None)
            fields[name] = {"default": default, **prop}
        return fields


def _instant(value: str, name: str) -> datetime | None:
    """An ISO-8601 time ('' = unset); naive times are UTC."""
    if value == "":
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise InvalidParamsError(f"{name}: {value!r} is not an ISO-8601 date-time") from None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


class Window(BaseModel):
    """A checked time window ``[start, end)`` of event time."""

    start: datetime
    end: datetime

    @property
    def start_us(self) -> int:
        return int(self.start.timestamp() * 1_000_000)

    @property
    def end_us(self) -> int:
        return int(self.end.timestamp() * 1_000_000)


def resolve_window(start: str, end: str, lookback_s: float, now: datetime) -> Window:
    """``[start, end)`` from a run's params; '' ends at ``now``, starts ``lookback_s`` before."""
    end_at = _instant(end, "window_end") or now
    start_at = _instant(start, "window_start") or end_at - timedelta(seconds=lookback_s)
    if end_at > now:
        raise InvalidParamsError(
            f"window_end {end_at.isoformat()} is in the future (now {now.isoformat()})"
        )
    if start_at >= end_at:
        raise InvalidParamsError(
            f"window_start {start_at.isoformat()} is not before window_end {end_at.isoformat()}"
        )
    return Window(start=start_at, end=end_at)


# The trigger form accepts '' (unset) or a date-time.
_ISO_OR_EMPTY: JsonDict = {
    "anyOf": [{"type": "string", "maxLength": 0}, {"type": "string", "format": "date-time"}]
}


class GcParams(_Params):
    dry_run: bool = Field(
        False, description="Report the boundaries GC would set, and change nothing."
    )


class ReshardParams(_Params):
    shards: int = Field(
        8, ge=1, le=4096, title="New shard count", description="Shards of the new epoch."
    )
    skew_s: float = Field(
        60.0,
        gt=0,
        le=86_400,
        title="Skew (seconds)",
        description="The epoch starts this long after now; at least the configured "
        "maximum clock skew (shards.max_clock_skew_s).",
    )
    dry_run: bool = Field(False, description="Validate and report; change nothing.")

    def check_settings(self, settings: PhotonSettings) -> Self:
        return self.check(settings.shards.max_clock_skew_s)

    def check(self, max_clock_skew_s: float) -> Self:
        if self.skew_s < max_clock_skew_s:
            raise InvalidParamsError(
                f"skew_s {self.skew_s} is below the configured maximum clock skew "
                f"({max_clock_skew_s} s): ids already in flight could change shard"
            )
        return self


class CompactionParams(_Params):
    dc: str = Field(
        "", pattern=r"^([a-z][a-z0-9-]{0,31})?$", description="Only this DC ('' = every DC)."
    )
    sample: int = Field(
        200, ge=0, le=100_000, description="Lookups compared before and after compaction."
    )


class _WindowParams(_Params):
    window_start: str = Field(
        "",
        json_schema_extra=_ISO_OR_EMPTY,
        description="Start of the event-time window, ISO-8601 ('' = window_end - lookback_s).",
    )
    window_end: str = Field(
        "",
        json_schema_extra=_ISO_OR_EMPTY,
        description="End of the event-time window, ISO-8601; not in the future "
        "('' = now - settle_s).",
    )
    lookback_s: float = Field(3600.0, gt=0, le=30 * 86_400, description="Window length.")
    settle_s: float = Field(
        120.0, ge=0, le=86_400, description="Leave the newest events this long to the pipelines."
    )

    @field_validator("window_start", "window_end")
    @classmethod
    def _check_instant(cls, value: str, info: Any) -> str:
        _instant(value, info.field_name)
        return value

    def window(self, now: datetime | None = None) -> Window:
        now = now or datetime.now(UTC)
        return resolve_window(
            self.window_start,
            self.window_end,
            self.lookback_s,
            now if self.window_end else now - timedelta(seconds=self.settle_s),
        )


class VerifyParams(_WindowParams):
    latency_bound_s: float = Field(
        4 * 3600.0,
        gt=0,
        le=30 * 86_400,
        description="A joined click's latency (joined_at - click time) may not exceed this.",
    )
    clear_tokens: bool = Field(True, description="Clear registry tokens of ids found in output.")


class RecoverParams(_WindowParams):
    dc: str = Field(
        "",
        pattern=r"^([a-z][a-z0-9-]{0,31})?$",
        description="Re-inject into this DC's joiner ('' = the DC that registered each id).",
    )
    dry_run: bool = Field(True, description="List what would be done; change nothing.")
