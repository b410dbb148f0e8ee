"""structlog, configured in this one place: JSON lines under systemd (JOURNAL_STREAM set) or
when stderr is not a terminal, a readable console line otherwise; always to stderr, so stdout
stays the command's output (tables, JSON)."""

from __future__ import annotations

import os
import sys
from typing import Any

import structlog


def _stderr_logger(*_args: Any) -> structlog.PrintLogger:
    # Looked up per logger, not once: tests (and click's runner) replace sys.stderr.
    return structlog.PrintLogger(sys.stderr)


LEVELS = {"debug": 10, "info": 20, "warning": 30, "error": 40}


def configure_logging(fmt: str = "auto", level: str = "debug") -> None:
    """Idempotent; called by the commands that change the host, and by the agent at start and
    on every reload (its config names `fmt` auto|json|console and the minimum `level`)."""
    if fmt == "auto":
        as_json = bool(os.environ.get("JOURNAL_STREAM")) or not sys.stderr.isatty()
    else:
        as_json = fmt == "json"
    renderer: Any = (
        structlog.processors.JSONRenderer(sort_keys=False)
        if as_json
        else structlog.dev.ConsoleRenderer(colors=False)
    )
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            renderer,
        ],
        logger_factory=_stderr_logger,
        wrapper_class=structlog.make_filtering_bound_logger(LEVELS.get(level, 10)),
        cache_logger_on_first_use=False,
    )
