"""Loopback port checks for the local stack and the tests.

``photon up`` checks every port it needs before it starts anything, so a
taken port fails with an error that names the port and the setting holding it,
and leaves nothing half-started.
"""

from __future__ import annotations

import os
import random
import socket
import threading
from collections.abc import Mapping
from pathlib import Path

from photon.errors import PhotonError
from photon.settings import PORT_SLICE_ENV_VAR


class PortInUseError(PhotonError, RuntimeError):
    def __init__(self, host: str, taken: Mapping[str, int]) -> None:
        listing = ", ".join(f"{port} ({setting})" for setting, port in taken.items())
        super().__init__(
            f"port(s) already in use on {host}: {listing}. Nothing was started. "
            "Stop whatever holds them, or choose other ports with PHOTON_STACK__* settings."
        )
        self.taken = dict(taken)


class NoFreePortError(PhotonError, RuntimeError):
    pass


def port_is_free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # As the servers bind: connections of a just-killed server linger in TIME_WAIT,
        # and they must not make its port look taken when it restarts.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def port_is_listening(host: str, port: int, timeout_s: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except OSError:
        return False


def require_free(host: str, ports: Mapping[str, int]) -> None:
    taken = {setting: port for setting, port in ports.items() if not port_is_free(host, port)}
    if taken:
        raise PortInUseError(host, taken)


#: The kernel hands out ports of this range to outgoing connections (bind(0) too).
EPHEMERAL_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
#: Below this are the ports that servers are commonly configured on.
LOWEST_PICK = 20_000


def _below_ephemeral() -> range:
    """Below the ephemeral range, above :data:`LOWEST_PICK`."""
    try:
        ephemeral_low = int(EPHEMERAL_RANGE_FILE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        ephemeral_low = 32_768  # Linux's default
    return range(LOWEST_PICK, max(LOWEST_PICK, ephemeral_low))


def _in_slice(whole: range) -> range:
    """This process's slice of ``whole``, if it has one (``PHOTON_PORT_SLICE=<i>/<n>``:
    the i-th of n equal slices). Processes that pick at once (the test suite's workers)
    set each its own: a port one picked and has not bound yet (a stack's, until
    ``photon up`` starts it) is never another's pick."""
    index, count = _port_slice()
    size = len(whole) // count
    return whole[index * size : (index + 1) * size]


def _port_slice() -> tuple[int, int]:
    value = os.environ.get(PORT_SLICE_ENV_VAR, "").strip()
    if not value:
        return 0, 1
    index_text, _, count_text = value.partition("/")
    try:
        index, count = int(index_text), int(count_text)
    except ValueError:
        index, count = -1, 0
    if not 0 <= index < count:
        raise PhotonError(
            f"{PORT_SLICE_ENV_VAR} must be <i>/<n> with 0 <= i < n (this process picks from "
            f"the i-th of n slices of the port range), not {value!r}"
        )
    return index, count


class _PortPicker:
    """Hands out ports in turn from a random start: a process never hands out one
    port twice in a row, and two processes start far apart (in slices of their own
    if they have them, :func:`_in_slice`)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._next: int | None = None

    def pick(self, count: int, host: str, consecutive: bool) -> list[int] | None:
        whole = _below_ephemeral()
        if len(whole) < 1_000:  # a kernel configured otherwise: its own choice
            return None
        ports = _in_slice(whole)
        if not ports:
            raise NoFreePortError(f"{PORT_SLICE_ENV_VAR} leaves no port of {whole}")
        picked: list[int] = []
        with self._lock:
            if self._next is None:
                self._next = random.randrange(len(ports))
            for _ in range(len(ports)):
                port = ports[self._next % len(ports)]
                self._next += 1
                free = port_is_free(host, port)
                if consecutive and (not free or (picked and port != picked[-1] + 1)):
                    picked = []  # a run starts again
                if free:
                    picked.append(port)
                    if len(picked) == count:
                        return picked
        raise NoFreePortError(
            f"no {count} free port(s) on {host} in {ports.start}-{ports.stop - 1}"
        )


_picker = _PortPicker()


def free_ports(count: int, host: str = "127.0.0.1", consecutive: bool = False) -> list[int]:
    """``count`` distinct ports that were free a moment ago (for tests and ad-hoc stacks);
    ``consecutive``: a run of them, for settings that take a base port.

    They are picked below the kernel's ephemeral range: a port picked there (as
    ``bind(0)`` does) can be taken by any outgoing connection before the server
    that was to listen on it binds it.
    """
    picked = _picker.pick(count, host, consecutive)
    if picked is not None:
        return picked
    for _ in range(50):
        ports = _kernel_choice(count, host)
        if not consecutive:
            return ports
        base = ports[0]
        run = list(range(base, base + count))
        if run[-1] <= 65_535 and all(port_is_free(host, port) for port in run):
            return run
    raise NoFreePortError(f"no {count} consecutive free ports on {host}")


def _kernel_choice(count: int, host: str) -> list[int]:
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind((host, 0))
            sockets.append(sock)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for sock in sockets:
            sock.close()
