"""XID and SXID errors since boot, from the kernel log (audit/xid.py parses; this reads).

Where the log comes from: /dev/kmsg (Host.scan_kmsg, a batch at a time, each record parsed and
counted as it comes and none kept; a root's `dev/kmsg` file); when that is
refused (kernel.dmesg_restrict without CAP_SYSLOG) or absent, the kernel messages of the
journal (`journalctl -k -b -o short-monotonic`, through Host.command, so a snapshot keeps the
answer). XIDs the agent saw through NVML events (AuditContext.observed_xids) stand in only when
no log could be read: the driver logs every XID it raises an event for.

Findings: `gpu.xid` per GPU (and per PCI address an XID names that no GPU here has: a GPU that
fell off the bus may be gone from sysfs too), `gpu.sxid` per NVSwitch. Events are counted per
device and number as they are met, never kept, and both the findings and their lines are
bounded (MAX_ABSENT_GPUS, MAX_XIDS_PER_GPU) however many addresses and numbers the log names.
The status of each Xid is
the policy's (audit/xid_policy.py: NVIDIA's immediate action by default, Azure NHC's fail list
or the site's per-Xid choice from `[audit.xid]` in /etc/mcpnode/mcpnode.toml); the evidence
names NVIDIA's catalogue row (audit/xid_catalog.py) and what decided. An Xid the driver
attributed to a MIG instance names it. Xid 63 (a row marked for remapping) is resolved once
NVML reports no remap pending: the GPU was reset since, so it is reported, not counted.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from mcpnode.audit import paths
from mcpnode.audit.context import AuditContext
from mcpnode.audit.expect import CONFIG_PATH
from mcpnode.audit.facts import FileRead, command_evidence, read_file, unreadable_finding
from mcpnode.audit.gpu import uptime_of
from mcpnode.audit.model import Evidence, Finding, Status, skipped
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
from mcpnode.host import CommandResult, HostReader
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
    """The kernel log as the collector read it: how many records and the first one's time, else
    (`records` None) why not (`read` says missing / denied / error, as for any file). The
    records themselves went to the collector's tallies as they were read (read_log)."""

    source: str  # /dev/kmsg or the journalctl command line
    records: int | None  # how many were read; None: no log could be read
    read: FileRead
    truncated: bool = False  # older records dropped to stay in bounds
    overwritten: int = 0
    journal: CommandResult | None = None  # the fallback's answer, when it was tried
    first_usec: int | None = None  # the first record's time since boot
    unread: bool = False  # reading stopped at its bound with newer records left


@dataclass(frozen=True)
class GpuRef:
    index: int
    address: PciAddress
    remap_pending: bool | None  # NVML's nvmlDeviceGetRemappedRows pending flag


@dataclass(frozen=True)
class XidFacts:
    log: KernelLog
    xids: XidTallies  # the log's XIDs, counted while it was read
    sxids: SxidTallies
    observed: tuple[XidEvent, ...]  # from NVML events (the agent), used without a log
    gpus: tuple[GpuRef, ...]
    switches: tuple[PciAddress, ...]
    uptime_s: float | None
    policy: XidPolicy = DEFAULT  # which status an Xid gets (audit/xid_policy.py)
    policy_error: str | None = None  # the [audit] table could not be used


def read_policy(host: HostReader) -> tuple[XidPolicy, str | None]:
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


OnRecords = Callable[[Iterable[LogRecord], str], None]  # records, "kmsg" or "journal"


def read_log(
    host: HostReader, on_records: OnRecords, keepalive: Callable[[], None] | None
) -> KernelLog:
    """The kernel log through `host`: /dev/kmsg, else the journal, its records handed to
    `on_records` a batch at a time and not kept (Host.scan_kmsg), `keepalive` called after
    each batch. Never raises but what `on_records` and `keepalive` raise."""
    kmsg = paths.KMSG
    first: list[int | None] = []  # the first record's time, once seen
    count = 0

    def on_kmsg(batch: tuple[str, ...]) -> None:
        nonlocal count
        records = [r for r in map(parse_kmsg_record, batch) if r is not None]
        if records and not first:
            first.append(records[0].usec)
        count += len(records)
        on_records(records, "kmsg")
        if keepalive is not None:
            keepalive()

    try:
        got = host.scan_kmsg(on_kmsg)
    except (PathNotFound, AccessDenied, HostError) as err:
        if count:
            # Failed part way (EIO): the journal would count what was counted again, so the
            # area fails with the error instead.
            raise
        denied = isinstance(err, AccessDenied)
        missing = isinstance(err, PathNotFound)
        read = FileRead(kmsg, Absent(f"no {kmsg}") if missing else Unreadable(err.detail, denied))
    else:
        return KernelLog(
            kmsg,
            count,
            FileRead(kmsg, ""),
            got.truncated,
            got.overwritten,
            first_usec=first[0] if first else None,
            unread=got.unread,
        )
    journal = host.command(JOURNAL_ARGV)
    if journal.found and journal.returncode == 0:
        lines = journal.stdout.splitlines()
        records = [r for r in map(parse_journal_line, lines) if r is not None]
        on_records(records, "journal")
        source = " ".join(JOURNAL_ARGV)
        return KernelLog(
            source,
            len(records),
            FileRead(source, ""),
            journal=journal,
            first_usec=records[0].usec if records else None,
        )
    return KernelLog(kmsg, None, read, journal=journal)


