"""Run ``python <args>`` as a child of the app's fork server (spark_apps/fork_server.py).

``spark_apps/spark_python`` runs this file with the interpreter's ``-I -S`` (the
standard library only: a few ms) for a process Spark starts, when the app's
driver named its server in ``SPARK_PYTHON_FORK_SERVER``. It sends the server its
arguments, environment, working directory and standard streams, then stands in
for the child: the signals it gets go to the child, and it exits as the child
did (by the same signal, or with its code).

How it fails: if the server cannot be reached or refuses, before any child
exists, this process becomes ``$SPARK_PYTHON_INTERPRETER <args>`` (``exec``), as
without the server. If the server goes while the child runs, it waits for the
child to end and exits 1 (the child's status is the server's to collect).
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import socket
import struct
import sys
from typing import NoReturn

#: Where the app's fork server listens, as its driver tells ``spark_apps/spark_python``.
SOCKET_ENV = "SPARK_PYTHON_FORK_SERVER"
INTERPRETER_ENV = "SPARK_PYTHON_INTERPRETER"
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1,
             signal.SIGUSR2)  # fmt: skip


def run_interpreter(args: list[str]) -> NoReturn:
    interpreter = os.environ.get(INTERPRETER_ENV) or sys.executable
    os.execv(interpreter, [interpreter, *args])  # noqa: S606


def encode_request(argv: list[str], env: dict[str, str], cwd: str) -> bytes:
    """The request: its body's length (4 bytes, big-endian), then the body, JSON."""
    body = json.dumps({"argv": argv, "env": env, "cwd": cwd}).encode()
    return struct.pack("!I", len(body)) + body


def ask(path: str, args: list[str]) -> tuple[socket.socket, int] | None:
    """The connection and the child's pid; None when the server refused."""
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.connect(path)
    cwd = os.getcwd()  # noqa: PTH109 (the standard library's least: no pathlib)
    message = encode_request(args, dict(os.environ), cwd)
    sent = socket.send_fds(conn, [message], [0, 1, 2])
    if sent < len(message):
        conn.sendall(message[sent:])
    line = _line(conn)
    pid = int(line) if line else 0
    if pid <= 0:
        conn.close()
        return None
    return conn, pid


def _line(conn: socket.socket) -> bytes | None:
    data = b""
    while not data.endswith(b"\n"):
        chunk = conn.recv(64)
        if not chunk:
            return None
        data += chunk
    return data.strip()


def wait(conn: socket.socket, pid: int) -> int:
    """The child's exit code as the server reports it (negative: its signal)."""
    line = _line(conn)
    if line is not None:
        return int(line)
    try:  # the server went: wait for the child itself
        pidfd = os.pidfd_open(pid)
    except OSError:
        return 1
    select.select([pidfd], [], [])
    return 1


class Forwarder:
    """Signals to this process, for the child: held until its pid is known."""

    def __init__(self) -> None:
        self.pid = 0
        self.pending: list[int] = []
        for sig in FORWARDED:
            signal.signal(sig, self.on_signal)

    def on_signal(self, number: int, _frame: object) -> None:
        if self.pid:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, number)
        else:
            self.pending.append(number)

    def to(self, pid: int) -> None:
        self.pid = pid
        for number in self.pending:
            self.on_signal(number, None)

    def die_of_pending(self) -> None:
        """No child will come: a signal that came meanwhile ends this process, as it would
        have (the interpreter this process becomes would not know of it)."""
        for number in self.pending:
            signal.signal(number, signal.SIG_DFL)
            os.kill(os.getpid(), number)


def main() -> None:
    args = sys.argv[1:]
    path = os.environ.get(SOCKET_ENV)
    if not path:
        run_interpreter(args)
    forwarder = Forwarder()
    try:
        asked = ask(path, args)
    except (OSError, ValueError):
        asked = None
    if asked is None:
        forwarder.die_of_pending()
        run_interpreter(args)
    conn, pid = asked
    forwarder.to(pid)
    code = wait(conn, pid)
    if code < 0:
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    sys.exit(code)


if __name__ == "__main__":
    main()
