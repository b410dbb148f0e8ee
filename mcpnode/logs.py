"""structlog, configured in this one place: JSON lines under systemd (JOURNAL_STREAM set) or
when stderr is not a terminal, a readable console line otherwise; always to stderr, so stdout
stays the command's output (tables, JSON).

When stderr is the journal, every line starts with its syslog priority, `<N>`: systemd reads
that prefix off each line of a service's stdout/stderr (systemd.exec(5), SyslogLevelPrefix=,
on by default; sd-daemon(3) lists the prefixes, SD_ERR "<3>" to SD_DEBUG "<7>") and stores the
line at that priority instead of the unit's default (SyslogLevel=info), so `journalctl -p
warning -u mcpnode` shows the agent's warnings and errors only. stderr is the journal when
`JOURNAL_STREAM` names its device and inode (`DEV:INODE`, systemd.exec(5), "Environment
variables in spawned processes"); a child whose stderr was redirected inherits the variable
but not the stream, and gets no prefix.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import Any, Protocol

import structlog


class EventLog(Protocol):
    """What code that logs events takes: structlog's logger (`structlog.get_logger`), or a
    test's recorder. One event name, then the event's fields as keywords."""

    def debug(self, event: str, **fields: Any) -> object: ...
    def info(self, event: str, **fields: Any) -> object: ...
    def warning(self, event: str, **fields: Any) -> object: ...
    def error(self, event: str, **fields: Any) -> object: ...


def _stderr_logger(*_args: Any) -> structlog.PrintLogger:
    # Looked up per logger, not once: tests (and click's runner) replace sys.stderr.
    return structlog.PrintLogger(sys.stderr)


LEVELS = {"debug": 10, "info": 20, "warning": 30, "error": 40}

# structlog's method names -> syslog priorities (sd-daemon(3): SD_CRIT <2>, SD_ERR <3>,
# SD_WARNING <4>, SD_NOTICE <5>, SD_INFO <6>, SD_DEBUG <7>).
PRIORITIES = {
    "critical": 2,
    "fatal": 2,
    "exception": 3,
    "error": 3,
    "err": 3,
    "warning": 4,
    "warn": 4,
    "notice": 5,
    "info": 6,
    "msg": 6,
    "debug": 7,
}


def stderr_is_journal(env: Mapping[str, str] | None = None, fd: int = 2) -> bool:
    """Whether file descriptor `fd` is the journal stream `JOURNAL_STREAM` names (DEV:INODE, in
    decimal). False when the variable is absent or malformed, or `fd` is something else."""
    value = (os.environ if env is None else env).get("JOURNAL_STREAM", "")
    dev, sep, ino = value.partition(":")
    if not sep or not dev.isdigit() or not ino.isdigit():
        return False
    try:
        st = os.fstat(fd)  # this process's own stderr, not the machine: no Host needed
    except OSError:
        return False
    return (st.st_dev, st.st_ino) == (int(dev), int(ino))


def journal_priority(_logger: Any, method_name: str, rendered: str) -> str:
    """The last processor under the journal: `<N>` before the rendered line."""
    return f"<{PRIORITIES.get(method_name, 6)}>{rendered}"


def configure_logging(fmt: str = "auto", level: str = "debug") -> None:
    """Idempotent; called by the commands that change the host, and by the agent at start and
    on every reload (its config names `fmt` auto|json|console and the minimum `level`)."""
    journal = stderr_is_journal()
    if fmt == "auto":
        as_json = bool(os.environ.get("JOURNAL_STREAM")) or not sys.stderr.isatty()
    else:
        as_json = fmt == "json"
    renderer: Any = (
        structlog.processors.JSONRenderer(sort_keys=False)
        if as_json
        else structlog.dev.ConsoleRenderer(colors=False)
    )
    processors: list[Any] = [
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        renderer,
    ]
    if journal:
        processors.append(journal_priority)
    structlog.configure(
        processors=processors,
        logger_factory=_stderr_logger,
        wrapper_class=structlog.make_filtering_bound_logger(LEVELS.get(level, 10)),
        cache_logger_on_first_use=False,
    )
