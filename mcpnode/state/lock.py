"""The state lock: one exclusive flock(2) on `mcpnode.lock` in the state directory (beside the
journal), held by every writer of the journal, the persisted sysctl.d file and the agent state
from loading the journal until its final save.

Without it two runs that overlap (the agent remediating while an operator runs `mcpnode apply`
or `rollback`, two Ansible runs) interleave their read-journal-write-save sequences: the second
run journals the first run's targets as "originals", or a resumed rollback deletes the other
run's journal, and `rollback` can no longer restore what the host had.

A second writer waits a bounded time (`--wait SECONDS`, default DEFAULT_WAIT_S), then fails
with LockBusy naming the holder (pid, command, since when), which the CLI turns into exit 75
(EX_TEMPFAIL): it never goes on unlocked. Readers (verify, audit, manifest show) never take it.

The lock is re-entrant within one StateLock object, so the agent can hold it around a whole
write cycle (journal check, apply, state file) while apply_profile takes it again inside.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from datetime import datetime, timezone

from mcpnode.errors import McpnodeError
from mcpnode.host import Host

LOCK_NAME = "mcpnode.lock"
DEFAULT_WAIT_S = 5.0


class LockNotHeld(McpnodeError):
    """A journal write was attempted without the state lock: a bug in mcpnode, refused rather
    than risk the interleavings the lock exists to prevent."""


class StateLock:
    """The lock of one state directory. `command` is what a waiting run is told holds it."""

    def __init__(self, host: Host, path: str, command: str) -> None:
        self.host = host
        self.path = path
        self.command = command
        self._depth = 0

    @property
    def held(self) -> bool:
        return self._depth > 0

    @contextlib.contextmanager
    def hold(self, wait_s: float = DEFAULT_WAIT_S) -> Iterator[None]:
        """Hold the lock for the block (re-entrant). Raises LockBusy after `wait_s` seconds,
        Untrusted when the lock file or its directory is not root's alone."""
        if self._depth:
            self._depth += 1
            try:
                yield
            finally:
                self._depth -= 1
            return
        holder: dict[str, object] = {
            "pid": os.getpid(),
            "command": self.command,
            "since": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        }
        with self.host.lock(self.path, wait_s=wait_s, holder=holder):
            self._depth = 1
            try:
                yield
            finally:
                self._depth = 0

    def require(self, what: str) -> None:
        """Raise LockNotHeld unless this process holds the lock."""
        if not self.held:
            raise LockNotHeld(f"{what} without the state lock {self.host.fs_path(self.path)}")
