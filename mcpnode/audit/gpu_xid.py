"""XID and SXID errors since boot, from the kernel log (audit/xid.py parses; this reads).

Where the log comes from: /dev/kmsg (Host.read_kmsg; a root's `dev/kmsg` file); when that is
refused (kernel.dmesg_restrict without CAP_SYSLOG) or absent, the kernel messages of the
journal (`journalctl -k -b -o short-monotonic`, through Host.command, so a snapshot keeps the
answer). XIDs the agent saw through NVML events (AuditContext.observed_xids) stand in only when
no log could be read: the driver logs every XID it raises an event for.

Findings: `gpu.xid` per GPU (and per PCI address an XID names that no GPU here has: a GPU that
fell off the bus may be gone from sysfs too), `gpu.sxid` per NVSwitch. FAIL on XIDs NVIDIA and
Azure's NHC treat as hardware or driver faults, WARN on application-class ones and on XIDs
mcpnode has no row for (audit/xid.py, CATALOG). Xid 63 (a row marked for remapping) is resolved
once NVML reports no remap pending: the GPU was reset since, so it is reported, not failed.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from mcpnode.audit import paths
from mcpnode.audit.context import AuditContext
from mcpnode.audit.facts import FileRead, command_evidence, read_file, unreadable_finding
from mcpnode.audit.gpu import uptime_of
from mcpnode.audit.model import Evidence, Finding, Status
from mcpnode.audit.xid import (
    ACTION_TEXT,
    XID_ROW_REMAP,
    LogRecord,
    SxidEvent,
    XidEvent,
    parse_journal_line,
    parse_kmsg_record,
    parse_sxid,
    parse_xid,
    since_boot,
    worst_action,
)
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


def read_log(host: Host) -> KernelLog:
    """The kernel log through `host`: /dev/kmsg, else the journal. Never raises."""
    kmsg = paths.KMSG
    try:
        got = host.read_kmsg()
    except (PathNotFound, AccessDenied, HostError) as err:
        denied = isinstance(err, AccessDenied)
        missing = isinstance(err, PathNotFound)
        read = FileRead(kmsg, None, denied=denied, error=None if missing else err.detail)
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
    return XidFacts(log, xids, sxids, ctx.observed_xids, gpus, switches, uptime)


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
        out.append(_gpu_finding(address, ref, by_gpu.get(address, []), log_ev))
    return out


def _gpu_finding(
    address: PciAddress, ref: GpuRef | None, events: list[XidEvent], log_ev: Evidence
) -> Finding:
    bus = str(address)
    who = f"GPU {ref.index}" if ref is not None else f"GPU at {bus} (not on the PCI bus now)"
    if not events:
        return Finding("gpu.xid", Status.PASS, f"{who}: no XID since boot", (log_ev,), None, bus)
    resolved = [
        e
        for e in events
        if e.xid == XID_ROW_REMAP and ref is not None and ref.remap_pending is False
    ]
    live = [e for e in events if e not in resolved]
    grouped: dict[int, list[XidEvent]] = defaultdict(list)
    for e in events:
        grouped[e.xid].append(e)
    ev = [log_ev]
    for xid, group in sorted(grouped.items()):
        last = group[-1]
        info = last.info
        note = ""
        if group[0] in resolved:
            note = "; resolved: NVML reports no remap pending (the GPU was reset since)"
        ev.append(
            Evidence(
                f"Xid {xid} ({last.source})",
                f"x{len(group)}, last at {since_boot(last.usec)} after boot: {info.name} "
                f"(NVIDIA: {info.cause}, {last.action}){note}; {last.detail[:160]}",
            )
        )
    fatal = [e for e in live if e.fatal]
    names = ", ".join(f"Xid {x}" for x in sorted({e.xid for e in (fatal or live or resolved)}))
    action = worst_action([e.action for e in (fatal or live)])
    remedy = ACTION_TEXT[action].replace("BUS", bus) if live else None
    if fatal:
        return Finding(
            "gpu.xid",
            Status.FAIL,
            f"{who}: {names} since boot: {fatal[-1].info.name} (a hardware or driver fault)",
            tuple(ev),
            remedy,
            bus,
        )
    if live:
        return Finding(
            "gpu.xid",
            Status.WARN,
            f"{who}: {names} since boot (application-class: the process that caused it "
            "failed, the GPU did not)",
            tuple(ev),
            remedy,
            bus,
        )
    return Finding(
        "gpu.xid", Status.INFO, f"{who}: {names} since boot, resolved", tuple(ev), None, bus
    )


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
