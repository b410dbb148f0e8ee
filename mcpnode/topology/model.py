"""The machine as frozen data. Imports nothing of mcpnode's but the leaf codecs (codec/).

Conventions: units in field names, `None` for unknown (never -1 or 0 standing in for "don't
know"), tuples and frozensets, collections sorted by a stable key (PCI address, id) so JSON
outputs diff cleanly.

The classes are `@record` classes (codec/record.py): dataclasses to the type checker, slotted
value types built at import for a fraction of dataclasses' cost at run time.
"""

from __future__ import annotations

from mcpnode.codec.cpus import format_list
from mcpnode.codec.record import record

SCHEMA_VERSION = "mcpnode.topology/v1"

NVIDIA_VENDOR_ID = 0x10DE
PCI_CLASS_BRIDGE_PCI = 0x0604  # PCI-to-PCI bridge (root ports and switch ports)
# Base class 0x03 (display): 0x0300 VGA-compatible (consumer / workstation GPUs, some L40S
# boards), 0x0302 3D controller (datacenter GPUs: A100, H100, H200, L4).
GPU_CLASSES = frozenset({0x0300, 0x0302})
NVME_CLASS = 0x0108  # mass storage / non-volatile memory controller
# Network controllers: 0x0200 Ethernet, 0x0207 InfiniBand (ConnectX in IB mode),
# 0x0280 "other" (some SmartNICs / DPUs).
NIC_CLASSES = frozenset({0x0200, 0x0207, 0x0280})

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (codec/typenames.py)
if TYPE_CHECKING:
    from collections.abc import Iterable
    from typing import Literal

    # Where a device's NUMA node came from: the type checker's alone (`import typing` costs a
    # `topo` run more than the check is worth at run time).
    NumaSource = Literal[
        "own",
        "ancestor",
        "nvml-memory-affinity",
        "nvml-cpu-affinity",
        "host-bridge",
        "local-cpus",
        "unknown",
    ]


class CpuSet(frozenset[int]):
    """A set of CPU (or NUMA node) ids that prints as a Linux cpulist: `0-47,96-143`."""

    def __new__(cls, ids: Iterable[int] = ()) -> CpuSet:
        return super().__new__(cls, ids)

    def cpulist(self) -> str:
        """Kernel list format (codec/cpus.py's format_list); empty set -> ''."""
        return format_list(self)

    def __str__(self) -> str:
        return self.cpulist()

    def __repr__(self) -> str:
        return f"CpuSet({self.cpulist()!r})"

    def __and__(self, other: Iterable[int]) -> CpuSet:  # type: ignore[override]
        return CpuSet(frozenset(self) & frozenset(other))

    def __or__(self, other: Iterable[int]) -> CpuSet:  # type: ignore[override]
        return CpuSet(frozenset(self) | frozenset(other))

    def __sub__(self, other: Iterable[int]) -> CpuSet:  # type: ignore[override]
        return CpuSet(frozenset(self) - frozenset(other))


@record(frozen=True, order=True)
class PciAddress:
    """domain:bus:device.function. Ordered numerically, printed as sysfs does: `0000:1b:00.0`."""

    domain: int
    bus: int
    device: int
    function: int

    def __str__(self) -> str:
        return f"{self.domain:04x}:{self.bus:02x}:{self.device:02x}.{self.function:x}"


@record(frozen=True)
class Problem:
    """Something that could not be read, or sources that did not agree.

    `code` is stable (`pci.numa.disagree`), `source` names where it was seen (a logical path or a
    PCI address), `detail` says what and, where known, what was used instead.
    """

    code: str
    source: str
    detail: str


@record(frozen=True)
class Cpu:
    id: int
    online: bool
    core_id: int | None
    package_id: int | None
    die_id: int | None
    node: int | None  # NUMA node holding this CPU, None if no node lists it
    siblings: CpuSet  # SMT siblings including itself (`thread_siblings_list`)


