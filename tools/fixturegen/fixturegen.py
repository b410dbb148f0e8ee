"""Generate realistic Linux sysfs/procfs trees from a declarative description of a machine.

A `HostSpec` describes CPUs (sockets x cores x SMT threads), NUMA nodes and a PCI hierarchy of
host bridges, ports, switches and endpoints. `write_host()` turns it into the tree that
discovery reads, laid out as the kernel lays it out:

- PCI functions nest under their parent bridge (`devices/pci0000:15/0000:15:01.0/0000:16:00.0`),
  a PCIe switch expands to an upstream-port bridge plus one downstream-port bridge per child,
  bus numbers are handed out depth-first as firmware does, SR-IOV VFs are sibling directories
  of their PF (same parent bridge, routing IDs after the PF, spilling onto following buses);
- every symlink is relative and computed with the kernel's own algorithm
  (fs/kernfs/symlink.c `kernfs_get_target_path`), so `net/<if>/device` reads
  `../../../0000:18:00.0` exactly as on real hardware, and the usual cycles exist
  (`subsystem`, `driver`, `device`, `cpuN/nodeM` <-> `nodeM/cpuN`);
- attribute contents use the kernel's formats (`0x030200`, `32.0 GT/s PCIe`, `%*pb` masks in
  32-bit groups sized to nr_cpu_ids, node meminfo columns ...), each ending in a newline.

Nothing random: the same spec gives a byte-identical tree.

Hosts with GPUs also get `mcpnode-snapshot.json` at their root: the NVML answers mcpnode's
discovery gets from the simulated NVML of tools/fixturegen/nvmlgen.py, so `--root` replays them.

CLI (from the repository root):
    # regenerate the committed fixtures
    python3 tools/fixturegen/fixturegen.py --out tests/fixtures/hosts
    # NVML failure recordings (and the agent's event-set recordings, fixtures/nvml-events)
    python3 tools/fixturegen/fixturegen.py --nvml-cases tests/fixtures/nvml
    # benchmark host, not committed
    python3 tools/fixturegen/fixturegen.py --synthetic-vfs 4096 --out DIR
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TypeAlias

# -- PCIe link speeds as the kernel prints them (>= 4.20; drivers/pci/pci.h pci_speed_string) --

GT2_5 = "2.5 GT/s PCIe"
GT5 = "5.0 GT/s PCIe"
GT8 = "8.0 GT/s PCIe"
GT16 = "16.0 GT/s PCIe"
GT32 = "32.0 GT/s PCIe"
SPEED_UNKNOWN = "Unknown"  # what a VF (all-zero Link Capabilities) reads

# -- ids used by the fixtures ---------------------------------------------------------------

V_NVIDIA = 0x10DE
V_MELLANOX = 0x15B3
V_INTEL = 0x8086
V_AMD = 0x1022
V_BROADCOM = 0x1000  # PEX880xx (Gen4) / PEX890xx (Gen5) switches enumerate as Broadcom/LSI
V_SAMSUNG = 0x144D
V_ASPEED = 0x1A03
V_REDHAT = 0x1B36  # QEMU PCIe root port
V_VIRTIO = 0x1AF4
V_QLOGIC = 0x1077

CLASS_HOST_BRIDGE = 0x060000
CLASS_ISA_BRIDGE = 0x060100
CLASS_PCI_BRIDGE = 0x060400
CLASS_3D = 0x030200
CLASS_VGA = 0x030000
CLASS_ETHERNET = 0x020000
CLASS_INFINIBAND = 0x020700
CLASS_NVME = 0x010802
CLASS_SATA_AHCI = 0x010601
CLASS_SCSI = 0x010000
CLASS_SAS = 0x010700
CLASS_NETWORK_OTHER = 0x028000  # ConnectX-3 VPI
CLASS_IB_SERIAL = 0x0C0600  # InfiniBand as a serial bus controller: QLogic TrueScale HCAs
CLASS_SMBUS = 0x0C0500
CLASS_SYSTEM_PERIPHERAL = 0x088000
CLASS_NVSWITCH_A100 = 0x068000
CLASS_NVSWITCH_H100 = 0x068001

ARPHRD_ETHER = 1
ARPHRD_INFINIBAND = 32

# NODES_SHIFT=10 on distribution x86_64 kernels: /proc/<pid>/status prints Mems_allowed with
# MAX_NUMNODES bits.
MAX_NUMNODES = 1024


# ==========================================================================================
# The declarative spec
# ==========================================================================================


@dataclass(frozen=True)
class LinkSpec:
    """PCIe link attributes; `max_*` default to the current values."""

    speed: str
    width: int
    max_speed: str | None = None
    max_width: int | None = None


@dataclass(frozen=True)
class NetdevSpec:
    """A network interface below a PCI function (`net/<name>/`).

    `name` may use `{bus}`, `{dev}`, `{fn}` (decimal, from the function's allocated address),
    so predictable names (`ibp{bus}s{dev}`, `enp{bus}s{dev}f{fn}np{fn}`) follow bus numbering.
    `speed_mbps=None` writes `-1` (SPEED_UNKNOWN, what a running link without carrier reads).
    """

    name: str
    operstate: str = "up"
    mtu: int = 1500
    speed_mbps: int | None = None
    arphrd: int = ARPHRD_ETHER
    address: str | None = None  # None: derived deterministically


@dataclass(frozen=True)
class RdmaSpec:
    """An RDMA device below a PCI function (`infiniband/<name>/`), one port."""

    name: str
    link_layer: str = "InfiniBand"  # or "Ethernet" (RoCE)
    state: str = "4: ACTIVE"
    phys_state: str = "5: LinkUp"
    rate: str = "400 Gb/sec (4X NDR)"
    hca_type: str = "MT4129"
    fw_ver: str = "28.39.1002"
    # ports/1/counters/<name> values other than 0 (link_downed, symbol_error, ...)
    counters: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True)
class NvmeSpec:
    name: str  # nvme0
    model: str
    serial: str
    firmware_rev: str = "GDC5602Q"
    # namespace 1's size in 512-byte sectors (`nvme0n1/size`); None writes no namespace
    namespace_sectors: int | None = None


@dataclass(frozen=True)
class SriovSpec:
    """SR-IOV on a PF. VFs take routing IDs after all functions of the PF's device.

    `vf_netdev` is a name template as in NetdevSpec (`{bus}`, `{dev}`, `{fn}` of the VF); None
    means the VFs have no netdev.
    """

    total_vfs: int
    num_vfs: int
    vf_device: int
    vf_driver: str | None = "mlx5_core"
    vf_netdev: str | None = "enp{bus}s{dev}f{fn}"


@dataclass(frozen=True)
class DeviceSpec:
    """A PCI endpoint function."""

    class_code: int
    vendor: int
    device: int
    subsystem_vendor: int | None = None  # None: same as vendor
    subsystem_device: int = 0
    revision: int = 0
    driver: str | None = None
    link: LinkSpec | None = None  # None: not PCIe (conventional PCI, root-complex integrated)
    slot: tuple[int, int] | None = None  # (device, function); None: automatic
    netdevs: tuple[NetdevSpec, ...] = ()
    rdma: tuple[RdmaSpec, ...] = ()
    nvme: tuple[NvmeSpec, ...] = ()
    sriov: SriovSpec | None = None
    # virtio: the function's netdevs live under `virtio<index>/net/` as virtio_net creates them
    virtio_index: int | None = None
    virtio_device: int = 1  # virtio device id: 1 net, 2 block
    virtio_driver: str | None = None
    label: str = ""  # free text for humans (what this device is in the modelled machine)


@dataclass(frozen=True)
class PortSpec:
    """A PCI-to-PCI bridge function (root port, PCIe-to-PCI bridge); children on a new bus."""

    vendor: int
    device: int
    children: tuple[Node, ...] = ()
    link: LinkSpec | None = None
    slot: tuple[int, int] | None = None
    driver: str | None = "pcieport"
    subsystem_vendor: int | None = None
    subsystem_device: int = 0
    revision: int = 0
    label: str = ""
    # ACS Control register of the port's ACS capability (0: nothing enabled, as NVIDIA asks
    # for P2P on bare metal); None: the port has no ACS capability (QEMU's root ports)
    acs_ctrl: int | None = 0
    port_type: int | None = None  # PCIe Device/Port Type; None: root port at the top, else 8


@dataclass(frozen=True)
class SwitchSpec:
    """A PCIe switch: an upstream-port bridge plus one downstream-port bridge per entry.

    Each `downstream` entry is what sits behind that downstream port: one node, or a tuple of
    endpoint functions of one multi-function device.
    """

    downstream: tuple[Downstream, ...]
    vendor: int = V_BROADCOM
    device: int = 0xC030  # PEX890xx Gen5
    usp_link: LinkSpec = LinkSpec(GT32, 16)
    dsp_link: LinkSpec = LinkSpec(GT32, 16)
    slot: tuple[int, int] | None = None
    revision: int = 0xB0
    dsp_numbers: tuple[int, ...] | None = None  # device numbers of the downstream ports
    label: str = ""
    dsp_acs_ctrl: int | None = 0  # ACS Control of every downstream port (see PortSpec)


Node: TypeAlias = DeviceSpec | PortSpec | SwitchSpec
Downstream: TypeAlias = Node | tuple[Node, ...]


@dataclass(frozen=True)
class HostBridgeSpec:
    """A PCI root bus (`/sys/devices/pciDDDD:BB`). Everything below gets `numa_node = node`."""

    bus: int
    node: int  # -1: no proximity information (VMs, some single-socket boards)
    children: tuple[Node, ...]
    domain: int = 0


@dataclass(frozen=True)
class NumaSpec:
    id: int
    cpus: str  # cpulist
    mem_total_kib: int
    distances: tuple[int, ...]  # SLIT row, indexed by position in HostSpec.numa


@dataclass(frozen=True)
class HostSpec:
    """A whole machine.

    CPUs are numbered as Linux enumerates x86 servers: first thread of every core socket by
    socket, then the second threads (`cpu = thread * sockets * cores + socket * cores + core`).
    """

    name: str  # fixture directory name
    hostname: str
    osrelease: str
    sockets: int
    cores_per_socket: int
    threads_per_core: int
    numa: tuple[NumaSpec, ...]
    host_bridges: tuple[HostBridgeSpec, ...]
    kernel_max: int = 8191  # NR_CPUS - 1 (CONFIG_NR_CPUS=8192 on Ubuntu)
    root_device: str = "/dev/nvme0n1p2"
    description: str = ""
    # /sys/class/dmi/id/{sys_vendor,product_name}: the board, or the hypervisor in a VM
    dmi: tuple[str, str] = ("Supermicro", "SYS-821GE-TNHR")
    uptime_s: float = 259200.52  # /proc/uptime: three days up
    # cpuN/topology/{thread,core}_siblings: the `%*pb` masks beside the `_list` files (both
    # printed from one cpumask, drivers/base/topology.c). hwloc 2.9 refuses a root with neither
    # these nor the 5.5+ `core_cpus`/`package_cpus` masks ("failed to find sysfs cpu topology
    # directory", topology-linux.c check_sysfs_cpu_path), so hosts benchmarked against lstopo
    # carry them. The committed fixtures predate this and keep their trees unchanged.
    cpu_masks: bool = False
    # cpuN/cache/index{2,3}: (cores per L3 domain within a socket, L3 KiB, L2 KiB per core or
    # None for no index2). None writes no cache directories, as the fixtures made before
    # caches were read; unified caches only (L1 and its instruction half add files, no facts).
    caches: tuple[int, int, int | None] | None = None

    @property
    def n_cpus(self) -> int:
        return self.sockets * self.cores_per_socket * self.threads_per_core


# ==========================================================================================
# Small helpers: cpulists and kernel bitmap formats
# ==========================================================================================


def parse_cpulist(text: str) -> list[int]:
    """`0-47,96-143` -> ids (sorted, unique)."""
    out: set[int] = set()
    for part in text.strip().split(","):
        if not part:
            continue
        if "-" in part:
            lo, hi = part.split("-", 1)
            out.update(range(int(lo), int(hi) + 1))
        else:
            out.add(int(part))
    return sorted(out)


def format_cpulist(ids: Iterable[int]) -> str:
    """Kernel `%*pbl` list format."""
    s = sorted(set(ids))
    out: list[str] = []
    i = 0
    while i < len(s):
        j = i
        while j + 1 < len(s) and s[j + 1] == s[j] + 1:
            j += 1
        out.append(str(s[i]) if i == j else f"{s[i]}-{s[j]}")
        i = j + 1
    return ",".join(out)


def format_bitmap(ids: Iterable[int], nbits: int) -> str:
    """Kernel `%*pb`: 32-bit hex groups, most significant first, comma separated, zero padded;
    the leading group has only as many digits as its bits need (lib/vsprintf.c bitmap_string)."""
    mask = 0
    for i in ids:
        if not 0 <= i < nbits:
            raise ValueError(f"bit {i} outside a {nbits}-bit map")
        mask |= 1 << i
    nchunks = (nbits + 31) // 32
    lead_bits = nbits - 32 * (nchunks - 1)
    groups: list[str] = []
    for k in range(nchunks - 1, -1, -1):
        val = (mask >> (32 * k)) & 0xFFFFFFFF
        width = (lead_bits + 3) // 4 if k == nchunks - 1 else 8
        groups.append(f"{val:0{width}x}")
    return ",".join(groups)


def bdf(domain: int, bus: int, dev: int, fn: int) -> str:
    return f"{domain:04x}:{bus:02x}:{dev:02x}.{fn:x}"


def kernfs_relpath(link: str, target: str) -> str:
    """The relative target the kernel stores for a sysfs symlink at `link` pointing to `target`.

    Both are paths relative to the tree root. Mirrors kernfs_get_target_path(): climb from the
    directory holding the link until reaching an ancestor of the *target's parent*, then descend;
    so `P/net/eth0/device -> P` reads `../../../<P's name>`, as on real machines.
    """
    base = link.split("/")[:-1]
    tgt = target.split("/")
    tparent = tgt[:-1]
    ups = 0
    while base and tparent[: len(base)] != base:
        ups += 1
        base = base[:-1]
    return "../" * ups + "/".join(tgt[len(base) :])


# ==========================================================================================
# Expansion: spec -> PCI functions with addresses and sysfs paths
# ==========================================================================================


@dataclass
class PciFunction:
    """One PCI function after bus allocation."""

    address: str  # 0000:18:00.0
    domain: int
    bus: int
    dev: int
    fn: int
    path: str  # tree-relative: sys/devices/pci0000:15/0000:15:01.0/...
    node: int
    class_code: int
    vendor: int
    device: int
    subsystem_vendor: int
    subsystem_device: int
    revision: int
    driver: str | None
    link: LinkSpec | None
    is_bridge: bool = False
    secondary: int | None = None
    subordinate: int | None = None
    spec: DeviceSpec | None = None  # endpoints (PFs and plain functions)
    physfn: str | None = None  # VFs: PF address
    virtfns: list[str] = field(default_factory=list)  # PFs: VF addresses
    netdevs: tuple[NetdevSpec, ...] = ()
    label: str = ""
    port_type: int = 0  # PCIe Device/Port Type: 0 endpoint, 4 root port, 5/6 switch up/down
    acs_ctrl: int | None = None  # bridges: ACS Control register; None: no ACS capability


class SpecError(ValueError):
    """The spec cannot describe a real machine (duplicate address, bus overflow, ...)."""


class _Allocator:
    def __init__(self, spec: HostSpec) -> None:
        self.spec = spec
        self.functions: list[PciFunction] = []
        self.next_bus = 0

    def run(self) -> list[PciFunction]:
        hbs = sorted(self.spec.host_bridges, key=lambda h: (h.domain, h.bus))
        for i, hb in enumerate(hbs):
            prev = hbs[i - 1] if i else None
            if prev is not None and prev.domain == hb.domain and hb.bus < self.next_bus:
                raise SpecError(f"pci{hb.domain:04x}:{hb.bus:02x} overlaps the previous root bus")
            self.next_bus = hb.bus + 1
            path = f"sys/devices/pci{hb.domain:04x}:{hb.bus:02x}"
            self._bus(hb, path, hb.bus, hb.children, root=True)
            nxt = hbs[i + 1] if i + 1 < len(hbs) else None
            limit = nxt.bus if nxt is not None and nxt.domain == hb.domain else 256
            if self.next_bus > limit:
                raise SpecError(
                    f"pci{hb.domain:04x}:{hb.bus:02x} needs buses up to {self.next_bus - 1:#x}"
                )
        seen: set[str] = set()
        bus_parent: dict[tuple[int, int], str] = {}
        for f in self.functions:
            if f.address in seen:
                raise SpecError(f"duplicate PCI address {f.address}")
            seen.add(f.address)
            parent = f.path.rsplit("/", 1)[0]
            if bus_parent.setdefault((f.domain, f.bus), parent) != parent:
                raise SpecError(f"bus {f.domain:04x}:{f.bus:02x} used below two bridges")
        return self.functions

    def _slots(self, children: Sequence[Node], root: bool) -> list[tuple[tuple[int, int], Node]]:
        placed: list[tuple[tuple[int, int], Node]] = []
        for i, child in enumerate(children):
            slot = child.slot
            if slot is None:
                slot = (i + 1, 0) if root else (0, i)
            placed.append((slot, child))
        placed.sort(key=lambda p: p[0])
        return placed

    def _bus(
        self,
        hb: HostBridgeSpec,
        parent_path: str,
        bus: int,
        children: Sequence[Node],
        *,
        root: bool,
    ) -> None:
        """Place `children` on `bus` below `parent_path`, depth first, in devfn order."""
        placed = self._slots(children, root)
        # functions of one device: SR-IOV VFs start after the highest function of the device
        max_fn: dict[int, int] = {}
        for (dev, fn), _ in placed:
            max_fn[dev] = max(max_fn.get(dev, 0), fn)
        vf_cursor: dict[int, int] = {}
        for (dev, fn), child in placed:
            addr = bdf(hb.domain, bus, dev, fn)
            path = f"{parent_path}/{addr}"
            if isinstance(child, DeviceSpec):
                pf = self._endpoint(hb, child, bus, dev, fn, path)
                if child.sriov is not None:
                    rid0 = (bus << 8) | (dev << 3)
                    start = vf_cursor.get(dev, rid0 + max_fn[dev] + 1)
                    end = self._vfs(hb, pf, child, parent_path, start)
                    vf_cursor[dev] = end
            elif isinstance(child, PortSpec):
                self._port(hb, child, bus, dev, fn, path, root)
            else:
                self._switch(hb, child, bus, dev, fn, path)

    def _endpoint(
        self, hb: HostBridgeSpec, d: DeviceSpec, bus: int, dev: int, fn: int, path: str
    ) -> PciFunction:
        sub_v = d.vendor if d.subsystem_vendor is None else d.subsystem_vendor
        f = PciFunction(
            address=bdf(hb.domain, bus, dev, fn),
            domain=hb.domain,
            bus=bus,
            dev=dev,
            fn=fn,
            path=path,
            node=hb.node,
            class_code=d.class_code,
            vendor=d.vendor,
            device=d.device,
            subsystem_vendor=sub_v,
            subsystem_device=d.subsystem_device,
            revision=d.revision,
            driver=d.driver,
            link=d.link,
            spec=d,
            netdevs=tuple(
                replace(n, name=n.name.format(bus=bus, dev=dev, fn=fn)) for n in d.netdevs
            ),
            label=d.label,
        )
        self.functions.append(f)
        return f

    def _vfs(
        self, hb: HostBridgeSpec, pf: PciFunction, d: DeviceSpec, parent_path: str, start: int
    ) -> int:
        sriov = d.sriov
        assert sriov is not None
        if not 0 <= sriov.num_vfs <= sriov.total_vfs:
            raise SpecError(f"{pf.address}: num_vfs outside 0..total_vfs")
        rid = start
        for _ in range(sriov.num_vfs):
            bus, dev, fn = rid >> 8, (rid >> 3) & 0x1F, rid & 0x7
            if bus > 0xFF:
                raise SpecError(f"{pf.address}: VFs run past bus 0xff")
            addr = bdf(hb.domain, bus, dev, fn)
            netdevs: tuple[NetdevSpec, ...] = ()
            if sriov.vf_netdev is not None:
                netdevs = (
                    NetdevSpec(
                        name=sriov.vf_netdev.format(bus=bus, dev=dev, fn=fn),
                        mtu=1500,
                        speed_mbps=None,
                    ),
                )
            self.functions.append(
                PciFunction(
                    address=addr,
                    domain=hb.domain,
                    bus=bus,
                    dev=dev,
                    fn=fn,
                    path=f"{parent_path}/{addr}",
                    node=hb.node,
                    class_code=d.class_code,
                    vendor=d.vendor,
                    device=sriov.vf_device,
                    subsystem_vendor=pf.subsystem_vendor,
                    subsystem_device=pf.subsystem_device,
                    revision=d.revision,
                    driver=sriov.vf_driver,
                    link=LinkSpec(SPEED_UNKNOWN, 0),
                    physfn=pf.address,
                    netdevs=netdevs,
                    label=f"VF of {pf.address}",
                )
            )
            pf.virtfns.append(addr)
            self.next_bus = max(self.next_bus, bus + 1)
            rid += 1
        return rid

    def _bridge(
        self,
        hb: HostBridgeSpec,
        *,
        bus: int,
        dev: int,
        fn: int,
        path: str,
        vendor: int,
        device: int,
        link: LinkSpec | None,
        driver: str | None,
        subsystem_vendor: int | None = None,
        subsystem_device: int = 0,
        revision: int = 0,
        label: str = "",
        port_type: int = 8,
        acs_ctrl: int | None = None,
    ) -> PciFunction:
        f = PciFunction(
            address=bdf(hb.domain, bus, dev, fn),
            domain=hb.domain,
            bus=bus,
            dev=dev,
            fn=fn,
            path=path,
            node=hb.node,
            class_code=CLASS_PCI_BRIDGE,
            vendor=vendor,
            device=device,
            subsystem_vendor=vendor if subsystem_vendor is None else subsystem_vendor,
            subsystem_device=subsystem_device,
            revision=revision,
            driver=driver,
            link=link,
            is_bridge=True,
            label=label,
            port_type=port_type,
            acs_ctrl=acs_ctrl,
        )
        self.functions.append(f)
        f.secondary = self.next_bus
        self.next_bus += 1
        return f

    def _port(
        self,
        hb: HostBridgeSpec,
        p: PortSpec,
        bus: int,
        dev: int,
        fn: int,
        path: str,
        root: bool = False,
    ) -> None:
        f = self._bridge(
            hb,
            bus=bus,
            dev=dev,
            fn=fn,
            path=path,
            vendor=p.vendor,
            device=p.device,
            link=p.link,
            driver=p.driver,
            subsystem_vendor=p.subsystem_vendor,
            subsystem_device=p.subsystem_device,
            revision=p.revision,
            label=p.label,
            port_type=p.port_type if p.port_type is not None else (4 if root else 8),
            acs_ctrl=p.acs_ctrl,
        )
        assert f.secondary is not None
        self._bus(hb, path, f.secondary, p.children, root=False)
        f.subordinate = self.next_bus - 1

    def _switch(
        self, hb: HostBridgeSpec, s: SwitchSpec, bus: int, dev: int, fn: int, path: str
    ) -> None:
        usp = self._bridge(
            hb,
            bus=bus,
            dev=dev,
            fn=fn,
            path=path,
            vendor=s.vendor,
            device=s.device,
            link=s.usp_link,
            driver="pcieport",
            revision=s.revision,
            label=s.label or "PCIe switch upstream port",
            port_type=5,
        )
        assert usp.secondary is not None
        numbers = s.dsp_numbers or tuple(range(len(s.downstream)))
        if len(numbers) != len(s.downstream):
            raise SpecError("dsp_numbers must name one device number per downstream entry")
        ports = [
            PortSpec(
                vendor=s.vendor,
                device=s.device,
                children=entry if isinstance(entry, tuple) else (entry,),
                link=s.dsp_link,
                slot=(n, 0),
                revision=s.revision,
                label="PCIe switch downstream port",
                acs_ctrl=s.dsp_acs_ctrl,
                port_type=6,
            )
            for n, entry in zip(numbers, s.downstream, strict=True)
        ]
        self._bus(hb, path, usp.secondary, ports, root=False)
        usp.subordinate = self.next_bus - 1


def pci_functions(spec: HostSpec) -> list[PciFunction]:
    """Every PCI function of the host, in enumeration order, with addresses and paths."""
    return _Allocator(spec).run()


# ==========================================================================================
# Tree building
# ==========================================================================================


@dataclass(frozen=True)
class Symlink:
    target: str  # relative, as stored


Entry: TypeAlias = bytes | Symlink


class _Tree:
    def __init__(self) -> None:
        self.entries: dict[str, Entry] = {}

    def file(self, path: str, content: str | bytes) -> None:
        if path in self.entries:
            raise SpecError(f"{path} written twice")
        self.entries[path] = content if isinstance(content, bytes) else content.encode()

    def link(self, path: str, target: str) -> None:
        """A symlink at `path` to tree-relative `target`, stored relative as the kernel does."""
        if path in self.entries:
            raise SpecError(f"{path} written twice")
        self.entries[path] = Symlink(kernfs_relpath(path, target))


def _cpu_layout(spec: HostSpec) -> list[tuple[int, int, int]]:
    """(package, core, thread) per CPU id."""
    s, c, t = spec.sockets, spec.cores_per_socket, spec.threads_per_core
    out: list[tuple[int, int, int]] = []
    for cpu in range(s * c * t):
        thread, rest = divmod(cpu, s * c)
        pkg, core = divmod(rest, c)
        out.append((pkg, core, thread))
    return out


def _node_of_cpus(spec: HostSpec) -> dict[int, int]:
    owner: dict[int, int] = {}
    for n in spec.numa:
        for cpu in parse_cpulist(n.cpus):
            if cpu in owner:
                raise SpecError(f"cpu{cpu} in node{owner[cpu]} and node{n.id}")
            if cpu >= spec.n_cpus:
                raise SpecError(f"node{n.id} lists cpu{cpu} beyond {spec.n_cpus} CPUs")
            owner[cpu] = n.id
    if len(owner) != spec.n_cpus:
        raise SpecError("NUMA nodes do not cover every CPU")
    for n in spec.numa:
        if len(n.distances) != len(spec.numa):
            raise SpecError(f"node{n.id}: distance row has the wrong length")
    return owner


def _mac(prefix: tuple[int, int, int], n: int) -> str:
    return ":".join(f"{b:02x}" for b in (*prefix, (n >> 16) & 0xFF, (n >> 8) & 0xFF, n & 0xFF))


def _ipoib_address(n: int) -> str:
    # 4 bytes QPN/flags + 16 bytes port GID (fe80:: prefix + GUID): 20 bytes, as IPoIB prints
    qpn = [0x00, 0x00, 0x10, 0x29 + (n & 0x3F)]
    gid = [
        0xFE,
        0x80,
        0,
        0,
        0,
        0,
        0,
        0,
        0x58,
        0xA2,
        0xE1,
        0x03,
        0x00,
        0x5C,
        (n >> 8) & 0xFF,
        n & 0xFF,
    ]
    return ":".join(f"{b:02x}" for b in qpn + gid)


def _proc_status(spec: HostSpec) -> str:
    cpus = range(spec.n_cpus)
    nodes = [n.id for n in spec.numa]
    fields = [
        ("Name", "cat"),
        ("Umask", "0022"),
        ("State", "R (running)"),
        ("Tgid", "4242"),
        ("Ngid", "0"),
        ("Pid", "4242"),
        ("PPid", "4107"),
        ("TracerPid", "0"),
        ("Uid", "0\t0\t0\t0"),
        ("Gid", "0\t0\t0\t0"),
        ("FDSize", "64"),
        ("Groups", "0 "),
        ("NStgid", "4242"),
        ("NSpid", "4242"),
        ("NSpgid", "4242"),
        ("NSsid", "4107"),
        ("VmPeak", "    5772 kB"),
        ("VmSize", "    5772 kB"),
        ("VmLck", "       0 kB"),
        ("VmPin", "       0 kB"),
        ("VmHWM", "    1024 kB"),
        ("VmRSS", "    1024 kB"),
        ("RssAnon", "      88 kB"),
        ("RssFile", "     936 kB"),
        ("RssShmem", "       0 kB"),
        ("VmData", "     360 kB"),
        ("VmStk", "     132 kB"),
        ("VmExe", "      20 kB"),
        ("VmLib", "    1524 kB"),
        ("VmPTE", "      48 kB"),
        ("VmSwap", "       0 kB"),
        ("HugetlbPages", "       0 kB"),
        ("CoreDumping", "0"),
        ("THP_enabled", "1"),
        ("Threads", "1"),
        ("SigQ", "0/4125518"),
        ("SigPnd", "0000000000000000"),
        ("ShdPnd", "0000000000000000"),
        ("SigBlk", "0000000000000000"),
        ("SigIgn", "0000000000000000"),
        ("SigCgt", "0000000000000000"),
        ("CapInh", "0000000000000000"),
        ("CapPrm", "000001ffffffffff"),
        ("CapEff", "000001ffffffffff"),
        ("CapBnd", "000001ffffffffff"),
        ("CapAmb", "0000000000000000"),
        ("NoNewPrivs", "0"),
        ("Seccomp", "0"),
        ("Seccomp_filters", "0"),
        ("Speculation_Store_Bypass", "thread vulnerable"),
        ("SpeculationIndirectBranch", "conditional enabled"),
        ("Cpus_allowed", format_bitmap(cpus, spec.n_cpus)),
        ("Cpus_allowed_list", format_cpulist(cpus)),
        ("Mems_allowed", format_bitmap(nodes, MAX_NUMNODES)),
        ("Mems_allowed_list", format_cpulist(nodes)),
        ("voluntary_ctxt_switches", "0"),
        ("nonvoluntary_ctxt_switches", "1"),
    ]
    return "".join(f"{k}:\t{v}\n" for k, v in fields)


_DEVNO = {"/dev/nvme0n1p2": "259:2", "/dev/md0": "9:0", "/dev/vda1": "252:1", "/dev/sda2": "8:2"}


def _proc_mountinfo(spec: HostSpec) -> str:
    devno = _DEVNO.get(spec.root_device, "259:2")
    return (
        f"28 1 {devno} / / rw,relatime shared:1 - ext4 {spec.root_device} rw\n"
        "22 28 0:21 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw\n"
        "23 28 0:22 / /proc rw,nosuid,nodev,noexec,relatime shared:13 - proc proc rw\n"
        "24 28 0:5 / /dev rw,nosuid,relatime shared:2 - devtmpfs udev "
        "rw,size=4096k,nr_inodes=1048576,mode=755,inode64\n"
        "25 24 0:23 / /dev/pts rw,nosuid,noexec,relatime shared:3 - devpts devpts "
        "rw,gid=5,mode=620,ptmxmode=000\n"
        "26 28 0:24 / /run rw,nosuid,nodev,noexec,relatime shared:5 - tmpfs tmpfs "
        "rw,size=52428800k,mode=755,inode64\n"
        "29 24 0:25 / /dev/shm rw,nosuid,nodev shared:4 - tmpfs tmpfs rw,inode64\n"
        "31 22 0:27 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 "
        "rw,nsdelegate,memory_recursiveprot\n"
    )


def _meminfo(node: int, total_kib: int) -> str:
    free = total_kib - total_kib // 25  # 96% free: a quiet host
    used = total_kib - free
    rows = [
        ("MemTotal:", total_kib),
        ("MemFree:", free),
        ("MemUsed:", used),
        ("SwapCached:", 0),
        ("Active:", used // 2),
        ("Inactive:", used // 4),
        ("Active(anon):", used // 8),
        ("Inactive(anon):", 0),
        ("Active(file):", used // 2 - used // 8),
        ("Inactive(file):", used // 4),
        ("Unevictable:", 0),
        ("Mlocked:", 0),
        ("Dirty:", 0),
        ("Writeback:", 0),
        ("FilePages:", used // 2),
        ("Mapped:", used // 16),
        ("AnonPages:", used // 8),
        ("Shmem:", 0),
    ]
    out = "".join(f"Node {node} {label:<16}{val:>8} kB\n" for label, val in rows)
    out += f"Node {node} HugePages_Total:     0\n"
    out += f"Node {node} HugePages_Free:      0\n"
    out += f"Node {node} HugePages_Surp:      0\n"
    return out


def _uevent(f: PciFunction) -> str:
    lines = []
    if f.driver is not None:
        lines.append(f"DRIVER={f.driver}")
    cls = f.class_code
    lines += [
        f"PCI_CLASS={cls:04X}",
        f"PCI_ID={f.vendor:04X}:{f.device:04X}",
        f"PCI_SUBSYS_ID={f.subsystem_vendor:04X}:{f.subsystem_device:04X}",
        f"PCI_SLOT_NAME={f.address}",
        f"MODALIAS=pci:v{f.vendor:08X}d{f.device:08X}sv{f.subsystem_vendor:08X}"
        f"sd{f.subsystem_device:08X}bc{cls >> 16:02X}sc{(cls >> 8) & 0xFF:02X}i{cls & 0xFF:02X}",
    ]
    return "\n".join(lines) + "\n"


# -- health files: AER counters, config space, IB counters, the kernel log -------------------

AER_KINDS = ("correctable", "fatal", "nonfatal")
# drivers/pci/pcie/aer.c: the names aer_dev_* print, one `NAME COUNT` line each, then
# `TOTAL_ERR_COR` / `TOTAL_ERR_FATAL` / `TOTAL_ERR_NONFATAL` (ABI: sysfs-bus-pci-devices-aer_stats)
AER_NAMES = {
    "correctable": ("RxErr", "BadTLP", "BadDLLP", "Rollover", "Timeout", "NonFatalErr",
                    "CorrIntErr", "HeaderOF"),
    "fatal": ("Undefined", "DLP", "SDES", "TLP", "FCP", "CmpltTO", "CmpltAbrt", "UnxCmplt",
              "RxOF", "MalfTLP", "ECRC", "UnsupReq", "ACSViol", "UncorrIntErr", "BlockedTLP",
              "AtomicOpBlocked", "TLPBlockedErr", "PoisonTLPBlocked"),
}  # fmt: skip
AER_NAMES["nonfatal"] = AER_NAMES["fatal"]
AER_TOTAL = {"correctable": "ERR_COR", "fatal": "ERR_FATAL", "nonfatal": "ERR_NONFATAL"}
IB_COUNTERS = ("link_downed", "link_error_recovery", "symbol_error", "port_rcv_errors")


def aer_text(kind: str, counts: dict[str, int] | None = None) -> str:
    """An aer_dev_<kind> file: every name the kernel prints with its count (0 unless given)."""
    counts = dict(counts or {})
    lines = [f"{name} {counts.pop(name, 0)}" for name in AER_NAMES[kind]]
    if counts:
        raise SpecError(f"aer_dev_{kind} has no counter {sorted(counts)}")
    total = sum(int(x.rsplit(" ", 1)[1]) for x in lines)
    return "\n".join([*lines, f"TOTAL_{AER_TOTAL[kind]} {total}"]) + "\n"


# PCI config space (PCI Local Bus 3.0 ch. 6; PCIe Base 6.0 ch. 7): the standard header, the
# PCI Express capability at 0x40, extended capabilities from 0x100: AER (ID 0x0001), then on
# ports that have one the ACS capability (ID 0x000D, 7.7.11: ACS Capability at +4, ACS Control
# at +6). 4096 bytes for PCIe functions (root reads them all), 256 for conventional PCI.
ACS_OFFSET = 0x148
ACS_CAP_ROOT_PORT = 0x001F  # SV TB RR CR UF (Intel/AMD root ports)
ACS_CAP_SWITCH = 0x007F  # SV TB RR CR UF EC DT (Broadcom PEX downstream ports)
# What Linux enables when an IOMMU is on (drivers/pci/pci.c pci_std_enable_acs: SV, RR, CR, UF)
ACS_LINUX_DEFAULT = 0x001D


def config_space(f: PciFunction, acs_ctrl: int | None = None) -> bytes:
    """The function's config space as sysfs `config` reads it as root. `acs_ctrl` overrides
    the ACS Control register of a port that has the capability."""
    size = 4096 if f.link is not None else 256
    b = bytearray(size)

    def put(off: int, value: int, width: int) -> None:
        b[off : off + width] = value.to_bytes(width, "little")

    put(0x00, f.vendor, 2)
    put(0x02, f.device, 2)
    put(0x04, 0x0406, 2)  # memory space, bus master, INTx disable
    put(0x06, 0x0010, 2)  # capabilities list
    put(0x08, f.revision | f.class_code << 8, 4)
    put(0x0C, 0x10, 1)  # cache line size
    put(0x0E, 1 if f.is_bridge else 0, 1)
    if f.is_bridge:
        bus = f.bus
        put(0x18, bus | (f.secondary or 0) << 8 | (f.subordinate or 0) << 16, 4)
    else:
        put(0x2C, f.subsystem_vendor | f.subsystem_device << 16, 4)
    if f.link is None:
        return bytes(b)
    put(0x34, 0x40, 1)
    put(0x40, 0x10, 1)  # PCI Express capability, last of the list
    put(0x42, 0x2 | f.port_type << 4, 2)  # version 2, Device/Port Type
    gen = {GT2_5: 1, GT5: 2, GT8: 3, GT16: 4, GT32: 5}
    max_speed = f.link.max_speed or f.link.speed
    max_width = f.link.max_width if f.link.max_width is not None else f.link.width
    put(0x4C, gen.get(max_speed, 0) | max_width << 4, 4)  # Link Capabilities
    put(0x52, gen.get(f.link.speed, 0) | f.link.width << 4, 2)  # Link Status
    ctrl = f.acs_ctrl if acs_ctrl is None else acs_ctrl
    has_acs = f.acs_ctrl is not None
    put(0x100, 0x0001 | 2 << 16 | (ACS_OFFSET if has_acs else 0) << 20, 4)  # AER v2
    if has_acs:
        cap = ACS_CAP_SWITCH if f.port_type == 6 else ACS_CAP_ROOT_PORT
        put(ACS_OFFSET, 0x000D | 1 << 16, 4)  # ACS v1, last of the list
        put(ACS_OFFSET + 4, cap, 2)
        put(ACS_OFFSET + 6, ctrl or 0, 2)
    return bytes(b)


def kmsg_record(seq: int, usec: int, message: str, priority: int = 6) -> str:
    """One /dev/kmsg record line (Documentation/ABI/testing/dev-kmsg)."""
    return f"{priority},{seq},{usec},-;{message}\n"


def boot_log(spec: HostSpec, extra: Sequence[tuple[int, str, int]] = ()) -> str:
    """A kernel log of this host from boot: the kernel banner, PCI enumeration of its GPUs,
    NVSwitches and NICs (with the kmsg dictionary continuation lines), the drivers probing
    them; then `extra` records (usec, message, priority) in order."""
    lines: list[tuple[int, str, int, tuple[str, ...]]] = [
        (0, f"Linux version {spec.osrelease} (buildd@lcy02-amd64-001) (gcc 11.4.0)", 5, ()),
        (0, f"Command line: BOOT_IMAGE=/vmlinuz-{spec.osrelease} root={spec.root_device} ro "
            "quiet", 6, ()),
    ]  # fmt: skip
    usec = 1_200_000
    fns = pci_functions(spec)
    for f in fns:
        usec += 137
        kind = "PCIe Endpoint" if f.port_type == 0 else "PCIe Switch Downstream Port"
        if f.link is None:
            kind = "conventional PCI endpoint"
        if f.port_type == 4:
            kind = "PCIe Root Port"
        elif f.port_type == 5:
            kind = "PCIe Switch Upstream Port"
        lines.append(
            (
                usec,
                f"pci {f.address}: [{f.vendor:04x}:{f.device:04x}] type "
                f"{'01' if f.is_bridge else '00'} class 0x{f.class_code:06x} {kind}",
                6,
                ("SUBSYSTEM=pci", f"DEVICE=+pci:{f.address}"),
            )
        )
    usec = 9_800_000
    nvidia = [f for f in fns if f.vendor == V_NVIDIA and f.class_code >> 16 == 0x03]
    if nvidia:
        lines.append((usec, "nvidia: loading out-of-tree module taints kernel.", 4, ()))
        lines.append(
            (usec + 5_000, "nvidia-nvlink: Nvlink Core is being initialized, major device "
             "number 510", 6, ())
        )  # fmt: skip
    for i, f in enumerate(nvidia):
        lines.append((usec + 9_000 + i * 400, f"nvidia {f.address}: enabling device (0000 -> "
                      "0002)", 6, ("SUBSYSTEM=pci", f"DEVICE=+pci:{f.address}")))  # fmt: skip
    switches = [f for f in fns if f.vendor == V_NVIDIA and f.class_code >> 8 == 0x0680]
    for i, f in enumerate(switches):
        lines.append((usec + 40_000 + i * 300, f"nvidia-nvswitch{i}: probing {f.address}", 6, ()))
    for f in fns:
        if f.driver == "mlx5_core" and f.physfn is None and f.spec is not None:
            fw = f.spec.rdma[0].fw_ver if f.spec.rdma else "28.39.1002"
            lines.append(
                (usec + 70_000 + f.bus * 10, f"mlx5_core {f.address}: firmware version: {fw}",
                 6, ("SUBSYSTEM=pci", f"DEVICE=+pci:{f.address}"))
            )  # fmt: skip
    lines.sort(key=lambda x: x[0])
    out = []
    for seq, (t, msg, prio, dict_lines) in enumerate(lines):
        out.append(kmsg_record(seq, t, msg, prio))
        out.extend(f" {d}\n" for d in dict_lines)
    for i, (t, msg, prio) in enumerate(extra):
        out.append(kmsg_record(len(lines) + i, t, msg, prio))
    return "".join(out)


class _Builder:
    def __init__(self, spec: HostSpec) -> None:
        self.spec = spec
        self.t = _Tree()
        self.n_cpus = spec.n_cpus
        self.all_cpus = list(range(spec.n_cpus))
        self.node_cpus = {n.id: parse_cpulist(n.cpus) for n in spec.numa}
        self.ifindex = 1
        self.mac_seq = 0

    def build(self) -> dict[str, Entry]:
        self._proc()
        self._cpus()
        self._nodes()
        self._cgroup()
        self._loopback()
        self._pci()
        self._dmi()
        self._kmsg()
        return self.t.entries

    def _dmi(self) -> None:
        vendor, product = self.spec.dmi
        self.t.file("sys/class/dmi/id/sys_vendor", vendor + "\n")
        self.t.file("sys/class/dmi/id/product_name", product + "\n")

    def _kmsg(self) -> None:
        """dev/kmsg as a snapshot holds it: a boot log with the lines a healthy host of this
        shape prints (PCI enumeration of the GPUs and NICs, the NVIDIA and mlx5 drivers) and
        no XID."""
        self.t.file("dev/kmsg", boot_log(self.spec))

    # -- procfs ------------------------------------------------------------------------

    def _proc(self) -> None:
        t, s = self.t, self.spec
        t.file("proc/sys/kernel/hostname", s.hostname + "\n")
        t.file("proc/sys/kernel/osrelease", s.osrelease + "\n")
        t.file("proc/self/status", _proc_status(s))
        t.file("proc/self/cgroup", "0::/\n")
        t.file("proc/self/mountinfo", _proc_mountinfo(s))
        # /proc/uptime: seconds up, seconds idle summed over CPUs (fs/proc/uptime.c)
        t.file("proc/uptime", f"{s.uptime_s:.2f} {s.uptime_s * s.n_cpus * 0.97:.2f}\n")

    def _cgroup(self) -> None:
        t = self.t
        t.file("sys/fs/cgroup/cgroup.controllers", "cpuset cpu io memory hugetlb pids rdma misc\n")
        t.file("sys/fs/cgroup/cpuset.cpus.effective", format_cpulist(self.all_cpus) + "\n")
        nodes = [n.id for n in self.spec.numa]
        t.file("sys/fs/cgroup/cpuset.mems.effective", format_cpulist(nodes) + "\n")

    # -- CPUs and NUMA -----------------------------------------------------------------

    def _cpus(self) -> None:
        t, s = self.t, self.spec
        owner = _node_of_cpus(s)
        layout = _cpu_layout(s)
        base = "sys/devices/system/cpu"
        every = format_cpulist(self.all_cpus) + "\n"
        t.file(f"{base}/possible", every)
        t.file(f"{base}/present", every)
        t.file(f"{base}/online", every)
        t.file(f"{base}/kernel_max", f"{s.kernel_max}\n")
        by_core: dict[tuple[int, int], list[int]] = {}
        by_pkg: dict[int, list[int]] = {}
        for cpu, (pkg, core, _thread) in enumerate(layout):
            by_core.setdefault((pkg, core), []).append(cpu)
            by_pkg.setdefault(pkg, []).append(cpu)
        for cpu, (pkg, core, _thread) in enumerate(layout):
            d = f"{base}/cpu{cpu}"
            t.file(f"{d}/topology/core_id", f"{core}\n")
            t.file(f"{d}/topology/physical_package_id", f"{pkg}\n")
            t.file(f"{d}/topology/die_id", "0\n")
            t.file(f"{d}/topology/thread_siblings_list", format_cpulist(by_core[pkg, core]) + "\n")
            t.file(f"{d}/topology/core_siblings_list", format_cpulist(by_pkg[pkg]) + "\n")
            if s.cpu_masks:
                threads, package = by_core[pkg, core], by_pkg[pkg]
                t.file(f"{d}/topology/thread_siblings", format_bitmap(threads, self.n_cpus) + "\n")
                t.file(f"{d}/topology/core_siblings", format_bitmap(package, self.n_cpus) + "\n")
            if s.caches is not None:
                self._cache_dirs(d, pkg, core, by_core, layout)
            if cpu != 0:
                t.file(f"{d}/online", "1\n")
            node = owner[cpu]
            t.link(f"{d}/node{node}", f"sys/devices/system/node/node{node}")

    def _cache_dirs(
        self,
        d: str,
        pkg: int,
        core: int,
        by_core: dict[tuple[int, int], list[int]],
        layout: list[tuple[int, int, int]],
    ) -> None:
        """L2 per core, L3 per run of `caches[0]` cores of one socket (an AMD CCX / CCD; the
        whole socket on Intel), as drivers/base/cacheinfo.c prints them."""
        t, s = self.t, self.spec
        assert s.caches is not None
        per_l3, l3_kib, l2_kib = s.caches
        ccx = core // per_l3
        l3_cpus = [c for c, (p, k, _) in enumerate(layout) if p == pkg and k // per_l3 == ccx]
        per_socket = -(-s.cores_per_socket // per_l3)
        levels = [(3, 3, l3_cpus, l3_kib, pkg * per_socket + ccx)]
        if l2_kib is not None:
            levels.insert(0, (2, 2, by_core[pkg, core], l2_kib, pkg * s.cores_per_socket + core))
        for index, level, shared, kib, ident in levels:
            base = f"{d}/cache/index{index}"
            t.file(f"{base}/level", f"{level}\n")
            t.file(f"{base}/type", "Unified\n")
            t.file(f"{base}/shared_cpu_list", format_cpulist(shared) + "\n")
            t.file(f"{base}/size", f"{kib}K\n")
            t.file(f"{base}/id", f"{ident}\n")

    def _nodes(self) -> None:
        t, s = self.t, self.spec
        base = "sys/devices/system/node"
        ids = [n.id for n in s.numa]
        listed = format_cpulist(ids) + "\n"
        t.file(f"{base}/possible", listed)
        t.file(f"{base}/online", listed)
        t.file(f"{base}/has_cpu", format_cpulist(n.id for n in s.numa if n.cpus) + "\n")
        mem = format_cpulist(n.id for n in s.numa if n.mem_total_kib > 0) + "\n"
        t.file(f"{base}/has_memory", mem)
        t.file(f"{base}/has_normal_memory", mem)
        for n in s.numa:
            d = f"{base}/node{n.id}"
            cpus = self.node_cpus[n.id]
            t.file(f"{d}/cpulist", format_cpulist(cpus) + "\n")
            t.file(f"{d}/cpumap", format_bitmap(cpus, self.n_cpus) + "\n")
            t.file(f"{d}/distance", " ".join(str(x) for x in n.distances) + "\n")
            t.file(f"{d}/meminfo", _meminfo(n.id, n.mem_total_kib))
            for cpu in cpus:
                t.link(f"{d}/cpu{cpu}", f"sys/devices/system/cpu/cpu{cpu}")

    # -- network -----------------------------------------------------------------------

    def _loopback(self) -> None:
        d = "sys/devices/virtual/net/lo"
        t = self.t
        t.file(f"{d}/operstate", "unknown\n")
        t.file(f"{d}/mtu", "65536\n")
        t.file(f"{d}/address", "00:00:00:00:00:00\n")
        t.file(f"{d}/type", "772\n")
        t.file(f"{d}/ifindex", "1\n")
        t.link(f"{d}/subsystem", "sys/class/net")
        t.link("sys/class/net/lo", d)

    def _netdev(self, parent: str, n: NetdevSpec) -> None:
        t = self.t
        d = f"{parent}/net/{n.name}"
        self.ifindex += 1
        self.mac_seq += 1
        if n.address is not None:
            address = n.address
        elif n.arphrd == ARPHRD_INFINIBAND:
            address = _ipoib_address(self.mac_seq)
        else:
            address = _mac((0x58, 0xA2, 0xE1), self.mac_seq)
        t.file(f"{d}/operstate", n.operstate + "\n")
        t.file(f"{d}/mtu", f"{n.mtu}\n")
        t.file(f"{d}/speed", f"{-1 if n.speed_mbps is None else n.speed_mbps}\n")
        t.file(f"{d}/address", address + "\n")
        t.file(f"{d}/type", f"{n.arphrd}\n")
        t.file(f"{d}/ifindex", f"{self.ifindex}\n")
        t.link(f"{d}/device", parent)
        t.link(f"{d}/subsystem", "sys/class/net")
        t.link(f"sys/class/net/{n.name}", d)

    # -- PCI ---------------------------------------------------------------------------

    def _pci(self) -> None:
        fns = pci_functions(self.spec)
        by_addr = {f.address: f for f in fns}
        for f in fns:
            self._function(f, by_addr)

    def _function(self, f: PciFunction, by_addr: dict[str, PciFunction]) -> None:
        t, p = self.t, f.path
        t.file(f"{p}/class", f"0x{f.class_code:06x}\n")
        t.file(f"{p}/vendor", f"0x{f.vendor:04x}\n")
        t.file(f"{p}/device", f"0x{f.device:04x}\n")
        t.file(f"{p}/subsystem_vendor", f"0x{f.subsystem_vendor:04x}\n")
        t.file(f"{p}/subsystem_device", f"0x{f.subsystem_device:04x}\n")
        t.file(f"{p}/revision", f"0x{f.revision:02x}\n")
        t.file(f"{p}/numa_node", f"{f.node}\n")
        local = self.all_cpus if f.node < 0 else self.node_cpus[f.node]
        t.file(f"{p}/local_cpulist", format_cpulist(local) + "\n")
        t.file(f"{p}/local_cpus", format_bitmap(local, self.n_cpus) + "\n")
        t.file(f"{p}/uevent", _uevent(f))
        if f.link is not None:
            t.file(f"{p}/current_link_speed", f.link.speed + "\n")
            t.file(f"{p}/current_link_width", f"{f.link.width}\n")
            t.file(f"{p}/max_link_speed", (f.link.max_speed or f.link.speed) + "\n")
            mw = f.link.width if f.link.max_width is None else f.link.max_width
            t.file(f"{p}/max_link_width", f"{mw}\n")
        if f.physfn is None:
            t.file(f"{p}/config", config_space(f))
            if f.link is not None:
                for kind in AER_KINDS:
                    t.file(f"{p}/aer_dev_{kind}", aer_text(kind))
        t.link(f"{p}/subsystem", "sys/bus/pci")
        t.link(f"sys/bus/pci/devices/{f.address}", p)
        if f.driver is not None:
            drv = f"sys/bus/pci/drivers/{f.driver}"
            t.link(f"{p}/driver", drv)
            t.link(f"{drv}/{f.address}", p)
        if f.is_bridge:
            t.file(f"{p}/secondary_bus_number", f"{f.secondary}\n")
            t.file(f"{p}/subordinate_bus_number", f"{f.subordinate}\n")
        if f.physfn is not None:
            t.link(f"{p}/physfn", by_addr[f.physfn].path)
        spec = f.spec
        if spec is not None and spec.sriov is not None:
            sr = spec.sriov
            t.file(f"{p}/sriov_totalvfs", f"{sr.total_vfs}\n")
            t.file(f"{p}/sriov_numvfs", f"{sr.num_vfs}\n")
            first = by_addr[f.virtfns[0]] if f.virtfns else None
            offset = 0 if first is None else _rid(first) - _rid(f)
            t.file(f"{p}/sriov_offset", f"{offset}\n")
            t.file(f"{p}/sriov_stride", "1\n")
            t.file(f"{p}/sriov_vf_device", f"{sr.vf_device:x}\n")
            for i, vf in enumerate(f.virtfns):
                t.link(f"{p}/virtfn{i}", by_addr[vf].path)
        net_parent = p
        if spec is not None and spec.virtio_index is not None:
            net_parent = self._virtio(f, spec)
        for n in f.netdevs:
            self._netdev(net_parent, n)
        if spec is not None:
            for r in spec.rdma:
                self._rdma(p, r)
            for nv in spec.nvme:
                self._nvme(p, nv)

    def _virtio(self, f: PciFunction, spec: DeviceSpec) -> str:
        t = self.t
        d = f"{f.path}/virtio{spec.virtio_index}"
        t.file(f"{d}/device", f"0x{spec.virtio_device:04x}\n")
        t.file(f"{d}/vendor", f"0x{f.subsystem_vendor:04x}\n")
        t.link(f"{d}/subsystem", "sys/bus/virtio")
        t.link(f"sys/bus/virtio/devices/virtio{spec.virtio_index}", d)
        if spec.virtio_driver is not None:
            drv = f"sys/bus/virtio/drivers/{spec.virtio_driver}"
            t.link(f"{d}/driver", drv)
            t.link(f"{drv}/virtio{spec.virtio_index}", d)
        return d

    def _rdma(self, parent: str, r: RdmaSpec) -> None:
        t = self.t
        d = f"{parent}/infiniband/{r.name}"
        t.file(f"{d}/node_type", "1: CA\n")
        t.file(f"{d}/hca_type", r.hca_type + "\n")
        t.file(f"{d}/fw_ver", r.fw_ver + "\n")
        seq = int(r.name.rsplit("_", 1)[-1]) if r.name.rsplit("_", 1)[-1].isdigit() else 0
        t.file(f"{d}/node_guid", f"58a2:e103:005c:{seq:04x}\n")
        t.file(f"{d}/ports/1/state", r.state + "\n")
        t.file(f"{d}/ports/1/phys_state", r.phys_state + "\n")
        t.file(f"{d}/ports/1/link_layer", r.link_layer + "\n")
        t.file(f"{d}/ports/1/rate", r.rate + "\n")
        counters = dict(r.counters)
        for name in IB_COUNTERS:
            t.file(f"{d}/ports/1/counters/{name}", f"{counters.pop(name, 0)}\n")
        if counters:
            raise SpecError(f"{r.name}: unknown IB counters {sorted(counters)}")
        t.link(f"{d}/device", parent)
        t.link(f"{d}/subsystem", "sys/class/infiniband")
        t.link(f"sys/class/infiniband/{r.name}", d)

    def _nvme(self, parent: str, nv: NvmeSpec) -> None:
        t = self.t
        d = f"{parent}/nvme/{nv.name}"
        t.file(f"{d}/model", nv.model + "\n")
        t.file(f"{d}/serial", nv.serial + "\n")
        t.file(f"{d}/firmware_rev", nv.firmware_rev + "\n")
        t.file(f"{d}/transport", "pcie\n")
        t.file(f"{d}/state", "live\n")
        t.link(f"{d}/device", parent)
        t.link(f"{d}/subsystem", "sys/class/nvme")
        t.link(f"sys/class/nvme/{nv.name}", d)
        if nv.namespace_sectors is not None:
            # the block device of namespace 1 (without native multipath: below the controller)
            t.file(f"{d}/{nv.name}n1/size", f"{nv.namespace_sectors}\n")


def _rid(f: PciFunction) -> int:
    return (f.bus << 8) | (f.dev << 3) | f.fn


def build_tree(spec: HostSpec) -> dict[str, Entry]:
    """Every file (bytes) and symlink of the host's tree, by tree-relative path."""
    return _Builder(spec).build()


def write_host(spec: HostSpec, dest: Path) -> None:
    """Write the host's tree under `dest` (created; must be absent or empty)."""
    entries = build_tree(spec)
    dest.mkdir(parents=True, exist_ok=True)
    if any(dest.iterdir()):
        raise FileExistsError(f"{dest} is not empty")
    base = str(dest)
    made: set[str] = set()
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    for rel in sorted(entries):
        parent = os.path.dirname(rel)
        if parent not in made:
            os.makedirs(os.path.join(base, parent), exist_ok=True)
            made.add(parent)
        entry = entries[rel]
        full = os.path.join(base, rel)
        if isinstance(entry, Symlink):
            os.symlink(entry.target, full)
        else:
            fd = os.open(full, flags, 0o644)
            try:
                view = memoryview(entry)
                while view:
                    view = view[os.write(fd, view) :]
            finally:
                os.close(fd)


# ==========================================================================================
# The committed fixtures
# ==========================================================================================

L_GPU_H100 = LinkSpec(GT32, 16)
L_GEN4_X16 = LinkSpec(GT16, 16)
L_GEN5_X16 = LinkSpec(GT32, 16)
L_NVME = LinkSpec(GT16, 4)


def _host_bridge_fn(vendor: int, device: int) -> DeviceSpec:
    """The root complex's own function at DD:00.0 (class 0x060000, no driver, no PCIe link)."""
    return DeviceSpec(CLASS_HOST_BRIDGE, vendor, device, slot=(0, 0), label="host bridge")


def _intel_vtd() -> DeviceSpec:
    """What Ice Lake / Sapphire Rapids show at DD:00.0 of each root bus: not a bridge at all."""
    return DeviceSpec(
        CLASS_SYSTEM_PERIPHERAL, V_INTEL, 0x09A2, slot=(0, 0), label="Memory Map/VT-d"
    )


def _nvme(name: str, serial: str, slot: tuple[int, int] | None = None) -> DeviceSpec:
    return DeviceSpec(
        CLASS_NVME,
        V_SAMSUNG,
        0xA80A,
        subsystem_device=0xA812,
        driver="nvme",
        link=L_NVME,
        slot=slot,
        # 3.84 TB: 7,501,476,528 sectors of 512 bytes
        nvme=(NvmeSpec(name, "SAMSUNG MZQL23T8HCLS-00A07", serial, namespace_sectors=7501476528),),
        label="NVMe SSD (PM9A3)",
    )


def _two_socket_smt(cores: int) -> tuple[str, str]:
    """cpulists of socket 0 and 1 for 2 sockets x `cores` x 2 threads."""
    total = 2 * cores
    return (
        f"0-{cores - 1},{total}-{total + cores - 1}",
        f"{cores}-{total - 1},{total + cores}-{2 * total - 1}",
    )


def connectx7_ib(rdma: str) -> DeviceSpec:
    """A ConnectX-7 NDR port in InfiniBand mode (class 0x0207), as on HGX/DGX H100 and GH200."""
    return DeviceSpec(
        CLASS_INFINIBAND,
        V_MELLANOX,
        0x1021,
        subsystem_device=0x0041,
        driver="mlx5_core",
        link=L_GEN5_X16,
        netdevs=(
            NetdevSpec("ibp{bus}s{dev}", mtu=4092, speed_mbps=400000, arphrd=ARPHRD_INFINIBAND),
        ),
        rdma=(RdmaSpec(rdma),),
        label="ConnectX-7 NDR (IB)",
    )


def hgx_h100_8gpu_8nic() -> HostSpec:
    """HGX H100 8-GPU, 2x 48-core Xeon (SPR), one Gen5 switch per GPU holding the GPU and its
    ConnectX-7 (IB), each switch under its own root port on its own host bridge."""
    node0, node1 = _two_socket_smt(48)
    rp = 0x352A  # SPR PCIe root port

    def gpu_nic_bridge(hb_bus: int, node: int, nic: int) -> HostBridgeSpec:
        gpu = DeviceSpec(
            CLASS_3D,
            V_NVIDIA,
            0x2330,
            subsystem_device=0x16C1,
            revision=0xA1,
            driver="nvidia",
            link=L_GPU_H100,
            label="H100 80GB HBM3 SXM5",
        )
        cx7 = connectx7_ib(f"mlx5_{nic}")
        return HostBridgeSpec(
            bus=hb_bus,
            node=node,
            children=(
                _intel_vtd(),
                PortSpec(
                    V_INTEL,
                    rp,
                    slot=(1, 0),
                    link=L_GEN5_X16,
                    children=(SwitchSpec(downstream=(gpu, cx7)),),
                ),
            ),
        )

    nvswitch = DeviceSpec(
        CLASS_NVSWITCH_H100,
        V_NVIDIA,
        0x22A3,
        subsystem_device=0x1796,
        revision=0xA1,
        driver="nvidia",
        link=LinkSpec(GT16, 2),
        label="NVSwitch (gen3)",
    )
    mgmt = DeviceSpec(
        CLASS_ETHERNET,
        V_INTEL,
        0x1533,
        subsystem_device=0x1533,
        revision=0x03,
        driver="igb",
        link=LinkSpec(GT2_5, 1),
        netdevs=(NetdevSpec("eno1", speed_mbps=1000),),
        label="I210 1GbE management NIC",
    )
    hb0 = HostBridgeSpec(
        bus=0x00,
        node=0,
        children=(
            _intel_vtd(),
            PortSpec(
                V_INTEL, rp, slot=(1, 0), link=L_NVME, children=(_nvme("nvme0", "S64HNE0T500123"),)
            ),
            PortSpec(V_INTEL, rp, slot=(2, 0), link=LinkSpec(GT2_5, 1), children=(mgmt,)),
            # NVSwitches land on 05:00.0 .. 08:00.0, as in the real `nvidia-smi nvlink -R`
            PortSpec(
                V_INTEL,
                rp,
                slot=(3, 0),
                link=L_GEN4_X16,
                children=(
                    SwitchSpec(
                        downstream=(nvswitch, nvswitch, nvswitch, nvswitch),
                        device=0xC010,
                        usp_link=L_GEN4_X16,
                        dsp_link=LinkSpec(GT16, 2),
                    ),
                ),
            ),
        ),
    )
    bridges = [hb0]
    for i, hb_bus in enumerate((0x15, 0x27, 0x37, 0x5A, 0x97, 0xA8, 0xB7, 0xD8)):
        bridges.append(gpu_nic_bridge(hb_bus, 0 if i < 4 else 1, i))
    return HostSpec(
        name="hgx-h100-8gpu-8nic",
        hostname="hgx-h100-node01",
        osrelease="5.15.0-119-generic",
        sockets=2,
        cores_per_socket=48,
        threads_per_core=2,
        numa=(
            NumaSpec(0, node0, 1056389356, (10, 21)),
            NumaSpec(1, node1, 1056874320, (21, 10)),
        ),
        host_bridges=tuple(bridges),
        description="from nvidia-smi topo -m in tests/fixtures/nvidia-smi/hgx-h100-8gpu-8nic.txt",
        caches=(48, 107520, 2048),  # Xeon 8480+: one 105 MiB L3 per socket, 2 MiB L2
    )


def pcie_4x_l40s_2socket() -> HostSpec:
    """2x 96-core EPYC (Genoa, NPS1), 4 L40S each alone under a root port of its own root
    complex, one dual-port ConnectX-6 Dx (RoCE) on socket 1, ASPEED BMC VGA on socket 0."""
    node0, node1 = _two_socket_smt(96)
    hbf = 0x14A4  # Genoa root complex
    rp = 0x14AB  # Genoa GPP bridge (root port)

    def l40s() -> DeviceSpec:
        return DeviceSpec(
            CLASS_3D,
            V_NVIDIA,
            0x26B9,
            subsystem_device=0x1851,
            revision=0xA1,
            driver="nvidia",
            # idle GPU: ASPM has the link at gen1; it trains to 16 GT/s under load
            link=LinkSpec(GT2_5, 16, max_speed=GT16, max_width=16),
            label="L40S",
        )

    def gpu_bridge(bus: int, node: int) -> HostBridgeSpec:
        return HostBridgeSpec(
            bus,
            node,
            (
                _host_bridge_fn(V_AMD, hbf),
                PortSpec(V_AMD, rp, slot=(1, 1), link=L_GEN4_X16, children=(l40s(),)),
            ),
        )

    def cx6dx(fn: int) -> DeviceSpec:
        return DeviceSpec(
            CLASS_ETHERNET,
            V_MELLANOX,
            0x101D,
            subsystem_device=0x0016,
            driver="mlx5_core",
            link=L_GEN4_X16,
            slot=(0, fn),
            netdevs=(NetdevSpec(f"enp{{bus}}s{{dev}}f{{fn}}np{fn}", mtu=9000, speed_mbps=100000),),
            rdma=(
                RdmaSpec(
                    f"mlx5_{fn}",
                    link_layer="Ethernet",
                    rate="100 Gb/sec (4X EDR)",
                    hca_type="MT4125",
                    fw_ver="22.39.1002",
                ),
            ),
            label=f"ConnectX-6 Dx port {fn + 1}",
        )

    aspeed_bridge = PortSpec(
        V_ASPEED,
        0x1150,
        driver=None,
        link=LinkSpec(GT5, 1),
        revision=0x06,
        label="AST1150 PCIe-to-PCI bridge",
        children=(
            DeviceSpec(
                CLASS_VGA, V_ASPEED, 0x2000, revision=0x52, driver="ast", label="ASPEED BMC VGA"
            ),
        ),
    )
    hb00 = HostBridgeSpec(
        0x00,
        0,
        (
            _host_bridge_fn(V_AMD, hbf),
            PortSpec(
                V_AMD, rp, slot=(1, 1), link=L_NVME, children=(_nvme("nvme0", "S64HNE0T700045"),)
            ),
            PortSpec(V_AMD, rp, slot=(7, 1), link=LinkSpec(GT5, 1), children=(aspeed_bridge,)),
        ),
    )
    hbe0 = HostBridgeSpec(
        0xE0,
        1,
        (
            _host_bridge_fn(V_AMD, hbf),
            PortSpec(V_AMD, rp, slot=(1, 1), link=L_GEN4_X16, children=(cx6dx(0), cx6dx(1))),
        ),
    )
    return HostSpec(
        name="pcie-4x-l40s-2socket",
        hostname="l40s-node07",
        osrelease="6.8.0-45-generic",
        sockets=2,
        cores_per_socket=96,
        threads_per_core=2,
        numa=(
            NumaSpec(0, node0, 395927700, (10, 32)),
            NumaSpec(1, node1, 396302136, (32, 10)),
        ),
        host_bridges=(
            hb00,
            gpu_bridge(0x40, 0),
            gpu_bridge(0x60, 0),
            gpu_bridge(0x80, 1),
            gpu_bridge(0xC0, 1),
            hbe0,
        ),
        dmi=("Supermicro", "AS-4125GS-TNRT"),
        description="from nvidia-smi topo -m in tests/fixtures/nvidia-smi/pcie-4x-l40s-2socket.txt",
    )


def dgx_a100() -> HostSpec:
    """DGX A100: 2x EPYC 7742 in NPS4 (8 NUMA nodes, one per root complex), GPUs and compute
    NICs behind two levels of PEX88096 switches, dual-port storage NICs on GPU-less nodes."""
    hbf, rp = 0x1480, 0x1483  # Rome root complex / GPP bridge
    sw = 0xC010  # PEX880xx Gen4

    nodes = []
    for n in range(8):
        lo = 16 * n
        socket_nodes = range(0, 4) if n < 4 else range(4, 8)
        dist = tuple(10 if m == n else (12 if m in socket_nodes else 32) for m in range(8))
        nodes.append(NumaSpec(n, f"{lo}-{lo + 15},{128 + lo}-{128 + lo + 15}", 131888504, dist))

    def a100() -> DeviceSpec:
        return DeviceSpec(
            CLASS_3D,
            V_NVIDIA,
            0x20B0,
            subsystem_device=0x134F,
            revision=0xA1,
            driver="nvidia",
            link=L_GEN4_X16,
            label="A100-SXM4-40GB",
        )

    def hdr(nic: int) -> DeviceSpec:
        return DeviceSpec(
            CLASS_INFINIBAND,
            V_MELLANOX,
            0x101B,
            subsystem_device=0x0007,
            driver="mlx5_core",
            link=L_GEN4_X16,
            netdevs=(
                NetdevSpec("ibp{bus}s{dev}", mtu=4092, speed_mbps=200000, arphrd=ARPHRD_INFINIBAND),
            ),
            rdma=(
                RdmaSpec(
                    f"mlx5_{nic}",
                    rate="200 Gb/sec (4X HDR)",
                    hca_type="MT4123",
                    fw_ver="20.31.1014",
                ),
            ),
            label="ConnectX-6 HDR (compute)",
        )

    def level2(child: DeviceSpec) -> SwitchSpec:
        return SwitchSpec(
            downstream=(child,),
            device=sw,
            usp_link=L_GEN4_X16,
            dsp_link=L_GEN4_X16,
            label="level-2 switch upstream port",
        )

    def gpu_quadrant(bus: int, node: int, nics: tuple[int, int]) -> HostBridgeSpec:
        # two GPUs and two compute NICs; GPU indices follow from PCI order
        l1 = SwitchSpec(
            downstream=(level2(a100()), level2(hdr(nics[0])), level2(a100()), level2(hdr(nics[1]))),
            device=sw,
            usp_link=L_GEN4_X16,
            dsp_link=L_GEN4_X16,
            label="level-1 switch upstream port",
        )
        return HostBridgeSpec(
            bus,
            node,
            (
                _host_bridge_fn(V_AMD, hbf),
                PortSpec(V_AMD, rp, slot=(1, 1), link=L_GEN4_X16, children=(l1,)),
            ),
        )

    def storage(bus: int, node: int, first: int) -> HostBridgeSpec:
        def port(fn: int) -> DeviceSpec:
            return DeviceSpec(
                CLASS_ETHERNET,
                V_MELLANOX,
                0x101B,
                subsystem_device=0x0008,
                driver="mlx5_core",
                link=L_GEN4_X16,
                slot=(0, fn),
                netdevs=(
                    NetdevSpec(f"enp{{bus}}s{{dev}}f{{fn}}np{fn}", mtu=9000, speed_mbps=200000),
                ),
                rdma=(
                    RdmaSpec(
                        f"mlx5_{first + fn}",
                        link_layer="Ethernet",
                        rate="200 Gb/sec (4X HDR)",
                        hca_type="MT4123",
                        fw_ver="20.31.1014",
                    ),
                ),
                label=f"ConnectX-6 dual-port (storage) port {fn + 1}",
            )

        return HostBridgeSpec(
            bus,
            node,
            (
                _host_bridge_fn(V_AMD, hbf),
                PortSpec(V_AMD, rp, slot=(3, 1), link=L_GEN4_X16, children=(port(0), port(1))),
            ),
        )

    nvswitch = DeviceSpec(
        CLASS_NVSWITCH_A100,
        V_NVIDIA,
        0x1AF1,
        subsystem_device=0x1652,
        revision=0xA1,
        driver="nvidia",
        link=LinkSpec(GT16, 2),
        label="NVSwitch (gen2)",
    )
    hb20 = HostBridgeSpec(
        0x20,
        2,
        (
            _host_bridge_fn(V_AMD, hbf),
            PortSpec(
                V_AMD, rp, slot=(1, 1), link=L_NVME, children=(_nvme("nvme0", "S5XANA0R100200"),)
            ),
            PortSpec(
                V_AMD, rp, slot=(1, 2), link=L_NVME, children=(_nvme("nvme1", "S5XANA0R100201"),)
            ),
        ),
    )
    hba0 = HostBridgeSpec(
        0xA0,
        6,
        (
            _host_bridge_fn(V_AMD, hbf),
            PortSpec(
                V_AMD,
                rp,
                slot=(1, 1),
                link=L_GEN4_X16,
                children=(
                    SwitchSpec(
                        downstream=(nvswitch,) * 6,
                        device=sw,
                        usp_link=L_GEN4_X16,
                        dsp_link=LinkSpec(GT16, 2),
                    ),
                ),
            ),
        ),
    )
    return HostSpec(
        name="dgx-a100",
        hostname="ash6-hpccdgx-node0009",
        osrelease="5.4.0-1046-nvidia",
        sockets=2,
        cores_per_socket=64,
        threads_per_core=2,
        numa=tuple(nodes),
        host_bridges=(
            gpu_quadrant(0x00, 3, (0, 1)),
            hb20,
            gpu_quadrant(0x40, 1, (2, 3)),
            storage(0x60, 0, 4),
            gpu_quadrant(0x80, 7, (6, 7)),
            hba0,
            gpu_quadrant(0xC0, 5, (8, 9)),
            storage(0xE0, 4, 10),
        ),
        root_device="/dev/md0",
        dmi=("NVIDIA", "DGXA100 920-23687-2530-000"),
        caches=(4, 16384, 512),  # EPYC 7742: a 16 MiB L3 per 4-core CCX, 512 KiB L2
        description="from nvidia-smi topo -m in tests/fixtures/nvidia-smi/dgx-a100.txt",
    )


def single_gpu_kvm_vm_h100_pcie() -> HostSpec:
    """KVM q35 guest: 252 vCPUs, one NUMA node, no ACPI proximity for PCI (numa_node -1),
    H100 PCIe and a passed-through ConnectX VF each behind its own QEMU pcie-root-port."""
    qrp = 0x000C
    rp_link = LinkSpec(GT16, 32)  # QEMU >= 4.0 generic root port advertises 16 GT/s x32

    def root_port(fn: int, child: DeviceSpec) -> PortSpec:
        return PortSpec(
            V_REDHAT,
            qrp,
            slot=(2, fn),
            link=rp_link,
            subsystem_vendor=V_REDHAT,
            label="QEMU pcie-root-port",
            children=(child,),
            acs_ctrl=None,  # QEMU's generic root port has no ACS capability
        )

    virtio_net = DeviceSpec(
        CLASS_ETHERNET,
        V_VIRTIO,
        0x1041,
        subsystem_device=0x1100,
        revision=0x01,
        driver="virtio-pci",
        link=LinkSpec(GT2_5, 1),
        netdevs=(NetdevSpec("enp{bus}s{dev}", speed_mbps=None),),
        virtio_index=0,
        virtio_device=1,
        virtio_driver="virtio_net",
        label="virtio-net",
    )
    virtio_blk = DeviceSpec(
        CLASS_SCSI,
        V_VIRTIO,
        0x1042,
        subsystem_device=0x1100,
        revision=0x01,
        driver="virtio-pci",
        link=LinkSpec(GT2_5, 1),
        virtio_index=1,
        virtio_device=2,
        virtio_driver="virtio_blk",
        label="virtio-blk",
    )
    h100 = DeviceSpec(
        CLASS_3D,
        V_NVIDIA,
        0x2331,
        subsystem_device=0x1626,
        revision=0xA1,
        driver="nvidia",
        link=LinkSpec(GT32, 16),
        label="H100 PCIe",
    )
    cx_vf = DeviceSpec(
        CLASS_ETHERNET,
        V_MELLANOX,
        0x101E,
        subsystem_device=0x0041,
        driver="mlx5_core",
        link=LinkSpec(SPEED_UNKNOWN, 0),  # a VF: all-zero Link Capabilities
        netdevs=(NetdevSpec("ens4", mtu=9000, speed_mbps=200000),),
        rdma=(
            RdmaSpec(
                "mlx5_0",
                link_layer="Ethernet",
                rate="200 Gb/sec (4X HDR)",
                hca_type="MT4126",
                fw_ver="28.39.1002",
            ),
        ),
        label="ConnectX VF (passthrough)",
    )
    hb = HostBridgeSpec(
        0x00,
        -1,
        (
            DeviceSpec(
                CLASS_HOST_BRIDGE,
                V_INTEL,
                0x29C0,
                subsystem_vendor=V_REDHAT,
                subsystem_device=0x1100,
                slot=(0, 0),
                label="q35 host bridge",
            ),
            root_port(0, virtio_net),
            root_port(1, virtio_blk),
            root_port(2, h100),
            root_port(3, cx_vf),
            DeviceSpec(
                CLASS_ISA_BRIDGE,
                V_INTEL,
                0x2918,
                subsystem_vendor=V_REDHAT,
                subsystem_device=0x1100,
                revision=0x02,
                driver="lpc_ich",
                slot=(0x1F, 0),
                label="ICH9 LPC",
            ),
            DeviceSpec(
                CLASS_SATA_AHCI,
                V_INTEL,
                0x2922,
                subsystem_vendor=V_REDHAT,
                subsystem_device=0x1100,
                revision=0x02,
                driver="ahci",
                slot=(0x1F, 2),
                label="ICH9 AHCI",
            ),
            DeviceSpec(
                CLASS_SMBUS,
                V_INTEL,
                0x2930,
                subsystem_vendor=V_REDHAT,
                subsystem_device=0x1100,
                revision=0x02,
                driver="i801_smbus",
                slot=(0x1F, 3),
                label="ICH9 SMBus",
            ),
        ),
    )
    return HostSpec(
        name="single-gpu-kvm-vm-h100-pcie",
        hostname="h100-vm-0",
        osrelease="6.8.0-1015-gcp",
        sockets=1,
        cores_per_socket=252,
        threads_per_core=1,
        caches=(252, 32768, None),  # QEMU's default: one L3 for the virtual socket (no L2 files)
        numa=(NumaSpec(0, "0-251", 1848735744, (10,)),),
        host_bridges=(hb,),
        root_device="/dev/vda1",
        dmi=("QEMU", "Standard PC (Q35 + ICH9, 2009)"),
        description=(
            "from nvidia-smi topo -m in tests/fixtures/nvidia-smi/single-gpu-kvm-vm-h100-pcie.txt"
        ),
    )


def no_gpu_host() -> HostSpec:
    """1 socket x 16 cores x 2 threads (Ice Lake-SP), X710 dual-port 10GbE (no RDMA), NVMe, and
    an ASPEED BMC VGA: a display-class device that is not an NVIDIA GPU."""
    rp = 0x347A  # ICX root port
    x710 = [
        DeviceSpec(
            CLASS_ETHERNET,
            V_INTEL,
            0x1572,
            subsystem_device=0x0006,
            revision=0x02,
            driver="i40e",
            link=LinkSpec(GT8, 8),
            slot=(0, fn),
            netdevs=(NetdevSpec("enp{bus}s{dev}f{fn}", operstate=state, speed_mbps=speed),),
            label=f"X710 port {fn + 1}",
        )
        for fn, state, speed in ((0, "up", 10000), (1, "down", None))
    ]
    aspeed_bridge = PortSpec(
        V_ASPEED,
        0x1150,
        driver=None,
        link=LinkSpec(GT5, 1),
        revision=0x04,
        label="AST1150 PCIe-to-PCI bridge",
        children=(
            DeviceSpec(
                CLASS_VGA, V_ASPEED, 0x2000, revision=0x41, driver="ast", label="ASPEED BMC VGA"
            ),
        ),
    )
    return HostSpec(
        name="no-gpu-host",
        hostname="edge-01",
        osrelease="5.14.0-427.13.1.el9_4.x86_64",
        sockets=1,
        cores_per_socket=16,
        threads_per_core=2,
        numa=(NumaSpec(0, "0-31", 263812340, (10,)),),
        host_bridges=(
            HostBridgeSpec(
                0x00,
                0,
                (
                    _intel_vtd(),
                    PortSpec(
                        V_INTEL,
                        0xA190,
                        slot=(0x1C, 0),
                        link=LinkSpec(GT5, 1),
                        label="PCH root port",
                        children=(aspeed_bridge,),
                    ),
                ),
            ),
            HostBridgeSpec(
                0x17,
                0,
                (
                    _intel_vtd(),
                    PortSpec(
                        V_INTEL,
                        rp,
                        slot=(2, 0),
                        link=L_NVME,
                        children=(_nvme("nvme0", "S64HNE0T300077"),),
                    ),
                ),
            ),
            HostBridgeSpec(
                0x30,
                0,
                (
                    _intel_vtd(),
                    PortSpec(V_INTEL, rp, slot=(2, 0), link=LinkSpec(GT8, 8), children=tuple(x710)),
                ),
            ),
        ),
        dmi=("Dell Inc.", "PowerEdge R650"),
        description="plain 1-socket server without GPUs or RDMA",
    )


def synthetic_host(n_vfs: int) -> HostSpec:
    """HGX-like 2-socket host, 8 GPUs, 8 ConnectX-7 (RoCE) PFs carrying `n_vfs` SR-IOV VFs in
    total (spread evenly, remainder on the first PFs), each VF with a netdev. For benchmarks."""
    if n_vfs < 0:
        raise ValueError("n_vfs must be >= 0")
    node0, node1 = _two_socket_smt(48)
    per, extra = divmod(n_vfs, 8)
    bridges = []
    for i in range(8):
        count = per + (1 if i < extra else 0)
        gpu = DeviceSpec(
            CLASS_3D,
            V_NVIDIA,
            0x2330,
            subsystem_device=0x16C1,
            revision=0xA1,
            driver="nvidia",
            link=L_GPU_H100,
            label="H100 SXM",
        )
        nic = DeviceSpec(
            CLASS_ETHERNET,
            V_MELLANOX,
            0x1021,
            subsystem_device=0x0041,
            driver="mlx5_core",
            link=L_GEN5_X16,
            netdevs=(NetdevSpec("enp{bus}s{dev}f{fn}np0", mtu=9000, speed_mbps=400000),),
            rdma=(RdmaSpec(f"mlx5_{i}", link_layer="Ethernet"),),
            sriov=SriovSpec(total_vfs=max(count, 1), num_vfs=count, vf_device=0x101E),
            label="ConnectX-7 (RoCE) with SR-IOV",
        )
        bridges.append(
            HostBridgeSpec(
                0x10 + 0x20 * i,
                0 if i < 4 else 1,
                (
                    PortSpec(
                        V_INTEL,
                        0x352A,
                        slot=(1, 0),
                        link=L_GEN5_X16,
                        children=(SwitchSpec(downstream=(gpu, nic)),),
                    ),
                ),
            )
        )
    return HostSpec(
        name=f"synthetic-{n_vfs}vfs",
        hostname="synthetic-sriov",
        osrelease="6.8.0-45-generic",
        sockets=2,
        cores_per_socket=48,
        threads_per_core=2,
        numa=(NumaSpec(0, node0, 1056389356, (10, 21)), NumaSpec(1, node1, 1056874320, (21, 10))),
        host_bridges=tuple(bridges),
        description=f"synthetic benchmark host with {n_vfs} VFs",
        cpu_masks=True,  # lstopo reads these roots too (bench/bench_scale.py)
    )


def hand_edited_base() -> HostSpec:
    """The base of the hand-edited dumps (graft_copy): a small 2-socket server with a QLogic
    QDR HCA (`qib0`, `ib0`: class 0x0c06, as 40intel64-2g2n4c+pcilocality has it), an LSI
    SAS2008 controller, an empty root port, and a ConnectX-3 (`mlx4_0`, `ib1`) on socket 1
    (32em64t-2n8c has one). Not a committed fixture: tests build it, then edit it as a person
    editing a dump would."""
    qib = DeviceSpec(
        CLASS_IB_SERIAL,
        V_QLOGIC,
        0x7322,
        driver="ib_qib",
        link=LinkSpec(GT5, 8),
        netdevs=(NetdevSpec("ib0", mtu=2044, speed_mbps=40000, arphrd=ARPHRD_INFINIBAND),),
        rdma=(RdmaSpec("qib0", rate="40 Gb/sec (4X QDR)", hca_type="InfiniPath_QLE7340"),),
        label="QLogic QLE7340 (TrueScale QDR)",
    )
    sas = DeviceSpec(
        CLASS_SAS, V_BROADCOM, 0x0072, driver="mpt2sas", link=LinkSpec(GT5, 8), label="SAS2008"
    )
    cx3 = DeviceSpec(
        CLASS_NETWORK_OTHER,
        V_MELLANOX,
        0x1003,
        driver="mlx4_core",
        link=LinkSpec(GT8, 8),
        netdevs=(NetdevSpec("ib1", mtu=2044, speed_mbps=56000, arphrd=ARPHRD_INFINIBAND),),
        rdma=(RdmaSpec("mlx4_0", rate="56 Gb/sec (4X FDR)", hca_type="MT4099"),),
        label="ConnectX-3 VPI (FDR)",
    )
    rp = 0x3C02  # Sandy Bridge-EP root port

    def port(slot: int, *children: DeviceSpec) -> PortSpec:
        return PortSpec(V_INTEL, rp, slot=(slot, 0), link=LinkSpec(GT8, 8), children=children)

    return HostSpec(
        name="hand-edited",
        hostname="edited-01",
        osrelease="3.10.0-327.el7.x86_64",
        sockets=2,
        cores_per_socket=4,
        threads_per_core=1,
        numa=(NumaSpec(0, "0-3", 16777216, (10, 20)), NumaSpec(1, "4-7", 16777216, (20, 10))),
        host_bridges=(
            HostBridgeSpec(0x00, 0, (port(1, qib), port(2, sas), port(3))),
            HostBridgeSpec(0x80, 1, (port(1, cx3),)),
        ),
        dmi=("Supermicro", "X9DRT"),
        description="base of the hand-edited dumps: QLogic HCA, SAS controller, ConnectX-3",
    )


def graft_copy(root: Path, source: str, parent: str, name: str | None = None) -> str:
    """Edit a written tree as people edit dumps: copy the directory `source` (tree-relative,
    symlinks copied as they are) into directory `parent` under `name` (default: its own name).
    Nothing else changes: /sys/bus/pci/devices still links to the original. Returns the copy's
    tree-relative path."""
    dest = f"{parent}/{name or source.rsplit('/', 1)[-1]}"
    shutil.copytree(root / source, root / dest, symlinks=True)
    return dest


def h100_nvl_pair(name: str = "h100-nvl-pair") -> HostSpec:
    """Azure NC80adis H100 v5 style VM: 2 NUMA nodes of 40 vCPUs (no SMT), two H100 NVL joined
    by NVLink bridges, each GPU alone on its own Hyper-V vPCI root bus (PCI domains 0001 and
    0002, no bridges above it), numa_node from the vPCI's NUMA affinity. The NVLink state
    (active or not) lives in the NVML recording; the tree is the same."""

    def nvl(domain: int, node: int) -> HostBridgeSpec:
        gpu = DeviceSpec(
            CLASS_3D,
            V_NVIDIA,
            0x2321,
            subsystem_device=0x1839,
            revision=0xA1,
            driver="nvidia",
            link=L_GPU_H100,
            slot=(0, 0),
            label="H100 NVL (Hyper-V vPCI)",
        )
        return HostBridgeSpec(bus=0x00, node=node, children=(gpu,), domain=domain)

    return HostSpec(
        name=name,
        hostname="nc80adis-h100-v5-0",
        osrelease="6.5.0-1025-azure",
        sockets=2,
        cores_per_socket=40,
        threads_per_core=1,
        numa=(
            NumaSpec(0, "0-39", 335544320, (10, 32)),
            NumaSpec(1, "40-79", 335544320, (32, 10)),
        ),
        host_bridges=(nvl(0x0001, 0), nvl(0x0002, 1)),
        root_device="/dev/sda2",
        dmi=("Microsoft Corporation", "Virtual Machine"),
        description=(
            "H100 NVL pair, NVLink bridges "
            + ("inactive (Azure/azhpc-images#443)" if name.endswith("-inactive") else "active")
        ),
    )


def grace_hopper_gh200() -> HostSpec:
    """GH200 480GB: one 72-core Grace socket (NUMA node 0, LPDDR5X) and the Hopper GPU's HBM3
    onlined as CPU-less NUMA node 1. The GPU, a ConnectX-7 and an NVMe each sit below a Grace
    root port on their own PCI domain (the GPU at 0009:01:00.0, as on GH200 boards); every
    PCI device is local to node 0. Real GH200 kernels also list empty nodes 2-8 reserved for
    MIG memory partitions: not modelled here."""
    grace_rp = 0x22B2  # Grace PCIe root port (device id illustrative)
    gh200 = DeviceSpec(
        CLASS_3D,
        V_NVIDIA,
        0x2342,
        subsystem_device=0x16EB,
        revision=0xA1,
        driver="nvidia",
        link=L_GPU_H100,
        label="GH200 480GB (Hopper)",
    )
    cx7 = connectx7_ib("mlx5_0")

    def domain(d: int, child: DeviceSpec, link: LinkSpec) -> HostBridgeSpec:
        rp = PortSpec(V_NVIDIA, grace_rp, slot=(0, 0), link=link, label="Grace root port")
        return HostBridgeSpec(
            bus=0x00, node=0, children=(replace(rp, children=(child,)),), domain=d
        )

    return HostSpec(
        name="grace-hopper-gh200",
        hostname="gh200-node01",
        osrelease="6.8.0-1013-nvidia-64k",
        sockets=1,
        cores_per_socket=72,
        threads_per_core=1,
        numa=(
            # SLIT as GH200 firmware reports it: the GPU memory node is "far" (80)
            NumaSpec(0, "0-71", 502924544, (10, 80)),
            NumaSpec(1, "", 99614720, (80, 10)),
        ),
        host_bridges=(
            domain(0x0000, cx7, L_GEN5_X16),
            domain(0x0008, _nvme("nvme0", "S64HNE0T900311"), L_NVME),
            domain(0x0009, gh200, L_GPU_H100),
        ),
        dmi=("Quanta Cloud Technology Inc.", "S74G-2U"),
        description="GH200: GPU memory as a CPU-less NUMA node",
    )


def fixture_hosts() -> dict[str, HostSpec]:
    """The committed fixtures under tests/fixtures/hosts/<name>/, by name."""
    specs = (
        hgx_h100_8gpu_8nic(),
        pcie_4x_l40s_2socket(),
        dgx_a100(),
        single_gpu_kvm_vm_h100_pcie(),
        no_gpu_host(),
        h100_nvl_pair(),
        h100_nvl_pair("h100-nvl-pair-inactive"),
        grace_hopper_gh200(),
    )
    return {s.name: s for s in specs}


# ==========================================================================================
# CLI
# ==========================================================================================

_GENERATED_TOP = frozenset({"sys", "proc", "dev", "mcpnode-snapshot.json"})


def _wipe_generated(path: Path) -> None:
    """Remove a previously generated tree; refuse anything that does not look like one."""
    if not path.exists() and not path.is_symlink():
        return
    if not path.is_dir() or path.is_symlink():
        raise SystemExit(f"{path}: exists and is not a directory")
    names = {p.name for p in path.iterdir()}
    if not names <= _GENERATED_TOP:
        raise SystemExit(f"{path}: not a generated tree (holds {sorted(names - _GENERATED_TOP)})")
    shutil.rmtree(path)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--out", type=Path, help="destination directory")
    ap.add_argument(
        "--nvml-cases",
        type=Path,
        metavar="DIR",
        help="write the NVML failure recordings (tools/fixturegen/nvmlgen.py) as DIR/<case>.json",
    )
    ap.add_argument(
        "--synthetic-vfs",
        type=int,
        metavar="N",
        help="write the synthetic SR-IOV host with N VFs as the tree at --out (not committed)",
    )
    ap.add_argument(
        "--host",
        action="append",
        default=None,
        help="regenerate only this fixture (repeatable); default: all",
    )
    args = ap.parse_args(argv)
    if args.out is None and args.nvml_cases is None:
        ap.error("one of --out and --nvml-cases is required")
    if args.nvml_cases is not None:
        from tools.fixturegen import (
            nvmlgen,  # imports mcpnode: only when NVML recordings are asked for
        )

        for path in nvmlgen.write_cases(args.nvml_cases):
            print(f"wrote {path}")
        for path in nvmlgen.write_event_cases():
            print(f"wrote {path}")
        if args.out is None:
            return 0
    out: Path = args.out
    if args.synthetic_vfs is not None:
        _wipe_generated(out)
        write_host(synthetic_host(args.synthetic_vfs), out)
        print(f"wrote {out} ({args.synthetic_vfs} VFs)")
        return 0
    hosts = fixture_hosts()
    names = args.host or sorted(hosts)
    unknown = [n for n in names if n not in hosts]
    if unknown:
        ap.error(f"unknown fixture(s): {', '.join(unknown)}; known: {', '.join(sorted(hosts))}")
    from tools.fixturegen import (
        nvmlgen,  # records mcpnode's discovery of each tree: imports mcpnode
    )

    for name in names:
        dest = out / name
        _wipe_generated(dest)
        write_host(hosts[name], dest)
        nvmlgen.write_snapshot_meta(hosts[name], dest)
        count = sum(
            len(files) + len([d for d in dirs if (Path(root) / d).is_symlink()])
            for root, dirs, files in os.walk(dest)
        )
        print(f"wrote {dest} ({count} files and links)")
    return 0


if __name__ == "__main__":
    # Run as a script: import this file again as `tools.fixturegen.fixturegen`, so that
    # nvmlgen.py (which imports tools.fixturegen.fixturegen) sees the same spec classes as the
    # specs it is given.
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from tools.fixturegen.fixturegen import main as _main

    sys.exit(_main())
