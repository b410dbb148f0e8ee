"""Auto-pinning in the agent: the process-scan timer around `AutoPinner` (autopin.py), which
pins each GPU process a `[[autopin.rule]]` matches to its GPU's CPUs, from the placement the
agent last published."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from mcpnode.agent.config import AgentConfig
from mcpnode.agent.part import AgentPart
from mcpnode.placement.build import Built
from mcpnode.placement.ps import cpu_verdict_counts
from mcpnode.topology.nvml import GpuBackend

if TYPE_CHECKING:
    from mcpnode.agent.autopin import AutoPinner


@dataclass(eq=False)
class Pinning(AgentPart):
    """The scan every `[autopin] interval` while `[autopin] enabled`. `built` answers the last
    publication (None before the first), `backend` the NVML backend; `pinned_more` is told when
    a scan pinned a process (the agent then updates its STATUS line and state file)."""

    built: Callable[[], Built | None]
    backend: Callable[[], GpuBackend | None]
    pinned_more: Callable[[], None]

    def __post_init__(self) -> None:
        super().__post_init__()
        self.pinner: AutoPinner | None = None
        self.pinned = 0  # processes pinned (or adopted) and alive at the last scan

    def start(self) -> None:
        """A new pinner with the configuration's rules; the first scan now."""
        from mcpnode.agent.autopin import AutoPinner

        self.pinner = AutoPinner(
            self.ctx.live,
            self.config.pin_rules,
            self.config.pin_scope,
            self.log,
            migrate=self.config.pin_migrate,
        )
        self.timers.schedule("pin", 0.0, self._tick)

    def stop(self) -> None:
        self.pinner = None
        self.timers.cancel("pin")
        self.metrics.set_gpu_process_cpus({})  # no scan, no count: the series go

    def reconfigure(self, old: AgentConfig) -> None:
        """A reload: a new pinner when auto-pinning was turned on or its rules changed; none
        when it was turned off."""
        config = self.config
        if config.autopin and (
            not old.autopin
            or config.pin_rules != old.pin_rules
            or config.pin_migrate != old.pin_migrate
        ):
            self.start()
        elif not config.autopin and old.autopin:
            self.stop()

    def _tick(self) -> None:
        try:
            built = self.built()
            if self.pinner is not None and built is not None:
                self.metrics.count_event("timer")
                result = self.pinner.scan(built.topology, built.placement, self.backend())
                for event in result.pinned:
                    self.metrics.count_pin(event.rule)
                self.pinned = result.tracked
                self.metrics.set_pinned_processes(result.tracked)
                # After the pins: a process just pinned counts where it now runs.
                pairs = ((p.pid, p.gpu_index) for p in result.processes)
                self.metrics.set_gpu_process_cpus(
                    cpu_verdict_counts(self.ctx.live, pairs, built.placement)
                )
                if result.pinned:
                    self.pinned_more()
        finally:
            if self.config.autopin:
                self.timers.schedule("pin", self.config.pin_interval, self._tick)
