"""Tuning compliance: `mcpnode verify` against the active profile (tuning/active.py: the agent's,
else the journal's, else the persisted file's, else the configured one; the same plan apply
executes, so the audit cannot disagree with apply), plus every sysctl.d / sysctl.conf line that
would override the persisted values at boot (systemd-sysctl order).

No active profile is INFO ("not tuned by mcpnode"), never a FAIL against a profile nobody
chose; a journal that cannot be trusted is a FAIL (`tuning.state`): what was applied, and how
to undo it, is then unknown. Drift FAILs per key, and every one has the same one-command remedy.
Compliance nobody could check (no key readable) is SKIP, never PASS."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from mcpnode.audit.context import AuditContext
from mcpnode.audit.model import Evidence, Finding, Status
from mcpnode.errors import HostError, ManifestError, McpnodeError
from mcpnode.host import HostReader
from mcpnode.published import MANIFEST_PATH, read_manifest
from mcpnode.state.active import ActiveProfile
from mcpnode.state.agentstate import AGENT_STATE_PATH, AgentState, read_agent_state
from mcpnode.tuning.journal import managed_irqs
from mcpnode.tuning.partition import CpuPartition
from mcpnode.tuning.persist import Assignment, find_overrides, persisted_values
from mcpnode.tuning.verify import VerifyReport, verify


@dataclass(frozen=True)
class TuningFacts:
    profile: str | None  # checked against; None: no active profile (or it is unknown)
    report: VerifyReport | None
    overrides: tuple[Assignment, ...]
    error: str | None  # the profile did not load (unknown name, bad TOML)
    agent: AgentState | None = None  # what a running `mcpnode agent` published
    active: ActiveProfile | None = None  # None when the caller named the profile (--profile)


def collect(host: HostReader, ctx: AuditContext) -> TuningFacts:
    from mcpnode.tuning.profile import load_profile

    agent = read_agent_state(host)
    active = ctx.active
    if ctx.profile is None:
        return TuningFacts(None, None, (), None, agent, active)
    try:
        profile = load_profile(
            ctx.profile, host, Path(ctx.profiles_dir) if ctx.profiles_dir else None
        )
    except McpnodeError as err:
        return TuningFacts(ctx.profile, None, (), f"{type(err).__name__}: {err}", agent, active)
    partition = ctx.partition if ctx.partition is not None else _published_partition(host)
    report = verify(host, profile, partition, managed_irqs(host))
    overrides = find_overrides(host, persisted_values(report.plan))
    return TuningFacts(ctx.profile, report, overrides, None, agent, active)


def _published_partition(host: HostReader) -> CpuPartition | None:
    """The CPU partition the published manifest advertises (what `[irq]` is checked against
    when the audit runs on its own), read by the one manifest reader (mcpnode/published.py:
    trusted, every field checked); None when none is published or it is unusable, and then the
    `[irq]` keys are reported unverified."""
    from mcpnode.topology.parse import parse_cpulist

    try:
        doc = read_manifest(host)
    except (HostError, ManifestError):
        return None
    placement = doc["placement"]
    slices: set[int] = set()
    for gpu in placement["gpus"]:
        slices |= parse_cpulist(gpu["slice_cpus"])
    nodes = {n["id"]: frozenset(parse_cpulist(n["cpus"])) for n in doc["numa_nodes"]}
    return CpuPartition(
        frozenset(parse_cpulist(placement["housekeeping_cpus"])),
        frozenset(slices),
        nodes,
        f"manifest {MANIFEST_PATH}",
    )


def check(facts: TuningFacts, ctx: AuditContext) -> list[Finding]:
    return [*_compliance(facts, ctx), *_contested(facts), *_bootloader(facts)]


def _bootloader(facts: TuningFacts) -> list[Finding]:
    """`[bootloader]` arguments configured for the next boot but not in the running kernel's
    /proc/cmdline (tuning/plugins/bootloader.py): a reboot is due. Drift in the configuration
    itself is tuning.drift's."""
    if facts.report is None:
        return []
    out = []
    for item in facts.report.plan.items:
        if not item.key.startswith("bootloader:") or item.action != "ok":
            continue
        evidence = (Evidence(item.path or item.key, item.reason),)
        if "reboot required" in item.reason:
            inactive = item.reason.split("reboot required: ", 1)[1].split(" not in ")[0]
            out.append(
                Finding(
                    "tuning.bootloader",
                    Status.WARN,
                    f"kernel arguments wanted but not active: {inactive} (configured for the "
                    "next boot)",
                    evidence,
                    "Reboot the node (drain it first) so the kernel starts with them",
                    item.key,
                )
            )
        else:
            out.append(
                Finding(
                    "tuning.bootloader",
                    Status.PASS,
                    "every wanted kernel argument is configured and active",
                    evidence,
                    subject=item.key,
                )
            )
    return out


def _untuned(active: ActiveProfile | None) -> list[Finding]:
    """No profile to check against: INFO, or FAIL when the journal itself is unusable."""
    if active is not None and active.problem is not None:
        return [
            Finding(
                "tuning.state",
                Status.FAIL,
                "the tuning journal cannot be used, so which profile is applied (and how to undo "
                "it) is unknown",
                (Evidence("tuning journal", active.problem),),
                "Inspect the journal named above (restore it from backup, or fix its owner and "
                "mode: root's alone), then `mcpnode profiles active`",
            )
        ]
    detail = active.detail if active is not None else "no profile given"
    return [
        Finding(
            "tuning.profile",
            Status.INFO,
            "not tuned by mcpnode: no profile is active on this host",
            (Evidence("mcpnode profiles active", f"none ({detail})"),),
            "`mcpnode apply --profile NAME` tunes it (`mcpnode profiles list` shows the names); "
            "`mcpnode audit --profile NAME` checks it against one without applying it",
        )
    ]


