"""NVIDIA Fabric Manager on A100-generation NVSwitch systems (HGX/DGX A100), where NVML reports
no fabric state (nvmlDeviceGetGpuFabricInfo is Hopper and later; gpu.fabric checks those).
Without a running Fabric Manager the NVSwitches route nothing and CUDA fails to initialise on
every GPU (NVIDIA Fabric Manager User Guide, "Fabric Manager and the NVSwitch driver").

Read through Host.command, so a snapshot replays them: `systemctl is-active
nvidia-fabricmanager` (the unit the driver packages install) and the unit's journal of this
boot, whose last "successfully" line is Fabric Manager saying it configured the GPUs and
NVSwitches ("Successfully configured all the available GPUs and NVSwitches to route NVLink
traffic"). Unit active and that line logged: PASS; active without it: WARN; not active: FAIL.
Only reported where it applies (NVSwitch-attached GPUs without NVML fabric state).
"""

from __future__ import annotations

from dataclasses import dataclass

from mcpnode.audit.context import AuditContext
from mcpnode.audit.facts import clip, command_evidence
from mcpnode.audit.model import Evidence, Finding, Status
from mcpnode.host import CommandResult, HostReader
from mcpnode.topology.model import Topology

UNIT = "nvidia-fabricmanager"
IS_ACTIVE = ("systemctl", "is-active", UNIT)
JOURNAL = ("journalctl", "-u", UNIT, "-b", "--no-pager", "-q", "-o", "cat", "-n", "500")


@dataclass(frozen=True)
class FabricManagerFacts:
    applies: bool
    why: str  # why it applies or not, for the evidence
    is_active: CommandResult | None
    journal: CommandResult | None


def applies(topo: Topology) -> tuple[bool, str]:
    """NVSwitch-attached GPUs none of which reports a fabric state (pre-Hopper)."""
    with_nvml = [g.nvml for g in topo.gpus if g.nvml is not None]
    switched = any(x.remote_type == "SWITCH" for n in with_nvml for x in n.nvlinks)
    if not switched:
        return False, "no GPU has NVLinks to an NVSwitch"
    if any(n.fabric_state not in (None, "NOT_SUPPORTED") for n in with_nvml):
        return False, "the GPUs report a fabric state (Hopper or later): see gpu.fabric"
    return True, "NVSwitch-attached GPUs without NVML fabric state (A100 generation)"


def collect(host: HostReader, ctx: AuditContext) -> FabricManagerFacts:
    ok, why = applies(ctx.topology)
    if not ok:
        return FabricManagerFacts(False, why, None, None)
    return FabricManagerFacts(True, why, host.command(IS_ACTIVE), host.command(JOURNAL))


def last_success(journal: CommandResult | None) -> str | None:
    if journal is None or not journal.found or journal.returncode != 0:
        return None
    lines = [x for x in journal.stdout.splitlines() if "successfully" in x.lower()]
    return lines[-1].strip() if lines else None


def check(facts: FabricManagerFacts, ctx: AuditContext) -> list[Finding]:
    fid = "gpu.fabricmanager"
    if not facts.applies:
        # Not an A100-generation NVSwitch system: gpu.fabric says what applies (COMPLETED on
        # Hopper, one SKIP without NVSwitch); a second line here would only repeat it.
        return []
    active = facts.is_active
    assert active is not None
    ev = [command_evidence(active), Evidence("why it applies", facts.why)]
    remedy = (
        f"systemctl enable --now {UNIT}; its version must equal the driver's "
        f"(`journalctl -u {UNIT}` says why it stopped)"
    )
    if not active.found:
        # A snapshot without the answer is "not applicable here"; a live host whose systemctl
        # cannot say is one mcpnode could not verify.
        status = Status.SKIP if "not recorded" in (active.reason or "") else Status.WARN
        return [
            Finding(
                fid,
                status,
                f"Fabric Manager unit not checked: `{' '.join(IS_ACTIVE)}` "
                f"{active.reason or 'did not run'}",
                tuple(ev),
                None if status is Status.SKIP else remedy,
            )
        ]
    state = active.stdout.strip() or f"exit {active.returncode}"
    if state != "active":
        return [
            Finding(
                fid,
                Status.FAIL,
                f"{UNIT} is {state}: the NVSwitches route no NVLink traffic and CUDA cannot "
                "initialise the GPUs",
                tuple(ev),
                remedy,
            )
        ]
    success = last_success(facts.journal)
    if facts.journal is not None:
        ev.append(command_evidence(facts.journal, clip(success) if success else None))
    if success is None:
        return [
            Finding(
                fid,
                Status.WARN,
                f"{UNIT} is active but its journal of this boot does not say it configured the "
                "fabric",
                tuple(ev),
                f"`journalctl -u {UNIT} -b` for errors (a version mismatch with the driver, a "
                "degraded NVSwitch); restart it",
            )
        ]
    return [Finding(fid, Status.PASS, f"{UNIT} active: {clip(success, 120)}", tuple(ev))]
