"""Run the audit: discover once, build the shared context, then per area collect facts through
Host and run the pure checks. A collector or check that raises is the audit's own problem: it
becomes a SKIP finding naming the area and an entry in `problems`, never a crash.

Areas register here, in report order, with the id prefix every finding of theirs carries.
"""

from __future__ import annotations

import fnmatch
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from mcpnode.audit import (
    cgroup,
    container,
    expect,
    fabricmanager,
    gpu,
    gpu_xid,
    ib,
    kernel,
    numa,
    p2p,
    pcie,
    privilege,
    tuning,
)
from mcpnode.audit.context import AuditContext, build_context
from mcpnode.audit.expectation import Expectation
from mcpnode.audit.model import AuditReport, Evidence, Finding, Status
from mcpnode.host import Host


@dataclass(frozen=True)
class Area:
    prefix: str  # every finding id of the area starts with `prefix.`
    title: str  # heading in the text report
    collect: Callable[[Host, AuditContext], Any]  # all I/O, through Host
    check: Callable[[Any, AuditContext], list[Finding]]  # pure


AREAS: list[Area] = [
    Area("self", "Self", privilege.collect, privilege.check),
    Area("cgroup", "cgroup", cgroup.collect, cgroup.check),
    Area("kernel", "Kernel and modules", kernel.collect, kernel.check),
    Area("expect", "Expected inventory", expect.collect, expect.check),
    # Three collectors share the gpu prefix: NVML's facts, the kernel log's XIDs, Fabric
    # Manager; one failing does not cost the others.
    Area("gpu", "GPU health", gpu.collect, gpu.check),
    Area("gpu", "GPU health", gpu_xid.collect, gpu_xid.check),
    Area("gpu", "GPU health", fabricmanager.collect, fabricmanager.check),
    Area("pcie", "PCIe health", pcie.collect, pcie.check),
    Area("ib", "InfiniBand / RoCE ports", ib.collect, ib.check),
    Area("p2p", "Peer-to-peer (PCIe ACS)", p2p.collect, p2p.check),
    Area("numa", "NUMA", numa.collect, numa.check),
    Area("tuning", "Tuning compliance", tuning.collect, tuning.check),
    Area("container", "NVIDIA container stack", container.collect, container.check),
]


def matches(finding_id: str, pattern: str) -> bool:
    """An id glob: `gpu.*`, `*.ecc*`; a bare prefix (`gpu`, `kernel.module`) also selects
    everything below it."""
    return fnmatch.fnmatchcase(finding_id, pattern) or fnmatch.fnmatchcase(
        finding_id, pattern + ".*"
    )


def _area_wanted(prefix: str, only: Sequence[str], skip: Sequence[str]) -> bool:
    """Whether an area can produce a selected finding (so unselected areas read nothing)."""
    if any(p in ("*", prefix, prefix + ".*") for p in skip):
        return False
    if not only:
        return True
    # fnmatch's `*` crosses dots (`*fabric*` selects gpu.fabric), so a pattern whose first
    # segment holds a `*` may select any area.
    heads = [p.split(".", 1)[0] for p in only]
    return any("*" in h or fnmatch.fnmatchcase(prefix, h) for h in heads)


def selected(finding: Finding, only: Sequence[str], skip: Sequence[str]) -> bool:
    if only and not any(matches(finding.id, p) for p in only):
        return False
    return not any(matches(finding.id, p) for p in skip)


def run_areas(
    host: Host,
    ctx: AuditContext,
    areas: Sequence[Area],
    only: Sequence[str] = (),
    skip: Sequence[str] = (),
) -> tuple[list[Finding], list[str]]:
    """Collect and check each wanted area; failures become SKIP findings and problems."""
    findings: list[Finding] = []
    problems: list[str] = []
    for area in areas:
        if not _area_wanted(area.prefix, only, skip):
            continue
        stage = "collector"
        try:
            facts = area.collect(host, ctx)
            stage = "check"
            got = area.check(facts, ctx)
        except Exception as err:
            where = traceback.extract_tb(err.__traceback__)[-1]
            detail = f"{type(err).__name__}: {err}"
            problems.append(
                f"{area.prefix}: {stage} failed: {detail} ({where.filename}:{where.lineno})"
            )
            got = [
                Finding(
                    f"{area.prefix}.audit",
                    Status.SKIP,
                    f"{area.title} not checked: the {stage} failed ({detail})",
                    (Evidence(f"mcpnode.audit.{area.prefix}", detail),),
                    "Report this as an mcpnode bug with `mcpnode snapshot -o node.tar.gz` "
                    "attached.",
                )
            ]
        findings.extend(f for f in got if selected(f, only, skip))
    return findings, problems


def run_audit(
    host: Host,
    *,
    only: Sequence[str] = (),
    skip: Sequence[str] = (),
    profile: str | None = None,
    profiles_dir: str | None = None,
    now: datetime | None = None,
    areas: Sequence[Area] | None = None,
    expect: Expectation | None = None,
    expect_source: str | None = None,
) -> AuditReport:
    """Audit the machine behind `host`. Raises only when the audit cannot run at all (the
    root is unusable: RootError / HostError from discovery); `now` fixes `generated_at`.
    `profile` None: the profile the host was tuned with (tuning.configured_profile);
    `expect`: the expected inventory (`--expect FILE`; None: the expect area looks for one)."""
    from mcpnode.topology.discover import discover_host

    topology = discover_host(host)
    name = profile if profile is not None else tuning.configured_profile(host)
    ctx = build_context(
        host, topology, name, profiles_dir, expect=expect, expect_source=expect_source
    )
    findings, problems = run_areas(host, ctx, AREAS if areas is None else areas, only, skip)
    when = now or datetime.now(timezone.utc)
    return AuditReport(
        findings=tuple(findings),
        host=topology.identity.hostname,
        kernel=topology.identity.kernel_release,
        generated_at=when.isoformat(timespec="seconds"),
        problems=tuple(problems),
        profile=name,
    )
