"""Verify: re-read the host, re-plan, and report every key that does not match the profile.

It is the same `plan()` apply executes, so verify cannot drift from apply: a key is in drift
exactly when apply would write it (or would, given the privilege). Keys the kernel lacks and
keys that cannot be read are listed apart: they are not drift, and not passes either (tuned
counts a missing sysctl as passed; mcpnode says so instead).

Compliance is three-valued (`VerifyReport.compliant`): False with any drift; None — unknown,
with `unknown_reason` — when a key could not be read, or when not one key of the profile could
be checked here (a dump without /proc/sys); True only when every key that exists was read and
matches. Unknown is never reported as compliant: the manifest, exporters, fleet report and
metrics carry it as unknown, and `mcpnode verify` exits 3 for it.
"""

from __future__ import annotations

from dataclasses import dataclass

from mcpnode.host import HostReader
from mcpnode.tuning import plugins
from mcpnode.tuning.model import PlanItem
from mcpnode.tuning.partition import CpuPartition
from mcpnode.tuning.plan import Plan, plan
from mcpnode.tuning.profile import Profile
from mcpnode.tuning.state import read_state


@dataclass(frozen=True)
class Drift:
    key: str
    expected: str  # the profile's rule (`>= 1048576`, `bbr > cubic`, `65535`)
    wanted: str | None  # the value apply would write
    actual: str | None
    reason: str


@dataclass(frozen=True)
class VerifyReport:
    profile: str
    plan: Plan
    drift: tuple[Drift, ...]
    unsupported: tuple[PlanItem, ...]  # not on this kernel
    unverified: tuple[PlanItem, ...]  # unreadable, or skipped on purpose

    @property
    def ok(self) -> bool:
        """No drift (which is not the same as compliant: see `compliant`)."""
        return not self.drift

    @property
    def checked(self) -> int:
        """Keys read and found matching."""
        return sum(1 for i in self.plan.items if i.action == "ok")

    @property
    def unknown_reason(self) -> str | None:
        """Why compliance cannot be told (no drift seen, but not everything could be read)."""
        unread = [i.key for i in self.unverified if i.unread]
        if unread:
            more = f" and {len(unread) - 5} more" if len(unread) > 5 else ""
            shown = ", ".join(unread[:5]) + more
            return f"{len(unread)} key(s) of profile {self.profile!r} could not be read: {shown}"
        if self.checked == 0:
            return f"no key of profile {self.profile!r} could be read here"
        return None

    @property
    def compliant(self) -> bool | None:
        """True, False, or None when unknown (unknown_reason says why)."""
        if self.drift:
            return False
        return None if self.unknown_reason is not None else True


def drift_of(p: Plan) -> VerifyReport:
    """Classify a plan's items (pure)."""
    drift = []
    unsupported = []
    unverified = []
    for item in p.items:
        if item.action == "ok":
            continue
        if item.action == "unsupported":
            unsupported.append(item)
        elif (
            item.action == "set"
            or (item.action == "needs-privilege" and item.current)
            # A PM QoS request not held now is not in force: drift, though apply cannot write
            # it (only a running agent holds it: tuning/plugins/pmqos.py).
            or (item.action == "skipped" and item.current and _skipped_is_drift(item.key))
        ):
            drift.append(Drift(item.key, item.rule, item.desired, item.current, item.reason))
        else:
            unverified.append(item)
    return VerifyReport(p.profile, p, tuple(drift), tuple(unsupported), tuple(unverified))


def _skipped_is_drift(key: str) -> bool:
    subsystem = plugins.owner(key)
    return subsystem is not None and subsystem.skipped_is_drift


def verify(
    host: HostReader,
    profile: Profile,
    partition: CpuPartition | None = None,
    managed: frozenset[int] = frozenset(),
) -> VerifyReport:
    """Read the host and report drift from `profile`. Only reads. `partition` and `managed`
    (the journal's kernel-managed interrupts) are what `[irq]` is checked against."""
    state = read_state(host, profile, partition=partition, managed=managed)
    return drift_of(plan(profile, state))
