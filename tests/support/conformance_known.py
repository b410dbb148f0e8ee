"""Where mcpnode and hwloc 2.9 differ on the dumps in ../shared/hosts, and why.

Used by tests/topology/test_conformance_hwloc.py. Every difference that test finds must match
exactly one entry here, and every entry must still match a difference in each answer file it names
(for each key it lists), so the table cannot rot into a list of excuses.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from mcpnode.topology.model import CpuSet, Topology
from mcpnode.topology.parse import parse_cpulist


@dataclass(frozen=True)
class Diff:
    """One answer on which mcpnode and hwloc differ, both rendered as strings."""

    variant: str  # hwloc's answer file, without `.groundtruth.json`: NAME or NAME.disallowed
    field: str  # `numa.cpus`, `pci.numa`, ...
    key: str  # node id, PCI bus id, or "" for machine-wide answers
    ours: str
    theirs: str

    def __str__(self) -> str:
        return (
            f"[{self.variant}] {self.field} {self.key or '(machine)'}: "
            f"mcpnode {self.ours!r}, hwloc {self.theirs!r}"
        )


@dataclass(frozen=True)
class Known:
    """A documented difference.

    `keys` lists the node ids / bus ids it covers, each of which must differ; `("*",)` is a
    dump-wide rule over every key of `field`, usually with `holds` checking the reason
    mechanically. `ours`/`theirs`, when given, must equal the rendered answers. `problem` is a
    (code, source) Problem mcpnode must have recorded; `{key}` in the source is the diff's key.
    `variants` names the answer files ("" for NAME, "disallowed", "keepgpunuma"); None is all.
    """

    dump: str
    field: str
    keys: tuple[str, ...]
    category: str
    reason: str
    ours: str | None = None
    theirs: str | None = None
    variants: tuple[str, ...] | None = None
    problem: tuple[str, str] | None = None
    holds: Callable[[Diff, Topology], bool] | None = None

    def variant_name(self, variant: str) -> str:
        return self.dump if not variant else f"{self.dump}.{variant}"

    def matches(self, d: Diff, topo: Topology) -> bool:
        if d.field != self.field or (self.keys != ("*",) and d.key not in self.keys):
            return False
        if self.variants is None:
            if d.variant != self.dump and not d.variant.startswith(self.dump + "."):
                return False
        elif d.variant not in {self.variant_name(v) for v in self.variants}:
            return False
        if self.ours is not None and d.ours != self.ours:
            return False
        if self.theirs is not None and d.theirs != self.theirs:
            return False
        return self.holds is None or self.holds(d, topo)


# -- mechanical checks for dump-wide rules ------------------------------------------------------


def _set(rendered: str) -> CpuSet:
    return CpuSet() if rendered == "(none)" else parse_cpulist(rendered)


def _cut_to_process_cpus(d: Diff, topo: Topology) -> bool:
    """hwloc shows only the allowed part of the node: ours ∩ the process's cgroup CPUs."""
    allowed = topo.process.cpus
    return allowed is not None and _set(d.theirs) == _set(d.ours) & allowed


def _all_cpus_outside_process(d: Diff, topo: Topology) -> bool:
    node = topo.node(int(d.key))
    allowed = topo.process.cpus
    return (
        (d.ours, d.theirs) == ("has CPUs", "cpuless")
        and node is not None
        and allowed is not None
        and not node.cpus & allowed
    )


def _outside_process_mems(d: Diff, topo: Topology) -> bool:
    mems = topo.process.mems
    return (
        (d.ours, d.theirs) == ("listed", "hidden") and mems is not None and int(d.key) not in mems
    )


def _online_part(d: Diff, topo: Topology) -> bool:
    return _set(d.theirs) == _set(d.ours) & topo.cpus.online


def _named_after_domain_bus(d: Diff, topo: Topology) -> bool:
    """`pci0004:05` for 0004:05:00.0, as hwloc names the host bridge it makes up."""
    return d.theirs == "(none)" and d.ours == f"pci{d.key[:7]}"


