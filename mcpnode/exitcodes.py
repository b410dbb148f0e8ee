"""Every exit status mcpnode's commands and its agent use, in one place. The CLI maps error
types to them in `cli/errors.py`; `mcpnode agent` ends with them (agent/service.py). The codes
follow sysexits.h where one fits, and Nagios' plugin convention for verify's "unknown" (3).
A leaf: the agent sits below the CLI and imports it from here."""

from __future__ import annotations

EXIT_OK = 0
EXIT_FINDINGS = 1  # the command ran and found something wrong (audit FAIL, drift)
# The agent: a failure at start (unreadable journal, unusable root, the state lock held) or an
# incomplete rollback at stop; systemd restarts it (Restart=on-failure).
EXIT_AGENT_FAILED = 1
EXIT_ERROR = 2  # the command could not do its job
EXIT_UNKNOWN = 3  # verify could not tell (a key unreadable, no active profile): Nagios' UNKNOWN
EXIT_USAGE = 64  # EX_USAGE from sysexits.h
EXIT_DATAERR = 65  # EX_DATAERR: a manifest of a newer schema, or corrupt
EXIT_NO_PROCESS = 66  # EX_NOINPUT: pin's PID does not exist (any more)
EXIT_UNAVAILABLE = 69  # EX_UNAVAILABLE: the placement names CPUs/nodes this machine lacks
EXIT_LOCKED = 75  # EX_TEMPFAIL: another mcpnode run holds the state lock; try again later
EXIT_REFUSED = 77  # EX_NOPERM: pin refused by a safety check (kernel thread; narrowed, no --force)
# EX_CONFIG: the agent's configuration or profile cannot be used at start; the unit's
# RestartPreventExitStatus=78 keeps systemd from restarting it on the same file.
EXIT_CONFIG = 78
EXIT_NOT_FOUND = 127  # exec: the command is not found or not executable, as env(1) and sh exit