def collect(host: HostReader, ctx: AuditContext) -> XidFacts:
    # The policy first: each XID's rank under it is decided as the XID is counted.
    policy, error = read_policy(host)
    topo = ctx.topology
    xids = XidTallies({g.address for g in topo.gpus}, policy)
    sxids = SxidTallies(
        {
            d.address
            for d in topo.pci_devices
            if d.vendor_id == NVIDIA_VENDOR_ID and d.class_code == NVSWITCH_CLASS
        }
    )

    def on_records(records: Iterable[LogRecord], source: str) -> None:
        for r in records:
            try:
                x = parse_xid(r, source)
                sx = parse_sxid(r)
            except ValueError:
                continue  # an XID past 32 bits: no driver wrote it (as the agent skips it)
            if x is not None:
                xids.add(x)
            if sx is not None:
                sxids.add(sx)

    log = read_log(host, on_records, ctx.keepalive)
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
    return XidFacts(log, xids, sxids, ctx.observed_xids, gpus, switches, uptime, policy, error)


def _gpu_key(a: PciAddress) -> PciAddress:
    return PciAddress(a.domain, a.bus, a.device, 0)


def check(facts: XidFacts, ctx: AuditContext) -> list[Finding]:
    if not facts.gpus and not facts.xids and not facts.switches:
        return []  # no GPU, no XID: gpu.present says it once for every GPU check
    log = facts.log
    tallies = facts.xids
    if log.records is None:
        if not facts.observed:
            return [_no_log(facts, ctx)]
        tallies = XidTallies({g.address for g in facts.gpus}, facts.policy)
        for e in facts.observed:
            tallies.add(e)
    out = _xid_findings(facts, tallies)
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
    value = f"{log.records} records"
    if log.records and log.first_usec is not None:
        value += f" since {since_boot(log.first_usec)} after boot"
    if facts.uptime_s is not None:
        value += f"; up {since_boot(int(facts.uptime_s * 1_000_000))}"
    if log.truncated:
        value += "; older records dropped (over mcpnode's bound)"
    if log.overwritten:
        value += f"; the kernel overwrote records {log.overwritten} time(s) while reading"
    if log.unread:
        value += "; newer records not read (over mcpnode's bound)"
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
# the rest; per GPU one Xid (and its verdict) per number up to MAX_XIDS_PER_GPU, then one for the
# rest. A driver raises a few dozen distinct XIDs and a host has at most a few dozen GPUs.
MAX_ABSENT_GPUS = 16
MAX_XIDS_PER_GPU = 32
MAX_MIGS_NAMED = 8
OTHER_SUBJECT = "other"
_OTHER_XID = -1  # the key of the numbers past MAX_XIDS_PER_GPU on one GPU


@dataclass
class _Tally:
    """The events of one Xid number on one GPU, counted as they are met (never kept): the
    first and last, and the one the verdict is decided from (the worst under the policy; for
    Xid 154 the latest, whose recovery action replaces the earlier ones)."""

    count: int
    first: XidEvent
    last: XidEvent
    chosen: XidEvent
    chosen_rank: int
    migs: set[str]

    def add(self, e: XidEvent, rank: int) -> None:
        self.count += 1
        self.last = e
        if e.xid == XID_RECOVERY_ACTION or rank > self.chosen_rank:
            self.chosen, self.chosen_rank = e, rank
        if e.mig is not None and len(self.migs) < MAX_MIGS_NAMED:
            self.migs.add(e.mig)


