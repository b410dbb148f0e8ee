"""What every part of the agent is handed: the roots, the event log, the metrics, the loop and
its named timers, the clock, where profiles are read from, and how to send the STATUS line.

service.py builds one `AgentContext` and hands it to each part (enforce.py, publish.py,
pinning.py, health.py). A part is a dataclass of `AgentPart`: the context first, then what is
its own (the callbacks that tie it to the other parts) as fields, and its working state set in
`__post_init__`. Every part runs on the loop thread only.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from mcpnode.agent.config import AgentConfig
from mcpnode.agent.loop import Loop, Timers
from mcpnode.host import Host
from mcpnode.logs import EventLog

if TYPE_CHECKING:
    from mcpnode.agent.metrics import AgentMetrics


@dataclass(frozen=True)
class AgentContext:
    host: Host  # the root the agent discovers, tunes and publishes under (--root)
    live: Host  # the running system's processes (auto-pinning pins live processes only)
    log: EventLog
    metrics: AgentMetrics
    loop: Loop
    timers: Timers
    clock: Callable[[], float]  # monotonic seconds (time.monotonic; a test's clock)
    profiles_dir: Path | None  # where tuning profiles are looked up (None: the installed ones)
    status: Callable[[], None]  # sends the agent's STATUS line (sd_notify)


@dataclass(eq=False)
class AgentPart:
    """The base of the agent's parts: the context, shortcuts to what every part uses, and the
    configuration the part works from (replaced by the agent at start and at each reload)."""

    ctx: AgentContext
    config: AgentConfig = field(default_factory=AgentConfig, init=False)

    def __post_init__(self) -> None:
        self.host = self.ctx.host
        self.log = self.ctx.log
        self.metrics = self.ctx.metrics
        self.timers = self.ctx.timers
