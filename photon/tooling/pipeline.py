"""Run the DC pipelines as child processes: each DC's query reader and joiner.

The apps live in ``spark_apps`` (Spark wiring); this module imports only
their contract (``spark_apps.contracts``: modules and summary file), never
Spark, and starts them with this interpreter. By default a DC's two apps run as
two streaming queries of one Spark application (``python -m
spark_apps.dc_pipeline``): one driver JVM a DC, not two, on machines where the
drivers' share of the cores counts (docs/join.md, "The apps"). With
``pipeline.one_app_per_dc`` off, each app is its own process with its own
driver (``python -m spark_apps.joiner``).

How it fails: a child that exits non-zero is reported with its exit status
and the tail of its log; the others are stopped (SIGTERM, then SIGKILL after
``stop_timeout_s``) and :class:`PipelineError` is raised. SIGINT/SIGTERM to
``photon run`` stop every child cleanly.
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

from photon.apps import JOINER, QUERY_READER
from photon.errors import PhotonError
from photon.localfiles import last_lines
from photon.settings import PhotonSettings
from spark_apps.contracts import APP_MODULES, DC_PIPELINE_MODULE, SUMMARY_FILE, read_summary

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
    started: float = field(default_factory=time.monotonic)
    stop_sent: bool = False

    @property
    def name(self) -> str:
        return f"{'+'.join(self.apps)}[{self.dc}]"

    def log_tail(self, lines: int = 15) -> str:
        return last_lines(self.log_path, lines)


def app_summaries(child: Child) -> list[dict[str, Any]]:
    """One entry per app of ``child``: its app, DC and exit status, then its summary."""
    return [
        {"app": app, "dc": child.dc, "exit": child.process.returncode, **read_summary(state_dir)}
        for app, state_dir in zip(child.apps, child.state_dirs, strict=True)
    ]


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
    stop_timeout_s: float = 60.0,
) -> list[Child]:
    """Start a query reader and a joiner per DC (one application or two, by
    ``pipeline.one_app_per_dc``); wait until all have exited."""
    children: list[Child] = []
    child_env = {**os.environ, **(env or {})}
    stopping = False

    def stop_all(signum: int = signal.SIGTERM, _frame: object = None) -> None:
        nonlocal stopping
        stopping = True
        for child in children:
            if child.process.poll() is None:
                child.process.send_signal(signal.SIGTERM)

    previous = {s: signal.signal(s, stop_all) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        for dc in dcs:
            if settings.pipeline.one_app_per_dc:
                # The joiner decides when the run is idle; the query reader stops after it.
                launches: list[tuple[str | None, tuple[str, ...], float | None]] = [
                    (None, (QUERY_READER, JOINER), until_idle_s)
                ]
            else:
                # The query reader first: the joiner finds more in the cache. Joiners decide
                # when the run is idle; query readers run on until every joiner has stopped
                # (a waiting click's query may still be on its way).
                launches = [
                    (QUERY_READER, (QUERY_READER,), None),
                    (JOINER, (JOINER,), until_idle_s),
                ]
            for app, apps, idle in launches:
                state_dirs = tuple(settings.pipeline_dir(dc, a) for a in apps)
                for state_dir in state_dirs:
                    state_dir.mkdir(parents=True, exist_ok=True)
                    (state_dir / SUMMARY_FILE).unlink(missing_ok=True)
                # A DC's one application logs beside its joiner's state.
                log_path = state_dirs[-1] / "app.log"
                with log_path.open("ab") as log_file:
                    process = subprocess.Popen(
                        app_argv(app, dc, until_idle_s=idle, config=config),
                        stdout=log_file,
                        stderr=subprocess.STDOUT,
                        stdin=subprocess.DEVNULL,
                        env=child_env,
                    )
                children.append(Child(dc, apps, log_path, process, state_dirs))
        failed: list[tuple[Child, int]] = []
        pending = list(children)
        while pending:
            for child in list(pending):
                code = child.process.poll()
                if code is None:
                    continue
                pending.remove(child)
                if on_exit is not None:
                    on_exit(child, code)
                if code != 0 and not stopping:
                    failed.append((child, code))
                    stop_all()
            if until_idle_s is not None and not any(JOINER in c.apps for c in pending):
                for child in pending:  # the joiners are done: the readers may stop
                    if child.process.poll() is None and not child.stop_sent:
                        child.process.send_signal(signal.SIGTERM)
                        child.stop_sent = True
            time.sleep(0.2)
        if failed:
            child, code = failed[0]
            raise PipelineError(
                f"{child.name} exited with status {code}; its log ({child.log_path}) ends:\n"
                + child.log_tail()
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
        for signum, handler in previous.items():
            signal.signal(signum, handler)