@record(frozen=True)
class CpuTopology:
    possible: CpuSet
    present: CpuSet
    online: CpuSet
    cpus: tuple[Cpu, ...]  # the present CPUs, by id

    @property
    def offline(self) -> CpuSet:
        return self.present - self.online


@record(frozen=True)
class Cache:
    """One L2 or L3 cache domain: the online CPUs sharing it (`cpu*/cache/index*/
    shared_cpu_list`), as hwloc's L2Cache/L3Cache objects are. Unified and data caches only:
    an instruction cache holds no working set a placement could keep warm."""

    level: int  # 2 or 3
    cpus: CpuSet  # online CPUs sharing it
    size_kib: int | None  # `size` (the kernel prints KiB: `5118K`)
    id: int | None  # `id`, unique per level (Linux 4.14+); None on older kernels


@record(frozen=True)
class ProcessCpus:
    """What *this process* may use, distinct from any device's locality.

    nvidia-smi intersects a GPU's affinity with the caller's cpuset and prints an empty cell
    inside a 1-CPU Slurm job (the cell is NVML's affinity, which is clipped to the caller's
    cpuset: rapidsai/dask-cuda#1358, nvidia-cosmos/cosmos-predict1#11); mcpnode
    reports locality from sysfs and this separately.
    """

    cpus: CpuSet | None
    mems: CpuSet | None
    source: str | None  # logical path the answer came from


@record(frozen=True)
class NumaNode:
    id: int
    cpus: CpuSet  # as listed by the node, clipped to present CPUs
    memory_mib: int | None  # MemTotal of the node; None when meminfo is unreadable
    distances: tuple[tuple[int, int], ...]  # (other node id, SLIT distance), self included
    has_cpus: bool
    has_memory: bool

    @property
    def cpuless(self) -> bool:
        """A memory-only node (GPU memory on Grace/POWER9, CXL, HBM): never a pinning target."""
        return not self.has_cpus

    def distance_to(self, other: int) -> int | None:
        for node, dist in self.distances:
            if node == other:
                return dist
        return None


@record(frozen=True)
class PciLink:
    """PCIe link from `current_link_{speed,width}` / `max_link_{speed,width}`."""

    current_speed_gts: float | None
    current_width: int | None
    max_speed_gts: float | None
    max_width: int | None

    @property
    def width_downtrained(self) -> bool:
        """Trained narrower than it can: a real fault (reseat / riser / slot), unlike speed."""
        return _below(self.current_width, self.max_width)

    @property
    def speed_downtrained(self) -> bool:
        """Below max speed. Normal at idle for GPUs (ASPM / power saving downclocks the link)."""
        return _below(self.current_speed_gts, self.max_speed_gts)


def _below(current: float | None, most: float | None) -> bool:
    """A link trained (above 0: up) below what it can do; False where either is unknown."""
    return current is not None and most is not None and 0 < current < most


@record(frozen=True)
class PciDevice:
    address: PciAddress
    sysfs_path: str  # logical real path: /sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0
    host_bridge: str  # `pci0000:00`: the root complex this device hangs off
    # Bridges between the host bridge and this device, top first (root port, switch ports...).
    ancestors: tuple[PciAddress, ...]
    class_code: int | None  # 16-bit base+sub class (`0x0302`); prog-if kept separately
    prog_if: int | None
    vendor_id: int | None
    device_id: int | None
    subsystem_vendor_id: int | None
    subsystem_device_id: int | None
    driver: str | None
    numa_node: int | None  # resolved: own >= 0, else nearest ancestor, else host bridge
    numa_source: NumaSource
    numa_node_raw: int | None  # the device's own numa_node file (-1 kept as -1 here only)
    local_cpus: CpuSet | None  # `local_cpulist` or the hex `local_cpus` mask
    link: PciLink
    physfn: PciAddress | None  # SR-IOV: the PF of a virtual function
    sriov_numvfs: int | None

    @property
    def parent(self) -> PciAddress | None:
        return self.ancestors[-1] if self.ancestors else None

    @property
    def is_bridge(self) -> bool:
        return self.class_code == PCI_CLASS_BRIDGE_PCI

    @property
    def is_virtual_function(self) -> bool:
        return self.physfn is not None


