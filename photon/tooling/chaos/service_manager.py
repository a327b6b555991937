"""A service manager for the DC pipelines under chaos: restarts what dies, unless told not to.

In a deployment each app runs under a service manager (systemd, Kubernetes)
that restarts it when it dies. :class:`ServiceManager` plays that part for the
chaos harness: it starts each DC's query reader and joiner as child
processes (the same command lines as ``photon run``), restarts an app that
exits for any reason after ``restart_delay_s``, and lets the harness inject
faults: ``kill(dc, app)`` (SIGKILL: the app is restarted), ``take_down(dc)``
(SIGKILL both apps; nothing restarts them until ``bring_up(dc)``), and a
crash with a lost disk: ``start(faulty=…)`` runs an app first with a fault
setting that crashes it, and ``await_crash`` waits for that crash, wipes the
app's local state, as a lost disk would, and starts it afresh, with the
apps held back until then (``start(after_crash=…)``). ``await_exit`` waits
for a faulty run without touching the state, and starts the app again with
the next fault setting of a chain, or none (a crash at each step of a batch,
replayed from the same checkpoint). ``rearm`` stops a running app cleanly
and starts it with a fault setting; ``tree`` lists an app's processes (its
Spark JVM and Python workers too), for faults that stop some of them.

Each app runs in a process group of its own, and whatever of it outlives its
driver (its JVM, its Python workers) is killed and waited for before the app is
started again or its state wiped (:mod:`photon.tooling.process_group`).

How it fails: an app that keeps dying is restarted each time (the harness
reports the restarts); ``stop()`` sends SIGTERM to every app, then SIGKILL
after ``stop_timeout_s``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import structlog

from photon.apps import APP_NAMES
from photon.logconfig import FORMAT_ENV
from photon.settings import PhotonSettings
from photon.tooling.pipeline import app_argv
from photon.tooling.process_group import reap_group, start_app

log = structlog.get_logger(__name__)

#: How long a kill waits to see its SIGKILL end the app (a process in uninterruptible
#: I/O may take longer: the watcher then sees it die).
_KILLED_EXIT_WAIT_S = 10.0


@dataclass
class _App:
    dc: str
    app: str
    log_path: Path
    process: subprocess.Popen[bytes] | None = None
    exited_at: float | None = None  # when the watcher first saw it dead
    log_offset: int = 0  # where its log stood when it last started


@dataclass
class ServiceManagerEvents:
    """What happened to the apps, for the chaos report."""

    starts: Counter[str] = field(default_factory=Counter)  # "<app>[<dc>]" -> starts
    kills: list[dict[str, object]] = field(default_factory=list)
    exits: list[dict[str, object]] = field(default_factory=list)

    def exit_codes(self) -> dict[str, list[int]]:
        """``"<app>[<dc>]"`` -> the statuses its runs died with on their own, in order."""
        codes: dict[str, list[int]] = {}
        for died in self.exits:
            code = died["code"]
            assert isinstance(code, int)
            codes.setdefault(f"{died['app']}[{died['dc']}]", []).append(code)
        return codes


class ServiceManager:
    def __init__(
        self,
        settings: PhotonSettings,
        *,
        env: Mapping[str, str] | None = None,
        config: Path | None = None,
        log_dir: Path | None = None,
        restart_delay_s: float = 1.0,
        stop_timeout_s: float = 60.0,
    ) -> None:
        self.settings = settings
        # JSON log lines: the harness reads the joiners' batch reports back.
        # Unbuffered: a line is in the log when the app says it (the harness waits for some).
        self.env = {**os.environ, FORMAT_ENV: "json", "PYTHONUNBUFFERED": "1", **(env or {})}
        self.config = config
        self.restart_delay_s = restart_delay_s
        self.stop_timeout_s = stop_timeout_s
        self.events = ServiceManagerEvents()
        # Beside the apps' state, not in it: a state wipe must not take the logs.
        log_dir = log_dir or settings.pipeline_root / "_logs"
        self._apps = {
            (dc, app): _App(dc, app, log_dir / f"{app}-{dc}.log")
            for dc in settings.dcs
            for app in APP_NAMES
        }
        self._down: set[str] = set()
        # Apps on their faulty first run: neither restarted nor killed until they crash.
        self._faulty: dict[tuple[str, str], Mapping[str, str]] = {}
        self._after_crash: set[tuple[str, str]] = set()  # started once the faulty ones crashed
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._watcher = threading.Thread(target=self._watch, name="supervisor", daemon=True)

    # -- the harness's controls -----------------------------------------------------

    def start(
        self,
        faulty: Mapping[tuple[str, str], Mapping[str, str]] | None = None,
        after_crash: Collection[tuple[str, str]] = (),
    ) -> None:
        """Start every app; each ``(dc, app)`` of ``faulty`` with that environment on top
        (a fault setting that crashes it): see :meth:`await_crash`. The apps of
        ``after_crash`` start only once that crash came (or never did)."""
        with self._lock:
            self._faulty = dict(faulty or {})
            self._after_crash = set(after_crash)
            for key in self._apps:
                if key not in self._after_crash:
                    self._start(*key, extra_env=self._faulty.get(key))
        self._watcher.start()

    def kill(self, dc: str, app: str) -> int | None:
        """SIGKILL one app (it is restarted); returns the pid killed, None if it was not up.

        An app of a DC the harness holds (down, or crashing on purpose) is left alone.
        """
        with self._lock:
            entry = self._apps[(dc, app)]
            if dc in self._down or (dc, app) in self._faulty:
                return None
            if entry.process is None or entry.process.poll() is not None:
                return None
            pid = entry.process.pid
            entry.process.kill()
            self.events.kills.append({"dc": dc, "app": app, "pid": pid, "at": time.time()})
            log.warning("chaos.kill", dc=dc, app=app, pid=pid)
            # Seen dead here, not on the watcher's next look: a fault that strikes at once
            # after (a DC outage) would take the app out of the watcher's sight first.
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._saw_exit(entry, entry.process.wait(timeout=_KILLED_EXIT_WAIT_S))
            return pid

    def take_down(self, dc: str) -> None:
        """The whole DC pipeline dies (SIGKILL) and stays down until :meth:`bring_up`."""
        with self._lock:
            self._down.add(dc)
            for app in APP_NAMES:
                entry = self._apps[(dc, app)]
                process = entry.process
                if process is None:
                    continue
                if (code := process.poll()) is not None:
                    self._saw_exit(entry, code)  # it died before the outage, on its own
                else:
                    process.kill()
                    process.wait()
                reap_group(process)
        log.warning("chaos.dc_down", dc=dc)

    def bring_up(self, dc: str) -> None:
        with self._lock:
            self._down.discard(dc)
            for app in APP_NAMES:
                entry = self._apps[(dc, app)]
                if entry.process is None or entry.process.poll() is not None:
                    self._start(dc, app)
        log.warning("chaos.dc_up", dc=dc)

    def await_crash(
        self, dc: str, app: str, timeout_s: float, keep: Collection[int] = ()
    ) -> int | None:
        """Wait for the faulty run of ``app`` (see :meth:`start`) to exit, then wipe its state.

        The app's local state (checkpoint, retry store, attempt name) goes as a
        lost disk would take it; it is then started afresh, as a new attempt.
        What is left of the run but the pids in ``keep`` (a frozen zombie worker)
        is killed first. Returns the faulty run's exit status (None: it did not
        crash in time, and was killed).
        """
        code = self._await_faulty(dc, app, timeout_s, keep)
        with self._lock:
            shutil.rmtree(self.settings.pipeline_dir(dc, app), ignore_errors=True)
            del self._faulty[(dc, app)]
            for key in [(dc, app), *sorted(self._after_crash)]:
                if key[0] not in self._down:
                    self._start(*key, extra_env=self._faulty.get(key))
            self._after_crash.clear()
        log.warning("chaos.crash_with_lost_state", dc=dc, app=app, code=code)
        return code

    def await_exit(
        self,
        dc: str,
        app: str,
        timeout_s: float,
        then: Mapping[str, str] | None = None,
        before_restart: Callable[[], object] = lambda: None,
    ) -> int | None:
        """Wait for the faulty run of ``app`` to exit, keeping its state; call
        ``before_restart`` (what happens while it is down), then start it again with the
        fault setting ``then`` (it stays faulty) or, None, as usual. Returns the run's
        exit status (None: it did not exit in time, and was killed)."""
        code = self._await_faulty(dc, app, timeout_s)
        before_restart()
        with self._lock:
            if then is None:
                del self._faulty[(dc, app)]
            else:
                self._faulty[(dc, app)] = then
            if dc not in self._down:
                self._start(dc, app, extra_env=then)
        log.warning("chaos.faulty_run_ended", dc=dc, app=app, code=code, next=dict(then or {}))
        return code

    def rearm(self, dc: str, app: str, env: Mapping[str, str]) -> None:
        """Stop ``app`` cleanly (SIGTERM) and start it with the fault setting ``env``: a
        faulty run, ended with :meth:`await_crash` or :meth:`await_exit`."""
        with self._lock:
            entry = self._apps[(dc, app)]
            self._faulty[(dc, app)] = env
            process = entry.process
        self._stop_cleanly(process)
        with self._lock:
            self._start(dc, app, extra_env=env)

    def restart_afresh(self, dc: str, app: str) -> None:
        """Stop ``app`` cleanly (SIGTERM), wipe its local state and start it again: a new
        attempt, which reads its logs from their start."""
        with self._lock:
            entry = self._apps[(dc, app)]
            self._faulty[(dc, app)] = {}  # not restarted by the watcher meanwhile
            process = entry.process
        self._stop_cleanly(process)
        with self._lock:
            shutil.rmtree(self.settings.pipeline_dir(dc, app), ignore_errors=True)
            del self._faulty[(dc, app)]
            self._start(dc, app)
        log.warning("chaos.restarted_afresh", dc=dc, app=app)

    def tree(self, dc: str, app: str) -> list[psutil.Process]:
        """The app's process and all its descendants (its JVM, its Python workers)."""
        with self._lock:
            process = self._apps[(dc, app)].process
        if process is None or process.poll() is not None:
            return []
        try:
            root = psutil.Process(process.pid)
            return [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return []

    def _await_faulty(
        self, dc: str, app: str, timeout_s: float, keep: Collection[int] = ()
    ) -> int | None:
        """The exit status of ``app``'s faulty run (None: killed after ``timeout_s``),
        once nothing of it but ``keep`` is left."""
        with self._lock:
            process = self._apps[(dc, app)].process
        assert process is not None and (dc, app) in self._faulty, f"{app}[{dc}] is not faulty"
        try:
            code: int | None = process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            code = None
        reap_group(process, keep=keep)
        return code

    def _stop_cleanly(self, process: subprocess.Popen[bytes] | None) -> None:
        """SIGTERM, then SIGKILL after ``stop_timeout_s``; the caller made it faulty first,
        so the watcher does not start it again meanwhile."""
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=self.stop_timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        reap_group(process)

    def crashing(self) -> bool:
        """Whether an app is still on its faulty run."""
        with self._lock:
            return bool(self._faulty)

    def streaming(self, dc: str, app: str) -> bool:
        """Whether ``app`` of ``dc`` is up and its streaming query started since it last
        started (Spark takes a while: a fault should strike a pipeline that runs)."""
        with self._lock:
            entry = self._apps[(dc, app)]
            if dc in self._down or entry.process is None or entry.process.poll() is not None:
                return False
            offset = entry.log_offset
        try:
            with entry.log_path.open("rb") as log_file:
                log_file.seek(offset)
                return b"stream.started" in log_file.read()
        except FileNotFoundError:
            return False

    def held(self, dc: str, app: str) -> bool:
        """Whether ``app`` of ``dc`` is not meant to run now: its DC is held down, or it
        waits for a faulty app's crash (:meth:`start`)."""
        with self._lock:
            return dc in self._down or (dc, app) in self._after_crash

    def running(self, dc: str, app: str) -> bool:
        entry = self._apps[(dc, app)]
        return entry.process is not None and entry.process.poll() is None

    def log_path(self, dc: str, app: str) -> Path:
        return self._apps[(dc, app)].log_path

    def pids(self) -> dict[str, int]:
        return {
            f"{app}[{dc}]": e.process.pid
            for (dc, app), e in self._apps.items()
            if e.process is not None and e.process.poll() is None
        }

    def stop(self) -> None:
        self._stopping.set()
        if self._watcher.is_alive():
            self._watcher.join(timeout=5)
        with self._lock:
            live = [
                e.process for e in self._apps.values() if e.process and e.process.poll() is None
            ]
        for process in live:
            process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + self.stop_timeout_s
        for process in live:
            try:
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            reap_group(process)

    # -- internals ------------------------------------------------------------------

    def _start(self, dc: str, app: str, extra_env: Mapping[str, str] | None = None) -> None:
        entry = self._apps[(dc, app)]
        entry.log_path.parent.mkdir(parents=True, exist_ok=True)
        with entry.log_path.open("ab") as log_file:
            entry.log_offset = log_file.tell()
            entry.process = start_app(
                app_argv(app, dc, until_idle_s=None, config=self.config),
                output=log_file,
                env={**self.env, **(extra_env or {})},
            )
        entry.exited_at = None
        self.events.starts[f"{app}[{dc}]"] += 1
        log.info("chaos.start", dc=dc, app=app, pid=entry.process.pid)

    def _saw_exit(self, entry: _App, code: int) -> float:
        """Report a run's death once (the watcher, a kill and an outage may each see it);
        returns when it was first seen."""
        if entry.exited_at is None:
            entry.exited_at = time.monotonic()
            pid = entry.process.pid if entry.process is not None else None
            self.events.exits.append({"dc": entry.dc, "app": entry.app, "pid": pid, "code": code})
        return entry.exited_at

    def _watch(self) -> None:
        while not self._stopping.wait(0.2):
            with self._lock:
                for (dc, app), entry in self._apps.items():
                    if entry.process is None or dc in self._down or (dc, app) in self._faulty:
                        continue
                    code = entry.process.poll()
                    if code is None:
                        continue
                    if time.monotonic() - self._saw_exit(entry, code) >= self.restart_delay_s:
                        reap_group(entry.process)  # nothing of the dead run writes on
                        self._start(dc, app)
