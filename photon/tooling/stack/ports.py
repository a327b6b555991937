"""Loopback port checks for the local stack and the tests.

``photon up`` checks every port it needs before it starts anything, so a
taken port fails with an error that names the port and the setting holding it,
and leaves nothing half-started.
"""

from __future__ import annotations

import socket
from collections.abc import Mapping

from photon.errors import PhotonError


class PortInUseError(PhotonError, RuntimeError):
    def __init__(self, host: str, taken: Mapping[str, int]) -> None:
        listing = ", ".join(f"{port} ({setting})" for setting, port in taken.items())
        super().__init__(
            f"port(s) already in use on {host}: {listing}. Nothing was started. "
            "Stop whatever holds them, or choose other ports with PHOTON_STACK__* settings."
        )
        self.taken = dict(taken)


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


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """``count`` distinct ports that were free a moment ago (for tests and ad-hoc stacks)."""
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
