"""A fork server for the Python processes Spark starts on an app's host.

On a local master Spark starts some ten Python processes an app: for its log
source a daemon and workers to create it and to plan each batch's read and a
runner a stream, and the daemon its task workers are forked from. Each is a new
interpreter that imports PySpark (and the project's modules) before it does
anything: 0.15 to 1.2 CPU-s each, on the path to the first batch (docs/deploy.md,
"Start-up"). The app's driver starts this server as it starts its session
(:func:`start`); the server imports what those processes import, once, and
forks one child per process Spark starts, which runs the module Spark named
with Spark's arguments, environment and standard streams.

Spark starts them all through ``spark_apps/spark_python``, which hands a
``-m <module>`` that this server serves to ``spark_apps/fork_client.py``: the
client sends its arguments, environment, working directory and standard streams
(file descriptors over the Unix socket), learns its child's pid, forwards the
signals it gets to the child and exits as the child does. What Spark holds is
the client: its pipes are the child's, a signal to it reaches the child, its
exit status is the child's.

How it fails: never in a way that changes what a process does. A client that
cannot reach the server (not started yet, gone) or is refused (a module not
served, a working directory or ``PYTHONPATH`` other than the server's) runs the
interpreter itself, as without the server. The server serves only while it is
one thread (a fork copies only the forking thread) and its parent lives: when
the pipe its driver holds ends (the driver exited) it stops, and children
already forked run on, their clients still holding their streams. Each child
is named as Spark started it (``setproctitle``: ``ps`` shows ``python -m
pyspark.daemon …``, not the driver it was forked from). A client that is
killed (SIGKILL: nothing to forward) has its child killed by the server, which
sees the client's connection close. The socket lives in a directory only its
user can enter, and the server serves only its own user (``SO_PEERCRED``);
the server removes it as it stops, and so does its driver. Killed together
(SIGKILL to their process group) neither can: the directory stays, with a lock
file that the driver and the server hold (``flock``) while either lives, and the
next :func:`start` removes every such directory whose lock no one holds
(:func:`remove_stale_directories`).
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import fcntl
import gc
import io
import json
import os
import select
import shlex
import shutil
import signal
import socket
import stat
import struct
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import setproctitle

from spark_apps import SINGLE_THREADED_ENV, preloading_daemon
from spark_apps.fork_client import SOCKET_ENV
from spark_apps.without_pandas import pandas_hidden

MODULE = "spark_apps.fork_server"

#: The modules Spark runs as ``python -m <module>`` on an app's host that the server
#: serves, and what each imports (the server imports them all before it serves).
SERVED: dict[str, tuple[str, ...]] = {
    "pyspark.daemon": (
        "pyspark.daemon",
        "pyspark.sql.worker.create_data_source",
        "pyspark.sql.worker.plan_data_source_read",
        "pyspark.sql.worker.lookup_data_sources",
    ),
    "pyspark.sql.streaming.python_streaming_source_runner": (
        "pyspark.sql.streaming.python_streaming_source_runner",
    ),
    preloading_daemon.MODULE: tuple(preloading_daemon.modules_for([preloading_daemon.MODULE])),
}
#: What Spark's processes unpickle: the log source, by its module.
EXTRA_PRELOADS = ("spark_apps.growing_log_source",)

#: How long the server waits for a connected client's request.
REQUEST_TIMEOUT_S = 5.0
#: A request's largest size (its environment, mostly).
MAX_REQUEST_BYTES = 1 << 20
_HEADER = struct.Struct("!I")

#: :func:`start` makes each server's socket directory in the temporary directory
#: (``TMPDIR``), named with this prefix.
DIRECTORY_PREFIX = "photon-fork-"
#: In that directory, the file a driver and its server hold locked while either lives.
LOCK_NAME = "lock"
#: How old a directory with no lock file must be to be stale: :func:`start` makes the
#: lock right after the directory (the grace covers the moment in between), and
#: directories made before servers locked them have none.
UNLOCKED_GRACE_S = 60.0


@dataclass
class Request:
    """What a client asks: ``python <argv...>`` in ``cwd`` with ``env``."""

    argv: list[str]
    env: dict[str, str]
    cwd: str

    @property
    def module(self) -> str | None:
        return self.argv[1] if len(self.argv) >= 2 and self.argv[0] == "-m" else None


def decode_request(data: bytes) -> Request:
    """A request's body, as ``spark_apps/fork_client.py`` encodes it (after its length)."""
    raw = json.loads(data)
    argv, env, cwd = raw["argv"], raw["env"], raw["cwd"]
    if not (isinstance(argv, list) and all(isinstance(a, str) for a in argv)):
        raise ValueError("argv must be a list of strings")
    if not (isinstance(env, dict) and all(isinstance(v, str) for v in env.values())):
        raise ValueError("env must map strings to strings")
    if not isinstance(cwd, str):
        raise ValueError("cwd must be a string")
    return Request(argv, env, cwd)


