"""What a running `mcpnode agent` tells the rest of mcpnode: `/run/mcpnode/agent.json`.

The agent (a higher layer) writes it, under the state lock, after every change of state worth
reading elsewhere; `mcpnode profiles active` (tuning/active.py), verify and the audit read it
to name the profile the agent enforces, and the audit the keys it gave up remediating because
something else keeps changing them (a contested key is a finding, not a log line nobody reads).
/run is a tmpfs: a reboot clears it, and the agent removes it on a clean stop, so a file left
behind by a killed agent names its pid and readers can tell it is stale.

`profile` is None while the agent enforces nothing: another run rolled the tuning back under it
(`paused` says so), until `systemctl reload mcpnode`. `profile_source` says whether the profile
is the configured one or one the agent adopted because an operator applied it (`adopted`).

It is read as root's alone (Host.read_trusted): a state file anyone could write would decide
which profile verify and the audit check against.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

from mcpnode.errors import HostError, ProcessGone
from mcpnode.host import Host, HostReader

AGENT_STATE_PATH = "/run/mcpnode/agent.json"
SCHEMA = "mcpnode.agent-state/v1"
MAX_STATE_BYTES = 1 << 20


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
    profile: str | None  # None: enforcing nothing (paused says why)
    config: str
    drift_mode: str
    started_at: str
    updated_at: str
    contested: tuple[ContestedKey, ...] = ()
    pinned: int = 0
    profile_source: str = "config"  # config | adopted
    paused: str | None = None

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
        profile = doc["profile"]
        paused = doc.get("paused")
        return AgentState(
            pid=int(doc["pid"]),
            profile=None if profile is None else str(profile),
            config=str(doc["config"]),
            drift_mode=str(doc["drift_mode"]),
            started_at=str(doc["started_at"]),
            updated_at=str(doc["updated_at"]),
            contested=contested,
            pinned=int(doc.get("pinned", 0)),
            profile_source=str(doc.get("profile_source", "config")),
            paused=None if paused is None else str(paused),
        )
    except (ValueError, KeyError, TypeError, RecursionError):
        return None


def read_agent_state(host: HostReader) -> AgentState | None:
    """The state a running agent published; None when there is none, it is unreadable, or
    (on the live root) its pid is gone: a SIGKILLed agent cannot remove its file, and its
    profile and contested keys must not outlive it. A recorded root is taken as recorded."""
    try:
        data = host.read_trusted(AGENT_STATE_PATH, MAX_STATE_BYTES)
    except HostError:
        return None  # absent, or not root's alone: either way no agent state to believe
    state = parse_agent_state(data.decode("utf-8", "replace"))
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
