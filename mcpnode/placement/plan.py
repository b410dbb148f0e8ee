"""Where each GPU's work should run: CPUs, memory node, NICs and launcher environment.

Pure: takes a Topology, reads nothing. The rules (docs/placement.md explains them for users):

* **Local CPUs** of a GPU: its NUMA node's CPUs; the device's `local_cpulist` when the node is
  unknown (VMs, `numa_node` = -1).
* **Exclusive slice**: the online CPUs of a node, housekeeping CPUs removed, grouped into whole
  cores (SMT sibling groups, `thread_siblings_list`), and divided among the node's GPUs in PCI
  order as contiguous runs of cores, the first runs one core longer when they do not divide
  evenly (PyTorch's `--numa-binding=exclusive` splits the same way). A GPU whose node is unknown
  gets no slice and a problem, never a guess.
* **L3 domains**: where a node's cores sit in several L3 domains (AMD CCXs/CCDs, POWER9 core
  pairs), the slices follow them instead (_split_groups): whole domains per GPU when there are
  at least as many domains as GPUs, so no two GPUs share an L3; else each slice inside one
  domain. One L3 per node (Intel without SNC, a VM) or unknown caches: cut by count as above.
  Each placement also names the CPUs of its slice's L3 domain(s) (`--scope cache`, torchrun's
  `core-complex`) and of its node's package(s) (`--scope socket`).
* **Housekeeping**: `"first-core"` (default) reserves the first core of every node with CPUs
  (its lowest online CPU and that CPU's siblings) for the OS, IRQs and the agent; `"none"`
  reserves nothing; a cpulist reserves those CPUs, widened to whole cores so a slice never
  shares a core with them. The default is waived, with a problem, on a node where it would leave
  fewer cores than GPUs (a 2-CPU VM with one GPU keeps its only core for the GPU).
* **Memory node**: the GPU's node when it has CPUs. CPU-less nodes (Grace GPU memory, CXL, HBM)
  are never offered: `numactl --cpunodebind` / `set_mempolicy` on them fails or starves
  (vllm-project/vllm PR #39361).
* **NICs**: nvidia-smi's bucket between GPU and NIC (topology/distance.py), `SYS` never offered.
  RDMA-capable NICs are preferred (NCCL and UCX need them); plain Ethernet functions are offered
  only when no RDMA NIC is within reach. Of the candidates only the best bucket is kept
  (PIX < PXB < PHB < NODE), ties ordered by link speed, then width, then PCI address; SR-IOV
  virtual functions are left to the VMs they exist for.
* **MIG**: a GPU in MIG mode lists its MIG devices (GPU instance / compute instance, UUID,
  memory), each with the launcher environment of its own UUID (`CUDA_VISIBLE_DEVICES=MIG-...`,
  the only way CUDA selects one) and the parent's NICs. They share the parent's slice, local
  CPUs and memory node: MIG partitions the GPU's SMs and memory, not the host side, and the
  slice is already the GPU's share of its node. `--gpu MIG-...` selects one.
* **Environment**: `CUDA_VISIBLE_DEVICES` by UUID (index when NVML did not answer) and
  `CUDA_DEVICE_ORDER=PCI_BUS_ID` (CUDA's default order is fastest-first, not nvidia-smi's);
  `NCCL_IB_HCA` as `=mlx5_0:1,...` — the leading `=` asks NCCL for exact names, without it
  `mlx5_1` also matches `mlx5_10` (NCCL env docs, "NCCL_IB_HCA"); `NCCL_SOCKET_IFNAME` likewise
  `=`-exact; `UCX_NET_DEVICES` as `mlx5_0:1` (UCX matches whole names). Port 1 is named because
  ConnectX exposes one port per PCI function; the model does not list ports.
"""

from __future__ import annotations

import re

from mcpnode.codec.record import record, replace
from mcpnode.errors import UsageError
from mcpnode.topology.model import (
    CpuSet,
    Gpu,
    Nic,
    NumaNode,
    PciAddress,
    PciDevice,
    Topology,
    natural_key,
)
from mcpnode.topology.parse import ParseError, parse_cpulist

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (codec/typenames.py)
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import TypeVar

    T = TypeVar("T")


HOUSEKEEPING_DEFAULT = "first-core"
NIC_BUCKETS = ("PIX", "PXB", "PHB", "NODE")  # offered, closest first; SYS never
RDMA_PORT = 1


