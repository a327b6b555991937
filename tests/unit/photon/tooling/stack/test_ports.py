"""Ports for tests and ad-hoc stacks are picked where no outgoing connection takes them."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from photon.errors import PhotonError
from photon.settings import PORT_SLICE_ENV_VAR
from photon.tooling.stack import ports
from photon.tooling.stack.ports import free_ports, port_is_free

pytestmark = pytest.mark.unit


def _ephemeral_low() -> int:
    return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])


def test_free_ports_are_distinct_free_and_below_the_ephemeral_range() -> None:
    picked = free_ports(20)
    assert len(set(picked)) == 20
    assert all(ports.LOWEST_PICK <= port < _ephemeral_low() for port in picked)
    assert all(port_is_free("127.0.0.1", port) for port in picked)


def test_a_port_in_use_is_passed_over_and_none_is_handed_out_twice_in_a_row(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    picker = ports._PortPicker()
    monkeypatch.setattr(ports, "_picker", picker)
    first = free_ports(5)
    assert picker._next is not None
    upcoming = ports._in_slice(ports._below_ephemeral())[
        picker._next % len(ports._in_slice(ports._below_ephemeral()))
    ]
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", upcoming))
        listener.listen()
        later = free_ports(200)
    assert upcoming not in later
    assert not set(first) & set(later)


def test_a_kernel_whose_ephemeral_range_starts_low_gets_its_own_choice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    range_file = tmp_path / "ip_local_port_range"
    range_file.write_text("1024\t65535\n")
    monkeypatch.setattr(ports, "EPHEMERAL_RANGE_FILE", range_file)
    [port] = free_ports(1)
    assert port >= _ephemeral_low()  # the kernel's bind(0), from its real range


def test_a_consecutive_run_skips_a_port_in_use_and_overlaps_no_other_pick(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    picker = ports._PortPicker()
    monkeypatch.setattr(ports, "_picker", picker)
    metrics = free_ports(4, consecutive=True)
    assert picker._next is not None
    upcoming = ports._in_slice(ports._below_ephemeral())[
        (picker._next + 1) % len(ports._in_slice(ports._below_ephemeral()))
    ]
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", upcoming))
        listener.listen()
        ui = free_ports(3, consecutive=True)
    assert metrics == list(range(metrics[0], metrics[0] + 4))
    assert ui == list(range(ui[0], ui[0] + 3))
    assert upcoming not in ui and not set(metrics) & set(ui)


def test_processes_with_slices_of_their_own_never_pick_the_same_port(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    picks: list[set[int]] = []
    for index in range(3):
        monkeypatch.setenv(PORT_SLICE_ENV_VAR, f"{index}/3")
        monkeypatch.setattr(ports, "_picker", ports._PortPicker())
        picked = set(free_ports(300))
        whole = ports._below_ephemeral()
        size = len(whole) // 3
        assert all(
            whole.start + index * size <= port < whole.start + (index + 1) * size for port in picked
        )
        picks.append(picked)
    assert not (picks[0] & picks[1] or picks[0] & picks[2] or picks[1] & picks[2])


@pytest.mark.parametrize("value", ["3/3", "-1/2", "a/b", "1", "0/0"])
def test_a_slice_that_is_not_one_of_its_count_is_refused_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv(PORT_SLICE_ENV_VAR, value)
    monkeypatch.setattr(ports, "_picker", ports._PortPicker())
    with pytest.raises(PhotonError, match=PORT_SLICE_ENV_VAR):
        free_ports(1)
