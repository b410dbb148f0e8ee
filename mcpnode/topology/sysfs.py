"""Readers: sysfs/procfs through a Host into raw records. Nothing here decides locality;
`discover.py` does that over what these return.

Every read goes through `_read`, which turns a missing/unsupported file into None and any other
failure or unparsable content into a recorded Problem, so one bad file never costs the rest of
the topology.
"""

from __future__ import annotations

from mcpnode.codec.bounded import is_digits
from mcpnode.codec.cpus import MAX_CPU
from mcpnode.codec.record import record
from mcpnode.errors import HostError, PathNotFound
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
)

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy reads it the same)
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from typing import Any, TypeVar

    from mcpnode.host import HostReader

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
# World-readable (0444) since DMI's sysfs class (Linux 2.6.16); GPU Feature Discovery's default
# --machine-type-file (NVIDIA/k8s-device-plugin, internal/lm/machine-type.go).
SYS_DMI_PRODUCT = "/sys/class/dmi/id/product_name"
# What a published manifest's freshness is checked against (placement/source.py).
PROC_BOOT_ID = "/proc/sys/kernel/random/boot_id"
SYS_UEVENT_SEQNUM = "/sys/kernel/uevent_seqnum"
# Virtualization (topology/virt.py): the firmware's DMI strings, the CPU's hypervisor flag.
SYS_DMI_ID = "/sys/class/dmi/id"
SYS_HYPERVISOR_TYPE = "/sys/hypervisor/type"
PROC_CPUINFO = "/proc/cpuinfo"
# Node ids are below MAX_NUMNODES = 1 << CONFIG_NODES_SHIFT, at most 10 on x86_64 and arm64
# (Linux 6.x, mm/Kconfig and arch/*/Kconfig NODES_SHIFT).
MAX_NUMNODES = 1 << 10


def _numbered(name: str, prefix: str, most: int) -> int | None:
    """N of a `<prefix>N` directory name, N 1 to `most` ASCII digits, else None: the former
    patterns `^cpu([0-9]{1,5})$` and `^node([0-9]{1,4})$`, whose `$` also took the name with one
    final newline."""
    if name[-1:] == "\n":
        name = name[:-1]
    digits = name[len(prefix) :]
    return int(digits) if name.startswith(prefix) and is_digits(digits, 1, most) else None


def _is_virtio_dir(name: str) -> bool:
    """`virtio0`: the former pattern `^virtio\\d+$`, `\\d` any Unicode decimal digit (no
    re.ASCII; str.isdecimal() takes the same) and one final newline taken by `$`."""
    if name[-1:] == "\n":
        name = name[:-1]
    return name.startswith("virtio") and name[6:].isdecimal()


class Problems:
    """Collects Problems in the order they are found."""

    def __init__(self) -> None:
        self.items: list[Problem] = []

    def add(self, code: str, source: str, detail: str) -> None:
        self.items.append(Problem(code, source, detail))


def read_parsed(
    host: HostReader, path: str, parser: Callable[[str], T], problems: Problems
) -> T | None:
    """Read and parse one file: the parsed value, or None. Absent -> None silently; unreadable
    or garbage -> None and a Problem naming the file. (Tuning's read_value keeps the outcome
    itself, a Reading; discovery records it as a Problem instead.)"""
    try:
        text = host.read_optional(path)
    except HostError as err:
        return parsed(path, err, parser, problems)
    return parsed(path, text, parser, problems)


def parsed(
    path: str, text: str | HostError | None, parser: Callable[[str], T], problems: Problems
) -> T | None:
    """read_parsed() of what reading `path` gave (Host.read_files' answer, None when absent)."""
    if isinstance(text, HostError):
        problems.add("read.error", path, f"{type(text).__name__}: {text.detail}")
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


def read_identity(host: HostReader, problems: Problems) -> HostIdentity:
    return HostIdentity(
        hostname=read_parsed(host, PROC_HOSTNAME, _strip, problems) or None,
        kernel_release=read_parsed(host, PROC_OSRELEASE, _strip, problems) or None,
        machine=read_parsed(host, SYS_DMI_PRODUCT, _strip, problems) or None,
    )


# -- CPUs --------------------------------------------------------------------------------------


_TOPOLOGY_FILES = ("thread_siblings_list", "core_id", "physical_package_id", "die_id")