@record(frozen=True)
class NicChoice:
    address: PciAddress
    rdma: str | None  # first RDMA device of the function (mlx5_0); None for plain Ethernet
    netdevs: tuple[str, ...]
    bucket: str  # PIX / PXB / PHB / NODE
    link_speed_gts: float | None  # current PCIe link speed, GT/s
    link_width: int | None  # current PCIe link width, lanes


@record(frozen=True)
class MigPlacement:
    """One MIG device of a GPU: its identity and the environment that selects it."""

    uuid: str
    gpu_instance_id: int | None
    compute_instance_id: int | None
    memory_mib: int | None
    profile: str | None  # `3g.40gb`
    env: tuple[tuple[str, str], ...]


@record(frozen=True)
class GpuPlacement:
    index: int
    uuid: str | None
    address: PciAddress
    numa_node: int | None
    numa_source: str
    local_cpus: CpuSet  # NUMA-local CPUs (the node's CPUs, or local_cpulist); empty if unknown
    slice_cpus: CpuSet  # exclusive slice: whole cores, housekeeping excluded
    memory_nodes: CpuSet  # node(s) to bind; never a CPU-less node
    nics: tuple[NicChoice, ...]  # best bucket only, nearest/fastest first
    nvlink_peers: tuple[int, ...]  # indices of GPUs reached over NVLink
    env: tuple[tuple[str, str], ...]  # (name, value), in a fixed order
    mig: tuple[MigPlacement, ...] = ()  # MIG devices, by slot (MIG mode only)
    # `--scope cache`: the online CPUs of the L3 domain(s) the slice lies in (torchrun's
    # `core-complex`); empty without a slice or without cache information
    cache_cpus: CpuSet = CpuSet()
    # `--scope socket`: the online CPUs of the package(s) holding the GPU's node's CPUs
    socket_cpus: CpuSet = CpuSet()


@record(frozen=True)
class Placement:
    gpus: tuple[GpuPlacement, ...]
    housekeeping: CpuSet  # CPUs reserved, widened to whole cores
    problems: tuple[str, ...]


def plan_placement(topo: Topology, housekeeping: str = HOUSEKEEPING_DEFAULT) -> Placement:
    """Place every GPU of `topo`.

    `housekeeping` is `"first-core"`, `"none"` or a cpulist. Raises UsageError for anything else.
    """
    problems: list[str] = []
    online = topo.cpus.online
    siblings = {c.id: (c.siblings & online) | CpuSet({c.id}) for c in topo.cpus.cpus if c.online}
    cpu_nodes = [n for n in topo.numa_nodes if n.has_cpus and n.cpus & online]
    gpu_node = {g.address: _cpu_node(g, topo) for g in topo.gpus}
    gpus_on = {
        n.id: sorted((g for g in topo.gpus if gpu_node[g.address] == n.id), key=lambda g: g.address)
        for n in cpu_nodes
    }
    reserved = _housekeeping(housekeeping, cpu_nodes, online, siblings, gpus_on, problems)
    l3 = [c.cpus for c in topo.cache_domains(3)]
    touched: dict[tuple[int, ...], CpuSet] = {}
    sockets = _sockets(topo)

    slices: dict[PciAddress, CpuSet] = {}
    for node in cpu_nodes:
        gpus = gpus_on[node.id]
        if not gpus:
            continue
        free = (node.cpus & online) - reserved
        cores = _cores(free, siblings)
        if len(cores) < len(gpus):
            problems.append(
                f"node {node.id}: {len(cores)} core(s) outside housekeeping for {len(gpus)} GPUs;"
                f" GPUs {_indices(gpus[len(cores) :])} get no exclusive slice"
            )
        groups = _by_l3(cores, [dom for dom in l3 if dom & free])
        shares = _split(cores, len(gpus)) if groups is None else _split_groups(groups, len(gpus))
        for gpu, share in zip(gpus, shares, strict=True):
            slices[gpu.address] = CpuSet(cpu for core in share for cpu in core)

    # Imported here, not with the module: launches from a published manifest (placement/
    # source.py) use this module's types and never plan, and matrix brings discovery with it.
    from mcpnode.topology.matrix import nvlink_counts

    nv = nvlink_counts(topo)
    pci = {d.address: d for d in topo.pci_devices}
    index_of = {g.address: g.index for g in topo.gpus}
    out = []
    for gpu in sorted(topo.gpus, key=lambda g: g.address):
        node_id = gpu_node[gpu.address]
        home = topo.node(node_id) if node_id is not None else None
        if home is not None:
            local = home.cpus
        else:
            local = gpu.local_cpus or CpuSet()
            problems.append(
                f"GPU {gpu.index} ({gpu.address}): NUMA node unknown"
                f" (numa_source {gpu.numa_source}); no exclusive slice or memory node"
            )
        peers = tuple(sorted(index_of[b] for (a, b) in nv if a == gpu.address and b in index_of))
        nics = nearest_nics(topo, gpu, pci)
        uuid = gpu.nvml.uuid if gpu.nvml is not None else None
        out.append(
            GpuPlacement(
                index=gpu.index,
                uuid=uuid,
                address=gpu.address,
                numa_node=gpu.numa_node,
                numa_source=gpu.numa_source,
                local_cpus=CpuSet(local),
                slice_cpus=slices.get(gpu.address, CpuSet()),
                memory_nodes=CpuSet({node_id}) if node_id is not None else CpuSet(),
                nics=nics,
                nvlink_peers=peers,
                env=launcher_env(gpu.index, uuid, nics),
                mig=_mig(gpu, nics),
                cache_cpus=_touched(slices.get(gpu.address, CpuSet()), l3, touched),
                socket_cpus=sockets.get(home.id, CpuSet()) if home is not None else CpuSet(),
            )
        )
    return Placement(gpus=tuple(out), housekeeping=reserved, problems=tuple(problems))


