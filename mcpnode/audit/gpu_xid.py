"""XID and SXID errors since boot, from the kernel log (audit/xid.py parses; this reads).

Where the log comes from: /dev/kmsg (Host.read_kmsg; a root's `dev/kmsg` file); when that is
refused (kernel.dmesg_restrict without CAP_SYSLOG) or absent, the kernel messages of the
journal (`journalctl -k -b -o short-monotonic`, through Host.command, so a snapshot keeps the
answer). XIDs the agent saw through NVML events (AuditContext.observed_xids) stand in only when
no log could be read: the driver logs every XID it raises an event for.

Findings: `gpu.xid` per GPU (and per PCI address an XID names that no GPU here has: a GPU that
fell off the bus may be gone from sysfs too), `gpu.sxid` per NVSwitch; events are counted per
device and number as they are met, and both the findings and their lines are bounded
(MAX_ABSENT_GPUS, MAX_XIDS_PER_GPU) however many addresses and numbers the log names.
FAIL on XIDs NVIDIA and Azure's NHC treat as hardware or driver faults, WARN on
application-class ones and on XIDs mcpnode has no row for (audit/xid.py, CATALOG). Xid 63 (a row
marked for remapping) is resolved once NVML reports no remap pending: the GPU was reset since, so
it is reported, not failed.
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
    CATALOG,
    XID_RECOVERY_ACTION,
    XID_ROW_REMAP,
    Action,
    LogRecord,
    SxidEvent,
    XidEvent,
    XidInfo,
    parse_journal_line,
    parse_kmsg_record,
    parse_sxid,
    parse_xid,
    since_boot,
    worst_action,
)
from mcpnode.audit.xid import info as xid_info
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


# A kernel log is whatever its writers made it. The findings stay bounded however many
# addresses and numbers it names: one finding per GPU of this host, one per address an XID names
# that no GPU here has (a GPU that fell off the bus) up to MAX_ABSENT_GPUS, then one finding for
# the rest; per GPU one evidence line per XID number up to MAX_XIDS_PER_GPU, then one line for
# the rest. A driver raises a few dozen distinct XIDs and a host has at most a few dozen GPUs.
MAX_ABSENT_GPUS = 16
MAX_XIDS_PER_GPU = 32
OTHER_SUBJECT = "other"


@dataclass
class _XidGroup:
    """The events of one XID number on one GPU, counted as they are met (never kept)."""

    count: int
    first: XidEvent
    last: XidEvent
    last_at: int  # the last event's place in the log, to tell which group is the latest
    actions: set[Action]
    fatal_actions: set[Action]
    last_fatal: XidEvent | None
    last_fatal_at: int

    def add(self, e: XidEvent, at: int, fixed: tuple[Action, bool] | None) -> None:
        """One more event; `fixed` is the action and fatality every event of this XID has
        (None for Xid 154, whose message names its action)."""
        self.count += 1
        self.last, self.last_at = e, at
        action, fatal = fixed if fixed is not None else (e.action, e.fatal)
        self.actions.add(action)
        if fatal:
            self.fatal_actions.add(action)
            self.last_fatal, self.last_fatal_at = e, at


def _group_xids(
    events: tuple[XidEvent, ...], known: set[PciAddress]
) -> tuple[dict[PciAddress, dict[int, _XidGroup]], dict[int, _XidGroup], set[PciAddress]]:
    """Events per GPU and XID number: (this host's GPUs and the first MAX_ABSENT_GPUS other
    addresses; every other address together; those other addresses). XID numbers past
    MAX_XIDS_PER_GPU on one GPU are counted under -1."""
    by_gpu: dict[PciAddress, dict[int, _XidGroup]] = {}
    absent = 0
    rest: dict[int, _XidGroup] = {}
    rest_addresses: set[PciAddress] = set()
    for at, e in enumerate(events):
        address = _gpu_key(e.address)
        groups = by_gpu.get(address)
        if groups is None:
            if address in known or absent < MAX_ABSENT_GPUS:
                absent += address not in known
                groups = by_gpu[address] = {}
            else:
                groups = rest
                if len(rest_addresses) <= MAX_ABSENT_GPUS:  # enough to say "more than"
                    rest_addresses.add(address)
        xid = e.xid
        if xid not in groups and len(groups) >= MAX_XIDS_PER_GPU:
            xid = -1
        group = groups.get(xid)
        if group is None:
            group = groups[xid] = _XidGroup(0, e, e, at, set(), set(), None, -1)
        group.add(e, at, _fixed(e.xid))
    return by_gpu, rest, rest_addresses


_UNLISTED: XidInfo = xid_info(-1)  # what every XID without a row of the catalog is


def _fixed(xid: int) -> tuple[Action, bool] | None:
    """The action and fatality every event of `xid` has; None for Xid 154 (its message names
    its action)."""
    if xid == XID_RECOVERY_ACTION:
        return None
    row = CATALOG.get(xid, _UNLISTED)
    return row.action, row.fatal


def _xid_findings(facts: XidFacts, events: tuple[XidEvent, ...]) -> list[Finding]:
    refs = {g.address: g for g in facts.gpus}
    by_gpu, rest, rest_addresses = _group_xids(events, set(refs))
    log_ev = _log_evidence(facts)
    out = []
    for address in sorted(set(refs) | set(by_gpu)):
        ref = refs.get(address)
        out.append(_gpu_finding(address, ref, by_gpu.get(address, {}), log_ev))
    if rest:
        out.append(_gpu_finding(None, None, rest, log_ev, len(rest_addresses)))
    return out


def _gpu_finding(
    address: PciAddress | None,
    ref: GpuRef | None,
    groups: dict[int, _XidGroup],
    log_ev: Evidence,
    addresses: int = 0,
) -> Finding:
    """The finding of one GPU (`address`), or with `address` None of the `addresses` other
    addresses past MAX_ABSENT_GPUS together."""
    bus = str(address) if address is not None else OTHER_SUBJECT
    if address is None:
        many = f"more than {MAX_ABSENT_GPUS}" if addresses > MAX_ABSENT_GPUS else str(addresses)
        who = f"{many} more addresses no GPU here has (over mcpnode's {MAX_ABSENT_GPUS})"
    elif ref is not None:
        who = f"GPU {ref.index}"
    else:
        who = f"GPU at {bus} (not on the PCI bus now)"
    if not groups:
        return Finding("gpu.xid", Status.PASS, f"{who}: no XID since boot", (log_ev,), None, bus)
    resolved = {
        xid
        for xid in groups
        if xid == XID_ROW_REMAP and ref is not None and ref.remap_pending is False
    }
    live = [x for x in groups if x not in resolved]
    fatal = [x for x in live if groups[x].last_fatal is not None]
    ev = [log_ev]
    for xid, group in sorted(groups.items(), key=lambda kv: (kv[0] < 0, kv[0])):
        last = group.last
        if xid < 0:
            ev.append(
                Evidence(
                    f"other XIDs ({last.source})",
                    f"x{group.count} of numbers past the first {MAX_XIDS_PER_GPU} on this GPU "
                    f"(over mcpnode's bound), last at {since_boot(last.usec)} after boot: "
                    f"Xid {last.xid}; {last.detail[:160]}",
                )
            )
            continue
        info = last.info
        note = ""
        if xid in resolved:
            note = "; resolved: NVML reports no remap pending (the GPU was reset since)"
        first = f"first at {since_boot(group.first.usec)}, " if group.count > 1 else ""
        ev.append(
            Evidence(
                f"Xid {xid} ({last.source})",
                f"x{group.count}, {first}last at {since_boot(last.usec)} after boot: "
                f"{info.name} (NVIDIA: {info.cause}, {last.action}){note}; {last.detail[:160]}",
            )
        )
    shown = fatal or live or sorted(resolved)
    names = ", ".join(f"Xid {x}" for x in sorted(shown) if x >= 0)
    if -1 in shown:
        names += " and more" if names else "XIDs"
    if fatal:
        action = worst_action([a for x in fatal for a in groups[x].fatal_actions])
    else:
        action = worst_action([a for x in live for a in groups[x].actions])
    remedy = None
    if live:
        remedy = ACTION_TEXT[action].replace("BUS", bus if address is not None else "<bus id>")
    if fatal:
        latest = max((groups[x] for x in fatal), key=lambda g: g.last_fatal_at).last_fatal
        assert latest is not None
        return Finding(
            "gpu.xid",
            Status.FAIL,
            f"{who}: {names} since boot: {latest.info.name} (a hardware or driver fault)",
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
    # Bounded as the XIDs are: this host's NVSwitches, MAX_ABSENT_GPUS other addresses, then
    # one finding (key None) for the rest.
    known = set(facts.switches)
    by_switch: dict[PciAddress | None, list[SxidEvent]] = defaultdict(list)
    for e in facts.sxids:
        key: PciAddress | None = e.switch
        if key not in by_switch and key not in known:
            absent = len(by_switch.keys() - known - {None})
            key = key if absent < MAX_ABSENT_GPUS else None
        by_switch[key].append(e)
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
    addresses = sorted(known | {k for k in by_switch if k is not None})
    for switch in [*addresses, *([None] if None in by_switch else [])]:
        events = by_switch.get(switch, [])
        bus = str(switch) if switch is not None else OTHER_SUBJECT
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
            sxid = e.sxid
            if sxid not in grouped and len(grouped) >= MAX_XIDS_PER_GPU:
                sxid = -1  # numbers past the bound, together
            grouped[sxid].append(e)
        ev = [log_ev]
        for sxid, group in sorted(grouped.items(), key=lambda kv: (kv[0] < 0, kv[0])):
            severities = sorted({e.severity for e in group if e.severity is not None})
            last = group[-1]
            ev.append(
                Evidence(
                    f"SXid {sxid}" if sxid >= 0 else "other SXIDs",
                    f"x{len(group)} ({', '.join(severities) or 'severity not logged'}), last "
                    f"at {since_boot(last.usec)} after boot: {last.detail[:160]}",
                )
            )
        fatal = any(e.severity == "fatal" for e in events)
        ids = ", ".join(str(x) for x in sorted(grouped) if x >= 0)
        if -1 in grouped:
            ids += " and more"
        who = f"NVSwitch {bus}" if switch is not None else "More addresses no NVSwitch here has"
        out.append(
            Finding(
                "gpu.sxid",
                Status.FAIL if fatal else Status.WARN,
                f"{who}: {'fatal ' if fatal else ''}SXid {ids} since boot"
                + (" (the NVLink fabric through it is down until reset)" if fatal else ""),
                tuple(ev),
                "Fatal SXIDs need the GPUs and NVSwitches reset: stop the workloads, "
                "`systemctl restart nvidia-fabricmanager` or reboot; see the Fabric Manager "
                "User Guide's SXid tables; non-fatal ones: watch `journalctl -k | grep SXid`",
                bus,
            )
        )
    return out
