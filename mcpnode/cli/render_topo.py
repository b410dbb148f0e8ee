"""Text renderings of the topology: the nvidia-smi matrix, the PCI tree, JSON."""

from __future__ import annotations

from mcpnode.codec import jsonout
from mcpnode.codec.printable import printable
from mcpnode.topology.discover import effective_local_cpus
from mcpnode.topology.jsonify import topology_json
from mcpnode.topology.matrix import build_matrix
from mcpnode.topology.model import (
    NVIDIA_VENDOR_ID,
    NvmeNamespace,
    PciAddress,
    PciDevice,
    PciLink,
    RdmaPort,
    Topology,
)
from mcpnode.topology.pciclass import class_name

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (codec/typenames.py)
if TYPE_CHECKING:
    from collections.abc import Callable

# nvidia-smi's Legend, verbatim, so `diff <(nvidia-smi topo -m) <(mcpnode topo)` lines up.
LEGEND = """\
Legend:

  X    = Self
  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)
  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node
  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)
  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)
  PIX  = Connection traversing at most a single PCIe bridge
  NV#  = Connection traversing a bonded set of # NVLinks
"""  # noqa: E501


def as_json(topo: Topology) -> str:
    return jsonout.dumps(topology_json(topo))


def write_json(topo: Topology, write: Callable[[str], object]) -> None:
    """`as_json(topo)` through `write`, in pieces as they are made: an 8,192-VF host's JSON
    is 12 MB, and json.dumps(indent=2) held a list of every fragment besides (codec/jsonout.py)."""
    jsonout.write_json(topology_json(topo), write)


# `--color`: the matrix cells by how close the pair is, from NVLink to across sockets (the
# colours of cli/render_audit.py: green as PASS, yellow as WARN, red as FAIL).
_CELL_COLOURS = {
    "PIX": "\033[32m",
    "PXB": "\033[33m",
    "PHB": "\033[33m",
    "NODE": "\033[33m",
    "SYS": "\033[31m",
}
_NV_COLOUR = "\033[32m"
_RESET = "\033[0m"


def _coloured(cell: str) -> str:
    colour = _NV_COLOUR if cell.startswith("NV") else _CELL_COLOURS.get(cell)
    return f"{colour}{cell}{_RESET}" if colour else cell


def as_matrix(topo: Topology, color: bool = False) -> str:
    """nvidia-smi `topo -m` layout: TAB separated, ` X ` on the diagonal, NIC rows ending in
    empty affinity cells, then Legend and NIC Legend. `color`: each pair's cell coloured by its
    bucket (the tabs keep the columns where they are)."""
    m = build_matrix(topo)
    out: list[str] = []
    if not topo.gpus:
        out.append("No NVIDIA GPUs found on this host (no PCI function with vendor 0x10de and")
        out.append("class 0x0300/0x0302). NUMA and NIC topology follow.")
        out.append("")
    if m.rows:
        head = ["", *m.columns, "CPU Affinity", "NUMA Affinity", "GPU NUMA ID"]
        out.append("\t".join(head))
        for row in m.rows:
            cells = [" X " if c == "X" else c for c in row.cells]
            if color:
                cells = [_coloured(c) for c in cells]
            tail = [row.cpu_affinity or "", row.numa_affinity or "", "", row.gpu_numa_id or ""]
            if row.cpu_affinity is None:
                # nvidia-smi ends NIC rows with four empty cells (header has three names:
                # the GPU rows carry an unnamed empty cell before GPU NUMA ID).
                tail = ["", "", "", ""]
            out.append("\t".join([row.label, *cells, *tail]))
        out.append("")
        out.append(LEGEND)
        if m.nic_legend:
            out.append("NIC Legend:")
            out.append("")
            out.extend(f"  {label}: {printable(name)}" for label, name in m.nic_legend)
            out.append("")
    out.extend(_summary(topo))
    return "\n".join(out) + "\n"


