"""Self: who the audit runs as. Without root some reads are refused (a containerd config kept
0600, sysctls readable only by root, NVML calls answering NoPermission); those checks say SKIP
with the reason rather than FAIL, and this finding says why up front."""

from __future__ import annotations

from dataclasses import dataclass

from mcpnode.audit.context import AuditContext
from mcpnode.audit.model import Evidence, Finding, Status
from mcpnode.host import HostReader


@dataclass(frozen=True)
class SelfFacts:
    euid: int | None  # None: a recorded root that does not say (a plain dump)
    live: bool


def collect(host: HostReader, ctx: AuditContext) -> SelfFacts:
    return SelfFacts(host.effective_uid(), host.is_live)


def check(facts: SelfFacts, ctx: AuditContext) -> list[Finding]:
    # The same source live and replayed, so a snapshot's audit equals the live one.
    source = "effective uid"
    shown = "not recorded" if facts.euid is None else str(facts.euid)
    if ctx.is_root:
        summary = "running as root: every check can read what it needs"
        if facts.euid is None:
            summary = "recorded root without an euid: read as root (nothing was refused)"
        return [Finding("self.privilege", Status.PASS, summary, (Evidence(source, shown),))]
    return [
        Finding(
            "self.privilege",
            Status.INFO,
            f"running as uid {shown}, not root: checks that need root say SKIP",
            (Evidence(source, shown),),
            "sudo mcpnode audit",
        )
    ]
