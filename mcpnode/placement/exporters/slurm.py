"""Slurm `gres.conf` lines for the GPUs: `Name=gpu Type= File= Cores= Links=`.

What `AutoDetect=nvml` would fill in (SchedMD/slurm src/plugins/gpu/nvml/gpu_nvml.c,
`_get_system_gpu_list_nvml`), derived from mcpnode's topology instead of a slurmd built against
NVML, so the lines can be written out explicitly or compared with what slurmd logs:

* **File** `/dev/nvidia<minor>`: NVML's minor number, which need not equal the GPU index.
* **Cores**: Slurm *abstract core indices*, not Linux CPU ids (gres.conf(5), "Cores"; the
  `CPUs=` vs `Cores=` confusion is NVIDIA/deepops#1195). slurmd numbers the cores it gets
  from hwloc socket-major: index = cores in earlier sockets + position of the core in its
  socket, counting physical cores, not SMT threads (xcpuinfo.c, `xcpuinfo_hwloc_topo_get`).
  hwloc orders sockets and cores by their lowest PU, so that is the order used here; core ids
  from sysfs may have gaps (`core_id` 0-7, 16-23 on some Xeons) and are never used as indices.
  The CPU set is the GPU's NUMA-local CPUs (NVML's `nvmlDeviceGetCpuAffinity`, which is what
  AutoDetect converts), not the exclusive slice.
* **Links**: per GPU, one number per GPU in NVML index order: -1 for itself, the count of
  NVLinks to that GPU, 0 for none (gres.conf(5), "Links"). On NVSwitch systems every link
  lands on a switch, so AutoDetect would count 0 everywhere; mcpnode uses the NV# of
  `nvidia-smi topo -m` instead (topology/matrix.py `nvlink_counts`), which is what Slurm's
  coscheduling by link count is for. `Links=` is written only when some GPU has NVLink.
* **Type**: by default exactly what `AutoDetect=nvml` derives: NVML's product name with every
  ASCII letter lower-cased and every space made `_` (`_nvml_get_device_name` calls
  `gpu_common_underscorify_tolower`, src/plugins/gpu/common/gpu_common.c), so `NVIDIA H100 80GB
  HBM3` is `nvidia_h100_80gb_hbm3` and `NVIDIA A100-SXM4-80GB` is `nvidia_a100-sxm4-80gb`.
  Explicit lines then agree with autodetected ones. `type_form="short"` writes the model token
  instead (`h100`, `a100`, `l40s`). Either must match slurm.conf's `Gres=gpu:<type>:<count>`.
* **Several NUMA nodes in a socket** (AMD EPYC NPS2/NPS4, Intel SNC): each GPU's `Cores=` is
  then part of a socket. slurmd schedules GRES cores by socket unless NUMA nodes are made its
  sockets with `SlurmdParameters=numa_node_as_socket` in slurm.conf (slurm.conf(5)); a GPU
  whose cores do not fill a socket may otherwise be refused ("GRES core specification ...
  doesn't match socket boundaries", SchedMD bug 22498 and SlinkyProject/slurm-operator#205).
  The output says so in a comment on such hosts. The indices are the same either way, since
  `sub_socket_numa` only reports hosts where every NUMA node's CPUs lie in one socket.
"""

from __future__ import annotations

from typing import Literal

from mcpnode.placement.exporters.inputs import (
    AuditSummary,
    gpu_name,
    nvlink_by_index,
    short_model,
)
from mcpnode.placement.plan import Placement
from mcpnode.topology.model import CpuSet, CpuTopology, Topology

PATH = "/etc/slurm/gres-mcpnode.conf"


def slurm_core_indices(cpus: CpuTopology) -> dict[int, int]:
    """Linux CPU id -> Slurm abstract core index, for every present CPU whose package and core
    ids are known. SMT siblings map to the same index."""
    first_cpu: dict[tuple[int, int], int] = {}  # (package, core_id) -> its lowest CPU id
    for cpu in cpus.cpus:
        if cpu.package_id is None or cpu.core_id is None:
            continue
        key = (cpu.package_id, cpu.core_id)
        first_cpu[key] = min(cpu.id, first_cpu.get(key, cpu.id))
    package_first: dict[int, int] = {}
    for (pkg, _core), lo in first_cpu.items():
        package_first[pkg] = min(lo, package_first.get(pkg, lo))
    ordered = sorted(first_cpu, key=lambda k: (package_first[k[0]], first_cpu[k]))
    index_of_core = {key: i for i, key in enumerate(ordered)}
    return {
        cpu.id: index_of_core[(cpu.package_id, cpu.core_id)]
        for cpu in cpus.cpus
        if cpu.package_id is not None and cpu.core_id is not None
    }


def cores_for(cpus: CpuSet, index: dict[int, int]) -> CpuSet | None:
    """The Slurm core indices covering `cpus`; None when some CPU has no known core."""
    if not cpus or any(c not in index for c in cpus):
        return None
    return CpuSet(index[c] for c in cpus)


TypeForm = Literal["autodetect", "short"]
TYPE_FORMS: tuple[TypeForm, ...] = ("autodetect", "short")
_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ ", "abcdefghijklmnopqrstuvwxyz_")


