"""Peer-to-peer readiness: PCIe Access Control Services on the bridges that carry GPU-to-GPU
and GPU-to-NIC (GPUDirect RDMA) traffic, read from each bridge's config space (audit/pcicfg.py),
and the GPU x GPU readiness matrix `mcpnode topo --p2p` prints beside NVML's own answer (the
`nvidia-smi topo -p2p r` matrix).

Paths that should carry P2P over PCIe: every GPU pair not joined by NVLink, and every GPU with
its nearest RDMA NIC(s) (the smallest distance bucket, as NCCL picks them). The bridges on a
path are those below the two devices' common ancestor, on both sides. ACS Source Validation,
P2P Request Redirect or Completion Redirect enabled on one of them: FAIL on bare metal (NCCL's
troubleshooting guide: P2P falls back to the root complex or hangs), INFO inside a VM, where
the hypervisor needs ACS to keep the guest's devices isolated (then ATS on the NIC is the fix).
"""

from __future__ import annotations

from dataclasses import dataclass

from mcpnode.audit import paths
from mcpnode.audit.context import AuditContext
from mcpnode.audit.facts import FileRead, read_file, unreadable_finding
from mcpnode.audit.model import Evidence, Finding, Status, skipped
from mcpnode.audit.pcicfg import Acs, ConfigTooShort, acs_names, find_acs
from mcpnode.codec.reading import Absent, Unreadable
from mcpnode.errors import AccessDenied, HostError, PathNotFound
from mcpnode.host import HostReader
from mcpnode.topology.distance import classify
from mcpnode.topology.matrix import nvlink_counts
from mcpnode.topology.model import PciAddress, PciDevice, Topology

_BUCKET_ORDER = ("PIX", "PXB", "PHB", "NODE", "SYS")
# DMI answers of hypervisors (SMBIOS type 1 as QEMU/KVM, Hyper-V, EC2, GCE, VMware, Xen,
# VirtualBox and OpenStack Nova fill it in)
_VM_VENDORS = (
    "qemu",
    "microsoft corporation",
    "amazon ec2",
    "google",
    "vmware",
    "xen",
    "innotek",
    "openstack",
    "red hat",
    "nutanix",
    "kubevirt",
)
_VM_PRODUCTS = ("kvm", "virtual machine", "hvm domu", "virtualbox", "openstack nova")


@dataclass(frozen=True)
class Path:
    a: PciAddress
    b: PciAddress
    label: str  # "GPU 0 <-> GPU 1", "GPU 0 <-> mlx5_0"
    bridges: tuple[PciAddress, ...]


@dataclass(frozen=True)
class BridgeAcs:
    address: PciAddress
    acs: Acs | None  # None: no ACS capability (when `read` worked)
    read: FileRead  # the config read: missing / denied / error, or a short read
    short: bool = False  # fewer bytes than the extended capabilities need


@dataclass(frozen=True)
class P2pFacts:
    paths: tuple[Path, ...]
    bridges: tuple[BridgeAcs, ...]
    virtual: bool | None  # None: could not tell
    virtual_evidence: str


def _ancestry(dev: PciDevice) -> tuple[PciAddress, ...]:
    return dev.ancestors


def path_bridges(a: PciDevice, b: PciDevice) -> tuple[PciAddress, ...]:
    """The bridges below the common ancestor of `a` and `b`, on both sides, in order a -> b."""
    if a.host_bridge != b.host_bridge:
        return _ancestry(a)[::-1] + _ancestry(b)
    common = 0
    for x, y in zip(a.ancestors, b.ancestors, strict=False):
        if x != y:
            break
        common += 1
    return a.ancestors[common:][::-1] + b.ancestors[common:]


