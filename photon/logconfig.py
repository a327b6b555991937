"""structlog set-up for Photon's processes: one line per event on stderr.

``PHOTON_LOG_FORMAT`` picks the line: ``console`` (key=value, the default) or
``json`` (one JSON object a line, for log shippers and for the chaos harness,
which reads its apps' batch reports back).

How it fails: an unknown level or format raises ``ValueError`` naming the ones
there are, before anything is logged.
"""

from __future__ import annotations

import logging
import os
import sys

import structlog

LEVELS = ("debug", "info", "warning", "error")
FORMATS = ("console", "json")
FORMAT_ENV = "PHOTON_LOG_FORMAT"


def configure_logging(level: str = "info", fmt: str | None = None) -> None:
    if level not in LEVELS:
        raise ValueError(f"log level {level!r} is not one of {', '.join(LEVELS)}")
    fmt = fmt if fmt is not None else os.environ.get(FORMAT_ENV, "console")
    if fmt not in FORMATS:
        raise ValueError(f"log format {fmt!r} ({FORMAT_ENV}) is not one of {', '.join(FORMATS)}")
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer()
        if fmt == "json"
        else structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
    )
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(getattr(logging, level.upper())),
        logger_factory=_stderr_logger,
        cache_logger_on_first_use=False,
    )


def _stderr_logger(*_args: object) -> structlog.PrintLogger:
    # Looked up at each use: a test runner (or a daemon) may replace sys.stderr, and
    # close its replacement; a log line must never fail the work it reports on.
    stream = sys.stderr if not getattr(sys.stderr, "closed", False) else sys.__stderr__
    return structlog.PrintLogger(stream)