@record(frozen=True)
class NvLink:
    """One NVLink of a GPU, as NVML reports it."""

    link: int
    active: bool
    version: str | None  # the real NVLink version ("3.1" on A100, "4.0" on H100), not NVML's enum
    remote_type: str | None  # "GPU", "SWITCH", "IBMNPU", "UNKNOWN"
    remote_address: PciAddress | None  # on NVSwitch systems: the switch's, never a peer GPU's
    speed_mbps: int | None = None  # NVML_FI_DEV_NVLINK_GET_SPEED: MB/s (10^6), this link
    # nvmlDeviceGetNvLinkErrorCounter since the driver loaded (or the counters were reset);
    # None where NVML does not count them (NotSupported; Blackwell dropped the DL counters).
    replay_errors: int | None = None
    recovery_errors: int | None = None
    crc_flit_errors: int | None = None
    crc_data_errors: int | None = None


@record(frozen=True)
class GpuProcess:
    pid: int  # host PID namespace (the driver does not know PID namespaces)
    used_memory_mib: int | None


@record(frozen=True)
class MigDevice:
    """A MIG device (one compute instance of one GPU instance) of a GPU in MIG mode, as NVML's
    MIG device handle answers (nvidia-smi -L: `MIG 3g.40gb Device 0: (UUID: MIG-...)`)."""

    index: int  # slot on its parent (nvmlDeviceGetMigDeviceHandleByIndex)
    uuid: str | None  # `MIG-<uuid>` (R470+), what CUDA_VISIBLE_DEVICES takes
    gpu_instance_id: int | None
    compute_instance_id: int | None
    memory_mib: int | None
    slices: int | None  # the GPU instance's slice count: the `3g` of 3g.40gb

    @property
    def profile(self) -> str | None:
        """nvidia-smi's name for it, `3g.40gb`: the slice count and the memory in GiB rounded
        up, as the profile names are (3g.40gb has 40320 MiB, 1g.10gb 9856 MiB on H100 80GB)."""
        if self.slices is None or self.memory_mib is None:
            return None
        return f"{self.slices}g.{-(-self.memory_mib // 1024)}gb"


@record(frozen=True)
class NvmlGpu:
    """What NVML says about one GPU. A fact NVML could not give is None, and `unavailable`
    says why (`("ecc_mode", "NotSupported")`)."""

    index: int
    address: PciAddress | None
    minor: int | None
    uuid: str | None
    name: str | None
    architecture: str | None
    compute_capability: str | None
    memory_total_mib: int | None
    serial: str | None
    board_id: int | None
    module_id: int | None
    persistence_mode: bool | None
    ecc_current: bool | None
    ecc_pending: bool | None
    ecc_uncorrected_volatile: int | None
    ecc_uncorrected_aggregate: int | None
    remapped_rows_correctable: int | None
    remapped_rows_uncorrectable: int | None
    remapped_rows_pending: bool | None
    remapped_rows_failure: bool | None
    mig_current: bool | None
    mig_pending: bool | None
    compute_mode: str | None
    pcie_gen_current: int | None
    pcie_gen_max: int | None
    pcie_gen_gpu_max: int | None
    pcie_width_current: int | None
    pcie_width_max: int | None
    nvlinks: tuple[NvLink, ...]
    fabric_state: str | None  # COMPLETED / IN_PROGRESS / NOT_STARTED / NOT_SUPPORTED
    fabric_status: str | None  # NVML return name of the registration ("Success")
    cpu_affinity_node: CpuSet | None
    cpu_affinity_socket: CpuSet | None
    memory_affinity_nodes: CpuSet | None
    memory_numa_node: int | None  # GPU memory exposed as a (CPU-less) NUMA node: Grace
    processes: tuple[GpuProcess, ...] | None
    lost: bool  # GpuIsLost seen: the GPU fell off the bus mid-discovery
    unavailable: tuple[tuple[str, str], ...]
    # Clocks, thermal, power (`nvidia-smi -q -d CLOCK,PERFORMANCE,TEMPERATURE,POWER`). None:
    # NVML could not say (reason in `unavailable`).
    clocks_event_reasons: int | None = None  # nvmlClocksEventReason* bit mask, active now
    temperature_c: int | None = None  # GPU die (NVML_TEMPERATURE_GPU)
    temperature_slowdown_c: int | None = None  # HW slowdown threshold
    temperature_shutdown_c: int | None = None  # HW shutdown threshold
    power_usage_mw: int | None = None
    power_limit_mw: int | None = None  # enforced: the lowest of every limit in force
    power_default_limit_mw: int | None = None  # the board's default management limit
    clock_sm_mhz: int | None = None
    clock_sm_max_mhz: int | None = None
    clock_mem_mhz: int | None = None
    clock_mem_max_mhz: int | None = None
    app_clock_sm_mhz: int | None = None  # applications clocks in force (`nvidia-smi -ac`)
    app_clock_mem_mhz: int | None = None
    default_app_clock_sm_mhz: int | None = None
    default_app_clock_mem_mhz: int | None = None
    pcie_replay_count: int | None = None  # PCIe replays since the driver loaded
    # MIG devices when MIG is on (current mode), by slot; None when MIG is off or they could
    # not be enumerated (`unavailable` says why).
    mig_devices: tuple[MigDevice, ...] | None = None

    @property
    def active_links(self) -> int:
        return sum(1 for link in self.nvlinks if link.active)


