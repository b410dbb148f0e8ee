"""The GPU/NIC distance matrix of `nvidia-smi topo -m`, as data (rendering is in cli/).

Rows and columns: GPUs in PCI order (GPU0..), then RDMA devices in natural name order (NIC0..,
nvidia-smi lists only RDMA-capable NICs, from /sys/class/infiniband). Affinity columns come from
sysfs, *not* clipped to this process's cpuset (nvidia-smi clips them; see ProcessCpus).
"""

from __future__ import annotations

from dataclasses import dataclass

from mcpnode.topology.discover import effective_local_cpus, nodes_of_cpus
from mcpnode.topology.distance import classify
from mcpnode.topology.model import PciDevice, Topology


@dataclass(frozen=True)
class MatrixRow:
    label: str  # GPU0 / NIC0
    address: str
    cells: tuple[str, ...]  # one per column, " X " handled by the renderer
    cpu_affinity: str | None  # None for NIC rows (nvidia-smi leaves them empty)
    numa_affinity: str | None
    gpu_numa_id: str | None


@dataclass(frozen=True)
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
    rows = []
    for label, dev, is_gpu in entries:
        cells = tuple("X" if other is dev else classify(dev, other) for _, other, _ in entries)
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
            gpu_numa = "N/A"  # GPU memory as a NUMA node comes from NVML (nvmlDeviceGetNumaNodeId)
        rows.append(MatrixRow(label, str(dev.address), cells, cpu_aff, numa_aff, gpu_numa))
    return TopoMatrix(
        columns=tuple(label for label, _, _ in entries),
        rows=tuple(rows),
        nic_legend=tuple(legend),
    )