def _mig(gpu: Gpu, nics: tuple[NicChoice, ...]) -> tuple[MigPlacement, ...]:
    devices = gpu.nvml.mig_devices if gpu.nvml is not None else None
    return tuple(
        MigPlacement(
            uuid=d.uuid,
            gpu_instance_id=d.gpu_instance_id,
            compute_instance_id=d.compute_instance_id,
            memory_mib=d.memory_mib,
            profile=d.profile,
            env=launcher_env(gpu.index, d.uuid, nics),
        )
        for d in devices or ()
        if d.uuid is not None
    )


def as_mig(parent: GpuPlacement, mig: MigPlacement) -> GpuPlacement:
    """The placement of one MIG device: its parent's, with the device's own UUID and
    environment (and no MIG devices of its own)."""
    return replace(parent, uuid=mig.uuid, env=mig.env, mig=())


_GPU_INDEX = re.compile(r"0|[1-9][0-9]{0,3}", re.ASCII)  # no leading zero: "00" is no index


def select_gpus(
    placement: Placement, selector: str, process_cpus: CpuSet | None = None
) -> tuple[GpuPlacement, ...]:
    """The GPUs `selector` names: an index (`"3"`), a UUID (`"GPU-8f..."`, or a MIG device's
    `"MIG-..."`: its parent's placement with its own environment), or `"all-local"`
    (every GPU whose node holds all of `process_cpus`). Raises UsageError naming the selector.

    An index is ASCII digits and nothing else: str.isdigit() also takes `²` (which int()
    then refuses) and int() takes fullwidth `０`, Arabic-Indic `٠` and surrounding whitespace
    (`"0\n"`), each of which would quietly select GPU 0."""
    sel = selector
    known = ", ".join(str(g.index) for g in placement.gpus) or "none"
    if sel == "all-local":
        if process_cpus is None or not process_cpus:
            raise UsageError("--gpu all-local: the CPUs this process may use are unknown")
        chosen = tuple(g for g in placement.gpus if g.memory_nodes and process_cpus <= g.local_cpus)
        if not chosen:
            raise UsageError(
                f"--gpu all-local: no GPU's NUMA node holds this process's CPUs"
                f" {process_cpus.cpulist()} (GPU local CPUs: "
                + (
                    "; ".join(f"{g.index}: {g.local_cpus.cpulist() or '?'}" for g in placement.gpus)
                    or "no GPUs"
                )
                + ")"
            )
        return chosen
    if _GPU_INDEX.fullmatch(sel):
        for g in placement.gpus:
            if g.index == int(sel):
                return (g,)
        raise UsageError(f"--gpu {selector!r}: no GPU with that index (GPUs: {known})")
    for g in placement.gpus:
        if g.uuid is not None and g.uuid.lower() == sel.lower():
            return (g,)
        for m in g.mig:
            if m.uuid.lower() == sel.lower():
                return (as_mig(g, m),)
    raise UsageError(
        f"--gpu {selector!r}: not a GPU index, a known UUID or 'all-local' (GPUs: {known})"
    )


