"""cgroup mode: v2 (unified), hybrid, or v1 (legacy), decided the way systemd does (see
context.cgroup_mode_of). Hybrid and v1 are deprecated by systemd: v256 refuses to boot on them
unless SYSTEMD_CGROUP_ENABLE_LEGACY_FORCE=1 is on the kernel command line (systemd PR #31442),
and later releases removed cgroup v1 support (systemd PR #37026)."""

from __future__ import annotations

from dataclasses import dataclass

from mcpnode.audit.context import AuditContext, cgroup_mode_of
from mcpnode.audit.facts import FileRead, clip, file_evidence, read_file, unreadable_finding
from mcpnode.audit.model import Evidence, Finding, Status, skipped
from mcpnode.audit.paths import CGROUP_ROOT, CMDLINE, MOUNTINFO
from mcpnode.host import HostReader

# Kernel command line switches that keep systemd on cgroup v1 (systemd.unified_cgroup_hierarchy
# =0, systemd.legacy_systemd_cgroup_controller) or force it past v256's refusal.
LEGACY_SWITCHES = (
    "systemd.unified_cgroup_hierarchy",
    "systemd.legacy_systemd_cgroup_controller",
    "SYSTEMD_CGROUP_ENABLE_LEGACY_FORCE",
    "cgroup_no_v1",
)

DEPRECATION = (
    "systemd deprecates cgroup v1: v256 refuses to boot on it (legacy or hybrid) unless "
    "SYSTEMD_CGROUP_ENABLE_LEGACY_FORCE=1 is on the kernel command line, and later releases "
    "remove v1 support"
)
REMEDY = (
    "Boot with the unified hierarchy: remove systemd.unified_cgroup_hierarchy=0, "
    "systemd.legacy_systemd_cgroup_controller and SYSTEMD_CGROUP_ENABLE_LEGACY_FORCE from "
    "GRUB_CMDLINE_LINUX in /etc/default/grub (or add systemd.unified_cgroup_hierarchy=1), run "
    "`update-grub` (Debian/Ubuntu) or `grub2-mkconfig -o /boot/grub2/grub.cfg` (RHEL), reboot; "
    "the NVIDIA container toolkit needs libnvidia-container >= 1.8.1 on cgroup v2"
)


@dataclass(frozen=True)
class CgroupFacts:
    mountinfo: FileRead
    cmdline: FileRead


def collect(host: HostReader, ctx: AuditContext) -> CgroupFacts:
    return CgroupFacts(read_file(host, MOUNTINFO), read_file(host, CMDLINE))


def _switches(cmdline: str | None) -> list[str]:
    if not cmdline:
        return []
    return [w for w in cmdline.split() if w.split("=", 1)[0] in LEGACY_SWITCHES]


def check(facts: CgroupFacts, ctx: AuditContext) -> list[Finding]:
    fid = "cgroup.mode"
    read = facts.mountinfo
    if read.text is None:
        if read.missing:
            return skipped(
                fid,
                f"cgroup mode not checked: {MOUNTINFO} is not in this root",
                file_evidence(read),
                "Capture the host with `mcpnode snapshot` to include the mount table",
            )
        return [unreadable_finding(fid, read, ctx.is_root, "cgroup mode")]
    mode, seen = cgroup_mode_of(read.text)
    evidence = [Evidence(MOUNTINFO, seen)]
    switches = _switches(facts.cmdline.text)
    if switches:
        evidence.append(Evidence(CMDLINE, clip(" ".join(switches))))
    ev = tuple(evidence)
    if mode == "v2":
        return [Finding(fid, Status.PASS, "cgroup v2 (unified hierarchy)", ev)]
    if mode == "hybrid":
        summary = f"cgroup hybrid (v1 controllers, v2 for systemd only): {DEPRECATION}"
        return [Finding(fid, Status.WARN, summary, ev, REMEDY)]
    if mode == "v1":
        return [Finding(fid, Status.WARN, f"cgroup v1 (legacy): {DEPRECATION}", ev, REMEDY)]
    return [
        Finding(
            fid,
            Status.WARN,
            f"cgroup mode unknown: no cgroup file system at {CGROUP_ROOT}",
            ev,
            f"Mount the cgroup2 file system: `mount -t cgroup2 none {CGROUP_ROOT}` (systemd "
            "does this at boot; inside a container, run it with the host's cgroup namespace)",
        )
    ]
