"""The values tuning passes between its steps: a profile's `Setting`, the `HostState` read
for it, and the `PlanItem`s decided from both. Every subsystem (tuning/plugins/) speaks these.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from mcpnode.codec.record import record
from mcpnode.tuning.partition import CpuPartition
from mcpnode.tuning.privilege import Privileges
from mcpnode.tuning.read import Reading
from mcpnode.tuning.values import Desired

Action = Literal["set", "ok", "unsupported", "needs-privilege", "skipped"]
ACTIONS: tuple[Action, ...] = ("set", "ok", "unsupported", "needs-privilege", "skipped")


@dataclass(frozen=True)
class Setting:
    """One resolved profile value. `key` is a sysctl name or `vm:transparent_hugepage` /
    `cpu:governor` (paths.py); `source` the file whose value won; `comment` the comment block
    written above it there (the why and the kernel default, by convention)."""

    key: str
    desired: Desired
    source: str
    comment: str


@record(frozen=True)
class PlanItem:
    """One key. `current` is the kernel's text (None when absent or unreadable); `desired` the
    exact text that is (or would be) written; `rule` the profile's rule (`>= 1048576`)."""

    key: str
    path: str  # logical path; "" for a module
    rule: str
    current: str | None
    desired: str | None
    action: Action
    reason: str
    source: str  # profile file that set it ("" for journal restores)
    unread: bool = False  # the current value could not be read (EACCES, EIO, a bad link)

    @property
    def is_module(self) -> bool:
        return self.key.startswith("module:")

    @property
    def satisfied(self) -> bool:
        return self.action == "ok"


@dataclass(frozen=True)
class HostState:
    """What the plan needs to know about the host.

    readings:  logical path -> Reading, for every path a setting (or a journal entry) names
    available: logical path -> values the kernel offers for it (tcp congestion controls, THP
               modes, cpufreq governors); None where the kernel gives no list
    modules:   loaded modules (/proc/modules) plus requested ones present in /sys/module
               (built-in); None when /proc/modules is absent (no loadable module support)
    policies:  cpufreq policy directory names; None when there is no cpufreq at all (VMs)
    live:      the root is this machine, so modules can be loaded
    partition: the housekeeping CPUs and GPU slices `[irq]` places against; None when the
               caller could not tell (no manifest and no discovery in this run)
    managed:   interrupts the kernel refused to move (EIO) in an earlier apply (the journal)
    found:     what each subsystem read beyond single files, by its name (tuning/plugins/):
               the interrupts, NIC queues, boot configuration, PM QoS latency...
    """

    readings: Mapping[str, Reading]
    available: Mapping[str, frozenset[str] | None]
    modules: frozenset[str] | None
    privileges: Privileges
    cmdline: str | None
    policies: tuple[str, ...] | None
    live: bool
    partition: CpuPartition | None = None
    managed: frozenset[int] = frozenset()
    found: Mapping[str, object] = field(default_factory=dict)
