"""Discovery: raw sysfs records -> the frozen Topology, with locality decided and every
disagreement between sources recorded as a Problem.

Locality of a PCI device (its NUMA node), first source that answers wins:
1. `own`: its own `numa_node` when >= 0;
2. `ancestor`: the nearest upstream bridge's own `numa_node` when >= 0;
3. `host-bridge`: the root complex's locality, when most of the functions on that root complex
   report one node and none reports another (32em64t's NVMe: -1 among 27 siblings at node 0);
4. `local-cpus`: the device's `local_cpulist` lies inside exactly one node's CPUs (a VM with one
   node, POWER9 dumps without `numa_node`); a list that spans nodes stays unknown;
5. `unknown`: never silently 0 (PyTorch's `max(numa_node, 0)` is how GPUs get pinned to the
   wrong socket). NVML facts for GPUs join in a later layer.
"""

from __future__ import annotations

from mcpnode.codec.record import replace
from mcpnode.topology import sysfs
from mcpnode.topology.caches import read_caches
from mcpnode.topology.gpumem import read_gpu_memory_nodes
from mcpnode.topology.model import (
    GPU_CLASSES,
    NVIDIA_VENDOR_ID,
    NVME_CLASS,
    Cpu,
    CpuSet,
    CpuTopology,
    Gpu,
    Nic,
    NumaNode,
    Nvme,
    NvmlGpu,
    NvmlState,
    PciAddress,
    PciDevice,
    ProcessCpus,
    Topology,
)
from mcpnode.topology.nvmens import read_namespaces
from mcpnode.topology.nvml import open_backend
from mcpnode.topology.nvml_facts import collect
from mcpnode.topology.rdmaports import read_rdma_ports
from mcpnode.topology.sysfs import Problems, RawNodes, RawPci

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (codec/typenames.py)
if TYPE_CHECKING:
    from mcpnode.host import HostReader
    from mcpnode.topology.model import NumaSource
    from mcpnode.topology.nvml import GpuBackend


def discover(host: HostReader, backend: GpuBackend | None = None) -> Topology:
    """Read the machine behind `host` once and return its topology. Never raises for bad
    content: unreadable or garbage files become `problems`. With a GPU backend, NVML's facts
    are joined to the sysfs GPUs by PCI address (see merge_nvml)."""
    problems = Problems()
    for member, why in host.unpack_notes:
        problems.add("root.member-skipped", member, why)
    with host.oneshot():
        identity = sysfs.read_identity(host, problems)
        cpus = sysfs.read_cpus(host, problems)
        # Every later cpulist is bounded by the possible CPUs: a 64 KiB `0-65535,...` list on a
        # 80-CPU host is garbage at the first id past them, not 65,536 CPUs to place.
        limit = sysfs.cpu_limit(cpus.possible)
        raw_nodes = sysfs.read_nodes(host, problems, limit)
        process = sysfs.read_process_cpus(host, problems)
        raw_pci = sysfs.walk_pci(host, problems, limit)
        rdma_class = sysfs.read_rdma_class(host, problems)
        nvidia_claimed = sysfs.read_nvidia_driver_gpus(host)
        caches = read_caches(host, cpus, problems, limit)
        gpu_memory = read_gpu_memory_nodes(host, nvidia_claimed, problems)
    # A cpuset may name CPUs that are offline or absent (cgroup v1 `cpuset.effective_cpus` on
    # nvidiagpunumanodes lists 0-87 of 0-15,88-103): only online CPUs can run this process.
    if process.cpus is not None:
        process = ProcessCpus(process.cpus & cpus.online, process.mems, process.source)
    nodes = build_nodes(raw_nodes, cpus, problems)
    cpus = _with_cpu_nodes(cpus, nodes)
    for raw in raw_pci:
        if raw.vendor_id is None and raw.address in nvidia_claimed:
            raw.vendor_id = NVIDIA_VENDOR_ID  # the driver's claim stands in for a trimmed file
    devices = build_pci(raw_pci, nodes, cpus.present, problems)
    _attach_class_rdma(raw_pci, rdma_class, problems)
    gpus = _gpus(devices)
    nvml: NvmlState | None = None
    if backend is not None:
        node_ids = [n.id for n in nodes] or [0]
        nvml = collect(
            backend,
            cpu_words=max(cpus.possible | cpus.present | {0}) // 64 + 1,
            node_words=max(node_ids) // 64 + 1,
        )
        gpus, devices = merge_nvml(gpus, devices, nodes, nvml, problems)
    if gpu_memory:
        gpus = _driver_memory_nodes(gpus, nodes, gpu_memory, problems)
    nics = _nics(devices, raw_pci)
    nvmes = _nvmes(devices, raw_pci)
    if nvmes:
        nvmes = read_namespaces(host, nvmes, {d.address: d for d in devices}, problems)
    if any(n.rdma_devices for n in nics):
        nics = read_rdma_ports(host, nics, problems)
    return Topology(
        identity=identity,
        cpus=cpus,
        numa_nodes=nodes,
        pci_devices=devices,
        gpus=gpus,
        nics=nics,
        nvmes=nvmes,
        process=process,
        problems=tuple(problems.items),
        nvml=nvml,
        caches=caches,
    )