def _unknown_is_whole_machine(d: Diff, topo: Topology) -> bool:
    """hwloc attaches a device it cannot place to the machine: every NUMA node."""
    return d.ours == "unknown" and _set(d.theirs) == CpuSet(n.id for n in topo.numa_nodes)


# -- the table ----------------------------------------------------------------------------------

_HOST_BRIDGE = (
    "hwloc attaches every device under a host bridge to that bridge's locality (the first "
    "function's local_cpus) and never reads a device's own numa_node or local_cpulist; "
    "mcpnode follows the device's own files and records the disagreement"
)
_UNKNOWN = (
    "numa_node -1 with a local_cpulist spanning every node: the firmware gave no locality. "
    "hwloc reports the whole machine; mcpnode says unknown (None), never a made-up node"
)
_NO_PROCESS = (
    "the dump has no /proc/self/status and no mounted cpuset to read: mcpnode says unknown "
    "(None); hwloc assumes the process may use every CPU"
)
_NV = "nvidiagpunumanodes"
_NV_GPUS = (
    "0004:05:00.0",
    "0004:06:00.0",
    "0006:00:00.0",
    "0007:00:00.0",
    "0035:04:00.0",
    "0035:05:00.0",
)
_NV_GPU_NODES = ("250", "251", "252", "253", "254", "255")
_40I = "40intel64-2g2n4c+pcilocality"
_32E = "32em64t-2n8c+dax+nvme+mic+dimms"
_CG2 = "32amd64-4s2n4c-cgroup2"
_OFF = "offline-cpu0-node0"
_IA64 = "128ia64-17n4s2c"