def p2p_paths(topo: Topology) -> tuple[Path, ...]:
    nvl = nvlink_counts(topo)
    gpus = [(g, topo.pci(g.address)) for g in topo.gpus]
    out = []
    for i, (ga, da) in enumerate(gpus):
        for gb, db in gpus[i + 1 :]:
            if da is None or db is None or (ga.address, gb.address) in nvl:
                continue
            out.append(
                Path(
                    ga.address,
                    gb.address,
                    f"GPU {ga.index} <-> GPU {gb.index}",
                    path_bridges(da, db),
                )
            )
    nics = [
        (n, topo.pci(n.address)) for n in topo.nics if n.rdma_devices and not n.is_virtual_function
    ]
    for g, dg in gpus:
        if dg is None:
            continue
        scored = [
            (_BUCKET_ORDER.index(b), n, dn)
            for n, dn in nics
            if dn is not None and (b := classify(dg, dn)) in _BUCKET_ORDER
        ]
        if not scored:
            continue
        best = min(s for s, _, _ in scored)
        for s, n, dn in scored:
            if s == best:
                out.append(
                    Path(
                        g.address,
                        n.address,
                        f"GPU {g.index} <-> {n.rdma_devices[0]}",
                        path_bridges(dg, dn),
                    )
                )
    return tuple(out)


def read_bridge(host: HostReader, address: PciAddress) -> BridgeAcs:
    path = f"{paths.PCI_DEVICES}/{address}/config"
    try:
        data = host.read_bytes(path)
    except PathNotFound:
        return BridgeAcs(address, None, FileRead(path, Absent(f"no {path}")))
    except AccessDenied as err:
        return BridgeAcs(address, None, FileRead(path, Unreadable(err.detail, denied=True)))
    except HostError as err:
        return BridgeAcs(address, None, FileRead(path, Unreadable(err.detail, denied=False)))
    read = FileRead(path, f"{len(data)} bytes")
    try:
        return BridgeAcs(address, find_acs(data), read)
    except ConfigTooShort as err:
        denied = FileRead(path, Unreadable(str(err), denied=True))
        return BridgeAcs(address, None, denied, short=True)


def virtualization(vendor: str | None, product: str | None, cpuinfo: str | None) -> bool | None:
    """Whether this runs in a VM: the DMI system vendor/product a hypervisor reports, else the
    x86 `hypervisor` CPU flag (set by every hypervisor that follows the CPUID convention);
    None when neither is known."""
    v, p = (vendor or "").strip().lower(), (product or "").strip().lower()
    if any(v.startswith(x) for x in _VM_VENDORS) and (
        v != "microsoft corporation" or "virtual" in p
    ):
        return True
    if any(x in p for x in _VM_PRODUCTS):
        return True
    if cpuinfo:
        for line in cpuinfo.splitlines():
            if line.startswith("flags"):
                return "hypervisor" in line.split()
    if vendor is not None or product is not None:
        return False
    return None


def collect(host: HostReader, ctx: AuditContext) -> P2pFacts:
    return read_p2p(host, ctx.topology)


def read_p2p(host: HostReader, topo: Topology) -> P2pFacts:
    """The P2P paths of `topo` and the ACS of every bridge on them, read through `host`."""
    found = p2p_paths(topo)
    bridges = sorted({b for p in found for b in p.bridges})
    vendor = read_file(host, paths.DMI_VENDOR).text
    product = read_file(host, paths.DMI_PRODUCT).text
    cpuinfo = read_file(host, paths.CPUINFO).text if vendor is None else None
    virtual = virtualization(vendor, product, cpuinfo)
    seen = f"DMI {(vendor or 'vendor unknown').strip()} / {(product or 'product unknown').strip()}"
    if cpuinfo is not None:
        seen += "; /proc/cpuinfo hypervisor flag " + ("set" if virtual else "not set")
    return P2pFacts(found, tuple(read_bridge(host, b) for b in bridges), virtual, seen)


