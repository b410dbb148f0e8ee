"""nvidia-smi's distance buckets between two PCI devices, from the PCI tree and NUMA nodes.

Pure: takes model objects, reads nothing. The rules, in the order they are tried (each one is
a row of tests/topology/test_distance.py):

1. Same device (or functions of one device under the same bridge path): see rule 4.
2. Different root complexes (host bridges):
   - `NODE` when both devices' NUMA nodes are known and equal ("traversing ... the interconnect
     between PCIe Host Bridges within a NUMA node");
   - `SYS` otherwise (different nodes, or a node unknown: the conservative answer, since the
     path may cross the socket interconnect).
3. Same root complex, no bridge in common (e.g. two root ports of one host bridge, a q35 VM's
   GPU and NIC): `PHB`.
4. Same root complex with a common upstream bridge: count the *switches* on the path between
   them. A PCIe switch shows up in sysfs as an upstream port plus downstream ports; nvidia-smi
   (NVML's NVML_TOPOLOGY_SINGLE / MULTIPLE) counts it once. Ports are grouped by depth below the
   root port: depth 0 is the root port (its own group), then (upstream, downstream) pairs.
   - at most one switch (or just the shared root port): `PIX`;
   - more than one: `PXB`.

NVLink (`NV#`) replaces the GPU-GPU cell when NVML reports links; that happens a layer above.
NVIDIA documents the buckets only by their Legend text; the mapping above reproduces every
PCIe cell of real `nvidia-smi topo -m` outputs (tests/fixtures/nvidia-smi/: DGX A100, HGX
H100 with 8 NICs, 4x L40S on two sockets, a one-GPU H100 PCIe VM) on the fixtures modelled on
them (tests/fixtures/hosts/).
"""

from __future__ import annotations

from mcpnode.topology.model import PciAddress, PciDevice

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (codec/typenames.py)
if TYPE_CHECKING:
    from typing import Literal

    Bucket = Literal["X", "PIX", "PXB", "PHB", "NODE", "SYS"]

# Smaller is closer. Used to rank NICs for a GPU.
RANK: dict[str, int] = {"X": 0, "PIX": 1, "PXB": 2, "PHB": 3, "NODE": 4, "SYS": 5}


def _switch_group(depth: int) -> int:
    """Which switch a bridge at `depth` below the root port belongs to: 0 = the root port,
    1 = first switch (upstream port at depth 1, downstream ports at depth 2), 2 = next, ..."""
    return (depth + 1) // 2


def classify(a: PciDevice, b: PciDevice) -> Bucket:
    """The nvidia-smi bucket between two PCI functions."""
    if a.address == b.address:
        return "X"
    if a.host_bridge != b.host_bridge:
        if a.numa_node is not None and a.numa_node == b.numa_node:
            return "NODE"
        return "SYS"
    common = _common_prefix(a.ancestors, b.ancestors)
    if common == 0:
        return "PHB"
    groups = {_switch_group(common - 1)}
    groups.update(_switch_group(i) for i in range(common, len(a.ancestors)))
    groups.update(_switch_group(i) for i in range(common, len(b.ancestors)))
    return "PIX" if len(groups) <= 1 else "PXB"


def _common_prefix(x: tuple[PciAddress, ...], y: tuple[PciAddress, ...]) -> int:
    n = 0
    for p, q in zip(x, y, strict=False):
        if p != q:
            break
        n += 1
    return n