def _contested(facts: TuningFacts) -> list[Finding]:
    """Keys the agent stopped remediating: something else keeps setting them. WARN, because
    tuning.drift already FAILs the key while it is off-profile; this names the cause."""
    agent = facts.agent
    if agent is None:
        return []
    return [
        Finding(
            "tuning.contested",
            Status.WARN,
            f"mcpnode agent (pid {agent.pid}) stopped remediating {c.key}: another owner "
            f"changed it back {c.remediations} times within {c.window_s:g} s",
            (
                Evidence(
                    AGENT_STATE_PATH,
                    f"given up at {c.since}; value seen "
                    + (repr(c.value) if c.value is not None else "unreadable"),
                ),
                Evidence(f"profile {agent.profile}", f"drift mode {agent.drift_mode}"),
            ),
            "Find the other owner (tuned, a Kubernetes node-tuning operator, a sysctl.d file, "
            "a cron job), stop it from setting the key, then `systemctl reload mcpnode`",
            c.key,
        )
        for c in agent.contested
    ]


def _compliance(facts: TuningFacts, ctx: AuditContext) -> list[Finding]:
    name = facts.profile
    if name is None:
        return _untuned(facts.active)
    if facts.report is None:
        return [
            Finding(
                "tuning.profile",
                Status.FAIL,
                f"tuning profile {name!r} does not load, so compliance cannot be checked",
                (Evidence(f"profile {name}", facts.error or "?"),),
                "List the profiles with `mcpnode profiles list` and pass one with --profile, or "
                "fix the file named above",
            )
        ]
    report = facts.report
    out: list[Finding] = []
    items = report.plan.items
    remedy = _remedy(name, facts.active)
    for d in report.drift:
        item = next((i for i in items if i.key == d.key), None)
        where = item.path if item is not None and item.path else d.key
        # The file's name, not its path: the shipped profiles' path is the install's.
        source = f"profile {name}" + (
            f" ({Path(item.source).name})" if item is not None and item.source else ""
        )
        out.append(
            Finding(
                "tuning.drift",
                Status.FAIL,
                f"{d.key} = {d.actual}, profile {name!r} expects {d.expected}",
                (
                    Evidence(where, f"actual {d.actual}"),
                    Evidence(source, f"expected {d.expected}"),
                ),
                remedy,
                d.key,
            )
        )
    checked = report.checked
    if not report.drift and checked == 0:
        out.append(
            Finding(
                "tuning.drift",
                Status.SKIP,
                f"tuning compliance not checked: no key of profile {name!r} could be read here",
                (Evidence(f"profile {name}", f"0 of {len(items)} key(s) read"),),
            )
        )
    elif not report.drift and report.compliant is None:
        # Some keys match, others could not be read: compliance is unknown, never a PASS.
        out.append(
            Finding(
                "tuning.drift",
                Status.WARN,
                f"tuning compliance unknown: {checked} key(s) match profile {name!r}, "
                f"{report.unknown_reason}",
                (Evidence(f"profile {name}", f"{checked} of {len(items)} key(s) satisfied"),),
                "See tuning.unverified below for each key and why it could not be read",
            )
        )
    elif not report.drift:
        out.append(
            Finding(
                "tuning.drift",
                Status.PASS,
                f"{checked} key(s) match profile {name!r}",
                (Evidence(f"profile {name}", f"{checked} of {len(items)} key(s) satisfied"),),
            )
        )
    for item in report.unverified:
        needs_root = item.action == "needs-privilege" and not ctx.is_root
        why = f"needs root ({item.reason})" if needs_root else item.reason
        out.append(
            Finding(
                "tuning.unverified",
                Status.SKIP,
                f"{item.key} not verified: {why}",
                (Evidence(item.path or item.key, item.current or "not read"),),
                "sudo mcpnode audit --only 'tuning.*'" if needs_root else None,
                item.key,
            )
        )
    if report.unsupported:
        # One line for all: a dump or an older kernel can lack a dozen keys at once.
        keys = [i.key for i in report.unsupported]
        out.append(
            Finding(
                "tuning.unsupported",
                Status.INFO,
                f"{len(keys)} key(s) of profile {name!r} not on this kernel (or not in this "
                f"root), not checked: {', '.join(keys)}",
                tuple(Evidence(i.path or i.key, i.reason) for i in report.unsupported),
            )
        )
    winners = [a for a in facts.overrides if a.wins and not a.same_value]
    for a in winners:
        out.append(
            Finding(
                "tuning.override",
                Status.WARN,
                f"{a.file}:{a.line} sets {a.written} = {a.value} at boot, overriding profile "
                f"{name!r}",
                (Evidence(f"{a.file}:{a.line}", f"{a.written} = {a.value} ({a.note})"),),
                f"Remove or comment out line {a.line} of {a.file} (or rename the file to sort "
                "before 90-mcpnode.conf), then `systemctl restart systemd-sysctl`",
                a.key,
            )
        )
    return out


def _remedy(profile: str, active: ActiveProfile | None) -> str:
    """One command for all the drift of a profile: applying it again writes every drifted key
    (and keeps the persisted file current when the profile was persisted)."""
    persisted = active is not None and active.source == "persisted"
    return f"mcpnode apply --profile {profile}" + (" --persist" if persisted else "")