def check(facts: P2pFacts, ctx: AuditContext) -> list[Finding]:
    fid = "p2p.acs"
    if not facts.paths:
        return skipped(
            fid,
            "PCIe P2P not checked: no GPU pair without NVLink and no GPU with an RDMA NIC",
            Evidence("PCIe topology", "no P2P path over PCIe"),
        )
    on: dict[PciAddress, list[str]] = {}
    direct = []
    for p in facts.paths:
        if not p.bridges:
            direct.append(p.label)
        for b in p.bridges:
            on.setdefault(b, []).append(p.label)
    out = []
    place = Evidence("virtualization", facts.virtual_evidence)
    for br in facts.bridges:
        subject = str(br.address)
        carries = Evidence("P2P paths through it", ", ".join(on.get(br.address, [])))
        if br.read.text is None:
            got = unreadable_finding(fid, br.read, ctx.is_root, f"ACS on bridge {subject}")
            if br.read.missing:
                got = Finding(
                    fid,
                    Status.SKIP,
                    f"ACS on bridge {subject} not checked: its config space is not in this root",
                    (Evidence(br.read.path, "absent"),),
                )
            out.append(
                Finding(
                    got.id, got.status, got.summary, (*got.evidence, carries), got.remedy, subject
                )
            )
            continue
        if br.acs is None:
            out.append(
                Finding(
                    fid,
                    Status.PASS,
                    f"bridge {subject}: no ACS capability, P2P is not redirected",
                    (Evidence(br.read.path, "no ACS extended capability"), carries),
                    None,
                    subject,
                )
            )
            continue
        acs = br.acs
        value = (
            f"ACSCap {acs_names(acs.capability)} (0x{acs.capability:04x}), ACSCtl "
            f"{acs_names(acs.control)} (0x{acs.control:04x}) at 0x{acs.offset:03x}"
        )
        ev = (Evidence(br.read.path, value), carries, place)
        if not acs.redirecting:
            out.append(
                Finding(
                    fid,
                    Status.PASS,
                    f"bridge {subject}: ACS does not redirect P2P ({acs_names(acs.control)})",
                    ev,
                    None,
                    subject,
                )
            )
            continue
        redirect = acs_names(acs.redirecting)
        if facts.virtual:
            out.append(
                Finding(
                    fid,
                    Status.INFO,
                    f"bridge {subject}: ACS {redirect} on in a VM: the hypervisor's isolation; "
                    "P2P through it goes up to the root complex",
                    ev,
                    "In a VM keep ACS; enable ATS on the NIC (and the IOMMU's ATS support) so "
                    "GPUDirect RDMA translations stay on the device",
                    subject,
                )
            )
            continue
        vm_note = "" if facts.virtual is False else " (not known to be a VM)"
        out.append(
            Finding(
                fid,
                Status.FAIL,
                f"bridge {subject}: ACS {redirect} enabled on a P2P path{vm_note}: GPU peer "
                "traffic is redirected through the root complex (NCCL slows down or hangs)",
                ev,
                f"Disable ACS on bare metal: `setpci -s {subject} ECAP_ACS+0x6.w=0000` at every "
                "boot for each bridge on the path (a systemd unit before the workloads), or the "
                "BIOS setting (PCIe ACS / IOMMU off); booting with iommu=pt does not turn ACS "
                "off",
                subject,
            )
        )
    if direct and not facts.bridges:
        out.append(
            Finding(
                fid,
                Status.PASS,
                "no bridge between P2P peers (" + ", ".join(direct) + ")",
                (Evidence("PCIe topology", "peers on one bus"),),
            )
        )
    return out


def readiness(topo: Topology, facts: P2pFacts) -> list[list[str]]:
    """The GPU x GPU matrix `topo --p2p` prints: `X`; `NV#` over NVLink; NVML's status when it
    is not OK (CNS, GNS, TNS, NS, DR, U); `ACS` when a bridge on the path redirects; `?` when a
    bridge on it could not be read; else `OK`."""
    nvl = nvlink_counts(topo)
    nvml = {}
    if topo.nvml is not None:
        by_index = {g.nvml.index: g.address for g in topo.gpus if g.nvml is not None}
        for s in topo.nvml.p2p_read:
            a, b = by_index.get(s.a), by_index.get(s.b)
            if a is not None and b is not None:
                nvml[a, b] = s.status
    acs = {br.address: br for br in facts.bridges}
    gpus = [(g, topo.pci(g.address)) for g in topo.gpus]
    rows = []
    for ga, da in gpus:
        row = []
        for gb, db in gpus:
            if ga.address == gb.address:
                row.append("X")
                continue
            if (ga.address, gb.address) in nvl:
                row.append(f"NV{nvl[ga.address, gb.address]}")
                continue
            status = nvml.get((ga.address, gb.address))
            if status not in (None, "OK"):
                row.append(status or "U")
                continue
            bridges = path_bridges(da, db) if da is not None and db is not None else ()
            reads = [acs.get(b) for b in bridges]
            if any(r is not None and r.acs is not None and r.acs.redirecting for r in reads):
                row.append("ACS")
            elif any(r is None or (r.read.text is None and not r.read.missing) for r in reads):
                row.append("?")
            else:
                row.append("OK" if status == "OK" or status is None else status)
        rows.append(row)
    return rows