class XidTallies:
    """The XIDs per GPU and number, counted as they are met: this host's GPUs (`known`) and the
    first MAX_ABSENT_GPUS other addresses in `by_gpu`; every other address together in `rest`,
    those addresses in `rest_addresses` (up to one past the bound, enough to say "more than").
    Numbers past MAX_XIDS_PER_GPU on one GPU are counted under _OTHER_XID. Each event's rank is
    decided under `policy` as it is counted."""

    def __init__(self, known: set[PciAddress], policy: XidPolicy) -> None:
        self.known = known
        self.policy = policy
        self.by_gpu: dict[PciAddress, dict[int, _Tally]] = {}
        self.rest: dict[int, _Tally] = {}
        self.rest_addresses: set[PciAddress] = set()
        self._absent = 0

    def __bool__(self) -> bool:
        return bool(self.by_gpu or self.rest)

    def add(self, e: XidEvent) -> None:
        address = _gpu_key(e.address)
        groups = self.by_gpu.get(address)
        if groups is None:
            if address in self.known or self._absent < MAX_ABSENT_GPUS:
                self._absent += address not in self.known
                groups = self.by_gpu[address] = {}
            else:
                groups = self.rest
                if len(self.rest_addresses) <= MAX_ABSENT_GPUS:
                    self.rest_addresses.add(address)
        key = e.xid
        if key not in groups and len(groups) >= MAX_XIDS_PER_GPU:
            key = _OTHER_XID
        rank = _RANK[decide(self.policy, e.xid, e.action).status]
        tally = groups.get(key)
        if tally is None:
            groups[key] = _Tally(1, e, e, e, rank, {e.mig} if e.mig is not None else set())
        else:
            tally.add(e, rank)


def _xid_findings(facts: XidFacts, tallies: XidTallies) -> list[Finding]:
    refs = {g.address: g for g in facts.gpus}
    by_gpu, rest, rest_addresses = tallies.by_gpu, tallies.rest, tallies.rest_addresses
    log_ev = _log_evidence(facts)
    out = []
    for address in sorted(set(refs) | set(by_gpu)):
        ref = refs.get(address)
        out.append(_gpu_finding(address, ref, by_gpu.get(address, {}), log_ev, facts.policy))
    if rest:
        out.append(_gpu_finding(None, None, rest, log_ev, facts.policy, len(rest_addresses)))
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
    xid: int  # _OTHER_XID for the numbers past the bound
    tally: _Tally
    decision: Decision
    action: str
    resolved: bool


def _group(xid: int, tally: _Tally, ref: GpuRef | None, policy: XidPolicy) -> _Group:
    resolved = xid == XID_ROW_REMAP and ref is not None and ref.remap_pending is False
    chosen = tally.chosen
    decision = decide(policy, chosen.xid, chosen.action, chosen.info.action)
    return _Group(xid, tally, decision, chosen.action, resolved)


_RANK = {"INFO": 0, "WARN": 1, "FAIL": 2}


def _xid_evidence(g: _Group) -> Evidence:
    t = g.tally
    last = t.last
    if g.xid == _OTHER_XID:
        return Evidence(
            f"other XIDs ({last.source})",
            f"x{t.count} of numbers past the first {MAX_XIDS_PER_GPU} on this GPU (over "
            f"mcpnode's bound), last at {since_boot(last.usec)} after boot: Xid {last.xid}; "
            f"{last.detail[:160]}",
        )
    row = last.info
    migs = sorted(t.migs)
    where = f" on {'; '.join(migs)}" if migs else ""
    first = f"first at {since_boot(t.first.usec)}, " if t.count > 1 else ""
    asked = "" if g.action == row.action else f"; this event asks for {g.action}"
    note = ""
    if g.resolved:
        note = "; resolved: NVML reports no remap pending (the GPU was reset since)"
    value = (
        f"x{t.count}{where}, {first}last at {since_boot(last.usec)} after boot: {row.name}"
        + (f" ({row.mnemonic})" if row.mnemonic else "")
        + f"; NVIDIA: immediate action {row.immediate or 'none given'}, investigatory "
        f"{row.investigatory or 'none given'}{asked}{note}; {last.detail[:160]}"
    )
    return Evidence(f"Xid {g.xid} ({last.source})", value)


