"""What a snapshot recorded beyond files: its `mcpnode-snapshot.json` (command answers, the
effective uid it was taken with). The recording of reads itself is root.py's `recording()`."""

from __future__ import annotations

import os

from mcpnode.errors import HostError
from mcpnode.host.types import _opt_int
from mcpnode.host.write import HostWrites


class HostRecord(HostWrites):
    """A recorded root's own metadata."""

    def _recorded_commands(self) -> dict[str, dict[str, object]]:
        if self._commands is None:
            meta = self._snapshot_meta()
            commands = meta.get("commands")
            self._commands = (
                {str(k): v for k, v in commands.items() if isinstance(v, dict)}
                if isinstance(commands, dict)
                else {}
            )
        return self._commands

    def _snapshot_meta(self) -> dict[str, object]:
        """The root's `mcpnode-snapshot.json`, or {} when absent or unreadable (an unreadable
        snapshot answers "not recorded" for everything it would hold)."""
        import json  # a recorded root's: `topo` on the live host or a dump never reads it

        try:
            text = self.read_optional("/mcpnode-snapshot.json")
            meta = json.loads(text) if text else {}
        except (HostError, ValueError):
            return {}
        return meta if isinstance(meta, dict) else {}

    def effective_uid(self) -> int | None:
        """The effective uid the machine was read with: this process's on the live host, the
        one a snapshot recorded (`euid`) on a recorded root, None when a root does not say (a
        plain sysfs dump: treat as privileged, nothing there was refused)."""
        if self.is_live:
            return os.geteuid()
        if self._euid is None:
            self._euid = (_opt_int(self._snapshot_meta().get("euid")),)
        return self._euid[0]
