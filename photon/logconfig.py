"""structlog set-up for Photon's processes: key=value lines on stderr."""

from __future__ import annotations

import logging
import sys

import structlog

LEVELS = ("debug", "info", "warning", "error")


def configure_logging(level: str = "info") -> None:
    if level not in LEVELS:
        raise ValueError(f"log level {level!r} is not one of {', '.join(LEVELS)}")
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty()),
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
