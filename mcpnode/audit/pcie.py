"""PCIe health of the GPUs and the RDMA NICs: AER error counters from sysfs and the NICs' link
(the GPUs' own link is gpu.pcie.width, their replay counter gpu.pcie.replay).

AER statistics (Linux >= 4.19, Documentation/ABI/testing/sysfs-bus-pci-devices-aer_stats):
`aer_dev_correctable`, `aer_dev_nonfatal`, `aer_dev_fatal`, one `NAME COUNT` line per error
type and a `TOTAL_ERR_*` line, counted since boot. The names have spaces in the kernels that
introduced the files (4.19 to 5.x print `Receiver Error 2`, `RELAY_NUM Rollover 0`, the strings
of drivers/pci/pcie/aer.c's aer_correctable_error_string); later ones print lspci's short names
(`RxErr 2`): the count is the last field either way. The files exist only for a device with an
AER capability; the ABI notes that errors caused by an endpoint may be counted at its link
partner instead, so each device is read together with the port above it (its upstream bridge),
the finding names which one counted, and a device without the capability is judged by its
port's counters alone.

- fatal > 0 (device or its port): FAIL: the link went down or data was lost beyond recovery;
- non-fatal > 0: WARN: a transaction was lost but the link is up;
- correctable above 8 per minute since boot: WARN. A correctable error (receiver error, bad
  TLP/DLLP, replay timeout or rollover) is corrected by a link-level replay, so mcpnode holds
  them to DCGM's PCIe replay limit (DCGM_LIMIT_MAX_PCIREPLAY_RATE, 8/min).
- a NIC link narrower than its maximum: FAIL (bandwidth cut as for a GPU); slower than its
  maximum: WARN (a NIC has no P-states that slow its link at idle the way a GPU's do).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from mcpnode.audit import paths
from mcpnode.audit.context import AuditContext
from mcpnode.audit.facts import FileRead, file_evidence, read_file, unreadable_finding
from mcpnode.audit.gpu import uptime_of
from mcpnode.audit.model import Evidence, Finding, Status, skipped
from mcpnode.host import HostReader
from mcpnode.topology.model import PciAddress, PciLink

AER_KINDS = ("fatal", "nonfatal", "correctable")
AER_TOTALS = {
    "fatal": "TOTAL_ERR_FATAL",
    "nonfatal": "TOTAL_ERR_NONFATAL",
    "correctable": "TOTAL_ERR_COR",
}
CORRECTABLE_PER_MINUTE = 8.0


class AerParseError(ValueError):
    pass


def parse_aer(text: str, kind: str) -> dict[str, int]:
    """An aer_dev_* file -> {error name: count}, `TOTAL` included. The name is everything before
    the last field (4.19 - 5.x names have spaces). Raises AerParseError for a line that is not
    `NAME COUNT` or a file without its TOTAL line."""
    return dict(_parse_aer(text, kind))


@functools.lru_cache(maxsize=64)
def _parse_aer(text: str, kind: str) -> tuple[tuple[str, int], ...]:
    """parse_aer's pairs, remembered per distinct text: every GPU, NIC and bridge above them
    has the same three files of zeros on a healthy host, and the agent audits them again at
    every republish."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = line.rsplit(None, 1)
        if len(parts) != 2 or not parts[1].isascii() or not parts[1].isdigit():
            raise AerParseError(f"not `NAME COUNT`: {line[:80]!r}")
        out[" ".join(parts[0].split())] = int(parts[1])
    total = AER_TOTALS[kind]
    if total not in out:
        raise AerParseError(f"no {total} line")
    out["TOTAL"] = out.pop(total)
    return tuple(out.items())


@dataclass(frozen=True)
class AerRead:
    device: PciAddress
    files: tuple[tuple[str, FileRead], ...]  # (kind, read)


@dataclass(frozen=True)
class Subject:
    address: PciAddress
    what: str  # "GPU 0", "mlx5_0"
    is_nic: bool
    link: PciLink
    own: AerRead
    port: AerRead | None  # the bridge above it


@dataclass(frozen=True)
class PcieFacts:
    subjects: tuple[Subject, ...]
    uptime_s: float | None


