from __future__ import annotations

import dataclasses
import pickle

import pytest
from hypothesis import given
from hypothesis import strategies as st

from registry.ids import MAX_PID, MAX_TS_US, MIN_TS_US, EventId, InvalidEventIdError

pytestmark = pytest.mark.unit

ips = st.ip_addresses(v=4).map(str)
pids = st.integers(min_value=1, max_value=MAX_PID)
timestamps = st.integers(min_value=MIN_TS_US, max_value=MAX_TS_US - 1)


@given(ips, pids, timestamps)
def test_format_then_parse_gives_the_same_id(ip: str, pid: int, ts: int) -> None:
    event_id = EventId(ip, pid, ts)
    text = str(event_id)
    assert text == f"{ip}:{pid}:{ts}"
    assert EventId.parse(text) == event_id


def test_parse_the_design_example() -> None:
    event_id = EventId.parse("10.1.2.3:4242:1767225600123456")
    assert (event_id.server_ip, event_id.pid, event_id.ts_us) == (
        "10.1.2.3",
        4242,
        1767225600123456,
    )
    assert event_id.process == "10.1.2.3:4242"
    assert event_id.time.year == 2026


@pytest.mark.parametrize(
    ("text", "complaint"),
    [
        ("", "not '<ipv4>:<pid>:<ts_us>'"),
        ("10.1.2.3:4242", "not '<ipv4>:<pid>:<ts_us>'"),
        ("10.1.2.3:4242:1767225600123456:9", "not '<ipv4>:<pid>:<ts_us>'"),
        ("10.1.2.300:4242:1767225600123456", "not a canonical IPv4 address"),
        ("host:4242:1767225600123456", "not a canonical IPv4 address"),
        ("::1:4242:1767225600123456", "not '<ipv4>:<pid>:<ts_us>'"),
        ("10.1.2.3:-1:1767225600123456", "pid '-1'"),
        ("10.1.2.3:0:1767225600123456", "pid '0'"),
        ("10.1.2.3:042:1767225600123456", "pid '042'"),
        ("10.1.2.3: 42:1767225600123456", "pid ' 42'"),
        ("10.1.2.3:4294967296:1767225600123456", "pid 4294967296"),
        ("10.1.2.3:4242:1767225600", "microseconds"),  # seconds, not microseconds
        ("10.1.2.3:4242:+1767225600123456", "timestamp '+1767225600123456'"),
        ("10.1.2.3:4242:1767225600123456.5", "timestamp"),
        ("10.1.2.3:4242:99999999999999999", "microseconds"),
    ],
)
def test_malformed_ids_are_rejected_with_a_reason(text: str, complaint: str) -> None:
    with pytest.raises(
        InvalidEventIdError, match=complaint.replace("+", r"\+").replace(".", r"\.")
    ):
        EventId.parse(text)
    assert not EventId.is_valid(text)


def test_a_non_string_is_rejected() -> None:
    with pytest.raises(InvalidEventIdError, match="must be a string"):
        EventId.parse(12345)  # type: ignore[arg-type]


def test_ids_order_by_server_then_pid_then_time() -> None:
    a = EventId("10.0.0.1", 5, MIN_TS_US + 2)
    b = EventId("10.0.0.1", 5, MIN_TS_US + 3)
    assert a < b


@pytest.mark.parametrize(
    "ip", ["10.01.2.3", "256.1.1.1", "1.2.3", "1.2.3.4.5", "1.2.3.-4", " 1.2.3.4", "01.2.3.4"]
)
def test_only_canonical_ipv4_addresses_are_accepted(ip: str) -> None:
    with pytest.raises(InvalidEventIdError, match="canonical IPv4"):
        EventId.parse(f"{ip}:4242:1767225600123456")


def _canonical_by_the_rules(text: str) -> bool:
    """The documented rules, spelled out slowly (the module docstring): what parse
    must accept, whatever way it checks."""
    parts = text.split(":")
    if len(parts) != 3:
        return False
    ip, pid, ts = parts
    octets = ip.split(".")
    if len(octets) != 4 or not all(o.isascii() and o.isdigit() for o in octets):
        return False
    if any(len(o) > 1 and o[0] == "0" for o in octets) or any(int(o) > 255 for o in octets):
        return False
    for value in (pid, ts):
        if not (value.isascii() and value.isdigit()) or value[0] == "0":
            return False
    return 0 < int(pid) <= MAX_PID and MIN_TS_US <= int(ts) < MAX_TS_US


near_misses = st.builds(
    lambda ip, pid, ts, sep: f"{ip}{sep}{pid}{sep}{ts}",
    st.one_of(ips, st.from_regex(r"[0-9.]{1,17}", fullmatch=True), st.text(max_size=8)),
    st.one_of(pids.map(str), st.from_regex(r"[-+0-9 ]{1,11}", fullmatch=True)),
    st.one_of(timestamps.map(str), st.from_regex(r"[0-9.+]{1,20}\n?", fullmatch=True)),
    st.sampled_from([":", ":", ":", "::", ";"]),
)


@given(near_misses)
def test_parse_accepts_exactly_the_canonical_ids(text: str) -> None:
    assert EventId.is_valid(text) == _canonical_by_the_rules(text)
    if EventId.is_valid(text):
        assert str(EventId.parse(text)) == text


def test_a_parsed_id_equals_a_built_one_and_keeps_its_text() -> None:
    text = "10.1.2.3:4242:1767225600123456"
    parsed, built = EventId.parse(text), EventId("10.1.2.3", 4242, 1767225600123456)
    assert parsed == built and hash(parsed) == hash(built) and not parsed < built
    assert str(parsed) == str(built) == text
    assert repr(parsed) == repr(built)
    again = pickle.loads(pickle.dumps(parsed))  # noqa: S301 (our own bytes: Spark pickles ids)
    assert again == parsed and str(again) == text
    changed = dataclasses.replace(parsed, pid=7)
    assert str(changed) == "10.1.2.3:7:1767225600123456"  # its own text, not the old one


def test_the_checked_addresses_kept_stay_bounded_and_never_admit_a_bad_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import registry.ids as ids

    monkeypatch.setattr(ids, "_CANONICAL_IPS", set())
    monkeypatch.setattr(ids, "_CANONICAL_IPS_MAX", 2)
    for n in range(5):
        assert EventId.parse(f"10.0.0.{n}:1:1767225600123456").server_ip == f"10.0.0.{n}"
        assert len(ids._CANONICAL_IPS) <= 2
        with pytest.raises(InvalidEventIdError, match="canonical IPv4"):
            EventId.parse(f"10.0.0.0{n}:1:1767225600123456")
    assert not any(ip.startswith("10.0.0.0") and len(ip) > 8 for ip in ids._CANONICAL_IPS)