def _path_entries(value: str | None) -> list[str]:
    return [entry for entry in (value or "").split(os.pathsep) if entry]


def refusal(request: Request, own_env: Mapping[str, str], own_cwd: str) -> str | None:
    """Why the server will not fork ``request`` (None: it will): the module is not one
    it serves, or the child would import from elsewhere than the server did."""
    if request.module not in SERVED:
        return f"module {request.module!r} not served"
    if request.cwd != own_cwd:
        return "another working directory"  # python -m puts it first on sys.path
    if _path_entries(request.env.get("PYTHONPATH")) != _path_entries(own_env.get("PYTHONPATH")):
        return "another PYTHONPATH"
    return None


def preloads() -> list[str]:
    """Every module the server imports before it serves."""
    modules = [m for served in SERVED.values() for m in served] + list(EXTRA_PRELOADS)
    return list(dict.fromkeys(modules))


def _recv_request(conn: socket.socket) -> tuple[Request, list[int]]:
    conn.settimeout(REQUEST_TIMEOUT_S)
    data, fds, _flags, _addr = socket.recv_fds(conn, 1 << 16, 3)
    try:
        while len(data) < _HEADER.size:
            chunk = conn.recv(1 << 16)
            if not chunk:
                raise ValueError("request cut short")
            data += chunk
        (size,) = _HEADER.unpack_from(data)
        if size > MAX_REQUEST_BYTES:
            raise ValueError(f"request of {size} bytes")
        while len(data) < _HEADER.size + size:
            chunk = conn.recv(1 << 16)
            if not chunk:
                raise ValueError("request cut short")
            data += chunk
        if len(fds) != 3:
            raise ValueError(f"{len(fds)} file descriptors, not 3")
        return decode_request(data[_HEADER.size : _HEADER.size + size]), fds
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise


def _std_streams(unbuffered: bool) -> None:
    """New ``sys.std*`` over fds 0-2, as a fresh interpreter makes them."""
    sys.stdin = io.TextIOWrapper(open(0, "rb", closefd=False), encoding="utf-8")  # noqa: SIM115
    for fd, name in ((1, "stdout"), (2, "stderr")):
        raw: Any = open(fd, "wb", buffering=0, closefd=False)  # noqa: SIM115
        binary = raw if unbuffered else io.BufferedWriter(raw)
        stream = io.TextIOWrapper(
            binary,
            encoding="utf-8",
            errors="backslashreplace" if name == "stderr" else "strict",
            line_buffering=name == "stderr" or os.isatty(fd),
            write_through=unbuffered,
        )
        setattr(sys, name, stream)