def _gpu_finding(
    address: PciAddress | None,
    ref: GpuRef | None,
    tallies: dict[int, _Tally],
    log_ev: Evidence,
    policy: XidPolicy,
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
    if not tallies:
        return Finding("gpu.xid", Status.PASS, f"{who}: no XID since boot", (log_ev,), None, bus)
    ordered = sorted(tallies.items(), key=lambda kv: (kv[0] == _OTHER_XID, kv[0]))
    groups = [_group(x, t, ref, policy) for x, t in ordered]
    ev = [log_ev]
    for g in groups:
        ev.append(_xid_evidence(g))
        verdict = "INFO (resolved)" if g.resolved else g.decision.status
        label = f"Xid {g.xid}" if g.xid != _OTHER_XID else "other XIDs"
        ev.append(Evidence(f"{label} verdict", f"{verdict}: {g.decision.why}"))
    live = [g for g in groups if not g.resolved]
    status = max((g.decision.status for g in live), key=_RANK.__getitem__, default="INFO")
    top = [g for g in live if g.decision.status == status] or groups

    def name(g: _Group) -> str:
        if g.xid == _OTHER_XID:
            return "more XIDs"
        migs = sorted(g.tally.migs)
        return f"Xid {g.xid}" + (f" ({'; '.join(migs)})" if migs else "")

    names = ", ".join(name(g) for g in top)
    if not live:
        return Finding(
            "gpu.xid", Status.INFO, f"{who}: {names} since boot, resolved", tuple(ev), None, bus
        )
    lead = top[-1]
    what = lead.tally.last.info.name
    summary = f"{who}: {names} since boot: {what} ({lead.decision.label})"
    remedy = None
    if status != "INFO":
        target = bus if address is not None else "<bus id>"
        remedy = _REMEDY.get(lead.action, _REMEDY["NOT_GIVEN"]).replace("BUS", target)
    return Finding("gpu.xid", Status(status), summary, tuple(ev), remedy, bus)


@dataclass
class _SxidTally:
    """The events of one SXid number on one NVSwitch, counted as they are met: how many, the
    severities they carried, the last one."""

    count: int
    severities: set[str]
    last: SxidEvent


@dataclass
class SxidTallies:
    """The SXIDs per NVSwitch and number, counted as they are met, bounded as the XIDs are: this
    host's NVSwitches (`known`), MAX_ABSENT_GPUS other addresses, then one key (None) for the
    rest; per switch MAX_XIDS_PER_GPU numbers, then one key (-1) for the rest. `fatal`: the
    switches with a fatal one."""

    known: set[PciAddress]
    by_switch: dict[PciAddress | None, dict[int, _SxidTally]] = field(default_factory=dict)
    fatal: set[PciAddress | None] = field(default_factory=set)

    def __bool__(self) -> bool:
        return bool(self.by_switch)

    def add(self, e: SxidEvent) -> None:
        key: PciAddress | None = e.switch
        if key not in self.by_switch and key not in self.known:
            absent = len(self.by_switch.keys() - self.known - {None})
            key = key if absent < MAX_ABSENT_GPUS else None
        grouped = self.by_switch.setdefault(key, {})
        sxid = e.sxid
        if sxid not in grouped and len(grouped) >= MAX_XIDS_PER_GPU:
            sxid = -1  # numbers past the bound, together
        tally = grouped.get(sxid)
        if tally is None:
            tally = grouped[sxid] = _SxidTally(0, set(), e)
        tally.count += 1
        tally.last = e
        if e.severity is not None:
            tally.severities.add(e.severity)
        if e.severity == "fatal":
            self.fatal.add(key)


def _sxid_findings(facts: XidFacts) -> list[Finding]:
    # Bounded as the XIDs are (SxidTallies).
    known = set(facts.switches)
    by_switch = facts.sxids.by_switch
    if facts.log.records is None:
        return []  # said by gpu.xid; SXIDs have no NVML event stand-in
    if not facts.switches and not by_switch:
        return skipped(
            "gpu.sxid",
            "SXIDs not checked: no NVSwitch on the PCI bus",
            Evidence(f"{paths.PCI_DEVICES} (class 0x0680, vendor 0x10de)", "0"),
        )
    log_ev = _log_evidence(facts)
    out = []
    addresses = sorted(known | {k for k in by_switch if k is not None})
    for switch in [*addresses, *([None] if None in by_switch else [])]:
        grouped = by_switch.get(switch, {})
        bus = str(switch) if switch is not None else OTHER_SUBJECT
        if not grouped:
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
        ev = [log_ev]
        for sxid, t in sorted(grouped.items(), key=lambda kv: (kv[0] < 0, kv[0])):
            last = t.last
            ev.append(
                Evidence(
                    f"SXid {sxid}" if sxid >= 0 else "other SXIDs",
                    f"x{t.count} ({', '.join(sorted(t.severities)) or 'severity not logged'}), "
                    f"last at {since_boot(last.usec)} after boot: {last.detail[:160]}",
                )
            )
        fatal = switch in facts.sxids.fatal
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