def _summary(topo: Topology) -> list[str]:
    out = ["NUMA nodes:"]
    for n in topo.numa_nodes:
        mem = f"{n.memory_mib} MiB" if n.memory_mib is not None else "memory unknown"
        kind = f" (CPU-less: {_memory_of(n.id, topo)})" if n.cpuless else ""
        out.append(f"  node{n.id}: CPUs {n.cpus.cpulist() or '-'}, {mem}{kind}")
    nics = [n for n in topo.nics if not n.is_virtual_function]
    if nics:
        out.append("NICs:")
        for nic in nics:
            names = printable(",".join(d.name for d in nic.netdevs)) or "-"
            rdma = printable(",".join(nic.rdma_devices)) or "-"
            dev = topo.pci(nic.address)
            node = "unknown" if nic.numa_node is None else str(nic.numa_node)
            if dev is not None and dev.numa_source not in ("own", "unknown"):
                node += f" (via {dev.numa_source})"
            out.append(f"  {nic.address} netdev {names} rdma {rdma} NUMA {node}")
    vfs = sum(1 for n in topo.nics if n.is_virtual_function)
    if vfs:
        out.append(f"  (+{vfs} SR-IOV virtual functions)")
    allowed = topo.process.cpus
    if allowed is not None and allowed != topo.cpus.online:
        out.append(f"This process may use CPUs {allowed.cpulist()} of {topo.cpus.online.cpulist()}")
    out.extend(_problem_lines(topo))
    return out


def _problem_lines(topo: Topology, limit: int = 50) -> list[str]:
    if not topo.problems:
        return []
    out = [f"Problems ({len(topo.problems)}):"]
    out.extend(
        f"  [{p.code}] {printable(p.source)}: {printable(p.detail)}" for p in topo.problems[:limit]
    )
    if len(topo.problems) > limit:
        out.append(f"  ... {len(topo.problems) - limit} more (see --format json)")
    return out


def _link(link: PciLink) -> str:
    if link.current_speed_gts is None and link.current_width is None:
        return ""
    cur = f"{_gts(link.current_speed_gts)} x{link.current_width or '?'}"
    mx = f"{_gts(link.max_speed_gts)} x{link.max_width or '?'}"
    mark = ""
    if link.width_downtrained:
        mark = "  <-- DOWNTRAINED width"
    elif link.speed_downtrained:
        mark = "  (below max speed)"
    return f" [{cur} of {mx}]{mark}"


def _gts(v: float | None) -> str:
    return "?" if v is None else f"{v:g}GT/s"


def _label(dev: PciDevice, topo: Topology) -> str:
    names: list[str] = []
    for g in topo.gpus:
        if g.address == dev.address:
            names.append(f"GPU{g.index}")
    for nic in topo.nics:
        if nic.address == dev.address:
            names.extend(d.name for d in nic.netdevs)
            names.extend(nic.rdma_devices)
    for nv in topo.nvmes:
        if nv.address == dev.address:
            names.append(nv.controller)
    if dev.vendor_id == NVIDIA_VENDOR_ID and dev.class_code == 0x0680:
        names.append("NVSwitch")
    if dev.is_bridge:
        names.append("bridge")
    ids = (
        f"{dev.vendor_id:04x}:{dev.device_id:04x}"
        if dev.vendor_id is not None and dev.device_id is not None
        else "????:????"
    )
    cls = f"{dev.class_code:04x}" if dev.class_code is not None else "????"
    name = class_name(dev.class_code)
    if name is not None:
        cls += f" {name}"
    drv = f" {printable(dev.driver)}" if dev.driver else ""
    tag = f" {printable(' '.join(names))}" if names else ""
    return f"{dev.address} [{cls}] {ids}{drv}{tag}"


def as_tree(topo: Topology) -> str:
    """NUMA node -> host bridge -> bridges -> devices, with link speed/width. SR-IOV virtual
    functions are counted under their PF rather than listed (a NIC may carry hundreds)."""
    # Plain dicts, not defaultdicts: `topo` never imports collections (codec/typenames.py).
    children: dict[PciAddress | None, list[PciDevice]] = {}
    roots: dict[str, list[PciDevice]] = {}
    vfs: dict[PciAddress, int] = {}
    for d in topo.pci_devices:
        if d.physfn is not None:
            vfs[d.physfn] = vfs.get(d.physfn, 0) + 1
            continue
        if d.parent is None:
            roots.setdefault(d.host_bridge, []).append(d)
        else:
            children.setdefault(d.parent, []).append(d)
    bridge_node: dict[str, str] = {}
    for hb, devs in roots.items():
        known = {d.numa_node for d in devs if d.numa_node is not None}
        bridge_node[hb] = f"node{known.pop()}" if len(known) == 1 else "NUMA unknown"
    out: list[str] = []

    ports = {n.address: n.rdma_ports for n in topo.nics if n.rdma_ports}
    namespaces: dict[PciAddress, list[NvmeNamespace]] = {}
    for nv in topo.nvmes:
        namespaces.setdefault(nv.address, []).extend(nv.namespaces)

    def walk(dev: PciDevice, depth: int) -> None:
        out.append("    " * depth + _label(dev, topo) + _link(dev.link) + _locality(dev, topo))
        for p in ports.get(dev.address, ()):
            out.append("    " * (depth + 1) + _port(p))
        for ns in namespaces.get(dev.address, ()):
            out.append("    " * (depth + 1) + f"{printable(ns.name)}: {_bytes(ns.size_bytes)}")
        if dev.address in vfs:
            out.append("    " * (depth + 1) + f"(+{vfs[dev.address]} SR-IOV virtual functions)")
        for c in children.get(dev.address, []):
            walk(c, depth + 1)

    by_node: dict[str, list[str]] = {}
    for hb, label in bridge_node.items():
        by_node.setdefault(label, []).append(hb)
    for n in topo.numa_nodes:
        by_node.setdefault(f"node{n.id}", [])
    for label in sorted(by_node, key=lambda s: (s == "NUMA unknown", len(s), s)):
        node = _node_line(label, topo)
        out.append(node)
        out.extend(_cache_lines(label, topo))
        for hb in sorted(by_node[label]):
            out.append(f"  {hb} (host bridge)")
            for d in roots[hb]:
                walk(d, 1)
    out.extend(_problem_lines(topo))
    return "\n".join(out) + "\n"