def read_cpus(host: HostReader, problems: Problems) -> CpuTopology:
    listed: set[int] = set()
    try:
        for e in host.scandir(SYS_CPU):
            cpu = _numbered(e.name, "cpu", 5)
            if cpu is not None and (e.is_dir or e.is_symlink):
                listed.add(cpu)
    except HostError as err:
        problems.add("cpu.unreadable", SYS_CPU, f"{type(err).__name__}: {err.detail}")
    possible = read_parsed(host, f"{SYS_CPU}/possible", parse.parse_cpulist, problems)
    cpulist = parse.cpulist_within(cpu_limit(possible))
    present = read_parsed(host, f"{SYS_CPU}/present", cpulist, problems)
    online = read_parsed(host, f"{SYS_CPU}/online", cpulist, problems)
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
    # Four attributes of every CPU (768 on a 192-CPU host) in one batch read; each is parsed,
    # and its problem recorded, in the order the per-file reads had.
    ids = sorted(present)
    found = host.read_files(
        [f"{SYS_CPU}/cpu{c}/topology/{name}" for c in ids for name in _TOPOLOGY_FILES]
    )

    def one(cpu_id: int, name: str, parser: Callable[[str], T]) -> T | None:
        path = f"{SYS_CPU}/cpu{cpu_id}/topology/{name}"
        return parsed(path, found.get(path), parser, problems)

    for cpu_id in ids:
        siblings = one(cpu_id, "thread_siblings_list", cpulist)
        cpus.append(
            Cpu(
                id=cpu_id,
                online=cpu_id in online,
                core_id=one(cpu_id, "core_id", parse.parse_int),
                package_id=one(cpu_id, "physical_package_id", parse.parse_int),
                die_id=one(cpu_id, "die_id", parse.parse_int),
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


def cpu_limit(possible: CpuSet | None) -> int:
    """One past the highest CPU any other cpulist or mask may name: the kernel sizes every
    cpumask to nr_cpu_ids, which is `possible`'s last id + 1 (kernel/cpu.c, Linux 2.6.26+); a
    root without `possible` gets the documented cap, codec.cpus.MAX_CPU."""
    return max(possible) + 1 if possible else MAX_CPU


def read_nodes(host: HostReader, problems: Problems, cpus_limit: int = MAX_CPU) -> RawNodes:
    """The node directories, their CPUs (no id at or above `cpus_limit`), memory and distances;
    node lists bounded by MAX_NUMNODES."""
    ids: list[int] = []
    try:
        for e in host.scandir(SYS_NODE):
            node = _numbered(e.name, "node", 4)
            if node is not None and e.is_dir:
                ids.append(node)
    except PathNotFound:
        # CONFIG_NUMA=n kernels have no node/ directory: discover treats the machine as one node.
        pass
    except HostError as err:
        problems.add("numa.unreadable", SYS_NODE, f"{type(err).__name__}: {err.detail}")
    cpulist = parse.cpulist_within(cpus_limit)
    cpumask = parse.cpumask_within(cpus_limit)
    nodelist = parse.cpulist_within(MAX_NUMNODES)
    nodes = []
    for node_id in sorted(ids):
        base = f"{SYS_NODE}/node{node_id}"
        cpus = read_parsed(host, f"{base}/cpulist", cpulist, problems)
        if cpus is None:
            cpus = read_parsed(host, f"{base}/cpumap", cpumask, problems)
        nodes.append(
            RawNode(
                id=node_id,
                cpus=cpus,
                memory_kib=read_parsed(
                    host, f"{base}/meminfo", parse.parse_node_meminfo_total_kib, problems
                ),
                distance_row=read_parsed(host, f"{base}/distance", parse.parse_distances, problems),
            )
        )
    # `has_memory` is N_MEMORY (Linux 3.8+). Without it discover uses each node's MemTotal, not
    # `has_normal_memory`: that one leaves out nodes whose memory is all ZONE_MOVABLE or HIGHMEM
    # (hotplugged, CXL), and in 48amd64-4pa2n6c-sparse it still says 0-7 for nodes 0-2,33,...,73.
    has_memory = read_parsed(host, f"{SYS_NODE}/has_memory", nodelist, problems)
    return RawNodes(
        nodes=tuple(nodes),
        online=read_parsed(host, f"{SYS_NODE}/online", nodelist, problems),
        has_cpu=read_parsed(host, f"{SYS_NODE}/has_cpu", nodelist, problems),
        has_memory=has_memory,
    )


# -- what this process may use -------------------------------------------------------------------


def read_process_cpus(host: HostReader, problems: Problems) -> ProcessCpus:
    """Cpus_allowed_list / Mems_allowed_list of the reading process; for dumps without
    /proc/self/status, the cgroup cpuset (v2 `cpuset.cpus.effective`, v1 `cpuset.cpus`) found
    through /proc/self/cgroup (or the older /proc/self/cpuset) and the mount table. The CPUs are
    bounded by codec.cpus.MAX_CPU, not by `possible`: a cpuset may name CPUs this root lacks, and
    discover clips it to the online ones."""
    status_path = f"{PROC_SELF}/status"
    status = read_parsed(host, status_path, _strip, problems)
    if status:
        cpus_text = parse.parse_status_field(status, "Cpus_allowed_list")
        mems_text = parse.parse_status_field(status, "Mems_allowed_list")
        try:
            cpus = parse.parse_cpulist(cpus_text) if cpus_text is not None else None
            mems = parse.parse_cpulist(mems_text, MAX_NUMNODES) if mems_text is not None else None
        except parse.ParseError as err:
            problems.add("process.cpus.garbage", status_path, str(err))
        else:
            if cpus is not None:
                return ProcessCpus(cpus=cpus, mems=mems, source=status_path)
    return _process_cpus_from_cgroup(host, problems)


def _process_cpus_from_cgroup(host: HostReader, problems: Problems) -> ProcessCpus:
    cg_text = read_parsed(host, f"{PROC_SELF}/cgroup", _strip, problems)
    v2_path = parse.parse_cgroup_v2_path(cg_text) if cg_text else None
    v1_path = parse.parse_cgroup_v1_cpuset_path(cg_text) if cg_text else None
    if v2_path is None and v1_path is None:
        # Before /proc/self/cgroup existed in dumps, hwloc read /proc/self/cpuset (a path).
        v2_path = read_parsed(host, f"{PROC_SELF}/cpuset", _strip, problems) or None
    mounts_text = read_parsed(host, f"{PROC_SELF}/mountinfo", lambda t: t, problems)
    mounts = parse.parse_mountinfo(mounts_text) if mounts_text else []
    if not mounts:
        plain = read_parsed(host, "/proc/mounts", lambda t: t, problems)
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
    nodelist = parse.cpulist_within(MAX_NUMNODES)
    for mnt, cg, cpus_file, mems_file in candidates:
        base = mnt.rstrip("/") + ("/" + cg.strip("/") if cg.strip("/") else "")
        cpus = read_parsed(host, f"{base}/{cpus_file}", parse.parse_cpulist, problems)
        if cpus is None:
            continue
        mems = read_parsed(host, f"{base}/{mems_file}", nodelist, problems)
        return ProcessCpus(cpus=cpus, mems=mems, source=f"{base}/{cpus_file}")
    return ProcessCpus(cpus=None, mems=None, source=None)


# -- PCI ---------------------------------------------------------------------------------------

# What discovery reads of each PCI function (drivers/pci/pci-sysfs.c) and of each netdev below
# one (Documentation/ABI/testing/sysfs-class-net). One read_directory() per directory lists it
# and reads these at once: the walk costs one listing and one open per attribute, and an SR-IOV
# host's thousands of virtual functions are read at a pace comparable to hwloc's.
# In the order they are taken, which is the order of their Problems in every output: keep it.
_FN_ATTRS = (
    "class",
    "vendor",
    "device",
    "subsystem_vendor",
    "subsystem_device",
    "numa_node",
    "local_cpulist",
    "local_cpus",
    "current_link_speed",
    "current_link_width",
    "max_link_speed",
    "max_link_width",
    "sriov_numvfs",
)
_PCI_ATTRS = frozenset(_FN_ATTRS)
_NETDEV_ATTRS = frozenset({"operstate", "mtu", "speed", "address"})
_PCI_LINKS = frozenset({"driver", "physfn"})
_NOTHING: frozenset[str] = frozenset()


class RawPci:
    """One PCI function as read. A plain slotted class: thousands of these exist on an SR-IOV
    host, for one discovery."""

    __slots__ = (
        "address",
        "ancestors",
        "class_code",
        "device_id",
        "driver",
        "host_bridge",
        "link",
        "local_cpus",
        "name",
        "netdevs",
        "numa_raw",
        "nvme",
        "parent",
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
        self,
        address: PciAddress,
        path: str,
        host_bridge: str,
        ancestors: tuple[PciAddress, ...],
        parent: RawPci | None = None,
        name: str | None = None,
    ) -> None:
        self.address = address
        # the directory's name: str(address), as sysfs prints it
        self.name = path.rsplit("/", 1)[-1] if name is None else name
        self.parent = parent  # the upstream bridge read just before it (ancestors[-1]), if any
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


_MISSING = object()
_NOT_YET: dict[str, str] = {}  # _Values' texts of a parser that has parsed none (never written)


class _Values:
    """Attribute texts parsed once per distinct text, and the Problems of the files they came
    from.

    The functions of one SR-IOV host repeat a few texts thousands of times (every VF of a PF has
    its class, vendor, NUMA node, CPU list and link), so each parser sees each distinct text
    once and every function with that text shares the parsed value: one CpuSet for all the VFs
    of a PF, not one each. A refused text is remembered too, and still recorded as a Problem for
    every file that held it. Values are immutable, so sharing them is safe.
    """

    def __init__(self, problems: Problems, cpus_limit: int = MAX_CPU) -> None:
        self.problems = problems
        # one parser object each, so the memo below is keyed on it once per walk
        self.cpulist = parse.cpulist_within(cpus_limit)
        self.cpumask = parse.cpumask_within(cpus_limit)
        # parser -> text -> value; texts the parser refused -> its message (each parser's dict
        # made when its first text is)
        self._memo: dict[Callable[[str], object], dict[str, object]] = {}
        self._refused: dict[Callable[[str], object], dict[str, str]] = {}
        self._links: dict[tuple[object, ...], PciLink] = {}
        self._functions: dict[tuple[object, ...], tuple[_FunctionValues, tuple[Any, ...]]] = {}
        self._addresses: dict[str, PciAddress | None] = {}

    def get(
        self,
        directory: str,
        name: str,
        attrs: dict[str, str | HostError],
        parser: Callable[[str], T],
    ) -> T | None:
        """`directory/name` as `parser` reads it: None when absent, unreadable (a read.error
        Problem) or garbage (a read.garbage Problem), as read_parsed."""
        text = attrs.get(name)
        if text is None:
            return None
        value = self._memo.get(parser, _NOT_YET).get(text, _MISSING)  # type: ignore[arg-type]
        if value is _MISSING:
            return self._first(f"{directory}/{name}", text, parser)
        return value  # type: ignore[return-value]  # what `parser` returned for this text

    def _first(self, path: str, text: str | HostError, parser: Callable[[str], T]) -> T | None:
        """get() for a text not parsed yet, a refused one, or a read that failed."""
        if not isinstance(text, str):
            self.problems.add("read.error", path, _why(text))
            return None
        refused = self._refused.get(parser, _NOT_YET).get(text)
        if refused is None:
            # hwloc-gather-topology dumps end some values with a NUL: see read_parsed.
            try:
                value = parser(text.split("\x00", 1)[0])
            except parse.ParseError as err:
                refused = self._refused.setdefault(parser, {})[text] = str(err)
            else:
                self._memo.setdefault(parser, {})[text] = value
                return value
        self.problems.add("read.garbage", path, refused)
        return None

    def link(self, values: tuple[float | None, int | None, float | None, int | None]) -> PciLink:
        """One PciLink per distinct set of link values (every VF's is all None)."""
        link = self._links.get(values)
        if link is None:
            link = self._links[values] = PciLink(*values)
        return link

    def address(self, name: str) -> PciAddress | None:
        """A `physfn` target's PCI address (None when it is not one), parsed once per PF."""
        addr = self._addresses.get(name, _MISSING)
        if addr is _MISSING:
            addr = self._addresses[name] = (
                parse.parse_pci_address(name) if parse.is_pci_address(name) else None
            )
        return addr  # type: ignore[return-value]

    def function(
        self, path: str, addr: PciAddress, attrs: dict[str, str | HostError]
    ) -> _FunctionValues:
        """A PCI function's attributes parsed (_FN_ATTRS, taken as _parse_function takes them),
        with their Problems recorded for `path` and `addr`.

        Parsed once per distinct set of texts: every VF of a PF has the same, so the second VF
        costs one lookup, not a dozen parses."""
        key = tuple(map(attrs.get, _FN_ATTRS))
        hit = self._functions.get(key)
        if hit is None:
            hit = self._functions[key] = self._parse_function(attrs)
        parsed, notes = hit
        for code, attr, detail in notes:
            self.problems.add(code, f"{path}/{attr}" if attr else str(addr), detail)
        return parsed

    def _parse_function(
        self, attrs: dict[str, str | HostError]
    ) -> tuple[_FunctionValues, tuple[tuple[str, str | None, str], ...]]:
        """The values of function(), and its Problems as (code, attribute or None for the
        device itself, detail), in the order they are found."""
        notes: list[tuple[str, str | None, str]] = []

        def one(name: str, parser: Callable[[str], T]) -> T | None:
            text = attrs.get(name)
            if text is None:
                return None
            if not isinstance(text, str):
                notes.append(("read.error", name, _why(text)))
                return None
            value = self._memo.get(parser, _NOT_YET).get(text, _MISSING)
            if value is not _MISSING:
                return value  # type: ignore[return-value]
            refused = self._refused.get(parser, _NOT_YET).get(text)
            if refused is None:
                try:
                    value = parser(text.split("\x00", 1)[0])  # NUL: see read_parsed
                except parse.ParseError as err:
                    refused = self._refused.setdefault(parser, {})[text] = str(err)
                else:
                    self._memo.setdefault(parser, {})[text] = value
                    return value
            notes.append(("read.garbage", name, refused))
            return None

        cls = one("class", parse.parse_pci_class)
        vendor = one("vendor", parse.parse_hex)
        device = one("device", parse.parse_hex)
        subsystem_vendor = one("subsystem_vendor", parse.parse_hex)
        subsystem_device = one("subsystem_device", parse.parse_hex)
        numa = one("numa_node", _parse_numa_raw)
        # The function's local CPUs: `local_cpulist`, else the `local_cpus` mask. Both files
        # print one cpumask (drivers/pci/pci-sysfs.c: local_cpus_show and local_cpulist_show
        # both call pci_dev_show_local_cpu(), cpumap_print_to_pagebuf() of
        # cpumask_of_pcibus()), so on a live kernel they cannot disagree; in an edited dump they
        # can, and that is recorded, naming both. The list is the one used: it is what
        # discovery has always reported (the mask only when the list is missing or
        # unreadable), and its meaning does not hang on the mask's width, which an edited dump
        # gets wrong by a 32-bit group as easily as by a digit.
        local = one("local_cpulist", self.cpulist)
        if "local_cpus" in attrs:
            masked = one("local_cpus", self.cpumask)
            if local is None:
                local = masked
            elif masked is not None and local != masked:
                mask_text = attrs["local_cpus"]
                assert isinstance(mask_text, str)
                notes.append(
                    (
                        "pci.local-cpus.disagree",
                        None,
                        f"local_cpulist says {local.cpulist() or '(none)'} but local_cpus "
                        f"{mask_text.strip()} means {masked.cpulist() or '(none)'}; using "
                        "local_cpulist",
                    )
                )
        link = self.link(
            (
                one("current_link_speed", parse.parse_link_speed),
                one("current_link_width", parse.parse_link_width),
                one("max_link_speed", parse.parse_link_speed),
                one("max_link_width", parse.parse_link_width),
            )
        )
        numvfs = one("sriov_numvfs", parse.parse_int)
        class_code, prog_if = cls if cls is not None else (None, None)
        parsed = (
            class_code,
            prog_if,
            vendor,
            device,
            subsystem_vendor,
            subsystem_device,
            numa,
            local,
            link,
            numvfs,
        )
        return parsed, tuple(notes)


# function(): class code, prog-if, vendor, device, subsystem vendor, subsystem device, numa_node
# as written, local CPUs, link, sriov_numvfs.
_FunctionValues = tuple[
    int | None,
    int | None,
    int | None,
    int | None,
    int | None,
    int | None,
    int | None,
    CpuSet | None,
    PciLink,
    int | None,
]


def _why(err: HostError) -> str:
    return f"{type(err).__name__}: {err.detail}"


def walk_pci(host: HostReader, problems: Problems, cpus_limit: int = MAX_CPU) -> list[RawPci]:
    """Every PCI function under /sys/devices/pci*, found by walking real directories only.

    The walk descends into `DDDD:BB:DD.F` subdirectories (bridges hold their children) and into
    nested `pciDDDD:BB` host bridges (Intel VMD). It never follows symlinks, so the cycles through
    `subsystem`/`driver`/`device` links cannot trap it, and it also finds bridges that a dump
    left out of /sys/bus/pci/devices. An address found in several places (a hand-edited dump) is
    settled by /sys/bus/pci/devices (_settle_duplicates).
    """
    out: list[RawPci] = []
    try:
        top = host.scandir(SYS_DEVICES)
    except HostError as err:
        problems.add("pci.unreadable", SYS_DEVICES, _why(err))
        return out
    values = _Values(problems, cpus_limit)
    # (directory, host bridge name, ancestors, its subdirectories when already listed, the
    # function whose directory it is)
    Item = tuple[str, str, tuple[PciAddress, ...], "list[str] | None", "RawPci | None"]
    stack: list[Item] = [
        (f"{SYS_DEVICES}/{e.name}", e.name, (), None, None)
        for e in reversed(top)
        if e.is_dir and parse.is_host_bridge_name(e.name)
    ]
    while stack:
        dir_path, bridge, ancestors, kids, parent = stack.pop()
        if kids is None:
            try:
                kids = host.read_directory(dir_path, _NOTHING)[1]
            except HostError as err:
                problems.add("pci.vanished", dir_path, _why(err))
                continue
        children: list[Item] = []
        for name in kids:
            # Function directories (`0000:01:00.0`) and nested host bridges (`pci10000:00`) both
            # hold a ':', which no sysfs attribute or class directory name does.
            if ":" not in name:
                continue
            child = f"{dir_path}/{name}"
            if parse.is_pci_address(name):
                read = _read_pci_function(host, child, name, bridge, ancestors, parent, values)
                if read is None:
                    continue
                dev, dev_kids = read
                out.append(dev)
                children.append((child, bridge, (*ancestors, dev.address), dev_kids, dev))
            elif parse.is_host_bridge_name(name):
                children.append((child, name, (), None, None))
        stack.extend(reversed(children))
    out = _settle_duplicates(host, out, problems)
    _add_unwalked(host, out, values)
    out.sort(key=_address_order)
    return out


def _address_order(d: RawPci) -> tuple[int, int, int, int]:
    """PciAddress order as plain ints: comparing records field by field costs more."""
    a = d.address
    return (a.domain, a.bus, a.device, a.function)


def _settle_duplicates(host: HostReader, found: list[RawPci], problems: Problems) -> list[RawPci]:
    """One directory per PCI address: the one /sys/bus/pci/devices/ADDR links to.

    A live kernel has one directory per function (its `struct device`), but hand-edited dumps
    graft a device's directory under a second parent (hwloc's developers pruned and edited some
    of theirs). Every copy would otherwise become a device of its own, and the copy read last
    lends its netdevs and RDMA devices to all of them: three NICs each named `qib0`, or a SAS
    controller reported with a ConnectX's `ib0`. The copy the bus link names is kept (the
    kernel makes that link to the device's one directory, drivers/pci/bus.c pci_bus_add_device
    -> device_add -> bus_add_device); when the link is absent or names none of them, the first
    in walk order is. Every other copy is a Problem, and it is dropped with everything below it:
    a grafted subtree holds no device of this machine.
    """
    first: dict[tuple[int, int, int, int], RawPci] = {}
    copies: dict[PciAddress, list[RawPci]] = {}
    for dev in found:
        seen = first.setdefault(_address_order(dev), dev)
        if seen is not dev:
            copies.setdefault(dev.address, [seen]).append(dev)
    if not copies:
        return found
    dropped: list[str] = []  # directories ignored, with their subtrees

    def under_dropped(path: str) -> bool:
        return any(path == d or path.startswith(d + "/") for d in dropped)

    # Shallowest first, so that a grafted bridge is settled before the copies below it.
    for addr, devs in sorted(copies.items(), key=lambda kv: min(d.path.count("/") for d in kv[1])):
        alive = [d for d in devs if not under_dropped(d.path)]
        if len(alive) < 2:
            continue
        link = f"{SYS_BUS_PCI}/{addr}"
        try:
            target: str | None = host.realpath(link)
        except HostError:
            target = None
        keep = next((d for d in alive if d.path == target), None)
        if keep is not None:
            why = f"the directory {link} links to"
        else:
            keep = alive[0]
            why = (
                f"first found; {link} is absent"
                if target is None
                else f"first found; {link} links to {target}, none of them"
            )
        for d in alive:
            if d is keep:
                continue
            dropped.append(d.path)
            problems.add(
                "pci.duplicate-address",
                str(addr),
                f"also a directory at {d.path}: ignored with everything below it; using "
                f"{keep.path} ({why})",
            )
    return [d for d in found if not under_dropped(d.path)]


def _add_unwalked(host: HostReader, found: list[RawPci], values: _Values) -> None:
    """Functions listed in /sys/bus/pci/devices that the walk did not reach.

    Trimmed dumps (hwloc's `nvidiagpunumanodes`) keep devices as plain directories there with no
    /sys/devices/pci* tree; their root complex is then unknown, named after domain:bus the way
    hwloc does (`pci0004:05`), and each is recorded.
    """
    problems = values.problems
    seen = {d.name for d in found}
    normal: set[str] | None = None  # str() of every address found, built only when needed
    names = host.listdir_optional(SYS_BUS_PCI)
    for name in names or ():
        # Compared by name first: parsing the thousands already walked would cost more than the
        # listing. A name spelled otherwise (upper case, 8-digit domain) is compared parsed.
        if name in seen or not parse.is_pci_address(name):
            continue
        addr = parse.parse_pci_address(name)
        if normal is None:
            normal = {str(d.address) for d in found}
        if str(addr) in normal:
            continue
        try:
            real = host.realpath(f"{SYS_BUS_PCI}/{name}")
        except HostError as err:
            problems.add("pci.vanished", f"{SYS_BUS_PCI}/{name}", _why(err))
            continue
        parent = real.rsplit("/", 2)[-2] if real.count("/") >= 2 else ""
        bridge = (
            parent if parse.is_host_bridge_name(parent) else f"pci{addr.domain:04x}:{addr.bus:02x}"
        )
        read = _read_pci_function(host, real, name, bridge, (), None, values)
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
        seen.add(name)
        normal.add(str(addr))


def read_nvidia_driver_gpus(host: HostReader) -> set[PciAddress]:
    """PCI functions the NVIDIA kernel driver lists in /proc/driver/nvidia/gpus/<bus id>.

    Identifies GPUs in dumps whose `vendor` files were trimmed, and on hosts where the driver
    is loaded it is the driver's own view of what it bound."""
    names = host.listdir_optional(PROC_NVIDIA_GPUS) or []
    return {parse.parse_pci_address(n) for n in names if parse.is_pci_address(n)}


def _read_pci_function(
    host: HostReader,
    path: str,
    name: str,
    bridge: str,
    ancestors: tuple[PciAddress, ...],
    parent: RawPci | None,
    values: _Values,
) -> tuple[RawPci, list[str]] | None:
    """One PCI function's attributes, and its subdirectories holding functions or host bridges
    (for the walk to descend into without listing them again).

    Problems are recorded in the order the attributes are taken below, which is the order of
    the Problems in every output: keep it."""
    problems = values.problems
    try:
        attrs, subdirs, links = host.read_directory(path, _PCI_ATTRS, _PCI_LINKS)
    except HostError as err:
        problems.add("pci.vanished", path, _why(err))
        return None
    dev = RawPci(parse.parse_pci_address(name), path, bridge, ancestors, parent, name)
    (
        dev.class_code,
        dev.prog_if,
        dev.vendor_id,
        dev.device_id,
        dev.subsystem_vendor_id,
        dev.subsystem_device_id,
        dev.numa_raw,
        dev.local_cpus,
        dev.link,
        dev.sriov_numvfs,
    ) = values.function(path, dev.address, attrs)
    if links:
        dev.driver = _target_name(path, "driver", links, problems)
        pf = _target_name(path, "physfn", links, problems)
        if pf is not None:
            dev.physfn = values.address(pf)
    kids: list[str] = []
    virtio: list[str] = []
    for sub in subdirs:
        if ":" in sub:
            kids.append(sub)
        elif _is_virtio_dir(sub):
            virtio.append(sub)
    if "net" in subdirs:
        dev.netdevs = _read_netdevs(host, f"{path}/net", values)
    for sub in virtio:
        # virtio-net puts its netdev one level down: <pci fn>/virtio0/net/eth0 (the virtio bus
        # device sits between the PCI function and the netdev).
        if host.is_real_dir(f"{path}/{sub}/net"):
            dev.netdevs.extend(_read_netdevs(host, f"{path}/{sub}/net", values))
    if "infiniband" in subdirs:
        dev.rdma = _list(host, f"{path}/infiniband", problems)
    if "nvme" in subdirs:
        for ctrl in _list(host, f"{path}/nvme", problems):
            model = read_parsed(host, f"{path}/nvme/{ctrl}/model", _strip, problems)
            dev.nvme.append((ctrl, model or None))
    return dev, kids


def _target_name(
    path: str, name: str, links: dict[str, str | HostError | None], problems: Problems
) -> str | None:
    """The last component of symlink `path/name`'s target (`driver` -> `mlx5_core`), as
    Host.link_name() gives it; None when there is no such symlink."""
    target = _answer(path, name, links, problems)
    if target is None:
        return None
    return target.rstrip("/").rsplit("/", 1)[-1] or None


def _answer(
    directory: str, name: str, answers: Mapping[str, str | HostError | None], problems: Problems
) -> str | None:
    """`name`'s entry of what was read in `directory`: None when absent, and when its read
    failed, which is noted in `problems`."""
    got = answers.get(name)
    if got is None or isinstance(got, str):
        return got
    problems.add("read.error", f"{directory}/{name}", _why(got))
    return None


def _list(host: HostReader, path: str, problems: Problems) -> list[str]:
    try:
        return host.listdir(path)
    except HostError as err:
        problems.add("read.error", path, _why(err))
        return []


def _text(
    directory: str, name: str, attrs: dict[str, str | HostError], problems: Problems
) -> str | None:
    """An attribute's text, stripped (read_parsed with _strip): unique per file (a MAC address),
    so not worth remembering."""
    text = _answer(directory, name, attrs, problems)
    if text is None:
        return None
    return text.split("\x00", 1)[0].strip() or None


def _parse_speed_mbps(text: str) -> int | None:
    # `speed` is -1 (SPEED_UNKNOWN) when the link is down on most drivers, and reading it fails
    # with EINVAL while the interface is not running (net/core/net-sysfs.c, speed_show), which
    # copies of sysfs (snapshots of such a read, `cp -r` dumps) hold as an empty file: both
    # are the kernel's normal answers for a link that is down, unknown speed, not garbage.
    if not text.strip():
        return None
    value = parse.parse_int(text)
    return value if value > 0 else None


def _read_netdevs(host: HostReader, path: str, values: _Values) -> list[NetDev]:
    """The netdevs in a function's `net/` directory: each is a directory there (a symlink to one
    in some dumps, followed inside the root)."""
    problems = values.problems
    try:
        _, dirs, links = host.read_directory(path, _NOTHING)
    except HostError as err:
        problems.add("read.error", path, _why(err))
        return []
    out = []
    for name in sorted([*dirs, *links]) if links else dirs:
        base = f"{path}/{name}"
        try:
            attrs = host.read_directory(base, _NETDEV_ATTRS)[0]
        except HostError as err:
            problems.add("read.error", base, _why(err))
            attrs = {}
        get = values.get
        out.append(
            NetDev(
                name=name,
                operstate=get(base, "operstate", attrs, _strip) or None,
                mtu=get(base, "mtu", attrs, parse.parse_int),
                speed_mbps=get(base, "speed", attrs, _parse_speed_mbps),
                mac=_text(base, "address", attrs, problems),
            )
        )
    return out


def read_rdma_class(host: HostReader, problems: Problems) -> list[tuple[str, PciAddress, str]]:
    """RDMA devices from /sys/class/infiniband: (name, the PCI function its `device` link
    names, that function's real directory).

    Used to catch devices whose directory is not below the PCI function (some dumps keep only
    the class link)."""
    out: list[tuple[str, PciAddress, str]] = []
    names = host.listdir_optional(SYS_CLASS_IB)
    for name in names or ():
        try:
            real = host.realpath(f"{SYS_CLASS_IB}/{name}/device")
        except HostError:
            continue
        last = real.rsplit("/", 1)[-1]
        if parse.is_pci_address(last):
            out.append((name, parse.parse_pci_address(last), real))
    return out