def _aer(host: HostReader, address: PciAddress) -> AerRead:
    base = f"{paths.PCI_DEVICES}/{address}"
    return AerRead(address, tuple((k, read_file(host, f"{base}/aer_dev_{k}")) for k in AER_KINDS))


def collect(host: HostReader, ctx: AuditContext) -> PcieFacts:
    topo = ctx.topology
    subjects = []
    wanted: list[tuple[PciAddress, str, bool, PciLink]] = [
        (g.address, f"GPU {g.index}", False, g.link) for g in topo.gpus
    ]
    wanted += [
        (n.address, n.rdma_devices[0], True, n.link)
        for n in topo.nics
        if n.rdma_devices and not n.is_virtual_function
    ]
    for address, what, is_nic, link in wanted:
        dev = topo.pci(address)
        parent = dev.parent if dev is not None else None
        subjects.append(
            Subject(
                address,
                what,
                is_nic,
                link,
                _aer(host, address),
                _aer(host, parent) if parent is not None else None,
            )
        )
    uptime = uptime_of(read_file(host, paths.UPTIME).text)
    return PcieFacts(tuple(subjects), uptime)


def check(facts: PcieFacts, ctx: AuditContext) -> list[Finding]:
    if not facts.subjects:
        return skipped(
            "pcie.aer",
            "PCIe errors not checked: no GPU and no RDMA NIC here",
            Evidence(paths.PCI_DEVICES, "no GPU, no RDMA NIC"),
        )
    out = []
    for s in facts.subjects:
        out.append(_aer_finding(s, facts.uptime_s, ctx))
        if s.is_nic:
            out.append(_nic_link(s))
    return out


def _counts(read: AerRead) -> tuple[dict[str, dict[str, int]] | None, Finding | None, bool]:
    """({kind: counts}, a finding for an unusable file, whether any file exists)."""
    counts: dict[str, dict[str, int]] = {}
    present = False
    for kind, fr in read.files:
        if fr.missing:
            continue
        present = True
        if fr.text is None:
            return None, unreadable_finding("pcie.aer", fr, True, "AER counters"), True
        try:
            counts[kind] = parse_aer(fr.text, kind)
        except AerParseError as err:
            return (
                None,
                Finding(
                    "pcie.aer",
                    Status.FAIL,
                    f"AER counters not checked: {fr.path} is malformed ({err})",
                    (file_evidence(fr),),
                    "Report this file's content with `mcpnode snapshot`: the kernel prints "
                    "`NAME COUNT` lines and a TOTAL line",
                    str(read.device),
                ),
                True,
            )
    return counts, None, present