KNOWN: tuple[Known, ...] = (
    # -- PCI locality: hwloc's host-bridge rule against the device's own files
    Known(
        _32E,
        "pci.cpus",
        ("0000:00:02.0",),
        "hwloc-host-bridge-locality",
        f"{_HOST_BRIDGE}. The NVMe was grafted from another machine (hwloc's own note): its "
        "local_cpulist says 0-3 inside node 0's 0-7, numa_node -1 (node 0 by host-bridge "
        "consensus, on which both agree)",
        ours="0-3",
        theirs="0-7",
        problem=("pci.numa.local-cpus-disagree", "{key}"),
    ),
    Known(
        _40I,
        "pci.numa",
        ("0000:43:00.0",),
        "hwloc-host-bridge-locality",
        f"{_HOST_BRIDGE}. This HCA's numa_node says 2 while its local_cpulist says 0-39 and "
        "every other function on pci0000:40 says -1",
        ours="2",
        theirs="0-3",
        problem=("pci.numa.local-cpus-disagree", "{key}"),
    ),
    # -- PCI locality the firmware did not give
    Known(
        _40I,
        "pci.numa",
        ("0000:02:00.0", "0000:02:00.1", "0000:03:00.0", "0000:03:00.1"),
        "unknown-locality",
        f"{_UNKNOWN}. These are NICs, so mcpnode also records that their locality is unknown",
        ours="unknown",
        theirs="0-3",
        problem=("pci.numa.unknown", "{key}"),
    ),
    Known(
        _40I,
        "pci.numa",
        ("*",),
        "unknown-locality",
        f"{_UNKNOWN} (bridges, storage, USB, VGA: no Problem for devices placement ignores)",
        holds=_unknown_is_whole_machine,
    ),
    Known(
        _32E,
        "pci.numa",
        ("*",),
        "unknown-locality",
        f"{_UNKNOWN}: the uncore host bridges pci0000:7f and pci0000:ff, where no function "
        "gives a node",
        holds=_unknown_is_whole_machine,
    ),
    # -- PCI functions one side lists and the other does not
    Known(
        _32E,
        "pci.found",
        ("0000:00:11.0",),
        "dump-inconsistent",
        "a root port whose config space says secondary = subordinate bus 0 (the 'bogus bus "
        "numbers' of hwloc's hand edit): hwloc_pcidisc_find_bridge_buses rejects it and hwloc "
        "drops the bridge; mcpnode lists every function sysfs shows",
        ours="found",
        theirs="missing",
    ),
    Known(
        "32intel64-2p8co2t+8ve",
        "pci.found",
        ("0000:5f:03.0",),
        "mcpnode-walks-devices",
        "this PLX downstream port is under /sys/devices but missing from /sys/bus/pci/devices, "
        "which is all hwloc enumerates (its chain for 0000:60:00.x skips the port); mcpnode walks "
        "/sys/devices and finds it",
        ours="found",
        theirs="missing",
    ),
    # -- the trimmed POWER9 dump with NVIDIA GPUs
    Known(
        _NV,
        "pci.vendor",
        _NV_GPUS,
        "trimmed-dump",
        "the dump kept only `class` and `local_cpus` for the GPUs: hwloc has no vendor (0000); "
        "mcpnode takes NVIDIA from /proc/driver/nvidia/gpus/<bus id>, the driver's own claim",
        ours="10de",
        theirs="unknown",
    ),
    Known(
        _NV,
        "pci.root_complex",
        _NV_GPUS,
        "trimmed-dump",
        "the GPUs are plain directories in /sys/bus/pci/devices with no /sys/devices/pci* tree: "
        "no root complex in sysfs. mcpnode names it after domain:bus as hwloc does "
        "('hostbridge 0004:[05-05]') and records that the upstream bridges are unknown",
        problem=("pci.outside-tree", "{key}"),
        holds=_named_after_domain_bus,
    ),
    Known(
        _NV,
        "process.cpus",
        ("",),
        "cgroup-v1-file",
        "cgroup v1 cpuset 'jjh': cpuset.cpus says 0-175, cpuset.effective_cpus 0-87. mcpnode "
        "reads effective_cpus, what the kernel enforces, and keeps its online part (0-15); hwloc "
        "reads cpuset.cpus and keeps the online part. On the legacy hierarchy the two files are "
        "equal on a real machine, so the dump was edited (its CPUs were trimmed to 0-15,88-103)",
        ours="0-15",
        theirs="0-15,88-103",
    ),
    Known(
        _NV,
        "numa.node",
        _NV_GPU_NODES,
        "gpu-numa-hidden",
        "nodes 250-255 are the V100s' memory (proc/driver/nvidia/gpus/*/numa_status): hwloc hides "
        "them unless HWLOC_KEEP_NVIDIA_GPU_NUMA_NODES=1 (the keepgpunuma answers, compared too); "
        "mcpnode keeps every node sysfs lists, CPU-less",
        ours="listed",
        theirs="hidden",
        variants=("", "disallowed"),
    ),
    Known(
        _NV,
        "numa.cpus",
        ("250", "251", "252"),
        "gpu-numa-locality",
        "hwloc hangs a GPU memory node under its GPU's package and gives it that package's CPUs; "
        "the kernel node has none (empty cpulist, has_cpu 0,8)",
        ours="(none)",
        theirs="88-103",
        variants=("keepgpunuma",),
    ),
    Known(
        _NV,
        "numa.cpus",
        ("253", "254", "255"),
        "gpu-numa-locality",
        "as for 250-252, under package 0",
        ours="(none)",
        theirs="0-15",
        variants=("keepgpunuma",),
    ),
    Known(
        _NV,
        "numa.cpuless",
        _NV_GPU_NODES,
        "gpu-numa-locality",
        "hwloc gives GPU memory nodes their package's CPUs; mcpnode marks them CPU-less, since "
        "they are never a pinning target",
        ours="cpuless",
        theirs="has CPUs",
        variants=("keepgpunuma",),
    ),
    Known(
        _NV,
        "pci.numa",
        _NV_GPUS[:3],
        "gpu-numa-locality",
        "with GPU memory nodes kept, hwloc's locality of a GPU is its package's nodes: node 0 "
        "and the GPU memory nodes under it; mcpnode gives the one node the GPU is attached to",
        ours="0",
        theirs="0,253-255",
        variants=("keepgpunuma",),
    ),
    Known(
        _NV,
        "pci.numa",
        _NV_GPUS[3:],
        "gpu-numa-locality",
        "as above, under package 8",
        ours="8",
        theirs="8,250-252",
        variants=("keepgpunuma",),
    ),
    # -- what a cgroup hides from hwloc (the plain answers; `.disallowed` shows everything)
    Known(
        _CG2,
        "numa.cpus",
        ("*",),
        "cgroup-hidden",
        "hwloc shows only the CPUs of the cgroup (cpuset.cpus.effective 0-5); mcpnode's node "
        "CPUs are the whole node and the cgroup is ProcessCpus",
        variants=("",),
        holds=_cut_to_process_cpus,
    ),
    Known(
        _CG2,
        "numa.cpuless",
        ("*",),
        "cgroup-hidden",
        "a node whose CPUs are all outside the cgroup looks CPU-less in hwloc's plain answers",
        variants=("",),
        holds=_all_cpus_outside_process,
    ),
    Known(
        _CG2,
        "numa.node",
        ("*",),
        "cgroup-hidden",
        "hwloc hides nodes outside the cgroup's cpuset.mems.effective (0-5)",
        variants=("",),
        holds=_outside_process_mems,
    ),
    # -- offline CPUs and nodes
    Known(
        _OFF,
        "numa.cpus",
        ("1",),
        "offline-cpus",
        "hwloc drops offline CPUs (1,3,21,23) from node sets; mcpnode lists every present CPU "
        "of the node and marks each CPU's online state",
        holds=_online_part,
    ),
    Known(
        _OFF,
        "numa.distances",
        ("1",),
        "dump-inconsistent",
        "node1/distance has 2 values but node/online lists only node 1, and the kernel prints "
        "one per online node (drivers/base/node.c, node_read_distance): the dump was edited "
        "from a 2-node machine. mcpnode will not guess which value is which and records it; "
        "hwloc, with one node, shows no matrix",
        ours="(none)",
        theirs="21 10",
        problem=("numa.distance.mismatch", "/sys/devices/system/node/node{key}/distance"),
    ),
    # -- what old or partial dumps lack
    Known(
        _IA64,
        "cpu.possible",
        ("",),
        "old-dump-no-cpu-files",
        "this ia64 dump predates cpu/possible: mcpnode takes possible = present",
        ours="0-127",
        theirs="(no file; hwloc uses 0-127)",
    ),
    Known(
        _IA64,
        "cpu.present",
        ("",),
        "old-dump-no-cpu-files",
        "no cpu/present: mcpnode uses the cpuN directories and says so",
        ours="0-127",
        theirs="(no file; hwloc uses 0-127)",
        problem=("cpu.present.missing", "/sys/devices/system/cpu/present"),
    ),
    Known(
        _IA64,
        "cpu.online",
        ("",),
        "old-dump-no-cpu-files",
        "no cpu/online: mcpnode assumes every present CPU is online and says so",
        ours="0-127",
        theirs="(no file; hwloc uses 0-127)",
        problem=("cpu.online.missing", "/sys/devices/system/cpu/online"),
    ),
    Known(
        _IA64,
        "process.cpus",
        ("",),
        "process-cpus-unknown",
        _NO_PROCESS,
        ours="unknown",
        theirs="0-127",
    ),
    Known(
        "48amd64-4pa2n6c-sparse",
        "process.cpus",
        ("",),
        "process-cpus-unknown",
        _NO_PROCESS,
        ours="unknown",
        theirs="0-47",
    ),
    Known(
        _32E,
        "process.cpus",
        ("",),
        "process-cpus-unknown",
        f"{_NO_PROCESS} (proc/self/cpuset says '/', but only a memory cgroup is mounted)",
        ours="unknown",
        theirs="0-15",
    ),
)