def discover_host(host: HostReader) -> Topology:
    """discover() with the host's own GPU backend: live NVML for `/`, the recorded answers for
    a snapshot, "not recorded" for a plain dump."""
    backend = open_backend(host)
    try:
        return discover(host, backend)
    finally:
        backend.close()


def merge_nvml(
    gpus: tuple[Gpu, ...],
    devices: tuple[PciDevice, ...],
    nodes: tuple[NumaNode, ...],
    nvml: NvmlState,
    problems: Problems,
) -> tuple[tuple[Gpu, ...], tuple[PciDevice, ...]]:
    """Join NVML's GPUs to sysfs's by PCI address and settle each GPU's NUMA node.

    Chain for a GPU: sysfs own `numa_node` -> nearest ancestor -> NVML memory affinity -> NVML
    CPU affinity mapped to nodes -> the sysfs guesses (root complex, local CPUs) -> unknown.
    NVML's CPU affinity is the driver's view of the same locality nvidia-smi prints, but it is
    clipped to this process's cpuset (rapidsai/dask-cuda#1358, nvidia-cosmos/cosmos-predict1#11),
    hence it ranks below the memory affinity.
    """
    if not nvml.available:
        if gpus:
            problems.add("nvml.unavailable", "nvml", f"NVML unavailable: {nvml.reason}")
        return gpus, devices
    by_addr = {g.address: g for g in nvml.gpus if g.address is not None}
    sysfs_addrs = {g.address for g in gpus}
    if len(nvml.gpus) != len(gpus):
        problems.add(
            "gpu.count-mismatch",
            "nvml",
            f"sysfs lists {len(gpus)} NVIDIA GPUs, NVML {len(nvml.gpus)}",
        )
    for g in nvml.gpus:
        if g.address is not None and g.address not in sysfs_addrs:
            problems.add("gpu.nvml-only", str(g.address), f"NVML GPU {g.index} has no sysfs device")
        if g.lost:
            problems.add("gpu.lost", str(g.address or g.index), "GpuIsLost during discovery")
    new_gpus = []
    moved: dict[PciAddress, tuple[int, NumaSource]] = {}
    for gpu in gpus:
        facts = by_addr.get(gpu.address)
        if facts is None:
            new_gpus.append(gpu)
            continue
        if facts.index != gpu.index:
            problems.add(
                "gpu.index-mismatch",
                str(gpu.address),
                f"NVML index {facts.index}, PCI order {gpu.index}",
            )
        numa, source = _gpu_numa(gpu, facts, nodes, problems)
        if (numa, source) != (gpu.numa_node, gpu.numa_source):
            moved[gpu.address] = (numa, source) if numa is not None else (-1, source)
        _check_links(gpu, facts, problems)
        mem_node = facts.memory_numa_node
        if mem_node is not None:
            node = next((n for n in nodes if n.id == mem_node), None)
            if node is not None and not node.cpuless:
                problems.add(
                    "gpu.memory-node-has-cpus",
                    str(gpu.address),
                    f"NVML says GPU memory is NUMA node {mem_node}, which has CPUs",
                )
        new_gpus.append(
            replace(
                gpu,
                numa_node=numa,
                numa_source=source,
                nvml=facts,
                memory_numa_node=mem_node,
            )
        )
    new_devices = tuple(
        replace(
            d,
            numa_node=None if moved[d.address][0] < 0 else moved[d.address][0],
            numa_source=moved[d.address][1],
        )
        if d.address in moved
        else d
        for d in devices
    )
    return tuple(new_gpus), new_devices