def gres_type(name: str | None, form: TypeForm = "autodetect") -> str | None:
    """The `Type=` of a GPU named `name` by NVML: AutoDetect=nvml's spelling (C `tolower` in
    the C locale, so ASCII letters only, and spaces made `_`), or the short model token. None
    without a name. Raises ValueError for another form."""
    if form not in TYPE_FORMS:
        raise ValueError(f"gres type form {form!r} is not one of {TYPE_FORMS}")
    if not name:
        return None
    if form == "short":
        return short_model(name)
    return name.translate(_ASCII_LOWER)


def sub_socket_numa(topo: Topology) -> tuple[int, int] | None:
    """(NUMA nodes with CPUs, sockets) when some socket holds more than one NUMA node with CPUs
    (NPS>1, SNC); None otherwise, or when the CPUs' packages or nodes are unknown."""
    nodes_of: dict[int, set[int]] = {}
    packages_of: dict[int, set[int]] = {}
    for cpu in topo.cpus.cpus:
        if cpu.package_id is None or cpu.node is None:
            return None
        nodes_of.setdefault(cpu.package_id, set()).add(cpu.node)
        packages_of.setdefault(cpu.node, set()).add(cpu.package_id)
    if not any(len(nodes) > 1 for nodes in nodes_of.values()):
        return None
    if any(len(pkgs) > 1 for pkgs in packages_of.values()):
        return None  # a NUMA node across sockets: not the NPS/SNC layout this note is about
    return len(packages_of), len(nodes_of)


def render(
    topo: Topology,
    placement: Placement,
    audit: AuditSummary | None,
    *,
    type_form: TypeForm = "autodetect",
) -> str:
    """gres.conf lines, one per GPU in NVML index order, after a header saying how they were
    derived. A GPU without a minor number (NVML did not answer) gets a comment, not a line:
    `File=` is the one field Slurm cannot do without. `audit` is not used."""
    del audit
    index = slurm_core_indices(topo.cpus)
    nv = nvlink_by_index(topo)
    gpu_indices = [g.index for g in topo.gpus]
    by_index = {p.index: p for p in placement.gpus}
    lines = [
        "# Slurm gres.conf lines generated by `mcpnode export slurm` (see docs/exporters.md).",
        "# File=  /dev/nvidia<minor>, NVML's minor number (not always the GPU index).",
        "# Cores= Slurm abstract core indices of the GPU's NUMA-local CPUs: socket-major,",
        "#        physical cores only (index = cores in earlier sockets + core's position in",
        "#        its socket), as slurmd numbers hwloc's cores. Not Linux CPU ids.",
        "# Links= per GPU in index order: -1 self, NVLink count to that GPU, 0 none;",
        "#        NVSwitch systems get the NV# of `nvidia-smi topo -m`.",
        "# Type=  NVML's name as AutoDetect=nvml spells it (lower case, spaces as _)"
        if type_form == "autodetect"
        else "# Type=  the model token of NVML's name (AutoDetect=nvml would write the full name)",
        f"# {len(index)} CPUs with known cores -> {len(set(index.values()))} Slurm cores;"
        f" {len(topo.gpus)} GPU(s).",
    ]
    split = sub_socket_numa(topo)
    if split is not None and topo.gpus:
        nodes, sockets = split
        lines += [
            f"# {nodes} NUMA nodes with CPUs on {sockets} socket{'s' if sockets > 1 else ''} "
            "(NPS>1 or sub-NUMA clustering):",
            "#   each Cores= below is part of a socket. Set SlurmdParameters=numa_node_as_socket",
            "#   in slurm.conf so that slurmd's sockets are these NUMA nodes (slurm.conf(5));",
            '#   without it a GPU whose cores do not fill a socket may be refused ("GRES core',
            "#   specification ... doesn't match socket boundaries\"). The indices are the same",
            "#   either way: each NUMA node's cores lie in one socket.",
        ]
    if not topo.gpus:
        lines.append("# no GPU found: nothing to configure")
    for gpu in topo.gpus:
        p = by_index.get(gpu.index)
        minor = gpu.nvml.minor if gpu.nvml is not None else None
        label = f"GPU{gpu.index} {gpu.address}"
        if minor is None:
            lines.append(f"# {label}: minor number unknown (NVML did not answer); no line")
            continue
        fields = ["Name=gpu"]
        model = gres_type(gpu_name(gpu), type_form)
        if model is not None:
            fields.append(f"Type={model}")
        fields.append(f"File=/dev/nvidia{minor}")
        local = p.local_cpus if p is not None else (gpu.local_cpus or CpuSet())
        cores = cores_for(local, index)
        if cores is not None:
            fields.append(f"Cores={cores.cpulist()}")
        if nv:
            links = (
                -1 if other == gpu.index else nv.get((gpu.index, other), 0) for other in gpu_indices
            )
            fields.append("Links=" + ",".join(str(n) for n in links))
        node = "?" if gpu.numa_node is None else str(gpu.numa_node)
        cpus = local.cpulist() or "?"
        lines.append(f"# {label}: NUMA node {node}, CPUs {cpus}")
        if cores is None:
            lines.append(f"# {label}: CPU cores unknown; Cores= left out")
        lines.append(" ".join(fields))
    return "\n".join(lines) + "\n"
