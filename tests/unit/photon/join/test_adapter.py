"""The adapter: the default ad-click mapping and loading one by dotted path."""

from __future__ import annotations

import json

import pytest

from photon.events.records import decode_click, decode_query
from photon.join.adapter import AdapterError, AdClickAdapter, load_adapter, schema_of

pytestmark = pytest.mark.unit

QUERY = decode_query(
    b'{"query_id":"10.1.0.1:1000:1767225600000000","query":"red shoes",'
    b'"country":"DE","ad_ids":["ad1","ad2"],"user_id":"u7"}'
)
CLICK = decode_click(
    b'{"click_id":"10.2.0.1:2000:1767225605000000","query_id":"10.1.0.1:1000:1767225600000000",'
    b'"ad_id":"ad2","cost_micros":120000,"extra":[1,2]}'
)


class SkipAll:
    def adapt(self, click: object, query: object) -> None:
        return None


def test_the_default_adapter_types_billing_fields_and_keeps_the_rest() -> None:
    fields = AdClickAdapter().adapt(CLICK, QUERY)
    assert fields is not None
    assert fields["ad_id"] == "ad2" and fields["ad_shown"] is True
    assert fields["cost_micros"] == 120000 and fields["country"] == "DE"
    assert fields["click_ts_us"] - fields["query_ts_us"] == 5_000_000
    assert json.loads(fields["click_fields"]) == {
        "ad_id": "ad2",
        "cost_micros": 120000,
        "extra": [1, 2],
    }
    assert json.loads(fields["query_fields"])["user_id"] == "u7"
    assert set(fields) == set(schema_of(AdClickAdapter()).names)  # type: ignore[union-attr]


def test_extra_fields_are_written_as_compact_json_with_keys_sorted_at_every_depth() -> None:
    line = (
        '{"query_id":"10.1.0.1:1000:1767225600000000","z":{"b":[{"y":1,"x":true}],"a":null},'
        '"é":"中 \\u0000 \\" \\\\ \\n \\u001f \u2028 😀","big":100000000000000000000000,'
        '"f":1.5,"e":1e+16,"small":9.81e-05,"neg":-0.0}'
    )
    fields = AdClickAdapter().adapt(CLICK, decode_query(line.encode()))
    assert fields is not None
    written = fields["query_fields"]
    # What json.dumps writes (compact, sorted, UTF-8 text) but for floats' notation,
    # which is their shortest round-trip form; every value reads back the same.
    assert written == json.dumps(
        json.loads(written), separators=(",", ":"), sort_keys=True, ensure_ascii=False
    ).replace("1e+16", "1e16").replace("9.81e-05", "0.0000981")
    assert json.loads(written) == {k: v for k, v in json.loads(line).items() if k != "query_id"}
    assert list(json.loads(written)) == sorted(json.loads(written))
    assert written.startswith('{"big":100000000000000000000000,"e":1e16,"f":1.5,')


def test_a_click_on_an_ad_not_shown_is_flagged() -> None:
    odd = decode_click(CLICK.to_json_line().replace(b'"ad2"', b'"ad9"'))
    assert AdClickAdapter().adapt(odd, QUERY)["ad_shown"] is False  # type: ignore[index]


def test_adapters_load_by_dotted_path() -> None:
    assert isinstance(load_adapter("photon.join.adapter:AdClickAdapter"), AdClickAdapter)
    assert isinstance(load_adapter(f"{__name__}.SkipAll"), SkipAll)


@pytest.mark.parametrize(
    ("path", "complaint"),
    [
        ("nodots", "is not"),
        ("no.such.module:Thing", "does not import"),
        ("photon.join.adapter:Nothing", "has no class"),
        ("photon.join.adapter:AdapterError", "has no adapt"),
    ],
)
def test_bad_adapter_paths_fail_clearly(path: str, complaint: str) -> None:
    with pytest.raises(AdapterError, match=complaint):
        load_adapter(path)