def _become(request: Request, fds: Sequence[int]) -> NoReturn:
    """In the forked child: take the client's streams and environment, run its module."""
    code: int = 1
    try:
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        # Nothing else of the server's (or its driver's: a lock, a log): a new interpreter
        # that Spark started would have only the three.
        os.closerange(3, os.sysconf("SC_OPEN_MAX"))
        # Named in ps as Spark started it, not as the driver it was forked from.
        setproctitle.setproctitle(shlex.join([sys.executable, *request.argv]))
        signal.set_wakeup_fd(-1)
        for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGPIPE, signal.SIG_IGN)  # as Python starts
        signal.signal(signal.SIGINT, signal.default_int_handler)
        atexit._clear()  # its parent's: a new interpreter has none
        os.environ.clear()
        os.environ.update(request.env)
        _std_streams(bool(request.env.get("PYTHONUNBUFFERED")))
        sys.argv = ["-m", *request.argv[2:]]
        import runpy
        import warnings

        # The module was imported here already, as every served one is: that is the point.
        warnings.filterwarnings("ignore", message=".* found in sys.modules after import of package",
                                category=RuntimeWarning)  # fmt: skip
        runpy.run_module(request.argv[1], run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as exc:
        if exc.code is None:
            code = 0
        elif isinstance(exc.code, int):
            code = exc.code
        else:
            print(exc.code, file=sys.stderr)
            code = 1
    except BaseException:
        traceback.print_exc()
        code = 1
    finally:
        with contextlib.suppress(BaseException):
            _join_threads()
        with contextlib.suppress(BaseException):
            atexit._run_exitfuncs()
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(BaseException):
                stream.flush()
        os._exit(code & 0xFF)


def _join_threads() -> None:
    """Wait for the module's non-daemon threads, as an interpreter does before it exits."""
    import threading

    for thread in threading.enumerate():
        if thread is not threading.current_thread() and not thread.daemon:
            thread.join()


def _peer_is_me(conn: socket.socket) -> bool:
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    _pid, uid, _gid = struct.unpack("3i", creds)
    return bool(uid == os.getuid())


def serve(socket_path: Path, parent_end: int = 0) -> int:
    """Import :func:`preloads`, then serve on ``socket_path`` until ``parent_end`` (a
    pipe its parent holds the other end of) ends. The socket's directory is the
    server's: removed as it stops, if nothing else is in it."""
    setproctitle.setproctitle(shlex.join([sys.executable, "-m", MODULE, str(socket_path)]))
    os.environ.update(SINGLE_THREADED_ENV)
    # pyarrow.dataset imports pandas when it can: ~0.2 CPU-s for what no Spark process of
    # the apps uses (spark_apps/without_pandas.py). One that does imports it itself.
    with pandas_hidden():
        failed = preloading_daemon.preload(preloads())
    if preloading_daemon.threads() != 1:
        print("fork_server: a preloaded module started a thread; not serving", file=sys.stderr)
        return 1
    gc.collect()
    gc.freeze()  # what the children share: out of their collections' way
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the driver's stop reaches us as EOF
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    ready = socket_path.with_name(socket_path.name + ".binding")
    with contextlib.suppress(FileNotFoundError):
        ready.unlink()
    listener.bind(str(ready))
    listener.listen(64)
    ready.rename(socket_path)  # clients connect only once it serves
    if failed:
        print(f"fork_server: serving without {failed}", file=sys.stderr)
    own_env, own_cwd = dict(os.environ), str(Path.cwd())
    children: dict[int, socket.socket | None] = {}  # a child's pid: its client, if alive
    clients: dict[int, int] = {}  # a client connection's fd: its child's pid
    conns: dict[int, socket.socket] = {}
    try:
        while True:
            waiting: list[Any] = [parent_end, wake_r, listener, *conns.values()]
            readable, _, _ = select.select(waiting, [], [])
            if parent_end in readable and not os.read(parent_end, 4096):
                return 0  # the driver is gone, or stopped us
            if wake_r in readable:
                with contextlib.suppress(BlockingIOError):
                    os.read(wake_r, 4096)
                _reap(children, clients, conns)
            for conn in [c for c in readable if isinstance(c, socket.socket) and c is not listener]:
                pid = clients.pop(conn.fileno(), None)
                conns.pop(conn.fileno(), None)
                if pid is not None and pid in children:  # its client went before it
                    _kill(pid)
                    children[pid] = None
                conn.close()
            if listener in readable:
                conn, _ = listener.accept()
                try:
                    if not _peer_is_me(conn):
                        conn.close()
                        continue
                    request, fds = _recv_request(conn)
                except (OSError, ValueError) as exc:
                    print(f"fork_server: a request not read: {exc!r}", file=sys.stderr)
                    conn.close()
                    continue
                why = refusal(request, own_env, own_cwd)
                if why is not None:
                    for fd in fds:
                        os.close(fd)
                    with contextlib.suppress(OSError):
                        conn.sendall(b"0\n")
                    conn.close()
                    print(f"fork_server: {request.module} refused: {why}", file=sys.stderr)
                    continue
                for stream in (sys.stdout, sys.stderr):
                    stream.flush()
                pid = os.fork()
                if pid == 0:
                    _become(request, fds)
                for fd in fds:
                    os.close(fd)
                try:
                    conn.setblocking(True)
                    conn.sendall(f"{pid}\n".encode())
                except OSError:  # the client went already
                    _kill(pid)
                    children[pid] = None
                    conn.close()
                    continue
                children[pid] = conn
                clients[conn.fileno()] = pid
                conns[conn.fileno()] = conn
    finally:
        listener.close()
        for name in (socket_path.name, LOCK_NAME):
            with contextlib.suppress(FileNotFoundError):
                (socket_path.parent / name).unlink()
        # The directory is the server's (start() made it for it): a driver that was
        # SIGKILLed cannot remove it, and an empty one is all that is left of it here.
        with contextlib.suppress(OSError):
            socket_path.parent.rmdir()


def _kill(pid: int) -> None:
    """SIGKILL, as the client got (a signal it could catch, it would have forwarded)."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def _reap(
    children: dict[int, socket.socket | None],
    clients: dict[int, int],
    conns: dict[int, socket.socket],
) -> None:
    """Collect every child that ended; tell its client how (its wait status's code)."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        conn = children.pop(pid, None)
        if conn is None:  # its client is gone (or it was never ours)
            continue
        clients.pop(conn.fileno(), None)
        conns.pop(conn.fileno(), None)
        with contextlib.suppress(OSError):
            conn.sendall(f"{os.waitstatus_to_exitcode(status)}\n".encode())
        conn.close()


@dataclass
class ForkServer:
    """A running server, as :func:`start` gives it: its pid, the pipe whose end it waits
    for (its parent's write end), its socket's directory."""

    pid: int
    parent_end: int
    directory: Path
    forked: bool
    lock_fd: int = -1

    @property
    def socket_path(self) -> Path:
        return self.directory / "s"

    def stop(self) -> None:
        """End its serving (its children run on) and collect it; idempotent."""
        if self.parent_end >= 0:
            with contextlib.suppress(OSError):
                os.close(self.parent_end)
            self.parent_end = -1
            for _ in range(200):  # ~10 s
                with contextlib.suppress(ChildProcessError):
                    if os.waitpid(self.pid, os.WNOHANG)[0] == 0:
                        time.sleep(0.05)
                        continue
                break
            else:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(self.pid, signal.SIGKILL)
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(self.pid, 0)
        shutil.rmtree(self.directory, ignore_errors=True)
        if self.lock_fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self.lock_fd)
            self.lock_fd = -1


def _locked_file(directory: Path) -> int:
    """Make ``directory``'s lock file, locked by this process (its descriptor): made
    under another name and locked before it is renamed, so no sweep finds it unlocked."""
    making = directory / f"{LOCK_NAME}.new"
    fd = os.open(making, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        making.rename(directory / LOCK_NAME)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _is_stale(directory: Path, made_at: float) -> bool:
    """Whether the socket directory's server and driver are both gone: its lock is free
    (taking it here is only a test: the directory is removed next), or it has none and
    is older than the grace and no server listens on its socket."""
    try:
        fd = os.open(directory / LOCK_NAME, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        if time.time() - made_at < UNLOCKED_GRACE_S:
            return False
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
            try:
                probe.connect(str(directory / "s"))
            except OSError:  # no socket (never bound), or no one listening on it
                return True
            return False  # a server from before the lock files: it serves
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    finally:
        os.close(fd)
    return True


def remove_stale_directories(parent: Path | None = None) -> list[Path]:
    """Remove the socket directories in ``parent`` (the temporary directory) that this
    user's servers left when killed with their drivers; the removed ones.

    Only directories named with :data:`DIRECTORY_PREFIX`, owned by this user and not
    symbolic links are looked at; a live server's (its lock held) and a new one's
    (no lock yet, within :data:`UNLOCKED_GRACE_S`) are left alone."""
    removed: list[Path] = []
    root = Path(tempfile.gettempdir()) if parent is None else parent
    for directory in root.glob(f"{DIRECTORY_PREFIX}*"):
        try:
            status = os.lstat(directory)
            if not stat.S_ISDIR(status.st_mode) or status.st_uid != os.getuid():
                continue
            if not _is_stale(directory, status.st_mtime):
                continue
        except OSError:  # gone meanwhile, or not ours to read
            continue
        shutil.rmtree(directory, ignore_errors=True)
        if not directory.exists():
            removed.append(directory)
    return removed


def start() -> ForkServer:
    """Start this app's server and point Spark's Python processes at it (their launcher
    reads :data:`SOCKET_ENV`); it stops with this process or :meth:`ForkServer.stop`.

    Forked from this process while it is one thread (an app's driver, before its session
    and metrics start: ``spark_apps`` keeps numpy's and Arrow's threads from starting),
    the server has the driver's modules already and imports only what Spark's processes
    add (~0.45 CPU-s in a compare run here); otherwise a new interpreter imports them all
    (~1 CPU-s). Before it, the directories of servers killed with their drivers go
    (:func:`remove_stale_directories`)."""
    with contextlib.suppress(OSError):  # a sweep that fails leaves them, nothing more
        remove_stale_directories()
    directory = Path(tempfile.mkdtemp(prefix=DIRECTORY_PREFIX))  # 0700: this user only
    socket_path = directory / "s"
    lock_fd = _locked_file(directory)  # held here and by the server (same lock)
    read_end, write_end = os.pipe()  # neither inherited by what this process runs
    if preloading_daemon.threads() == 1:
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        pid = os.fork()
        if pid == 0:  # the server: never returns into the driver's code
            code = 1
            try:
                # The pipe as 3 and the lock as 4 (above both first: either may be 3 or
                # 4 now), and nothing else of the driver's but its streams.
                above = [fcntl.fcntl(fd, fcntl.F_DUPFD, 5) for fd in (read_end, lock_fd)]
                for target, fd in enumerate(above, start=3):
                    os.dup2(fd, target)
                os.closerange(5, os.sysconf("SC_OPEN_MAX"))
                code = serve(socket_path, 3)
            except BaseException:
                traceback.print_exc()
            finally:
                os._exit(code)
        forked = True
    else:
        process = subprocess.Popen(
            [sys.executable, "-m", MODULE, str(socket_path)],
            stdin=read_end,
            pass_fds=(lock_fd,),
            env=os.environ | SINGLE_THREADED_ENV,
        )
        pid, forked = process.pid, False
        process.returncode = 0  # collected by ForkServer.stop, not by Popen
    os.close(read_end)
    server = ForkServer(pid, write_end, directory, forked, lock_fd)
    atexit.register(server.stop)
    os.environ[SOCKET_ENV] = str(socket_path)
    return server


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1:
        print(f"usage: python -m {MODULE} SOCKET_PATH", file=sys.stderr)
        return 2
    try:
        return serve(Path(args[0]))
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            print(f"fork_server: {args[0]} in use", file=sys.stderr)
            return 1
        raise


if __name__ == "__main__":
    sys.exit(main())
