"""What a running `mcpnode agent` tells the rest of mcpnode: `/run/mcpnode/agent.json`.

The agent (a higher layer) writes it after every change of state worth reading elsewhere; the
audit reads it to name the profile the agent enforces and the keys it gave up remediating
because something else keeps changing them (a contested key is a finding, not a log line
nobody reads). /run is a tmpfs: a reboot clears it, and the agent removes it on a clean stop,
so a file left behind by a killed agent names its pid and the audit can tell it is stale.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

from mcpnode.errors import HostError, ProcessGone
from mcpnode.host import Host

AGENT_STATE_PATH = "/run/mcpnode/agent.json"
SCHEMA = "mcpnode.agent-state/v1"


@dataclass(frozen=True)
class ContestedKey:
    key: str
    remediations: int  # within window_s, when the agent stopped
    window_s: float
    since: str  # ISO 8601 UTC, when the agent gave up
    value: str | None  # the value last seen (the other owner's)


@dataclass(frozen=True)
class AgentState:
    pid: int
    profile: str
    config: str
    drift_mode: str
    started_at: str
    updated_at: str
    contested: tuple[ContestedKey, ...] = ()
    pinned: int = 0

    def to_json(self) -> str:
        doc: dict[str, Any] = {"schema": SCHEMA, **asdict(self)}
        doc["contested"] = [asdict(c) for c in self.contested]
        return json.dumps(doc, indent=2) + "\n"


def parse_agent_state(text: str) -> AgentState | None:
    """None for anything that is not a v1 state document (never raises: the audit reports
    an unreadable state as absent)."""
    try:
        doc = json.loads(text)
        if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
            return None
        contested = tuple(
            ContestedKey(
                str(c["key"]),
                int(c["remediations"]),
                float(c["window_s"]),
                str(c["since"]),
                None if c.get("value") is None else str(c["value"]),
            )
            for c in doc.get("contested", [])
        )
        return AgentState(
            pid=int(doc["pid"]),
            profile=str(doc["profile"]),
            config=str(doc["config"]),
            drift_mode=str(doc["drift_mode"]),
            started_at=str(doc["started_at"]),
            updated_at=str(doc["updated_at"]),
            contested=contested,
            pinned=int(doc.get("pinned", 0)),
        )
    except (ValueError, KeyError, TypeError):
        return None


def read_agent_state(host: Host) -> AgentState | None:
    """The state a running agent published; None when there is none, it is unreadable, or
    (on the live root) its pid is gone: a SIGKILLed agent cannot remove its file, and its
    profile and contested keys must not outlive it. A recorded root is taken as recorded."""
    try:
        text = host.read_optional(AGENT_STATE_PATH)
    except HostError:
        return None
    state = None if text is None else parse_agent_state(text)
    if state is not None and host.is_live:
        try:
            host.read_proc(state.pid, "stat")
        except ProcessGone:
            return None
        except HostError:
            pass  # EACCES under hidepid=: cannot tell, so trust the file
    return state


def write_agent_state(host: Host, state: AgentState) -> None:
    """Atomically, mode 0644 (monitoring reads it unprivileged). Raises AccessDenied/WriteError."""
    host.write_file_atomic(AGENT_STATE_PATH, state.to_json().encode(), mode=0o644)
