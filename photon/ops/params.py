"""The parameters of each operations DAG: one pydantic model per DAG.

The same model gives the trigger form its JSON schema (Airflow validates the
form against it) and validates the values again inside the task, together
with the checks that need the settings (the configured clock-skew bound, the
configured DCs, the clock). Invalid values raise :class:`InvalidParamsError`
before anything is changed.

Light on purpose: DAG files import this module at parse time.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Self

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic.config import JsonDict

from photon.errors import PhotonError

if TYPE_CHECKING:
    from photon.settings import PhotonSettings


class InvalidParamsError(PhotonError, ValueError):
    """A DAG run's parameters that cannot be used; nothing was changed."""


class _Params(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    def check_settings(self, settings: PhotonSettings) -> Self:
        """The checks that need the settings; raises :class:`InvalidParamsError`."""
        dc = getattr(self, "dc", None)
        if dc and dc not in settings.dcs:
            raise InvalidParamsError(
                f"dc: {dc!r} is not a configured DC ({', '.join(settings.dcs)})"
            )
        return self

    @classmethod
    def parse(cls, values: dict[str, Any]) -> Self:
        """Validate a run's params (the task's check; the form checked the schema)."""
        try:
            return cls.model_validate(values)
        except ValidationError as exc:
            problems = []
            for error in exc.errors():
                name = ".".join(str(p) for p in error["loc"]) or "params"
                # Our own checks name their field already ("window_end: ... is in the future").
                message = str(error["msg"]).removeprefix("Value error, ")
                problems.append(
                    message if message.startswith(f"{name}: ") else f"{name}: {message}"
                )
            raise InvalidParamsError(f"invalid params: {'; '.join(problems)}") from None

    @classmethod
    def form(cls, dcs: Sequence[str] | None = None) -> dict[str, dict[str, Any]]:
        """Per param: the keyword arguments of an Airflow ``Param`` (default and schema).

        An optional value (``X | None``) becomes ``type: ["null", X]``: Airflow's
        trigger form treats a typed field as required unless its type allows null,
        and sends an empty field as null. With ``dcs`` (the configured DCs), a DC
        param is a choice of them (a drop-down whose empty choice says what it
        means), so the form cannot send another; the task checks it again.
        """
        schema = cls.model_json_schema()
        fields: dict[str, dict[str, Any]] = {}
        for name, prop in schema["properties"].items():
            prop = _nullable_as_type_list(dict(prop))
            default = prop.pop("default", None)
            fields[name] = {"default": default, **prop}
        if dcs and "dc" in fields:
            dc = fields["dc"]
            dc.pop("pattern", None)
            empty = str(dc.get("title", "")).partition("(empty: ")[2].rstrip(")") or "unset"
            dc["enum"] = [None, *dcs]
            dc["values_display"] = {"null": f"(empty: {empty})"} | {d: f"DC {d}" for d in dcs}
        return fields


def _nullable_as_type_list(prop: dict[str, Any]) -> dict[str, Any]:
    """``anyOf: [{type: X, ...}, {type: null}]`` as ``type: ["null", X], ...``."""
    variants = prop.get("anyOf")
    if not variants or {"type": "null"} not in variants or len(variants) != 2:
        return prop
    (value,) = [v for v in variants if v != {"type": "null"}]
    flat = {k: v for k, v in prop.items() if k != "anyOf"}
    return {**flat, **value, "type": ["null", value["type"]]}


def _empty_as_none(value: Any) -> Any:
    """An empty or blank text is an unset value, as the trigger form's empty field (null)."""
    return None if isinstance(value, str) and not value.strip() else value


def instant(value: str | None, name: str) -> datetime | None:
    """An ISO-8601 time (None = unset); naive times are UTC."""
    if value is None:
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


def resolve_window(start: str | None, end: str | None, lookback_s: float, now: datetime) -> Window:
    """``[start, end)`` of a run's params; unset ends are ``now`` and ``lookback_s`` before."""
    end_at = instant(end, "window_end") or now
    start_at = instant(start, "window_start") or end_at - timedelta(seconds=lookback_s)
    if end_at > now:
        raise InvalidParamsError(
            f"window_end: {end_at.isoformat()} is in the future (now {now.isoformat()})"
        )
    if start_at >= end_at:
        raise InvalidParamsError(
            f"window_start: {start_at.isoformat()} is not before window_end {end_at.isoformat()}"
        )
    return Window(start=start_at, end=end_at)


#: The run types whose data interval is the time they are about (not a person's "now").
_INTERVAL_RUN_TYPES = ("scheduled", "backfill")


def run_interval(
    run_type: object, start: datetime | None, end: datetime | None
) -> tuple[datetime, datetime] | None:
    """The data interval a run is about: a scheduled (or backfilled) run's, so that a
    late, retried or cleared run covers the same hour as its first try; None for a run
    someone triggered (its window is from the form, or from now)."""
    kind = str(getattr(run_type, "value", run_type))
    if kind not in _INTERVAL_RUN_TYPES or start is None or end is None or end <= start:
        return None
    return start, end


# A DC's name, as the settings accept it (the task checks it is a configured one).
_DC_NAME = r"^[a-z][a-z0-9-]{0,31}$"
# The trigger form renders a date-time picker for it and checks the format.
_DATE_TIME: JsonDict = {"format": "date-time"}


class GcParams(_Params):
    dry_run: bool = Field(
        False,
        title="Dry run",
        description="On: report the boundaries GC would set and change nothing. "
        "Off (default): advance the boundaries and delete expired ids.",
    )


class ReshardParams(_Params):
    shards: int = Field(
        8, ge=1, le=4096, title="New shard count", description="Shards of the new epoch."
    )
    skew_s: float | None = Field(
        None,
        ge=1,
        le=86_400,
        title="Skew in seconds (empty: the configured maximum clock skew)",
        description="The epoch starts this long after now; at least the configured "
        "maximum clock skew (shards.max_clock_skew_s), which an empty field means.",
    )
    dry_run: bool = Field(
        False, title="Dry run", description="On: validate and report; change nothing."
    )

    _unset_skew = field_validator("skew_s", mode="before")(_empty_as_none)

    def check_settings(self, settings: PhotonSettings) -> Self:
        return self.check(settings.shards.max_clock_skew_s)

    def skew_for(self, max_clock_skew_s: float) -> float:
        """The skew asked for, or the configured bound when none was."""
        return max_clock_skew_s if self.skew_s is None else self.skew_s

    def check(self, max_clock_skew_s: float) -> Self:
        if self.skew_for(max_clock_skew_s) < max_clock_skew_s:
            raise InvalidParamsError(
                f"skew_s: {self.skew_s} is below the configured maximum clock skew "
                f"({max_clock_skew_s} s): ids already in flight could change shard"
            )
        return self


class CompactionParams(_Params):
    dc: str | None = Field(
        None,
        pattern=_DC_NAME,
        title="Datacenter (empty: every DC)",
        description="Compact only this DC's log-file map. Leave it empty to compact every "
        "configured DC.",
    )
    sample: int = Field(
        200,
        ge=0,
        le=100_000,
        title="Sampled lookups",
        description="Lookups compared through the old and the new runs before the old "
        "runs are deleted (0: no check).",
    )

    _unset_dc = field_validator("dc", mode="before")(_empty_as_none)


class _WindowParams(_Params):
    window_start: str | None = Field(
        None,
        json_schema_extra=_DATE_TIME,
        title="Window start (empty: window end minus lookback)",
        description="Start of the event-time window, ISO-8601 (naive times are UTC). "
        "Leave it empty to start the window 'Lookback (seconds)' before its end (a "
        "scheduled run: its data interval's start, minus the settle time).",
    )
    window_end: str | None = Field(
        None,
        json_schema_extra=_DATE_TIME,
        title="Window end (empty: now minus settle time)",
        description="End of the event-time window, ISO-8601 (naive times are UTC), not in "
        "the future. Leave it empty to end the window 'Settle time (seconds)' before now "
        "(a scheduled run: before its data interval's end).",
    )
    lookback_s: float = Field(
        3600.0,
        ge=1,
        le=30 * 86_400,
        title="Lookback (seconds)",
        description="The window's length when 'Window start' is empty.",
    )
    settle_s: float = Field(
        120.0,
        ge=0,
        le=86_400,
        title="Settle time (seconds)",
        description="When 'Window end' is empty, the newest events this long before now are "
        "left to the pipelines (the window ends there).",
    )

    _unset_times = field_validator("window_start", "window_end", mode="before")(_empty_as_none)

    @field_validator("window_start", "window_end")
    @classmethod
    def _check_instant(cls, value: str | None, info: Any) -> str | None:
        instant(value, info.field_name)
        return value

    def window(
        self, now: datetime | None = None, interval: tuple[datetime, datetime] | None = None
    ) -> Window:
        """The run's window. With neither end set: the data ``interval`` of a scheduled
        run (:func:`run_interval`), else the lookback ending now, each moved back by the
        settle time."""
        now = now or datetime.now(UTC)
        settle = timedelta(seconds=self.settle_s)
        if interval is not None and not self.window_start and not self.window_end:
            start, end = interval
            return resolve_window(None, None, (end - start).total_seconds(), min(now, end - settle))
        return resolve_window(
            self.window_start,
            self.window_end,
            self.lookback_s,
            now if self.window_end else now - settle,
        )


class VerifyParams(_WindowParams):
    latency_bound_s: float = Field(
        4 * 3600.0,
        ge=1,
        le=30 * 86_400,
        title="Latency bound (seconds)",
        description="A joined click's latency (joined_at - click time) may not exceed this.",
    )
    clear_tokens: bool = Field(
        True,
        title="Clear tokens",
        description="On (default): clear the registry tokens of ids found in the output.",
    )


class RecoverParams(_WindowParams):
    dc: str | None = Field(
        None,
        pattern=_DC_NAME,
        title="Datacenter (empty: the one that registered each click)",
        description="Re-inject every click into this DC's joiner (e.g. when the DC that "
        "registered it is down). Leave it empty to send each click back to the DC that "
        "registered it.",
    )
    dry_run: bool = Field(
        True,
        title="Dry run",
        description="On (default): list what would be done and change nothing. Turn it off "
        "to delete the dead attempts' ids and re-inject their clicks.",
    )

    _unset_dc = field_validator("dc", mode="before")(_empty_as_none)
