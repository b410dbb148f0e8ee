"""Run the audit: discover once, build the shared context, then per area collect facts through
Host and run the pure checks. A collector or check that raises means that area of the host could
not be verified: it becomes a FAIL finding (`<area>.audit`, naming the error and where it came
from) and an entry in `problems`, never a crash — and never a SKIP, which would let a host whose
configuration could not even be read through a preflight gate.

An audit that cannot run at all — a root with neither a readable sysfs nor a readable procfs
(an empty directory, a typo in --root) — raises AuditCannotRun (exit 2), instead of reporting
"passed" over nothing.

Areas register here, in report order, with the id prefix every finding of theirs carries.
"""

from __future__ import annotations

import fnmatch
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
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
    kubelet,
    numa,
    p2p,
    pcie,
    privilege,
    tuning,
)
from mcpnode.audit.context import AuditContext, build_context
from mcpnode.audit.expectation import Expectation
from mcpnode.audit.model import AuditReport, Evidence, Finding, Status
from mcpnode.audit.paths import MACHINE_DIRS
from mcpnode.audit.xid import XidEvent
from mcpnode.errors import HostError, McpnodeError
from mcpnode.host import Host, HostReader
from mcpnode.topology.model import CpuSet, Topology
from mcpnode.tuning.active import active_profile


@dataclass(frozen=True)
class Area:
    prefix: str  # every finding id of the area starts with `prefix.`
    title: str  # heading in the text report
    # All I/O, through the Host the runner is handed. Every area of AREAS takes its reading
    # role (HostReader: tests/host/test_host_roles.py checks each), so mypy refuses a write
    # from them; the probe's area (`audit --probe`, probe/area.py) measures, so takes the Host.
    collect: Callable[[Host, AuditContext], Any]
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
    Area("kubelet", "kubelet alignment", kubelet.collect, kubelet.check),
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
        if ctx.keepalive is not None:
            ctx.keepalive()
        stage = "collector"
        try:
            facts = area.collect(host, ctx)
            stage = "check"
            got = area.check(facts, ctx)
        except Exception as err:
            where = traceback.extract_tb(err.__traceback__)[-1]
            detail = " ".join(f"{type(err).__name__}: {err}".split())[:500]
            problems.append(
                f"{area.prefix}: {stage} failed: {detail} ({where.filename}:{where.lineno})"
            )
            got = [
                Finding(
                    f"{area.prefix}.audit",
                    Status.FAIL,
                    f"{area.title} could not be verified: the {stage} failed ({detail})",
                    (Evidence(f"mcpnode.audit.{area.prefix}", detail),),
                    "Fix what the error names (an unreadable or malformed file), then audit "
                    "again; if the host is fine, report it as an mcpnode bug with "
                    "`mcpnode snapshot -o node.tar.gz` attached.",
                )
            ]
        findings.extend(f for f in got if selected(f, only, skip))
    return findings, problems


class AuditCannotRun(McpnodeError):
    """The root has nothing an audit can read: no sysfs and no procfs (exit 2)."""


def require_machine(host: HostReader) -> None:
    """Raise AuditCannotRun unless `host` has a readable sysfs or procfs."""
    for logical in MACHINE_DIRS:
        try:
            if host.listdir_optional(logical):
                return
        except HostError:
            continue
    raise AuditCannotRun(
        f"{host.source}: no readable sysfs or procfs (looked for "
        f"{', '.join(MACHINE_DIRS)}): nothing to audit; is --root the machine's root?"
    )


def audit_context(
    host: Host,
    topology: Topology,
    profile: str | None,
    profiles_dir: str | None,
    *,
    housekeeping: CpuSet | None = None,
    observed_xids: tuple[XidEvent, ...] = (),
) -> AuditContext:
    """The shared context, with the profile to check: `profile` when given, else the active
    one (tuning/active.py), else none. `housekeeping`: mcpnode's housekeeping CPUs when the
    caller planned placement (audit/kubelet.py compares the kubelet's reserved CPUs);
    `observed_xids`: XIDs the agent received as NVML events. The whole Host, not
    HostReader: tuning/'s active_profile is typed against it."""
    active = None
    if profile is None:
        active = active_profile(host)
        profile = active.name
    return build_context(
        host,
        topology,
        profile,
        profiles_dir,
        active,
        housekeeping,
        observed_xids=observed_xids,
    )


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
    `profile` None: the active profile (`mcpnode profiles active`), or none; `expect`: the
    expected inventory (`--expect FILE`; None: the expect area looks for one)."""
    from mcpnode.topology.discover import discover_host

    require_machine(host)
    topology = discover_host(host)
    ctx = replace(
        audit_context(host, topology, profile, profiles_dir),
        expect=expect,
        expect_source=expect_source,
    )
    return audit_report(host, ctx, now or datetime.now(timezone.utc), areas, only, skip)


def audit_report(
    host: Host,
    ctx: AuditContext,
    when: datetime,
    areas: Sequence[Area] | None = None,
    only: Sequence[str] = (),
    skip: Sequence[str] = (),
) -> AuditReport:
    """Run `areas` (None: every area) over `ctx` and report them, generated at `when`: the
    audit command's report and the manifest's audit section alike."""
    findings, problems = run_areas(host, ctx, AREAS if areas is None else areas, only, skip)
    identity = ctx.topology.identity
    return AuditReport(
        findings=tuple(findings),
        host=identity.hostname,
        kernel=identity.kernel_release,
        generated_at=when.isoformat(timespec="seconds"),
        problems=tuple(problems),
        profile=ctx.profile,
    )