def _driver_memory_nodes(
    gpus: tuple[Gpu, ...],
    nodes: tuple[NumaNode, ...],
    driver: dict[PciAddress, int],
    problems: Problems,
) -> tuple[Gpu, ...]:
    """Each GPU's memory node from the driver's numa_status (gpumem.py) where NVML gave none;
    where NVML gave another, NVML's stays and the disagreement is a problem. A node that is not
    a CPU-less node of this machine is a problem and is not tied to the GPU."""
    by_id = {n.id: n for n in nodes}
    out = []
    for gpu in gpus:
        node_id = driver.get(gpu.address)
        if node_id is None:
            out.append(gpu)
            continue
        src = str(gpu.address)
        if gpu.memory_numa_node is not None:
            if gpu.memory_numa_node != node_id:
                problems.add(
                    "gpu.memory-node.disagree",
                    src,
                    f"NVML says GPU memory node {gpu.memory_numa_node}, the driver's numa_status"
                    f" {node_id}; using NVML's",
                )
            out.append(gpu)
            continue
        node = by_id.get(node_id)
        if node is None or not node.cpuless:
            problems.add(
                "gpu.memory-node-has-cpus" if node is not None else "gpu.memory-node.missing",
                src,
                f"the driver's numa_status says GPU memory is NUMA node {node_id}, which "
                + ("has CPUs" if node is not None else "is not a NUMA node here")
                + "; not tied to the GPU",
            )
            out.append(gpu)
            continue
        out.append(replace(gpu, memory_numa_node=node_id))
    return tuple(out)


def _gpu_numa(
    gpu: Gpu, facts: NvmlGpu, nodes: tuple[NumaNode, ...], problems: Problems
) -> tuple[int | None, NumaSource]:
    src = str(gpu.address)
    mem = facts.memory_affinity_nodes
    # Memory affinity can name the GPU's own CPU-less memory node on Grace; keep CPU nodes.
    cpu_nodes = {n.id for n in nodes if not n.cpuless}
    mem_node = None
    if mem:
        usable = mem & cpu_nodes if cpu_nodes else mem
        mem_node = next(iter(usable)) if len(usable) == 1 else None
    cpu_node = node_of_cpus(facts.cpu_affinity_node, nodes) if facts.cpu_affinity_node else None
    nvml_node, nvml_source = (
        (mem_node, "nvml-memory-affinity")
        if mem_node is not None
        else (cpu_node, "nvml-cpu-affinity")
    )
    if gpu.numa_source in ("own", "ancestor"):
        if nvml_node is not None and nvml_node != gpu.numa_node:
            problems.add(
                "gpu.numa.nvml-disagrees",
                src,
                f"sysfs ({gpu.numa_source}) says node {gpu.numa_node}, NVML ({nvml_source}) "
                f"says {nvml_node}; using sysfs",
            )
        return gpu.numa_node, gpu.numa_source
    if nvml_node is not None:
        if gpu.numa_node is not None and gpu.numa_node != nvml_node:
            problems.add(
                "gpu.numa.nvml-disagrees",
                src,
                f"sysfs guess ({gpu.numa_source}) node {gpu.numa_node}, NVML ({nvml_source}) "
                f"{nvml_node}; using NVML",
            )
        return nvml_node, nvml_source  # type: ignore[return-value]
    return gpu.numa_node, gpu.numa_source