@record(frozen=True)
class P2pStatus:
    """nvmlDeviceGetP2PStatus(a, b, READ): what `nvidia-smi topo -p2p r` prints for a pair.
    `status` is nvidia-smi's code (OK, CNS, GNS, TNS, NS, DR, U); None with `reason` when NVML
    did not answer."""

    a: int  # NVML index
    b: int
    status: str | None
    reason: str | None = None


@record(frozen=True)
class NvmlState:
    """NVML as a whole: available or why not, versions, and the per-GPU facts."""

    available: bool
    reason: str | None  # "LibraryNotFound: ..." when not available
    driver_version: str | None
    cuda_driver_version: str | None  # "12.4"
    nvml_version: str | None
    gpus: tuple[NvmlGpu, ...]
    p2p_read: tuple[P2pStatus, ...] = ()  # every ordered pair of GPUs, by (a, b)


@record(frozen=True)
class Gpu:
    """A GPU as sysfs sees it; NVML facts are merged by PCI address in a later layer."""

    index: int  # position in PCI bus order, which is NVML's and nvidia-smi's order
    address: PciAddress
    vendor_id: int
    device_id: int | None
    driver: str | None
    numa_node: int | None
    numa_source: NumaSource
    local_cpus: CpuSet | None
    link: PciLink
    nvml: NvmlGpu | None = None  # joined by PCI address when NVML answered
    memory_numa_node: int | None = None  # CPU-less node holding this GPU's memory: never a pin


@record(frozen=True)
class NetDev:
    name: str
    operstate: str | None
    mtu: int | None
    speed_mbps: int | None  # None when down or unknown (sysfs reports -1 or EINVAL)
    mac: str | None


@record(frozen=True)
class RdmaPort:
    """One port of an RDMA device (`/sys/class/infiniband/<dev>/ports/<n>`)."""

    device: str  # mlx5_0
    port: int
    state: str | None  # `ACTIVE`, `DOWN`, `INIT`, ... (the name after `4: `)
    rate: str | None  # `400 Gb/sec (4X NDR)`, as the kernel prints it
    link_layer: str | None  # `InfiniBand` or `Ethernet` (RoCE)


@record(frozen=True)
class Nic:
    """A network PCI function with its netdevs and RDMA devices (mlx5_0 <-> ens1f0np0)."""

    address: PciAddress
    class_code: int | None
    vendor_id: int | None
    device_id: int | None
    driver: str | None
    netdevs: tuple[NetDev, ...]
    rdma_devices: tuple[str, ...]
    numa_node: int | None
    local_cpus: CpuSet | None
    link: PciLink
    is_virtual_function: bool
    rdma_ports: tuple[RdmaPort, ...] = ()  # the ports of its RDMA devices, by device and port