def nearest_nics(
    topo: Topology, gpu: Gpu, pci: Mapping[PciAddress, PciDevice] | None = None
) -> tuple[NicChoice, ...]:
    """The NICs closest to `gpu` (see the module docstring for the rule). `pci`: the topology's
    devices by address, when the caller already has them."""
    from mcpnode.topology.distance import RANK, classify  # planning only (see plan_placement)

    if pci is None:
        pci = {d.address: d for d in topo.pci_devices}
    gdev = pci.get(gpu.address)
    if gdev is None:
        return ()
    scored: list[tuple[int, bool, Nic, str]] = []
    for nic in topo.nics:
        ndev = pci.get(nic.address)
        if ndev is None or nic.is_virtual_function:
            continue
        bucket = classify(gdev, ndev)
        if bucket in NIC_BUCKETS:
            scored.append((RANK[bucket], bool(nic.rdma_devices), nic, bucket))
    if any(rdma for _, rdma, _, _ in scored):
        scored = [s for s in scored if s[1]]
    if not scored:
        return ()
    best = min(rank for rank, _, _, _ in scored)
    chosen = [(nic, bucket) for rank, _, nic, bucket in scored if rank == best]
    chosen.sort(
        key=lambda p: (
            -(p[0].link.current_speed_gts or 0.0),
            -(p[0].link.current_width or 0),
            p[0].address,
        )
    )
    return tuple(
        NicChoice(
            address=nic.address,
            rdma=min(nic.rdma_devices, key=natural_key) if nic.rdma_devices else None,
            netdevs=tuple(sorted((d.name for d in nic.netdevs), key=natural_key)),
            bucket=bucket,
            link_speed_gts=nic.link.current_speed_gts,
            link_width=nic.link.current_width,
        )
        for nic, bucket in chosen
    )


def launcher_env(
    index: int, uuid: str | None, nics: tuple[NicChoice, ...]
) -> tuple[tuple[str, str], ...]:
    """The environment a launcher should set for one GPU; variables with nothing to say are
    left out rather than set empty (an empty NCCL_IB_HCA is not "none", it is "all")."""
    env = [("CUDA_VISIBLE_DEVICES", uuid or str(index)), ("CUDA_DEVICE_ORDER", "PCI_BUS_ID")]
    hcas = [f"{n.rdma}:{RDMA_PORT}" for n in nics if n.rdma is not None]
    ifnames = [d for n in nics for d in n.netdevs]
    if hcas:
        env.append(("NCCL_IB_HCA", "=" + ",".join(hcas)))
    if ifnames:
        env.append(("NCCL_SOCKET_IFNAME", "=" + ",".join(ifnames)))
    if hcas or ifnames:
        env.append(("UCX_NET_DEVICES", ",".join(hcas or ifnames)))
    return tuple(env)


# -- helpers -----------------------------------------------------------------------------------


def _cpu_node(gpu: Gpu, topo: Topology) -> int | None:
    """The node whose CPUs serve `gpu`: its own when that node has CPUs, else the one node its
    local CPUs fall in; None when neither says."""
    if gpu.numa_node is not None:
        node = topo.node(gpu.numa_node)
        if node is not None and node.has_cpus and node.cpus:
            return node.id
    if gpu.local_cpus:
        holders = [n.id for n in topo.numa_nodes if n.has_cpus and gpu.local_cpus & n.cpus]
        if len(holders) == 1:
            return holders[0]
    return None


def _touched(cpus: CpuSet, domains: list[CpuSet], made: dict[tuple[int, ...], CpuSet]) -> CpuSet:
    """Every CPU of the domains `cpus` touches (online only, as the domains are); `made` keeps
    each union built, as the GPUs of a node often touch the same domains."""
    hit = tuple(i for i, dom in enumerate(domains) if not dom.isdisjoint(cpus))
    union = made.get(hit)
    if union is None:
        union = made[hit] = CpuSet(cpu for i in hit for cpu in domains[i])
    return union


def _sockets(topo: Topology) -> dict[int, CpuSet]:
    """Per node with CPUs: the online CPUs of the package(s) its CPUs are on; a node with a CPU
    whose package id is unknown (no `physical_package_id`) is left out."""
    package_of = {c.id: c.package_id for c in topo.cpus.cpus}
    members: dict[int | None, set[int]] = {}
    for c in topo.cpus.cpus:
        if c.online:
            members.setdefault(c.package_id, set()).add(c.id)
    out = {}
    for node in topo.numa_nodes:
        mine = {package_of.get(cpu) for cpu in node.cpus}
        if mine and None not in mine:
            out[node.id] = CpuSet(cpu for pkg in mine for cpu in members.get(pkg, ()))
    return out


def _cores(cpus: CpuSet, siblings: dict[int, CpuSet]) -> list[CpuSet]:
    """`cpus` as whole cores, by lowest CPU id. A core with a sibling outside `cpus` (reserved,
    or on another node) is dropped whole, so no slice shares a core."""
    seen: set[int] = set()
    cores = []
    for cpu in sorted(cpus):
        if cpu in seen:
            continue
        core = siblings.get(cpu, CpuSet({cpu}))
        seen.update(core)
        if core <= cpus:
            cores.append(core)
    return cores


