"""Run the DC pipelines as child processes: each DC's query reader and joiner.

The apps live in ``spark_apps`` (Spark wiring); this module imports only
their contract (``spark_apps.contracts``: modules and summary file), never
Spark, and starts them with this interpreter. By default a DC's two apps run as
two streaming queries of one Spark application (``python -m
spark_apps.dc_pipeline``): one driver JVM a DC, not two, on machines where the
drivers' share of the cores counts (docs/join.md, "The apps"). With
``pipeline.one_app_per_dc`` off, each app is its own process with its own
driver (``python -m spark_apps.joiner``).

The launcher is the DCs' service manager, and the DCs are independent under it
(docs/ARCHITECTURE.md, "Restarts"): a child that dies (a non-zero exit: a crash,
kill -9 of its driver) is restarted after ``pipeline.restart_backoff_s``,
doubling while it keeps dying young, up to ``pipeline.restart_max_backoff_s``,
while every other child runs on. Spark's checkpoint and the retry store make a
restart safe: the app replays its last batch. Each child leads a process
group of its own, and what outlives its driver (its JVM, its Python workers)
is killed and waited for before it is started again, so that no restart
shares its checkpoint with the run before (:mod:`photon.tooling.process_group`).
Each restart is logged
(``pipeline.app_restarting``), counted in the child's summary, and told to the
app (:data:`RESTARTS_ENV`), which reports it as ``photon_app_restarts``. A
clean exit (status 0: idle under ``--until-idle``, or stopped) is not restarted.

On at most one core a DC (``pipeline.staggered_start``), the DCs start one after
another: each once the one before has logged its first joiner batch, has exited,
or has had ``pipeline.stagger_max_wait_s``. Started together, their drivers' JVMs
and Python workers share the cores, and every DC's first click comes late; one
after another, the first DC's comes as soon as it would alone (docs/deploy.md,
"Start-up"). A DC never waits on another for longer than that bound.

How it fails: a child that dies within ``pipeline.crash_loop_s`` of its start
``pipeline.crash_loop_limit`` times in a row (a bad setting, a missing
dependency: restarting cannot help) is given up on, with its exit status and
the tail of its log; the others run on, and once they have stopped
:class:`PipelineError` is raised naming it. SIGINT/SIGTERM/SIGHUP to ``photon run``
stop every child cleanly (SIGTERM, then SIGKILL after ``stop_timeout_s``).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog

from photon.apps import JOINER, QUERY_READER
from photon.errors import PhotonError
from photon.localfiles import last_lines
from photon.settings import PhotonSettings, PipelineSettings
from photon.tooling.process_group import reap_group, start_app
from spark_apps.contracts import (
    APP_MODULES,
    DC_PIPELINE_MODULE,
    RESTARTS_ENV,
    SUMMARY_FILE,
    read_summary,
)

log = structlog.get_logger(__name__)

#: The apps, in the order a DC starts them.
APPS = tuple(APP_MODULES)


class PipelineError(PhotonError, RuntimeError):
    """A pipeline app failed."""


@dataclass
class Child:
    """One app process of a DC: its apps (one, or both in one Spark application)."""

    dc: str
    apps: tuple[str, ...]
    log_path: Path
    process: subprocess.Popen[bytes]
    state_dirs: tuple[Path, ...]  # each app's, where it writes its summary
    #: What it was started as (app_argv's app: None for both) and its --until-idle.
    module_app: str | None = None
    idle_s: float | None = None
    started: float = field(default_factory=time.monotonic)
    stop_sent: bool = False
    restarts: int = 0
    #: Deaths in a row, each within pipeline.crash_loop_s of its start.
    young_deaths: int = 0
    restart_at: float | None = None  # when a restart is due (time.monotonic())
    given_up: bool = False
    #: Where the next look into its log starts: the log's size at its first start, then
    #: as far as :meth:`has_logged` has read (asked every 0.2 s: it reads each byte once).
    log_offset: int = 0

    def has_logged(self, event: bytes) -> bool:
        """Whether its log, since its first start, names ``event``."""
        try:
            with self.log_path.open("rb") as log_file:
                log_file.seek(self.log_offset)
                new = log_file.read()
        except FileNotFoundError:
            return False
        if event in new:
            return True  # not read past: asked again, it says so again
        # the event may be cut at the end of what is written so far: read its start again
        self.log_offset += max(0, len(new) - len(event) + 1)
        return False

    @property
    def name(self) -> str:
        return f"{'+'.join(self.apps)}[{self.dc}]"

    def log_tail(self, lines: int = 15) -> str:
        return last_lines(self.log_path, lines)


def app_summaries(child: Child) -> list[dict[str, Any]]:
    """One entry per app of ``child``: its app, DC, exit status and restarts, then its
    summary."""
    return [
        {
            "app": app,
            "dc": child.dc,
            "exit": child.process.returncode,
            "restarts": child.restarts,
            **read_summary(state_dir),
        }
        for app, state_dir in zip(child.apps, child.state_dirs, strict=True)
    ]


def restart_delay_s(pipeline: PipelineSettings, young_deaths: int) -> float:
    """How long the launcher waits before starting a dead app again: the first
    backoff, doubling with each death in a row of an app that died young."""
    doublings = min(max(young_deaths - 1, 0), 32)
    return float(min(pipeline.restart_backoff_s * 2**doublings, pipeline.restart_max_backoff_s))


def starts_staggered(pipeline: PipelineSettings, dcs: int) -> bool:
    """Whether ``photon run`` starts ``dcs`` DCs one after another (see the module
    docstring): as set, or on ``auto`` when this process may use at most one core a DC
    (one DC's start-up keeps more than one core busy: docs/deploy.md, "Start-up")."""
    if pipeline.staggered_start != "auto":
        return pipeline.staggered_start == "on"
    try:
        cores = len(os.sched_getaffinity(0))  # what taskset or a container's cpuset leaves
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    return cores <= dcs


#: What a DC's app logs when its joiner has run its first batch: its start-up is over.
FIRST_BATCH_EVENT = b"joiner.batch"


def app_argv(
    app: str | None, dc: str, *, until_idle_s: float | None, config: Path | None
) -> list[str]:
    """The command of one app of ``dc`` (``None``: both, in one Spark application)."""
    module = DC_PIPELINE_MODULE if app is None else APP_MODULES[app]
    argv = [sys.executable, "-m", module, "--dc", dc]
    if until_idle_s is not None:
        argv += ["--until-idle", str(until_idle_s)]
    if config is not None:
        argv += ["--config", str(config)]
    return argv


def reset_state(settings: PhotonSettings, dcs: list[str]) -> list[Path]:
    """Delete the apps' local state (checkpoints, retry stores, attempt names) of ``dcs``."""
    removed = []
    for dc in dcs:
        for app in APPS:
            path = settings.pipeline_dir(dc, app)
            if path.exists():
                shutil.rmtree(path)
                removed.append(path)
    return removed


def run_pipelines(
    settings: PhotonSettings,
    dcs: list[str],
    *,
    until_idle_s: float | None,
    config: Path | None = None,
    env: Mapping[str, str] | None = None,
    on_exit: Callable[[Child, int], None] | None = None,
    on_restart: Callable[[Child, float], None] | None = None,
    stop_timeout_s: float = 60.0,
) -> list[Child]:
    """Start a query reader and a joiner per DC (one application or two, by
    ``pipeline.one_app_per_dc``), restart each that dies (see the module docstring);
    wait until all have stopped."""
    children: list[Child] = []
    child_env = {**os.environ, **(env or {})}
    stopping = False
    pipeline = settings.pipeline

    def stop_all(signum: int = signal.SIGTERM, _frame: object = None) -> None:
        nonlocal stopping
        stopping = True
        for child in children:
            if child.process.poll() is None:
                child.process.send_signal(signal.SIGTERM)

    def launch(
        dc: str, app: str | None, apps: tuple[str, ...], idle: float | None, restarts: int
    ) -> tuple[subprocess.Popen[bytes], tuple[Path, ...], Path, int]:
        """The app's process, state directories, log, and its log's size before it."""
        state_dirs = tuple(settings.pipeline_dir(dc, a) for a in apps)
        for state_dir in state_dirs:
            state_dir.mkdir(parents=True, exist_ok=True)
            (state_dir / SUMMARY_FILE).unlink(missing_ok=True)
        # A DC's one application logs beside its joiner's state.
        log_path = state_dirs[-1] / "app.log"
        with log_path.open("ab") as log_file:
            offset = log_file.tell()
            process = start_app(
                app_argv(app, dc, until_idle_s=idle, config=config),
                output=log_file,
                env={**child_env, RESTARTS_ENV: str(restarts)},
            )
        return process, state_dirs, log_path, offset

    def start_dc(dc: str) -> list[Child]:
        if pipeline.one_app_per_dc:
            # The joiner decides when the run is idle; the query reader stops after it.
            planned: list[tuple[str | None, tuple[str, ...], float | None]] = [
                (None, (QUERY_READER, JOINER), until_idle_s)
            ]
        else:
            # The query reader first: the joiner finds more in the cache. Joiners decide
            # when the run is idle; query readers run on until every joiner has stopped
            # (a waiting click's query may still be on its way).
            planned = [
                (QUERY_READER, (QUERY_READER,), None),
                (JOINER, (JOINER,), until_idle_s),
            ]
        started = []
        for app, apps, idle in planned:
            process, state_dirs, log_path, offset = launch(dc, app, apps, idle, 0)
            child = Child(dc, apps, log_path, process, state_dirs, app, idle, log_offset=offset)
            started.append(child)
        children.extend(started)
        return started

    def may_start_next() -> bool:
        """Whether the next DC may start: not staggered, or the last one started has
        its start-up behind it, has exited, or has had the longest wait."""
        if not staggered or not last_started:
            return True
        joiner = next(c for c in last_started if JOINER in c.apps)
        return (
            joiner.process.poll() is not None
            or time.monotonic() - joiner.started >= pipeline.stagger_max_wait_s
            or joiner.has_logged(FIRST_BATCH_EVENT)
        )

    # SIGHUP too: the apps lead groups of their own, so a closed terminal reaches only us.
    stopping_signals = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
    previous = {s: signal.signal(s, stop_all) for s in stopping_signals}
    try:
        waiting = list(dcs)  # DCs not started yet
        last_started: list[Child] = []
        staggered = starts_staggered(pipeline, len(dcs))
        if staggered and len(dcs) > 1:
            log.info("pipeline.staggered_start", dcs=dcs, max_wait_s=pipeline.stagger_max_wait_s)
        pending: list[Child] = []
        while pending or (waiting and not stopping):
            while waiting and not stopping and may_start_next():
                last_started = start_dc(waiting.pop(0))
                pending += last_started
            now = time.monotonic()
            for child in list(pending):
                if child.restart_at is not None:  # dead, waiting out its backoff
                    if stopping:
                        pending.remove(child)
                    elif now >= child.restart_at:
                        child.process, *_ = launch(
                            child.dc, child.module_app, child.apps, child.idle_s, child.restarts
                        )
                        child.started, child.restart_at = time.monotonic(), None
                    continue
                code = child.process.poll()
                if code is None:
                    continue
                # What outlived its driver (its JVM, its workers) goes before anything
                # else: a restart must not share the checkpoint with it.
                reap_group(child.process)
                if on_exit is not None:
                    on_exit(child, code)
                if code == 0 or stopping or child.stop_sent:  # done, or told to stop
                    pending.remove(child)
                    continue
                died_young = now - child.started < pipeline.crash_loop_s
                child.young_deaths = child.young_deaths + 1 if died_young else 0
                if pipeline.crash_loop_limit and child.young_deaths >= pipeline.crash_loop_limit:
                    child.given_up = True
                    pending.remove(child)
                    log.error(
                        "pipeline.app_given_up",
                        app=child.name,
                        exit=code,
                        deaths_in_a_row=child.young_deaths,
                        log=str(child.log_path),
                    )
                    continue
                delay = restart_delay_s(pipeline, child.young_deaths)
                child.restarts += 1
                child.restart_at = now + delay
                log.warning(
                    "pipeline.app_restarting",
                    app=child.name,
                    exit=code,
                    restarts=child.restarts,
                    in_s=delay,
                )
                if on_restart is not None:
                    on_restart(child, delay)
            if (
                until_idle_s is not None
                and not waiting
                and not any(JOINER in c.apps for c in pending)
            ):
                for child in pending:  # the joiners are done: the readers may stop
                    if child.process.poll() is None and not child.stop_sent:
                        child.process.send_signal(signal.SIGTERM)
                        child.stop_sent = True
            time.sleep(0.2)
        given_up = [c for c in children if c.given_up]
        if given_up:
            raise PipelineError(
                "; ".join(
                    f"{c.name} died {c.young_deaths} times in a row within "
                    f"{pipeline.crash_loop_s:g} s of its start (last status "
                    f"{c.process.returncode}) and was given up on"
                    for c in given_up
                )
                + f"; the log of {given_up[0].name} ({given_up[0].log_path}) ends:\n"
                + given_up[0].log_tail()
            )
        return children
    finally:
        deadline = time.monotonic() + stop_timeout_s
        for child in children:
            if child.process.poll() is None:
                child.process.send_signal(signal.SIGTERM)
        for child in children:
            try:
                child.process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                child.process.kill()
                child.process.wait()
            reap_group(child.process)
        for signum, handler in previous.items():
            signal.signal(signum, handler)