def _node_line(label: str, topo: Topology) -> str:
    if label.startswith("node"):
        node = topo.node(int(label[4:]))
        if node is not None:
            gpu = None if node.cpus else topo.gpu_of_memory_node(node.id)
            if gpu is not None:
                return f"{label}: CPUs - (CPU-less: memory of GPU{gpu.index} {gpu.address})"
            return f"{label}: CPUs {node.cpus.cpulist() or '- (CPU-less)'}"
    return f"{label}:"


def _memory_of(node_id: int, topo: Topology) -> str:
    """What a CPU-less node holds: a GPU's memory (Grace, POWER9), or memory only."""
    gpu = topo.gpu_of_memory_node(node_id)
    return "memory only" if gpu is None else f"memory of GPU{gpu.index} {gpu.address}"


def _bytes(size: int | None) -> str:
    """A block device's size as lsblk prints it (binary units, one decimal), and in bytes."""
    if size is None:
        return "size unknown"
    value, unit = float(size), "B"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if value < 1024 or unit == "PiB":
            break
        value /= 1024
    return f"{value:.1f} {unit} ({size} bytes)" if unit != "B" else f"{size} bytes"


def _port(p: RdmaPort) -> str:
    """`port mlx5_0/1: ACTIVE, 400 Gb/sec (4X NDR), InfiniBand`; `?` for what is unknown."""
    facts = ", ".join(
        printable(v) if v is not None else "?" for v in (p.state, p.rate, p.link_layer)
    )
    return f"port {printable(p.device)}/{p.port}: {facts}"


def _cache_lines(label: str, topo: Topology) -> list[str]:
    """Under a node line: each L3 domain holding its CPUs, then its L2 domains counted by size
    (one per core on every x86 and arm64 server: listing them would only repeat the cores)."""
    node = topo.node(int(label[4:])) if label.startswith("node") else None
    if node is None or not node.cpus or not topo.caches:
        return []
    out = []
    for c in topo.cache_domains(3):
        if c.cpus & node.cpus:
            out.append(f"  L3 {c.cpus.cpulist()} ({_kib(c.size_kib)})")
    l2: dict[int | None, int] = {}
    for c in topo.cache_domains(2):
        if c.cpus & node.cpus:
            l2[c.size_kib] = l2.get(c.size_kib, 0) + 1
    if l2:
        sizes = sorted(l2.items(), key=lambda kv: (kv[0] is None, kv[0] or 0))
        out.append("  L2 " + ", ".join(f"{n} x {_kib(size)}" for size, n in sizes))
    return out


def _kib(size: int | None) -> str:
    if size is None:
        return "size unknown"
    return f"{size // 1024} MiB" if size >= 1024 and size % 1024 == 0 else f"{size} KiB"


def _locality(dev: PciDevice, topo: Topology) -> str:
    if dev.is_bridge:
        return ""
    local = effective_local_cpus(dev, topo.numa_nodes)
    node = "?" if dev.numa_node is None else str(dev.numa_node)
    src = "" if dev.numa_source == "own" else f" via {dev.numa_source}"
    cpus = local.cpulist() if local else "?"
    return f"  (NUMA {node}{src}, CPUs {cpus})"