def _by_l3(cores: list[CpuSet], l3: list[CpuSet]) -> list[list[CpuSet]] | None:
    """`cores` grouped by the L3 domain holding them (`l3`: the domains holding some of the
    node's free CPUs), domains in order of their lowest core;
    None when the node's cores are in one domain (nothing to respect) or when a core lies in
    no domain or across two (the caches are unknown or inconsistent: cut by count as before)."""
    if not cores or len(l3) < 2:
        return None
    groups: dict[int, list[CpuSet]] = {}
    for core in cores:
        holder = [i for i, dom in enumerate(l3) if core <= dom]
        if len(holder) != 1:
            return None
        groups.setdefault(holder[0], []).append(core)
    if len(groups) < 2:
        return None
    return sorted(groups.values(), key=lambda g: min(g[0]))


def _split_groups(groups: list[list[CpuSet]], n: int) -> list[list[CpuSet]]:
    """Cores of several L3 domains into `n` slices that never split a domain between two GPUs
    when that can be helped (torchrun's `core-complex` reasoning: a slice's threads share an
    L3, and no other GPU's threads evict it):

    * at least as many domains as GPUs: whole domains, in order, as contiguous runs of domains
      whose counts differ by at most one (first runs longer), as _split cuts cores;
    * fewer domains than GPUs: the GPUs are dealt to the domains in proportion to their cores
      (largest remainder, every domain at least one GPU while GPUs last), and each domain's
      cores are cut among its GPUs by _split: a slice then lies inside one domain.

    With more GPUs than cores (a problem the caller records) this falls back to _split."""
    if n <= len(groups):
        return [[core for group in run for core in group] for run in _split(groups, n)]
    total = sum(len(g) for g in groups)
    if total < n:
        return _split([core for group in groups for core in group], n)
    # One GPU per domain, then each further GPU to the domain with the most cores per GPU
    # (D'Hondt's rule: shares proportional to the cores, no domain given more GPUs than cores).
    counts = [1] * len(groups)
    for _ in range(n - len(groups)):
        room = [i for i in range(len(groups)) if counts[i] < len(groups[i])]
        best = max(room, key=lambda i: (len(groups[i]) / counts[i], -i))
        counts[best] += 1
    out: list[list[CpuSet]] = []
    for group, k in zip(groups, counts, strict=True):
        out.extend(_split(group, k))
    return out


def _split(items: list[T], n: int) -> list[list[T]]:
    """`items` (cores, or L3 domains) into `n` contiguous runs, sizes differing by at most
    one, longer runs first."""
    q, r = divmod(len(items), n)
    out = []
    start = 0
    for i in range(n):
        size = q + (1 if i < r else 0)
        out.append(items[start : start + size])
        start += size
    return out


def _housekeeping(
    spec: str,
    cpu_nodes: list[NumaNode],
    online: CpuSet,
    siblings: dict[int, CpuSet],
    gpus_on: dict[int, list[Gpu]],
    problems: list[str],
) -> CpuSet:
    spec = spec.strip()
    if spec == "none":
        return CpuSet()
    if spec == HOUSEKEEPING_DEFAULT:
        reserved: set[int] = set()
        for node in cpu_nodes:
            node_cpus = node.cpus & online
            first = siblings.get(min(node_cpus), CpuSet({min(node_cpus)})) & node_cpus
            n_gpus = len(gpus_on[node.id])
            if n_gpus and len(_cores(node_cpus - first, siblings)) < n_gpus:
                problems.append(
                    f"node {node.id}: housekeeping core {first.cpulist()} left to the GPUs"
                    f" (only {len(_cores(node_cpus, siblings))} core(s) for {n_gpus} GPU(s))"
                )
                continue
            reserved.update(first)
        return CpuSet(reserved)
    try:
        asked = parse_cpulist(spec)
    except ParseError as err:
        raise UsageError(
            f"housekeeping {spec!r}: expected 'first-core', 'none' or a cpulist ({err})"
        ) from err
    missing = asked - online
    if missing:
        problems.append(f"housekeeping CPUs {missing.cpulist()} are not online; ignored")
    widened: set[int] = set()
    for cpu in asked & online:
        widened.update(siblings.get(cpu, CpuSet({cpu})))
    return CpuSet(widened)


def _indices(gpus: list[Gpu]) -> str:
    return ",".join(str(g.index) for g in gpus)
