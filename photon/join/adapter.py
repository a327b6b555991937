"""The adapter: the business logic that turns a (click, query) pair into a joined record.

An adapter is any object with ``adapt(click, query) -> Mapping | None``: the
mapping is the joined record's extra fields, ``None`` skips the click (a
filter; counted, never registered, never written). Adapters are configured
by dotted path (``join.adapter = "package.module:ClassName"``) and built with
no arguments.

How it fails: a path that does not import, or names something that is not an
adapter, raises :class:`AdapterError` at start. An adapter that raises on one
pair fails that batch (Spark retries it): business logic bugs must be loud.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

import msgspec
import pyarrow as pa

from photon.errors import PhotonError
from photon.events.records import ClickEvent, QueryEvent


class AdapterError(PhotonError, ValueError):
    """An adapter path that cannot be loaded."""


@runtime_checkable
class Adapter(Protocol):
    """``adapt`` maps a pair to extra fields (or None: skip). An adapter may also
    have a ``schema`` (a ``pyarrow.Schema`` of those fields) so every output
    object has the same columns; without one, each object's are inferred."""

    def adapt(self, click: ClickEvent, query: QueryEvent) -> Mapping[str, Any] | None: ...


def schema_of(adapter: Adapter) -> pa.Schema | None:
    schema = getattr(adapter, "schema", None)
    return schema if isinstance(schema, pa.Schema) else None


class AdClickAdapter:
    """The default: an ad click joined with the search query that showed the ad.

    Typed columns for what billing and verification read; everything else of
    the two events passes through untouched as JSON (``click_fields``,
    ``query_fields``), so no input field is lost and the Parquet schema stays
    fixed whatever the logs carry. A click on an ad that its query did not show
    is still joined, flagged ``ad_shown = False``.
    """

    schema = pa.schema(
        [
            ("click_ts_us", pa.int64()),
            ("query_ts_us", pa.int64()),
            ("ad_id", pa.string()),
            ("cost_micros", pa.int64()),
            ("query_text", pa.string()),
            ("country", pa.string()),
            ("ad_shown", pa.bool_()),
            ("click_fields", pa.string()),
            ("query_fields", pa.string()),
        ]
    )

    def adapt(self, click: ClickEvent, query: QueryEvent) -> Mapping[str, Any] | None:
        click_extra = _rest(click.fields, ("click_id", "query_id"))
        query_extra = _rest(query.fields, ("query_id",))
        ad_id = click.fields.get("ad_id")
        shown = query.fields.get("ad_ids")
        return {
            "click_ts_us": click.click_id.ts_us,
            "query_ts_us": query.query_id.ts_us,
            "ad_id": ad_id if isinstance(ad_id, str) else None,
            "cost_micros": _int_or_none(click.fields.get("cost_micros")),
            "query_text": _str_or_none(query.fields.get("query")),
            "country": _str_or_none(query.fields.get("country")),
            "ad_shown": isinstance(shown, list) and ad_id in shown,
            "click_fields": _json(click_extra),
            "query_fields": _json(query_extra),
        }


DEFAULT_ADAPTER = "photon.join.adapter:AdClickAdapter"


def load_adapter(path: str) -> Adapter:
    """Build the adapter named ``module:Class`` (or ``module.Class``)."""
    module_name, sep, attr = path.partition(":")
    if not sep:
        module_name, _, attr = path.rpartition(".")
    if not module_name or not attr:
        raise AdapterError(f"adapter {path!r} is not 'package.module:ClassName'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise AdapterError(f"adapter module {module_name!r} does not import: {exc}") from exc
    factory = getattr(module, attr, None)
    if factory is None or not callable(factory):
        raise AdapterError(f"{module_name} has no class {attr!r}")
    adapter = factory()
    if not isinstance(adapter, Adapter):
        raise AdapterError(f"{path} has no adapt(click, query) method")
    return adapter


def _rest(fields: Mapping[str, Any], drop: tuple[str, ...]) -> dict[str, Any]:
    return {k: v for k, v in fields.items() if k not in drop}


#: Compact, keys sorted at every depth, text as UTF-8: ``json.dumps(sort_keys=True,
#: separators=(",", ":"), ensure_ascii=False)`` but for floats, which it writes in their
#: shortest round-trip form (``1e16``, not ``1e+16``), at about a fifth of the cost:
#: two of these a joined click were ~7% of a group task's time (docs/join.md, "Where a
#: group task's time goes").
_FIELDS_ENCODER = msgspec.json.Encoder(order="sorted")


def _json(fields: Mapping[str, Any]) -> str:
    return _FIELDS_ENCODER.encode(fields).decode("utf-8")


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _str_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) else None
