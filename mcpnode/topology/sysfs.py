"""Readers: sysfs/procfs through a Host into raw records. Nothing here decides locality;
`discover.py` does that over what these return.

Every read goes through `_read`, which turns a missing/unsupported file into None and any other
failure or unparsable content into a recorded Problem, so one bad file never costs the rest of
the topology.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TypeVar

from mcpnode.errors import HostError, PathNotFound
from mcpnode.host import Host
from mcpnode.topology import parse
from mcpnode.topology.model import (
    Cpu,
    CpuSet,
    CpuTopology,
    HostIdentity,
    NetDev,
    PciAddress,
    PciLink,
    Problem,
    ProcessCpus,
    record,
)

T = TypeVar("T")

SYS_CPU = "/sys/devices/system/cpu"
SYS_NODE = "/sys/devices/system/node"
SYS_DEVICES = "/sys/devices"
SYS_CLASS_IB = "/sys/class/infiniband"
SYS_BUS_PCI = "/sys/bus/pci/devices"
PROC_NVIDIA_GPUS = "/proc/driver/nvidia/gpus"
PROC_SELF = "/proc/self"
PROC_HOSTNAME = "/proc/sys/kernel/hostname"
PROC_OSRELEASE = "/proc/sys/kernel/osrelease"
# What a published manifest's freshness is checked against (placement/source.py).
PROC_BOOT_ID = "/proc/sys/kernel/random/boot_id"
SYS_UEVENT_SEQNUM = "/sys/kernel/uevent_seqnum"

_CPU_DIR = re.compile(r"^cpu(\d+)$")
_NODE_DIR = re.compile(r"^node(\d+)$")
_VIRTIO_DIR = re.compile(r"^virtio\d+$")


class Problems:
    """Collects Problems in the order they are found."""

    def __init__(self) -> None:
        self.items: list[Problem] = []

    def add(self, code: str, source: str, detail: str) -> None:
        self.items.append(Problem(code, source, detail))


def read_value(host: Host, path: str, parser: Callable[[str], T], problems: Problems) -> T | None:
    """Read and parse one file. Absent -> None silently; unreadable or garbage -> None and a
    Problem naming the file."""
    try:
        text = host.read_optional(path)
    except HostError as err:
        problems.add("read.error", path, f"{type(err).__name__}: {err.detail}")
        return None
    if text is None:
        return None
    # Dumps made by hwloc-gather-topology carry a trailing NUL after some values ("0-7\n\0"):
    # the C tools that read them stop at the NUL, and so do we. The live kernel never adds one.
    text = text.split("\x00", 1)[0]
    try:
        return parser(text)
    except parse.ParseError as err:
        problems.add("read.garbage", path, str(err))
        return None


def _strip(text: str) -> str:
    return text.strip()


# -- identity ----------------------------------------------------------------------------------


def read_identity(host: Host, problems: Problems) -> HostIdentity:
    return HostIdentity(
        hostname=read_value(host, PROC_HOSTNAME, _strip, problems) or None,
        kernel_release=read_value(host, PROC_OSRELEASE, _strip, problems) or None,
    )


# -- CPUs --------------------------------------------------------------------------------------


def read_cpus(host: Host, problems: Problems) -> CpuTopology:
    listed: set[int] = set()
    try:
        for e in host.scandir(SYS_CPU):
            m = _CPU_DIR.match(e.name)
            if m and (e.is_dir or e.is_symlink):
                listed.add(int(m.group(1)))
    except HostError as err:
        problems.add("cpu.unreadable", SYS_CPU, f"{type(err).__name__}: {err.detail}")
    possible = read_value(host, f"{SYS_CPU}/possible", parse.parse_cpulist, problems)
    present = read_value(host, f"{SYS_CPU}/present", parse.parse_cpulist, problems)
    online = read_value(host, f"{SYS_CPU}/online", parse.parse_cpulist, problems)
    if present is None:
        present = CpuSet(listed)
        if listed:
            problems.add("cpu.present.missing", f"{SYS_CPU}/present", "using the cpuN dirs")
    if possible is None:
        possible = present
    if online is None:
        online = present
        problems.add("cpu.online.missing", f"{SYS_CPU}/online", "assuming every present CPU")
    cpus = []
    for cpu_id in sorted(present):
        base = f"{SYS_CPU}/cpu{cpu_id}/topology"
        siblings = read_value(host, f"{base}/thread_siblings_list", parse.parse_cpulist, problems)
        cpus.append(
            Cpu(
                id=cpu_id,
                online=cpu_id in online,
                core_id=read_value(host, f"{base}/core_id", parse.parse_int, problems),
                package_id=read_value(
                    host, f"{base}/physical_package_id", parse.parse_int, problems
                ),
                die_id=read_value(host, f"{base}/die_id", parse.parse_int, problems),
                node=None,  # filled by discover from the node cpulists
                # Offline CPUs lose their topology/ dir on many kernels: a CPU is its own sibling.
                siblings=siblings if siblings else CpuSet({cpu_id}),
            )
        )
    return CpuTopology(possible=possible, present=present, online=online, cpus=tuple(cpus))


# -- NUMA nodes --------------------------------------------------------------------------------


@record(frozen=True)
class RawNode:
    id: int
    cpus: CpuSet | None
    memory_kib: int | None
    distance_row: tuple[int, ...] | None


@record(frozen=True)
class RawNodes:
    nodes: tuple[RawNode, ...]
    online: CpuSet | None
    has_cpu: CpuSet | None
    has_memory: CpuSet | None


def read_nodes(host: Host, problems: Problems) -> RawNodes:
    ids: list[int] = []
    try:
        for e in host.scandir(SYS_NODE):
            m = _NODE_DIR.match(e.name)
            if m and e.is_dir:
                ids.append(int(m.group(1)))
    except PathNotFound:
        # CONFIG_NUMA=n kernels have no node/ directory: discover treats the machine as one node.
        pass
    except HostError as err:
        problems.add("numa.unreadable", SYS_NODE, f"{type(err).__name__}: {err.detail}")
    nodes = []
    for node_id in sorted(ids):
        base = f"{SYS_NODE}/node{node_id}"
        cpus = read_value(host, f"{base}/cpulist", parse.parse_cpulist, problems)
        if cpus is None:
            cpus = read_value(host, f"{base}/cpumap", parse.parse_cpumask, problems)
        nodes.append(
            RawNode(
                id=node_id,
                cpus=cpus,
                memory_kib=read_value(
                    host, f"{base}/meminfo", parse.parse_node_meminfo_total_kib, problems
                ),
                distance_row=read_value(host, f"{base}/distance", parse.parse_distances, problems),
            )
        )
    # `has_memory` is N_MEMORY (Linux 3.8+). Without it discover uses each node's MemTotal, not
    # `has_normal_memory`: that one leaves out nodes whose memory is all ZONE_MOVABLE or HIGHMEM
    # (hotplugged, CXL), and in 48amd64-4pa2n6c-sparse it still says 0-7 for nodes 0-2,33,...,73.
    has_memory = read_value(host, f"{SYS_NODE}/has_memory", parse.parse_cpulist, problems)
    return RawNodes(
        nodes=tuple(nodes),
        online=read_value(host, f"{SYS_NODE}/online", parse.parse_cpulist, problems),
        has_cpu=read_value(host, f"{SYS_NODE}/has_cpu", parse.parse_cpulist, problems),
        has_memory=has_memory,
    )


# -- what this process may use -------------------------------------------------------------------


def read_process_cpus(host: Host, problems: Problems) -> ProcessCpus:
    """Cpus_allowed_list / Mems_allowed_list of the reading process; for dumps without
    /proc/self/status, the cgroup cpuset (v2 `cpuset.cpus.effective`, v1 `cpuset.cpus`) found
    through /proc/self/cgroup (or the older /proc/self/cpuset) and the mount table."""
    status_path = f"{PROC_SELF}/status"
    status = read_value(host, status_path, _strip, problems)
    if status:
        cpus_text = parse.parse_status_field(status, "Cpus_allowed_list")
        mems_text = parse.parse_status_field(status, "Mems_allowed_list")
        try:
            cpus = parse.parse_cpulist(cpus_text) if cpus_text is not None else None
            mems = parse.parse_cpulist(mems_text) if mems_text is not None else None
        except parse.ParseError as err:
            problems.add("process.cpus.garbage", status_path, str(err))
        else:
            if cpus is not None:
                return ProcessCpus(cpus=cpus, mems=mems, source=status_path)
    return _process_cpus_from_cgroup(host, problems)


def _process_cpus_from_cgroup(host: Host, problems: Problems) -> ProcessCpus:
    cg_text = read_value(host, f"{PROC_SELF}/cgroup", _strip, problems)
    v2_path = parse.parse_cgroup_v2_path(cg_text) if cg_text else None
    v1_path = parse.parse_cgroup_v1_cpuset_path(cg_text) if cg_text else None
    if v2_path is None and v1_path is None:
        # Before /proc/self/cgroup existed in dumps, hwloc read /proc/self/cpuset (a path).
        v2_path = read_value(host, f"{PROC_SELF}/cpuset", _strip, problems) or None
    mounts_text = read_value(host, f"{PROC_SELF}/mountinfo", lambda t: t, problems)
    mounts = parse.parse_mountinfo(mounts_text) if mounts_text else []
    if not mounts:
        plain = read_value(host, "/proc/mounts", lambda t: t, problems)
        mounts = parse.parse_mounts(plain) if plain else []
    # (mount point, cgroup path, cpus file, mems file). The mems name is spelled out: deriving it
    # by replacing "cpus" also rewrote the "cpuset." prefix (`memset.mems.effective`).
    candidates: list[tuple[str, str, str, str]] = []
    for _src, mnt, fstype, opts in mounts:
        if fstype == "cgroup2" and v2_path is not None:
            candidates.append((mnt, v2_path, "cpuset.cpus.effective", "cpuset.mems.effective"))
        elif fstype == "cpuset" or (fstype == "cgroup" and "cpuset" in opts):
            cg = v1_path if v1_path is not None else v2_path
            if cg is None:
                continue
            # The legacy `cpuset` filesystem, and cgroup v1 mounted with `noprefix` to emulate it
            # (40intel64's `/dev/cpuset`), name the files without the `cpuset.` prefix
            # (Documentation/admin-guide/cgroup-v1/cgroups.rst, `noprefix`); hwloc does the same.
            pre = "" if fstype == "cpuset" or "noprefix" in opts else "cpuset."
            candidates.append((mnt, cg, f"{pre}effective_cpus", f"{pre}effective_mems"))
            candidates.append((mnt, cg, f"{pre}cpus", f"{pre}mems"))
    for mnt, cg, cpus_file, mems_file in candidates:
        base = mnt.rstrip("/") + ("/" + cg.strip("/") if cg.strip("/") else "")
        cpus = read_value(host, f"{base}/{cpus_file}", parse.parse_cpulist, problems)
        if cpus is None:
            continue
        mems = read_value(host, f"{base}/{mems_file}", parse.parse_cpulist, problems)
        return ProcessCpus(cpus=cpus, mems=mems, source=f"{base}/{cpus_file}")
    return ProcessCpus(cpus=None, mems=None, source=None)


# -- PCI ---------------------------------------------------------------------------------------


class RawPci:
    """One PCI function as read, filled in attribute by attribute by _read_pci_function. A
    plain slotted class: thousands of these exist on an SR-IOV host, for one discovery."""

    __slots__ = (
        "address",
        "ancestors",
        "class_code",
        "device_id",
        "driver",
        "host_bridge",
        "link",
        "local_cpus",
        "netdevs",
        "numa_raw",
        "nvme",
        "path",
        "physfn",
        "prog_if",
        "rdma",
        "sriov_numvfs",
        "subsystem_device_id",
        "subsystem_vendor_id",
        "vendor_id",
    )

    def __init__(
        self, address: PciAddress, path: str, host_bridge: str, ancestors: tuple[PciAddress, ...]
    ) -> None:
        self.address = address
        self.path = path
        self.host_bridge = host_bridge
        self.ancestors = ancestors
        self.class_code: int | None = None
        self.prog_if: int | None = None
        self.vendor_id: int | None = None
        self.device_id: int | None = None
        self.subsystem_vendor_id: int | None = None
        self.subsystem_device_id: int | None = None
        self.driver: str | None = None
        self.numa_raw: int | None = None  # file value as written, -1 included
        self.local_cpus: CpuSet | None = None
        self.link = _NO_LINK
        self.physfn: PciAddress | None = None
        self.sriov_numvfs: int | None = None
        self.netdevs: list[NetDev] = []
        self.rdma: list[str] = []
        self.nvme: list[tuple[str, str | None]] = []


_NO_LINK = PciLink(None, None, None, None)


def _parse_numa_raw(text: str) -> int:
    value = parse.parse_int(text)
    if value < -1:
        raise parse.ParseError(f"numa_node out of range: {text.strip()!r}")
    return value


def walk_pci(host: Host, problems: Problems) -> list[RawPci]:
    """Every PCI function under /sys/devices/pci*, found by walking real directories only.

    The walk descends into `DDDD:BB:DD.F` subdirectories (bridges hold their children) and into
    nested `pciDDDD:BB` host bridges (Intel VMD). It never follows symlinks, so the cycles through
    `subsystem`/`driver`/`device` links cannot trap it, and it also finds bridges that a dump
    left out of /sys/bus/pci/devices.
    """
    out: list[RawPci] = []
    try:
        top = host.scandir(SYS_DEVICES)
    except HostError as err:
        problems.add("pci.unreadable", SYS_DEVICES, f"{type(err).__name__}: {err.detail}")
        return out
    # (directory, host bridge name, ancestors, its child directories when already known)
    Item = tuple[str, str, tuple[PciAddress, ...], "list[str] | None"]
    stack: list[Item] = [
        (f"{SYS_DEVICES}/{e.name}", e.name, (), None)
        for e in reversed(top)
        if e.is_dir and parse.is_host_bridge_name(e.name)
    ]
    while stack:
        dir_path, bridge, ancestors, kids = stack.pop()
        if kids is None:
            try:
                kids = _child_dirs(host, dir_path, host.listdir(dir_path))
            except HostError as err:
                problems.add("pci.vanished", dir_path, f"{type(err).__name__}: {err.detail}")
                continue
        children: list[Item] = []
        for name in kids:
            child = f"{dir_path}/{name}"
            if parse.is_pci_address(name):
                read = _read_pci_function(host, child, name, bridge, ancestors, problems)
                if read is None:
                    continue
                dev, dev_kids = read
                out.append(dev)
                children.append((child, bridge, (*ancestors, dev.address), dev_kids))
            elif parse.is_host_bridge_name(name):
                children.append((child, name, (), None))
        stack.extend(reversed(children))
    _add_unwalked(host, out, problems)
    out.sort(key=lambda d: d.address)
    return out


def _add_unwalked(host: Host, found: list[RawPci], problems: Problems) -> None:
    """Functions listed in /sys/bus/pci/devices that the walk did not reach.

    Trimmed dumps (hwloc's `nvidiagpunumanodes`) keep devices as plain directories there with no
    /sys/devices/pci* tree; their root complex is then unknown, named after domain:bus the way
    hwloc does (`pci0004:05`), and each is recorded.
    """
    seen = {d.address for d in found}
    names = host.listdir_optional(SYS_BUS_PCI)
    for name in names or ():
        if not parse.is_pci_address(name):
            continue
        addr = parse.parse_pci_address(name)
        if addr in seen:
            continue
        try:
            real = host.realpath(f"{SYS_BUS_PCI}/{name}")
        except HostError as err:
            problems.add(
                "pci.vanished", f"{SYS_BUS_PCI}/{name}", f"{type(err).__name__}: {err.detail}"
            )
            continue
        parent = real.rsplit("/", 2)[-2] if real.count("/") >= 2 else ""
        bridge = (
            parent if parse.is_host_bridge_name(parent) else f"pci{addr.domain:04x}:{addr.bus:02x}"
        )
        read = _read_pci_function(host, real, name, bridge, (), problems)
        if read is None:
            continue
        dev = read[0]
        problems.add(
            "pci.outside-tree",
            str(addr),
            f"not below /sys/devices/pci*: upstream bridges unknown, root complex taken as "
            f"{bridge}",
        )
        found.append(dev)
        seen.add(addr)


def read_nvidia_driver_gpus(host: Host) -> set[PciAddress]:
    """PCI functions the NVIDIA kernel driver lists in /proc/driver/nvidia/gpus/<bus id>.

    Identifies GPUs in dumps whose `vendor` files were trimmed, and on hosts where the driver
    is loaded it is the driver's own view of what it bound."""
    names = host.listdir_optional(PROC_NVIDIA_GPUS) or []
    return {parse.parse_pci_address(n) for n in names if parse.is_pci_address(n)}


def _child_dirs(host: Host, path: str, names: list[str]) -> list[str]:
    """Names under `path` that are real directories of PCI functions (`0000:01:00.0`) or nested
    host bridges (`pci10000:00`). Both contain a ':', which no sysfs attribute name does, so
    only those few entries cost an lstat."""
    return [
        n
        for n in names
        if ":" in n
        and (parse.is_pci_address(n) or parse.is_host_bridge_name(n))
        and host.is_real_dir(f"{path}/{n}")
    ]


def _read_pci_function(
    host: Host,
    path: str,
    name: str,
    bridge: str,
    ancestors: tuple[PciAddress, ...],
    problems: Problems,
) -> tuple[RawPci, list[str]] | None:
    """One PCI function's attributes, and its child directories (for the walk to reuse)."""
    try:
        listing = host.listdir(path)
    except HostError as err:
        problems.add("pci.vanished", path, f"{type(err).__name__}: {err.detail}")
        return None
    names = set(listing)
    dev = RawPci(
        address=parse.parse_pci_address(name),
        path=path,
        host_bridge=bridge,
        ancestors=ancestors,
    )

    def val(attr: str, parser: Callable[[str], T]) -> T | None:
        if attr not in names:
            return None
        return read_value(host, f"{path}/{attr}", parser, problems)

    cls = val("class", parse.parse_pci_class)
    if cls is not None:
        dev.class_code, dev.prog_if = cls
    dev.vendor_id = val("vendor", parse.parse_hex)
    dev.device_id = val("device", parse.parse_hex)
    dev.subsystem_vendor_id = val("subsystem_vendor", parse.parse_hex)
    dev.subsystem_device_id = val("subsystem_device", parse.parse_hex)
    dev.numa_raw = val("numa_node", _parse_numa_raw)
    dev.local_cpus = val("local_cpulist", parse.parse_cpulist)
    if dev.local_cpus is None:
        dev.local_cpus = val("local_cpus", parse.parse_cpumask)
    dev.link = PciLink(
        current_speed_gts=val("current_link_speed", parse.parse_link_speed),
        current_width=val("current_link_width", parse.parse_link_width),
        max_speed_gts=val("max_link_speed", parse.parse_link_speed),
        max_width=val("max_link_width", parse.parse_link_width),
    )
    dev.sriov_numvfs = val("sriov_numvfs", parse.parse_int)
    if "driver" in names:
        dev.driver = _link_name(host, f"{path}/driver", problems)
    if "physfn" in names:
        pf = _link_name(host, f"{path}/physfn", problems)
        if pf is not None and parse.is_pci_address(pf):
            dev.physfn = parse.parse_pci_address(pf)
    if "net" in names and host.is_real_dir(f"{path}/net"):
        dev.netdevs = _read_netdevs(host, f"{path}/net", problems)
    for sub in names:
        # virtio-net puts its netdev one level down: <pci fn>/virtio0/net/eth0 (the virtio bus
        # device sits between the PCI function and the netdev).
        if _VIRTIO_DIR.match(sub) and host.is_real_dir(f"{path}/{sub}/net"):
            dev.netdevs.extend(_read_netdevs(host, f"{path}/{sub}/net", problems))
    if "infiniband" in names and host.is_real_dir(f"{path}/infiniband"):
        dev.rdma = _list(host, f"{path}/infiniband", problems)
    if "nvme" in names and host.is_real_dir(f"{path}/nvme"):
        for ctrl in _list(host, f"{path}/nvme", problems):
            model = read_value(host, f"{path}/nvme/{ctrl}/model", _strip, problems)
            dev.nvme.append((ctrl, model or None))
    return dev, _child_dirs(host, path, listing)


def _link_name(host: Host, path: str, problems: Problems) -> str | None:
    try:
        return host.link_name(path)
    except HostError as err:
        problems.add("read.error", path, f"{type(err).__name__}: {err.detail}")
        return None


def _list(host: Host, path: str, problems: Problems) -> list[str]:
    try:
        return host.listdir(path)
    except HostError as err:
        problems.add("read.error", path, f"{type(err).__name__}: {err.detail}")
        return []


def _parse_speed_mbps(text: str) -> int | None:
    # `speed` is -1 (SPEED_UNKNOWN) when the link is down on most drivers.
    value = parse.parse_int(text)
    return value if value > 0 else None


def _read_netdevs(host: Host, path: str, problems: Problems) -> list[NetDev]:
    out = []
    for name in _list(host, path, problems):
        base = f"{path}/{name}"
        out.append(
            NetDev(
                name=name,
                operstate=read_value(host, f"{base}/operstate", _strip, problems) or None,
                mtu=read_value(host, f"{base}/mtu", parse.parse_int, problems),
                speed_mbps=read_value(host, f"{base}/speed", _parse_speed_mbps, problems),
                mac=read_value(host, f"{base}/address", _strip, problems) or None,
            )
        )
    return out


def read_rdma_class(host: Host, problems: Problems) -> list[tuple[str, PciAddress]]:
    """RDMA devices from /sys/class/infiniband with the PCI function their `device` link names.

    Used to catch devices whose directory is not below the PCI function (some dumps keep only
    the class link)."""
    out: list[tuple[str, PciAddress]] = []
    names = host.listdir_optional(SYS_CLASS_IB)
    for name in names or ():
        try:
            real = host.realpath(f"{SYS_CLASS_IB}/{name}/device")
        except HostError:
            continue
        last = real.rsplit("/", 1)[-1]
        if parse.is_pci_address(last):
            out.append((name, parse.parse_pci_address(last)))
    return out
