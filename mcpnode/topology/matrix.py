"""The GPU/NIC distance matrix of `nvidia-smi topo -m`, as data (rendering is in cli/).

Rows and columns: GPUs in PCI order (GPU0..), then RDMA devices in natural name order (NIC0..,
nvidia-smi lists only RDMA-capable NICs, from /sys/class/infiniband). Affinity columns come from
sysfs, *not* clipped to this process's cpuset (nvidia-smi clips them; see ProcessCpus).
"""

from __future__ import annotations

from mcpnode.codec.record import record
from mcpnode.topology.discover import effective_local_cpus, nodes_of_cpus
from mcpnode.topology.distance import classify
from mcpnode.topology.model import PciAddress, PciDevice, Topology


@record(frozen=True)
class MatrixRow:
    label: str  # GPU0 / NIC0
    address: str
    cells: tuple[str, ...]  # one per column, " X " handled by the renderer
    cpu_affinity: str | None  # None for NIC rows (nvidia-smi leaves them empty)
    numa_affinity: str | None
    gpu_numa_id: str | None


@record(frozen=True)
class TopoMatrix:
    columns: tuple[str, ...]
    rows: tuple[MatrixRow, ...]
    nic_legend: tuple[tuple[str, str], ...]  # (NIC0, mlx5_0)


def build_matrix(topo: Topology) -> TopoMatrix:
    entries: list[tuple[str, PciDevice, bool]] = []
    for gpu in topo.gpus:
        dev = topo.pci(gpu.address)
        if dev is not None:
            entries.append((f"GPU{gpu.index}", dev, True))
    legend = []
    for i, (rdma, nic) in enumerate(topo.rdma_nics()):
        dev = topo.pci(nic.address)
        if dev is not None:
            entries.append((f"NIC{i}", dev, False))
            legend.append((f"NIC{i}", rdma))
    nvlinks = nvlink_counts(topo)
    rows = []
    for label, dev, is_gpu in entries:
        cells = tuple(
            "X"
            if other is dev
            else (
                f"NV{nvlinks[dev.address, other.address]}"
                if (dev.address, other.address) in nvlinks
                else classify(dev, other)
            )
            for _, other, _ in entries
        )
        cpu_aff = numa_aff = gpu_numa = None
        if is_gpu:
            local = effective_local_cpus(dev, topo.numa_nodes)
            cpu_aff = local.cpulist() if local else "N/A"
            if dev.numa_node is not None:
                numa_aff = str(dev.numa_node)
            elif local:
                numa_aff = nodes_of_cpus(local, topo.numa_nodes).cpulist() or "N/A"
            else:
                numa_aff = "N/A"
            owner = next((g for g in topo.gpus if g.address == dev.address), None)
            mem_node = owner.memory_numa_node if owner is not None else None
            # nvmlDeviceGetNumaNodeId: GPU memory as a NUMA node (Grace); N/A elsewhere.
            gpu_numa = "N/A" if mem_node is None else str(mem_node)
        rows.append(MatrixRow(label, str(dev.address), cells, cpu_aff, numa_aff, gpu_numa))
    return TopoMatrix(
        columns=tuple(label for label, _, _ in entries),
        rows=tuple(rows),
        nic_legend=tuple(legend),
    )


def nvlink_counts(topo: Topology) -> dict[tuple[PciAddress, PciAddress], int]:
    """NV# for each ordered GPU pair joined by NVLink.

    Direct links (bridges, DGX-1 style meshes): active links whose remote is a GPU at the other
    GPU's address. NVSwitch systems: every link lands on a switch (the peer bus ids are the
    switches'), so two GPUs whose active links go to switches, on a fabric that is COMPLETED
    (Hopper+) or has no fabric state (A100: NotSupported), reach each other over all of them:
    NV<active links> (A100 NV12, H100/H200 NV18), the smaller count if the two differ.
    An inactive bridge yields nothing here, so the pair keeps its PCIe bucket.
    """
    out: dict[tuple[PciAddress, PciAddress], int] = {}
    # A GPU lost mid-discovery (GpuIsLost, XID 79) is off the bus: no NVLink to or from it. Its
    # links asked before the loss would otherwise give a wrong, smaller NV# (NV6 of NV18 when
    # lost at link 6: tests/fixtures/nvml/gpu-lost-mid-nvlink.json).
    lost = {g.address for g in topo.gpus if g.nvml is not None and g.nvml.lost}
    facts = [(g.address, g.nvml) for g in topo.gpus if g.nvml is not None and g.address not in lost]
    switched: dict[PciAddress, int] = {}
    for addr, f in facts:
        direct: dict[PciAddress, int] = {}
        n_switch = 0
        for link in f.nvlinks:
            if not link.active:
                continue
            if link.remote_type == "GPU" and link.remote_address is not None:
                direct[link.remote_address] = direct.get(link.remote_address, 0) + 1
            elif link.remote_type == "SWITCH":
                n_switch += 1
        for peer, n in direct.items():
            if peer not in lost:
                out[addr, peer] = n
        if n_switch and f.fabric_state in (None, "COMPLETED"):
            switched[addr] = n_switch
    for a, na in switched.items():
        for b, nb in switched.items():
            if a != b:
                out[a, b] = min(na, nb)
    return out