@record(frozen=True)
class NvmeNamespace:
    """A block device of an NVMe controller (`nvme0n1`)."""

    name: str  # nvme0n1, as /dev names it
    size_bytes: int | None  # `size` (512-byte sectors, whatever the LBA format) x 512


@record(frozen=True)
class Nvme:
    controller: str  # nvme0
    address: PciAddress
    model: str | None
    numa_node: int | None
    namespaces: tuple[NvmeNamespace, ...] = ()  # its block devices, by name


@record(frozen=True)
class HostIdentity:
    hostname: str | None
    kernel_release: str | None
    # DMI's product_name, the system's model as its firmware names it (`SYS-821GE-TNHR`,
    # `DGXA100 920-23687-2530-000`); None where there is no DMI (ARM without SMBIOS, some VMs).
    machine: str | None = None


@record(frozen=True)
class Topology:
    identity: HostIdentity
    cpus: CpuTopology
    numa_nodes: tuple[NumaNode, ...]
    pci_devices: tuple[PciDevice, ...]
    gpus: tuple[Gpu, ...]
    nics: tuple[Nic, ...]
    nvmes: tuple[Nvme, ...]
    process: ProcessCpus
    problems: tuple[Problem, ...] = ()
    nvml: NvmlState | None = None  # None: NVML was not asked (sysfs-only discovery)
    # L2 and L3 domains, by level then lowest CPU; () when sysfs has no cache/ directories
    caches: tuple[Cache, ...] = ()

    __record_private__ = ("_pci_index",)

    def pci(self, address: PciAddress) -> PciDevice | None:
        """The device at `address` (the first listed, as a scan finds it). Indexed on first use:
        the audit and the placement plan ask ~120 times per manifest build, and a scan
        compared ~50 addresses each time."""
        index: dict[PciAddress, PciDevice] | None = getattr(self, "_pci_index", None)
        if index is None:
            index = {}
            for dev in self.pci_devices:
                index.setdefault(dev.address, dev)
            object.__setattr__(self, "_pci_index", index)  # frozen: a cache, not a field
        return index.get(address)

    def node(self, node_id: int) -> NumaNode | None:
        for n in self.numa_nodes:
            if n.id == node_id:
                return n
        return None

    def gpu_of_memory_node(self, node_id: int) -> Gpu | None:
        """The GPU whose memory NUMA node `node_id` is (Grace, POWER9), None for any other."""
        return next((g for g in self.gpus if g.memory_numa_node == node_id), None)

    def cache_domains(self, level: int) -> tuple[Cache, ...]:
        """The caches of one level (3: the L3 domains placement cuts slices along)."""
        return tuple(c for c in self.caches if c.level == level)

    def rdma_nics(self) -> tuple[tuple[str, Nic], ...]:
        """(rdma device, NIC) pairs in natural name order: nvidia-smi's NIC0..NICn columns."""
        pairs = [(rdma, nic) for nic in self.nics for rdma in nic.rdma_devices]
        return tuple(sorted(pairs, key=lambda p: natural_key(p[0])))


def natural_key(name: str) -> tuple[object, ...]:
    """`mlx5_2` < `mlx5_10`: how nvidia-smi and humans order device names."""
    out: list[object] = []
    num = ""
    text = ""
    for ch in name:
        # ASCII digits only: str.isdigit() is also true of `²`, which int() refuses, and a
        # directory name (a netdev's, an RDMA device's) may hold one.
        if "0" <= ch <= "9":
            if text:
                out.append(text)
                text = ""
            num += ch
        else:
            if num:
                out.append(int(num))
                num = ""
            text += ch
    if text:
        out.append(text)
    if num:
        out.append(int(num))
    return tuple((0, x) if isinstance(x, int) else (1, x) for x in out)