def _check_links(gpu: Gpu, facts: NvmlGpu, problems: Problems) -> None:
    src = str(gpu.address)
    if facts.nvlinks and facts.active_links == 0:
        # Azure NC H100 v5 (H100 NVL pairs): bridges inactive on some boots, topo shows SYS
        # (Azure/azhpc-images#443). P2P then crosses PCIe.
        problems.add(
            "nvlink.inactive",
            src,
            f"{len(facts.nvlinks)} NVLinks, none active: peers fall back to PCIe",
        )
    switch_links = [x for x in facts.nvlinks if x.active and x.remote_type == "SWITCH"]
    if switch_links and facts.fabric_state not in (None, "COMPLETED"):
        problems.add(
            "nvlink.fabric-not-ready",
            src,
            f"NVSwitch fabric state {facts.fabric_state}: CUDA fails with error 802 until "
            "Fabric Manager registers the GPU",
        )


# -- NUMA --------------------------------------------------------------------------------------


def build_nodes(raw: RawNodes, cpus: CpuTopology, problems: Problems) -> tuple[NumaNode, ...]:
    if not raw.nodes:
        # CONFIG_NUMA=n (or a dump without node/): one implicit node holding every CPU, as the
        # kernel itself behaves. Recorded, since placement then has nothing to choose from.
        problems.add("numa.none", sysfs.SYS_NODE, "no NUMA nodes listed; treating as one node 0")
        return (NumaNode(0, cpus.present, None, ((0, 10),), bool(cpus.present), True),)
    # `distance` has one entry per *online* node, in node order (drivers/base/node.c).
    online_ids = sorted(raw.online) if raw.online else [n.id for n in raw.nodes]
    out = []
    for n in raw.nodes:
        path = f"{sysfs.SYS_NODE}/node{n.id}"
        node_cpus = n.cpus if n.cpus is not None else CpuSet()
        if n.cpus is None:
            problems.add("numa.cpulist.missing", f"{path}/cpulist", "treating the node as CPU-less")
        beyond = node_cpus - cpus.present
        if beyond:
            problems.add(
                "numa.cpulist.beyond-present",
                f"{path}/cpulist",
                f"lists CPUs {beyond.cpulist()} that are not present; ignored",
            )
            node_cpus = node_cpus & cpus.present
        distances: tuple[tuple[int, int], ...] = ()
        if n.distance_row is not None:
            if len(n.distance_row) == len(online_ids):
                distances = tuple(zip(online_ids, n.distance_row, strict=True))
            else:
                problems.add(
                    "numa.distance.mismatch",
                    f"{path}/distance",
                    f"{len(n.distance_row)} distances for {len(online_ids)} online nodes",
                )
        memory_mib = n.memory_kib // 1024 if n.memory_kib is not None else None
        has_memory = (n.id in raw.has_memory) if raw.has_memory is not None else bool(memory_mib)
        out.append(
            NumaNode(
                id=n.id,
                cpus=node_cpus,
                memory_mib=memory_mib,
                distances=distances,
                has_cpus=bool(node_cpus),
                has_memory=has_memory,
            )
        )
    return tuple(out)


def _with_cpu_nodes(cpus: CpuTopology, nodes: tuple[NumaNode, ...]) -> CpuTopology:
    owner = {cpu: n.id for n in nodes for cpu in n.cpus}
    fixed = tuple(
        Cpu(c.id, c.online, c.core_id, c.package_id, c.die_id, owner.get(c.id), c.siblings)
        for c in cpus.cpus
    )
    return CpuTopology(cpus.possible, cpus.present, cpus.online, fixed)


def node_of_cpus(local: CpuSet, nodes: tuple[NumaNode, ...]) -> int | None:
    """The one node whose CPUs contain all of `local`, or None when they span several."""
    if not local:
        return None
    owners = {n.id for n in nodes if n.cpus and local & n.cpus}
    if len(owners) != 1:
        return None
    (only,) = owners
    node = next(n for n in nodes if n.id == only)
    return only if local <= node.cpus else None


def nodes_of_cpus(local: CpuSet, nodes: tuple[NumaNode, ...]) -> CpuSet:
    """Every node sharing a CPU with `local` (nvidia-smi's "NUMA Affinity" of a CPU list)."""
    return CpuSet(n.id for n in nodes if n.cpus and local & n.cpus)


# -- PCI locality ------------------------------------------------------------------------------