def _aer_finding(s: Subject, uptime_s: float | None, ctx: AuditContext) -> Finding:
    subject = str(s.address)
    own, bad, present = _counts(s.own)
    if bad is not None:
        return Finding(
            bad.id, bad.status, f"{s.what}: {bad.summary}", bad.evidence, bad.remedy, subject
        )
    port_counts: dict[str, dict[str, int]] = {}
    port_present = False
    if s.port is not None:
        got, port_bad, port_present = _counts(s.port)
        if port_bad is not None:
            return Finding(
                port_bad.id,
                port_bad.status,
                f"{s.what}: {port_bad.summary}",
                port_bad.evidence,
                port_bad.remedy,
                subject,
            )
        port_counts = got or {}
    if not present and not port_present:
        return Finding(
            "pcie.aer",
            Status.SKIP,
            f"{s.what}: AER counters not checked: no aer_dev_* for {subject} here (the "
            "kernel has them since 4.19 with AER enabled: no `pci=noaer`, no firmware-first "
            "handling; a snapshot from an older mcpnode does not hold them)",
            (Evidence(f"{paths.PCI_DEVICES}/{subject}/aer_dev_*", "absent"),),
            None,
            subject,
        )
    own = own or {}

    def total(kind: str) -> tuple[int, list[str]]:
        n, where = 0, []
        for name, counts in ((subject, own), (str(s.port.device) if s.port else "", port_counts)):
            c = counts.get(kind, {}).get("TOTAL", 0)
            if c:
                n += c
                nonzero = [f"{k}={v}" for k, v in counts[kind].items() if v and k != "TOTAL"]
                where.append(f"{name}: {', '.join(nonzero) or c}")
        return n, where

    fatal, fatal_at = total("fatal")
    nonfatal, nonfatal_at = total("nonfatal")
    corr, corr_at = total("correctable")
    base = f"{paths.PCI_DEVICES}/{subject}"
    ev = [
        Evidence(
            f"{base}/aer_dev_{{fatal,nonfatal,correctable}}",
            f"fatal {fatal}, non-fatal {nonfatal}, correctable {corr}",
        ),
    ]
    if not present:
        ev.append(Evidence(f"{base}/aer_dev_*", "absent: no AER capability; its port's counters"))
    if s.port is not None:
        ev.append(Evidence("counted with its upstream port", str(s.port.device)))
    for label, where in (("fatal", fatal_at), ("non-fatal", nonfatal_at), ("correctable", corr_at)):
        if where:
            ev.append(Evidence(f"{label} errors", "; ".join(where)))
    remedy = (
        f"`lspci -vvv -s {subject}` (UESta/CESta) and `journalctl -k | grep -i aer` say which "
        "error; reseat the card and its riser/cable, update the BIOS and the device firmware; "
        "drain the node if fatal errors recur"
    )
    if fatal:
        return Finding(
            "pcie.aer",
            Status.FAIL,
            f"{s.what}: {fatal} fatal PCIe error(s) since boot (AER): the link failed",
            tuple(ev),
            remedy,
            subject,
        )
    if nonfatal:
        return Finding(
            "pcie.aer",
            Status.WARN,
            f"{s.what}: {nonfatal} uncorrectable non-fatal PCIe error(s) since boot (AER)",
            tuple(ev),
            remedy,
            subject,
        )
    rate = None if not uptime_s else corr / (uptime_s / 60)
    if rate is not None and rate > CORRECTABLE_PER_MINUTE:
        return Finding(
            "pcie.aer",
            Status.WARN,
            f"{s.what}: {rate:.3g} correctable PCIe errors per minute since boot, above "
            f"{CORRECTABLE_PER_MINUTE:g}/min: the link keeps replaying",
            tuple(ev),
            remedy,
            subject,
        )
    summary = "no uncorrectable PCIe errors"
    summary += f", {corr} correctable" if corr else ""
    return Finding(
        "pcie.aer", Status.PASS, f"{s.what}: {summary} since boot", tuple(ev), None, subject
    )


def _nic_link(s: Subject) -> Finding:
    subject = str(s.address)
    link = s.link
    src = f"{paths.PCI_DEVICES}/{subject}/{{current,max}}_link_{{speed,width}}"
    if link.current_width is None or link.max_width is None:
        return Finding(
            "pcie.nic.link",
            Status.SKIP,
            f"{s.what}: PCIe link not checked: sysfs reports no link width for {subject}",
            (Evidence(src, "absent"),),
            None,
            subject,
        )
    value = (
        f"x{link.current_width} of x{link.max_width}, {link.current_speed_gts} of "
        f"{link.max_speed_gts} GT/s"
    )
    ev = (Evidence(src, value),)
    remedy = (
        f"Reseat the NIC at {subject} (and its riser/cable), check the slot's BIOS setting; "
        f"confirm with `lspci -vv -s {subject} | grep -E 'LnkCap|LnkSta'`"
    )
    if link.width_downtrained:
        return Finding(
            "pcie.nic.link",
            Status.FAIL,
            f"{s.what}: PCIe link x{link.current_width}, below its maximum x{link.max_width}: "
            "RDMA bandwidth cut accordingly",
            ev,
            remedy,
            subject,
        )
    if link.speed_downtrained:
        return Finding(
            "pcie.nic.link",
            Status.WARN,
            f"{s.what}: PCIe link at {link.current_speed_gts} GT/s, below its maximum "
            f"{link.max_speed_gts} GT/s",
            ev,
            remedy,
            subject,
        )
    return Finding("pcie.nic.link", Status.PASS, f"{s.what}: PCIe link {value}", ev, None, subject)
