"""XID and SXID errors since boot, from the kernel log (audit/xid.py parses; this reads).

Where the log comes from: /dev/kmsg (Host.read_kmsg; a root's `dev/kmsg` file); when that is
refused (kernel.dmesg_restrict without CAP_SYSLOG) or absent, the kernel messages of the
journal (`journalctl -k -b -o short-monotonic`, through Host.command, so a snapshot keeps the
answer). XIDs the agent saw through NVML events (AuditContext.observed_xids) stand in only when
no log could be read: the driver logs every XID it raises an event for.

Findings: `gpu.xid` per GPU (and per PCI address an XID names that no GPU here has: a GPU that
fell off the bus may be gone from sysfs too), `gpu.sxid` per NVSwitch. The status of each Xid is
the policy's (audit/xid_policy.py: NVIDIA's immediate action by default, Azure NHC's fail list
or the site's per-Xid choice from `[audit.xid]` in /etc/mcpnode/mcpnode.toml); the evidence
names NVIDIA's catalogue row (audit/xid_catalog.py) and what decided. An Xid the driver
attributed to a MIG instance names it. Xid 63 (a row marked for remapping) is resolved once
NVML reports no remap pending: the GPU was reset since, so it is reported, not counted.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from mcpnode.audit import paths
from mcpnode.audit.context import AuditContext
from mcpnode.audit.expect import CONFIG_PATH
from mcpnode.audit.facts import FileRead, command_evidence, read_file, unreadable_finding
from mcpnode.audit.gpu import uptime_of
from mcpnode.audit.model import Evidence, Finding, Status
from mcpnode.audit.xid import (
    XID_RECOVERY_ACTION,
    XID_ROW_REMAP,
    LogRecord,
    SxidEvent,
    XidEvent,
    parse_journal_line,
    parse_kmsg_record,
    parse_sxid,
    parse_xid,
    since_boot,
)
from mcpnode.audit.xid_policy import (
    DEFAULT,
    Decision,
    PolicyError,
    XidPolicy,
    decide,
    parse_audit_table,
)
from mcpnode.codec import toml_bounded
from mcpnode.codec.reading import Absent, Unreadable
from mcpnode.codec.toml_bounded import TomlRejected
from mcpnode.errors import AccessDenied, HostError, PathNotFound
from mcpnode.host import CommandResult, Host
from mcpnode.topology.model import NVIDIA_VENDOR_ID, PciAddress

# The journal's kernel messages of this boot, oldest first; -n bounds what it prints.
JOURNAL_ARGV = (
    "journalctl",
    "-k",
    "-b",
    "-o",
    "short-monotonic",
    "--no-pager",
    "-q",
    "-n",
    "50000",
)
NVSWITCH_CLASS = 0x0680  # "bridge, other" (NVSwitch; hwloc matches it the same way)


@dataclass(frozen=True)
class KernelLog:
    """The kernel log as the collector got it: `records` when read, else why not (`read`
    says missing / denied / error, as for any file)."""

    source: str  # /dev/kmsg or the journalctl command line
    records: tuple[LogRecord, ...] | None
    read: FileRead
    truncated: bool = False
    overwritten: int = 0
    journal: CommandResult | None = None  # the fallback's answer, when it was tried


@dataclass(frozen=True)
class GpuRef:
    index: int
    address: PciAddress
    remap_pending: bool | None  # NVML's nvmlDeviceGetRemappedRows pending flag


@dataclass(frozen=True)
class XidFacts:
    log: KernelLog
    xids: tuple[XidEvent, ...]
    sxids: tuple[SxidEvent, ...]
    observed: tuple[XidEvent, ...]  # from NVML events (the agent), used without a log
    gpus: tuple[GpuRef, ...]
    switches: tuple[PciAddress, ...]
    uptime_s: float | None
    policy: XidPolicy = DEFAULT  # which status an Xid gets (audit/xid_policy.py)
    policy_error: str | None = None  # the [audit] table could not be used


def read_policy(host: Host) -> tuple[XidPolicy, str | None]:
    """The `[audit.xid]` policy of /etc/mcpnode/mcpnode.toml under the root (the default when
    there is none), and why the table could not be used. Never raises."""
    read = read_file(host, CONFIG_PATH)
    if read.text is None:
        return DEFAULT, None if read.missing else f"{CONFIG_PATH}: {read.error}"
    try:
        doc = toml_bounded.loads(read.text)
    except TomlRejected as err:
        return DEFAULT, f"{CONFIG_PATH}: not valid TOML: {err}"
    if "audit" not in doc:
        return DEFAULT, None
    try:
        return parse_audit_table(doc["audit"], CONFIG_PATH), None
    except PolicyError as err:
        return DEFAULT, str(err)


def read_log(host: Host) -> KernelLog:
    """The kernel log through `host`: /dev/kmsg, else the journal. Never raises."""
    kmsg = paths.KMSG
    try:
        got = host.read_kmsg()
    except (PathNotFound, AccessDenied, HostError) as err:
        denied = isinstance(err, AccessDenied)
        missing = isinstance(err, PathNotFound)
        read = FileRead(kmsg, Absent(f"no {kmsg}") if missing else Unreadable(err.detail, denied))
    else:
        records = tuple(r for r in map(parse_kmsg_record, got.records) if r is not None)
        return KernelLog(kmsg, records, FileRead(kmsg, ""), got.truncated, got.overwritten)
    journal = host.command(JOURNAL_ARGV)
    if journal.found and journal.returncode == 0:
        lines = journal.stdout.splitlines()
        records = tuple(r for r in map(parse_journal_line, lines) if r is not None)
        source = " ".join(JOURNAL_ARGV)
        return KernelLog(source, records, FileRead(source, ""), journal=journal)
    return KernelLog(kmsg, None, read, journal=journal)


def collect(host: Host, ctx: AuditContext) -> XidFacts:
    log = read_log(host)
    source = "kmsg" if log.source == paths.KMSG else "journal"
    records = log.records or ()
    xids = tuple(x for x in (parse_xid(r, source) for r in records) if x is not None)
    sxids = tuple(x for x in map(parse_sxid, records) if x is not None)
    topo = ctx.topology
    gpus = tuple(
        GpuRef(g.index, g.address, g.nvml.remapped_rows_pending if g.nvml else None)
        for g in topo.gpus
    )
    switches = tuple(
        d.address
        for d in topo.pci_devices
        if d.vendor_id == NVIDIA_VENDOR_ID and d.class_code == NVSWITCH_CLASS
    )
    uptime = uptime_of(read_file(host, paths.UPTIME).text)
    policy, error = read_policy(host)
    return XidFacts(log, xids, sxids, ctx.observed_xids, gpus, switches, uptime, policy, error)


def _gpu_key(a: PciAddress) -> PciAddress:
    return PciAddress(a.domain, a.bus, a.device, 0)


def check(facts: XidFacts, ctx: AuditContext) -> list[Finding]:
    if not facts.gpus and not facts.xids and not facts.switches:
        return []  # no GPU, no XID: gpu.present says it once for every GPU check
    log = facts.log
    events = facts.xids
    if log.records is None:
        if not facts.observed:
            return [_no_log(facts, ctx)]
        events = facts.observed
    out = _xid_findings(facts, events)
    out.extend(_sxid_findings(facts))
    if facts.policy_error is not None:
        out.insert(
            0,
            Finding(
                "gpu.xid.policy",
                Status.FAIL,
                f"Xid policy not used: {facts.policy_error}; NVIDIA's catalogue decided instead",
                (Evidence(CONFIG_PATH, facts.policy_error),),
                "Fix the [audit.xid] table (docs/config.md, [audit.xid])",
            ),
        )
    return out


def _log_evidence(facts: XidFacts) -> Evidence:
    log = facts.log
    if log.records is None:
        return Evidence(log.source, "unreadable; XIDs from the agent's NVML events")
    value = f"{len(log.records)} records"
    if log.records and log.records[0].usec is not None:
        value += f" since {since_boot(log.records[0].usec)} after boot"
    if facts.uptime_s is not None:
        value += f"; up {since_boot(int(facts.uptime_s * 1_000_000))}"
    if log.truncated:
        value += "; older records dropped (over mcpnode's bound)"
    if log.overwritten:
        value += f"; the kernel overwrote records {log.overwritten} time(s) while reading"
    return Evidence(log.source, value)


def _no_log(facts: XidFacts, ctx: AuditContext) -> Finding:
    log = facts.log
    if log.read.missing and (log.journal is None or not log.journal.found):
        ev = [Evidence(paths.KMSG, "not in this root")]
        if log.journal is not None:
            ev.append(command_evidence(log.journal))
        return Finding(
            "gpu.xid",
            Status.SKIP,
            f"XIDs not checked: no kernel log in this root ({paths.KMSG} was not captured)",
            tuple(ev),
            "Capture the host with a current `mcpnode snapshot` (it records the kernel log)",
        )
    found = unreadable_finding("gpu.xid", log.read, ctx.is_root, "XIDs (kernel log)")
    extra = (command_evidence(log.journal),) if log.journal is not None else ()
    remedy = found.remedy
    if log.read.denied:
        remedy = (
            "Run the audit as root (reading /dev/kmsg needs CAP_SYSLOG when "
            "kernel.dmesg_restrict=1), or add the user to the systemd-journal group"
        )
    return Finding(found.id, found.status, found.summary, found.evidence + extra, remedy)


def _xid_findings(facts: XidFacts, events: tuple[XidEvent, ...]) -> list[Finding]:
    by_gpu: dict[PciAddress, list[XidEvent]] = defaultdict(list)
    for e in events:
        by_gpu[_gpu_key(e.address)].append(e)
    refs = {g.address: g for g in facts.gpus}
    log_ev = _log_evidence(facts)
    out = []
    for address in sorted(set(refs) | set(by_gpu)):
        ref = refs.get(address)
        out.append(_gpu_finding(address, ref, by_gpu.get(address, []), log_ev, facts.policy))
    return out


# What to do for an action, with the command where there is one; NVIDIA's own words for it are
# xid_catalog.BUCKET_TEXT.
_REMEDY: dict[str, str] = {
    "RESET_GPU": "Drain the GPU, then reset it: `nvidia-smi -r -i BUS` (or reboot the node)",
    "DRAIN_AND_RESET": "Drain the GPU's work, then reset it: `nvidia-smi -r -i BUS`",
    "WORKFLOW_XID_48": "Drain the GPU, then reset it: `nvidia-smi -r -i BUS`; with Xid 63/64 "
    "too, drain first (NVIDIA's Xid 48 workflow)",
    "WORKFLOW_NVLINK_ERR": "Drain the GPU and reset it (`nvidia-smi -r -i BUS`) or reboot the "
    "node; `nvidia-smi nvlink -e -i BUS` shows the link errors",
    "RESTART_BM": "Drain the node and reboot (power-cycle) it; reseat or RMA the GPU if it recurs",
    "RESTART_VM": "Restart the VM that owns the GPU",
    "DRAIN_P2P": "Stop the GPU processes that do peer-to-peer traffic, then run the audit again",
    "CHECK_MECHANICALS": "Check the board's seating and its auxiliary power cables",
    "UPDATE_SWFW": "Update the GPU firmware and the driver (guest and host drivers must match)",
    "RESTART_APP": "Restart the application that hit it (check its code and inputs if it recurs)",
    "XID_154_EVAL": "Follow the Xid 154 logged with it; without one, restart the application",
    "WORKFLOW_NVLINK5_ERR": "Decode the message (IntrInfo, Error Status) with the catalogue's "
    '"XID 144-150 Decode" sheet; reset the GPU for a Fatal one',
    "WORKFLOW_XID_45": "Alone: `systemctl restart nvidia-fabricmanager`; with other Xids, follow "
    "those",
    "CHECK_UVM": "Reset the GPU (`nvidia-smi -r -i BUS`) if UVM or vGPU is in use",
    "CONTACT_SUPPORT": "Collect `nvidia-bug-report.sh` and contact your support organization",
    "XID_154": "Follow the recovery action the driver reports (`nvidia-smi -q | grep -i recovery`)",
    "NOT_GIVEN": "Look the Xid up in NVIDIA's Xid Catalog (a newer edition may list it); "
    "collect `nvidia-bug-report.sh` if it recurs",
}


@dataclass(frozen=True)
class _Group:
    xid: int
    events: tuple[XidEvent, ...]
    decision: Decision
    action: str
    resolved: bool


def _group(xid: int, events: list[XidEvent], ref: GpuRef | None, policy: XidPolicy) -> _Group:
    resolved = xid == XID_ROW_REMAP and ref is not None and ref.remap_pending is False
    if xid == XID_RECOVERY_ACTION:
        chosen = events[-1]  # the latest recovery action replaces the earlier ones
    else:
        chosen = max(events, key=lambda e: _RANK[decide(policy, xid, e.action).status])
    decision = decide(policy, xid, chosen.action, chosen.info.action)
    return _Group(xid, tuple(events), decision, chosen.action, resolved)


_RANK = {"INFO": 0, "WARN": 1, "FAIL": 2}


def _xid_evidence(g: _Group) -> Evidence:
    last = g.events[-1]
    row = last.info
    migs = sorted({e.mig for e in g.events if e.mig is not None})
    where = f" on {'; '.join(migs)}" if migs else ""
    asked = "" if g.action == row.action else f"; this event asks for {g.action}"
    note = ""
    if g.resolved:
        note = "; resolved: NVML reports no remap pending (the GPU was reset since)"
    value = (
        f"x{len(g.events)}{where}, last at {since_boot(last.usec)} after boot: {row.name}"
        + (f" ({row.mnemonic})" if row.mnemonic else "")
        + f"; NVIDIA: immediate action {row.immediate or 'none given'}, investigatory "
        f"{row.investigatory or 'none given'}{asked}{note}; {last.detail[:160]}"
    )
    return Evidence(f"Xid {g.xid} ({last.source})", value)


def _gpu_finding(
    address: PciAddress,
    ref: GpuRef | None,
    events: list[XidEvent],
    log_ev: Evidence,
    policy: XidPolicy,
) -> Finding:
    bus = str(address)
    who = f"GPU {ref.index}" if ref is not None else f"GPU at {bus} (not on the PCI bus now)"
    if not events:
        return Finding("gpu.xid", Status.PASS, f"{who}: no XID since boot", (log_ev,), None, bus)
    by_xid: dict[int, list[XidEvent]] = defaultdict(list)
    for e in events:
        by_xid[e.xid].append(e)
    groups = [_group(x, evs, ref, policy) for x, evs in sorted(by_xid.items())]
    ev = [log_ev]
    for g in groups:
        ev.append(_xid_evidence(g))
        verdict = "INFO (resolved)" if g.resolved else g.decision.status
        ev.append(Evidence(f"Xid {g.xid} verdict", f"{verdict}: {g.decision.why}"))
    live = [g for g in groups if not g.resolved]
    status = max((g.decision.status for g in live), key=_RANK.__getitem__, default="INFO")
    top = [g for g in live if g.decision.status == status] or groups

    def name(g: _Group) -> str:
        migs = sorted({e.mig for e in g.events if e.mig is not None})
        return f"Xid {g.xid}" + (f" ({'; '.join(migs)})" if migs else "")

    names = ", ".join(name(g) for g in top)
    if not live:
        return Finding(
            "gpu.xid", Status.INFO, f"{who}: {names} since boot, resolved", tuple(ev), None, bus
        )
    lead = top[-1]
    what = lead.events[-1].info.name
    summary = f"{who}: {names} since boot: {what} ({lead.decision.label})"
    remedy = None
    if status != "INFO":
        remedy = _REMEDY.get(lead.action, _REMEDY["NOT_GIVEN"]).replace("BUS", bus)
    return Finding("gpu.xid", Status(status), summary, tuple(ev), remedy, bus)


def _sxid_findings(facts: XidFacts) -> list[Finding]:
    by_switch: dict[PciAddress, list[SxidEvent]] = defaultdict(list)
    for e in facts.sxids:
        by_switch[e.switch].append(e)
    if facts.log.records is None:
        return []  # said by gpu.xid; SXIDs have no NVML event stand-in
    if not facts.switches and not by_switch:
        return [
            Finding(
                "gpu.sxid",
                Status.SKIP,
                "SXIDs not checked: no NVSwitch on the PCI bus",
                (Evidence(f"{paths.PCI_DEVICES} (class 0x0680, vendor 0x10de)", "0"),),
            )
        ]
    log_ev = _log_evidence(facts)
    out = []
    for switch in sorted(set(facts.switches) | set(by_switch)):
        events = by_switch.get(switch, [])
        bus = str(switch)
        if not events:
            out.append(
                Finding(
                    "gpu.sxid",
                    Status.PASS,
                    f"NVSwitch {bus}: no SXID since boot",
                    (log_ev,),
                    None,
                    bus,
                )
            )
            continue
        grouped: dict[int, list[SxidEvent]] = defaultdict(list)
        for e in events:
            grouped[e.sxid].append(e)
        ev = [log_ev]
        for sxid, group in sorted(grouped.items()):
            severities = sorted({e.severity for e in group if e.severity is not None})
            last = group[-1]
            ev.append(
                Evidence(
                    f"SXid {sxid}",
                    f"x{len(group)} ({', '.join(severities) or 'severity not logged'}), last "
                    f"at {since_boot(last.usec)} after boot: {last.detail[:160]}",
                )
            )
        fatal = any(e.severity == "fatal" for e in events)
        ids = ", ".join(str(x) for x in sorted(grouped))
        out.append(
            Finding(
                "gpu.sxid",
                Status.FAIL if fatal else Status.WARN,
                f"NVSwitch {bus}: {'fatal ' if fatal else ''}SXid {ids} since boot"
                + (" (the NVLink fabric through it is down until reset)" if fatal else ""),
                tuple(ev),
                "Fatal SXIDs need the GPUs and NVSwitches reset: stop the workloads, "
                "`systemctl restart nvidia-fabricmanager` or reboot; see the Fabric Manager "
                "User Guide's SXid tables; non-fatal ones: watch `journalctl -k | grep SXid`",
                bus,
            )
        )
    return out