def _host_bridge_nodes(raw: list[RawPci]) -> dict[str, int]:
    """Root complexes whose locality is clear from their functions: at least half of them give
    one node in `numa_node` and none gives another."""
    # Plain dicts, not collections.Counter: `topo` never imports collections (codec/typenames.py).
    votes: dict[str, dict[int, int]] = {}
    totals: dict[str, int] = {}
    for d in raw:
        totals[d.host_bridge] = totals.get(d.host_bridge, 0) + 1
        if d.numa_raw is not None and d.numa_raw >= 0:
            counter = votes.setdefault(d.host_bridge, {})
            counter[d.numa_raw] = counter.get(d.numa_raw, 0) + 1
    out = {}
    for bridge, counter in votes.items():
        if len(counter) == 1:
            ((node, count),) = counter.items()
            if 2 * count >= totals[bridge]:
                out[bridge] = node
    return out


def _interesting(d: RawPci) -> bool:
    """Devices whose unknown locality matters to placement: GPUs, NICs (network class, or any
    function carrying an RDMA device, like QLogic's class 0x0c06 InfiniBand HCAs), NVMe."""
    if d.rdma:
        return True
    if d.class_code is None:
        return False
    return (
        (d.vendor_id == NVIDIA_VENDOR_ID and d.class_code in GPU_CLASSES)
        or d.class_code >> 8 == 0x02
        or d.class_code == NVME_CLASS
    )


def build_pci(
    raw: list[RawPci], nodes: tuple[NumaNode, ...], present: CpuSet, problems: Problems
) -> tuple[PciDevice, ...]:
    bridge_node = _host_bridge_nodes(raw)
    node_cpus = {n.id: n.cpus for n in nodes}
    # The CPU sets of an SR-IOV host's functions are a few shared objects (sysfs._Values):
    # clip and compare each once, not once per function.
    clipped: dict[CpuSet, CpuSet] = {}
    agrees: dict[tuple[CpuSet, int], bool] = {}
    out = []
    for d in raw:
        numa: int | None = None
        source: NumaSource = "unknown"
        ancestor_numa: int | None = None
        a = d.parent  # the upstream bridges, nearest first: d.ancestors read backwards
        while a is not None:
            if a.numa_raw is not None and a.numa_raw >= 0:
                ancestor_numa = a.numa_raw
                break
            a = a.parent
        local = None
        if d.local_cpus is not None:
            local = clipped.get(d.local_cpus)
            if local is None:
                local = clipped[d.local_cpus] = d.local_cpus & present
        if d.numa_raw is not None and d.numa_raw >= 0:
            numa, source = d.numa_raw, "own"
            if ancestor_numa is not None and ancestor_numa != numa:
                problems.add(
                    "pci.numa.ancestor-disagrees",
                    str(d.address),
                    f"numa_node {numa} but upstream bridge says {ancestor_numa}; using own",
                )
        elif ancestor_numa is not None:
            numa, source = ancestor_numa, "ancestor"
        elif d.host_bridge in bridge_node:
            numa, source = bridge_node[d.host_bridge], "host-bridge"
        elif local:
            guess = node_of_cpus(local, nodes)
            if guess is not None:
                numa, source = guess, "local-cpus"
        if numa is not None and numa not in node_cpus and nodes:
            problems.add(
                "pci.numa.no-such-node", str(d.address), f"numa_node {numa} is not a NUMA node"
            )
        if numa is None and _interesting(d):
            problems.add(
                "pci.numa.unknown",
                str(d.address),
                "no numa_node (-1 or missing), no located ancestor, local CPUs "
                f"{local.cpulist() if local else 'unknown'} span nodes: locality unknown",
            )
        if numa is not None and local and numa in node_cpus:
            expected = node_cpus[numa]
            agree = agrees.get((local, numa))
            if agree is None:
                agree = agrees[local, numa] = not expected or local == expected
            if not agree:
                problems.add(
                    "pci.numa.local-cpus-disagree",
                    str(d.address),
                    f"NUMA node {numa} ({source}) has CPUs {expected.cpulist()} but "
                    f"local_cpulist says {local.cpulist()}",
                )
        # Positional, in PciDevice's field order: keyword arguments cost more, thousands of times.
        out.append(
            PciDevice(
                d.address,
                d.path,
                d.host_bridge,
                d.ancestors,
                d.class_code,
                d.prog_if,
                d.vendor_id,
                d.device_id,
                d.subsystem_vendor_id,
                d.subsystem_device_id,
                d.driver,
                numa,
                source,
                d.numa_raw,
                d.local_cpus,
                d.link,
                d.physfn,
                d.sriov_numvfs,
            )
        )
        if d.link.width_downtrained and _interesting(d):
            problems.add(
                "pci.link.width-downtrained",
                str(d.address),
                f"PCIe link x{d.link.current_width} of x{d.link.max_width}",
            )
    return tuple(out)


def effective_local_cpus(dev: PciDevice, nodes: tuple[NumaNode, ...]) -> CpuSet | None:
    """The device's local CPUs: `local_cpulist` when given, else its node's CPUs."""
    if dev.local_cpus:
        return dev.local_cpus
    if dev.numa_node is not None:
        for n in nodes:
            if n.id == dev.numa_node:
                return n.cpus
    return None


# -- device kinds ------------------------------------------------------------------------------


def _gpus(devices: tuple[PciDevice, ...]) -> tuple[Gpu, ...]:
    gpus = [d for d in devices if d.vendor_id == NVIDIA_VENDOR_ID and d.class_code in GPU_CLASSES]
    return tuple(
        Gpu(
            index=i,
            address=d.address,
            vendor_id=NVIDIA_VENDOR_ID,
            device_id=d.device_id,
            driver=d.driver,
            numa_node=d.numa_node,
            numa_source=d.numa_source,
            local_cpus=d.local_cpus,
            link=d.link,
        )
        for i, d in enumerate(gpus)  # devices are sorted by address: NVML's order
    )


def _attach_class_rdma(
    raw: list[RawPci], pairs: list[tuple[str, PciAddress, str]], problems: Problems
) -> None:
    """RDMA devices known only from /sys/class/infiniband join the function their `device`
    link leads to, when it leads to the directory that function was read from: a link into
    a copy that was not kept (sysfs.walk_pci, duplicate addresses) names no device here."""
    if not pairs:
        return
    by_path = {d.path: d for d in raw}
    by_addr: dict[PciAddress, RawPci] | None = None
    for name, addr, real in pairs:
        dev = by_path.get(real)
        if dev is None or dev.address != addr:
            if by_addr is None:
                by_addr = {d.address: d for d in raw}
            other = by_addr.get(addr)
            if other is not None and name not in other.rdma:
                problems.add(
                    "rdma.device-elsewhere",
                    f"{sysfs.SYS_CLASS_IB}/{name}",
                    f"its device link leads to {real}, not to {other.path} where {addr} was "
                    "read: not attached to it",
                )
            continue
        if name not in dev.rdma:
            dev.rdma.append(name)
            dev.rdma.sort()


def _nics(devices: tuple[PciDevice, ...], raw: list[RawPci]) -> tuple[Nic, ...]:
    """`devices` are built from `raw` in its order (build_pci, merge_nvml keep it)."""
    out = []
    for d, r in zip(devices, raw, strict=True):
        is_net_class = d.class_code is not None and d.class_code >> 8 == 0x02
        if not (is_net_class or r.rdma):
            continue
        netdevs = r.netdevs
        out.append(
            Nic(  # positional, in Nic's field order (see build_pci)
                d.address,
                d.class_code,
                d.vendor_id,
                d.device_id,
                d.driver,
                tuple(sorted(netdevs, key=lambda n: n.name)) if len(netdevs) > 1 else (*netdevs,),
                tuple(r.rdma),
                d.numa_node,
                d.local_cpus,
                d.link,
                d.physfn is not None,  # is_virtual_function
            )
        )
    return tuple(out)


def _nvmes(devices: tuple[PciDevice, ...], raw: list[RawPci]) -> tuple[Nvme, ...]:
    out = []
    for d, r in zip(devices, raw, strict=True):
        for ctrl, model in r.nvme:
            out.append(Nvme(controller=ctrl, address=d.address, model=model, numa_node=d.numa_node))
    return tuple(sorted(out, key=lambda n: (n.address, n.controller)))
