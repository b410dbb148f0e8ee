"""Exclusive slices cut along L3 domains (placement/plan.py), as a table over the committed
fixtures, the real machines of ../shared/hosts (when present) and small generated roots.

The rule: on a node whose cores sit in several L3 domains, no domain is split between two GPUs
when there are at least as many domains as GPUs; with fewer domains than GPUs, each slice lies
inside one domain. SMT siblings stay together, slices stay disjoint and inside the GPU's node.
A node whose cores share one L3 (Intel without SNC, a VM) is cut exactly as before."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mcpnode.codec.record import replace
from mcpnode.host import Host
from mcpnode.placement.plan import Placement, plan_placement
from mcpnode.topology.discover import discover
from mcpnode.topology.model import NVIDIA_VENDOR_ID, CpuSet, Gpu, PciAddress, PciLink, Topology
from mcpnode.topology.parse import parse_cpulist

HERE = Path(__file__).resolve().parents[1]
FIXTURES = HERE / "fixtures" / "hosts"
SHARED = Path(os.environ.get("MCPNODE_SHARED_HOSTS") or HERE.parent.parent / "shared" / "hosts")


def topology(root: Path) -> Topology:
    with Host(root) as host:
        return discover(host)


def check_layout(topo: Topology, placement: Placement) -> None:
    """The invariants of the module docstring, for every node that has GPUs."""
    online = topo.cpus.online
    siblings = {c.id: c.siblings & online for c in topo.cpus.cpus if c.online}
    l3 = [c.cpus for c in topo.cache_domains(3)]
    taken: set[int] = set()
    by_node: dict[int, list[CpuSet]] = {}
    for g in placement.gpus:
        s = g.slice_cpus
        assert not s & taken, f"GPU {g.index}: slice {s} overlaps another"
        taken |= s
        assert not s & placement.housekeeping
        for cpu in s:
            assert siblings[cpu] <= s, f"GPU {g.index}: core of CPU {cpu} split"
        if g.numa_node is not None and s:
            node = topo.node(g.numa_node)
            assert node is not None and s <= node.cpus
            by_node.setdefault(node.id, []).append(s)
        if s and l3:
            assert s <= g.cache_cpus, f"GPU {g.index}: cache CPUs {g.cache_cpus} miss {s}"
    for node_id, slices in by_node.items():
        node = topo.node(node_id)
        assert node is not None
        avail = (node.cpus & online) - placement.housekeeping
        domains = [d for d in l3 if d & avail]
        if len(domains) < 2:
            continue
        if len(domains) >= len(slices):
            for d in domains:
                users = [s for s in slices if s & d]
                assert len(users) <= 1, f"node {node_id}: L3 {d} split between {users}"
        else:
            for s in slices:
                assert any(s <= d for d in domains), f"node {node_id}: slice {s} straddles L3"


def with_gpus(topo: Topology, per_node: int) -> Topology:
    """`topo` with `per_node` GPUs on every node that has CPUs: placement is pure, and a GPU is
    model data (PCI address, node); the real dumps come without GPUs."""
    gpus: list[Gpu] = []
    for node in topo.numa_nodes:
        if not node.cpus:
            continue
        for _ in range(per_node):
            i = len(gpus)
            gpus.append(
                Gpu(
                    index=i,
                    address=PciAddress(0x40, i, 0, 0),
                    vendor_id=NVIDIA_VENDOR_ID,
                    device_id=None,
                    driver=None,
                    numa_node=node.id,
                    numa_source="own",
                    local_cpus=None,
                    link=PciLink(None, None, None, None),
                )
            )
    return replace(topo, gpus=tuple(gpus))


def slices(placement: Placement) -> list[str]:
    return [g.slice_cpus.cpulist() for g in placement.gpus]


# -- committed fixtures -----------------------------------------------------------------------

# fixture -> slices; the ones cut differently from before say so.
FIXTURE_SLICES = {
    # EPYC 7742, NPS4: 4 CCX of 4 cores per node, 2 GPUs per node. Before, GPU0 49-56 and GPU1
    # 57-63 shared the CCX 56-59; now each GPU has whole CCXs (the first minus housekeeping).
    "dgx-a100": [
        "49-55,177-183",
        "56-63,184-191",
        "17-23,145-151",
        "24-31,152-159",
        "113-119,241-247",
        "120-127,248-255",
        "81-87,209-215",
        "88-95,216-223",
    ],
    # hgx-h100-8gpu-8nic (one L3 per socket): cut by count as before, test_hgx_slices_exact
    "single-gpu-kvm-vm-h100-pcie": ["1-251"],  # a VM with one L3
    "pcie-4x-l40s-2socket": ["1-48,193-240", "49-95,241-287", "97-144,289-336", "145-191,337-383"],
}


@pytest.mark.parametrize("name", sorted(p.name for p in FIXTURES.iterdir() if (p / "sys").is_dir()))
def test_fixture_slices(name: str) -> None:
    topo = topology(FIXTURES / name)
    placement = plan_placement(topo)
    check_layout(topo, placement)
    if name in FIXTURE_SLICES:
        assert slices(placement) == FIXTURE_SLICES[name]


def test_dgx_cache_and_socket_scopes() -> None:
    placement = plan_placement(topology(FIXTURES / "dgx-a100"))
    g0 = placement.gpus[0]
    # the slice's CCXs, whole (housekeeping CPU 48 included: torchrun's core-complex)
    assert g0.cache_cpus.cpulist() == "48-55,176-183"
    assert g0.socket_cpus.cpulist() == "0-63,128-191"


# -- real machines (../shared/hosts) ----------------------------------------------------------


def dumps() -> list[str]:
    if not SHARED.is_dir():
        return []
    return sorted(p.name.removesuffix(".tar.bz2") for p in SHARED.glob("*.tar.bz2"))


# (dump, GPUs per node) -> expected slices, where the L3 layout decides them
DUMP_SLICES = {
    # POWER9, node 0: 2 L3 of 2 SMT4 cores (0-7, 8-15), housekeeping core 0-3. Cut by count,
    # GPU0 had 4-11 across both L3s; now 4-7 and 8-15, one L3 each.
    ("nvidiagpunumanodes", 2): ["4-7", "8-15", "92-95", "96-103"],
    # 3 GPUs for 2 L3: one domain holds two slices, none straddles
    ("nvidiagpunumanodes", 3): ["4-7", "8-11", "12-15", "92-95", "96-99", "100-103"],
    # 2 sockets, 1 L3 each (Intel, no SNC): cut by count, as before
    ("32intel64-2p8co2t+8ve", 2): ["1-4,17-20", "5-7,21-23", "9-12,25-28", "13-15,29-31"],
    # L3 numbered across nodes (0,4,8,... is one node and one L3): unchanged
    ("40intel64-2g2n4c+pcilocality", 2): [
        "4,8,12,16,20",
        "24,28,32,36",
        "5,9,13,17,21",
        "25,29,33,37",
        "6,10,14,18,22",
        "26,30,34,38",
        "7,11,15,19,23",
        "27,31,35,39",
    ],
}


@pytest.mark.parametrize("name", dumps() or ["(none)"])
@pytest.mark.parametrize("per_node", [1, 2, 3, 4])
def test_dump_slices(name: str, per_node: int) -> None:
    if name == "(none)":
        pytest.skip(f"hwloc reference dumps not found at {SHARED} (set MCPNODE_SHARED_HOSTS)")
    topo = with_gpus(topology(SHARED / f"{name}.tar.bz2"), per_node)
    placement = plan_placement(topo)
    check_layout(topo, placement)
    if (name, per_node) in DUMP_SLICES:
        assert slices(placement) == DUMP_SLICES[name, per_node]


# -- generated roots: several L3 per node, SNC, unbalanced counts -------------------------------

CPU = "sys/devices/system/cpu"
NODE = "sys/devices/system/node"


def put(root: Path, rel: str, text: str) -> None:
    p = root / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)


def machine(root: Path, nodes: list[str], l3: list[str]) -> Path:
    """No SMT; NUMA nodes and L3 domains given as cpulists."""
    every = sorted(set().union(*(parse_cpulist(n) for n in nodes)))
    text = CpuSet(every).cpulist() + "\n"
    for f in ("possible", "present", "online"):
        put(root, f"{CPU}/{f}", text)
    for i, n in enumerate(nodes):
        put(root, f"{NODE}/node{i}/cpulist", n + "\n")
    put(root, f"{NODE}/online", f"0-{len(nodes) - 1}\n")
    for cpu in every:
        put(root, f"{CPU}/cpu{cpu}/topology/thread_siblings_list", f"{cpu}\n")
        put(root, f"{CPU}/cpu{cpu}/topology/physical_package_id", "0\n")
        dom = next(d for d in l3 if cpu in parse_cpulist(d))
        for name, value in (("level", "3"), ("type", "Unified"), ("shared_cpu_list", dom)):
            put(root, f"{CPU}/cpu{cpu}/cache/index3/{name}", value + "\n")
        put(root, f"{CPU}/cpu{cpu}/cache/index3/size", "32768K\n")
    return root


@pytest.mark.parametrize(
    ("nodes", "l3", "per_node", "want"),
    [
        # 3 CCDs of 4 cores, 2 GPUs: whole CCDs, 2 + 1 (the first loses housekeeping CPU 0)
        (["0-11"], ["0-3", "4-7", "8-11"], 2, ["1-7", "8-11"]),
        # 2 CCDs, 4 GPUs: two slices inside each CCD
        (["0-15"], ["0-7", "8-15"], 4, ["1-4", "5-7", "8-11", "12-15"]),
        # unequal domains, 3 GPUs: the larger domain gets two (D'Hondt)
        (["0-11"], ["0-7", "8-11"], 3, ["1-4", "5-7", "8-11"]),
        # Intel SNC-2: one L3 spans both sub-NUMA nodes: each node is cut by count
        (["0-7", "8-15"], ["0-15"], 2, ["1-4", "5-7", "9-12", "13-15"]),
        # interleaved L3 numbering (40intel64-like): slices follow the domains, not the ids
        (["0-7"], ["0,2,4,6", "1,3,5,7"], 2, ["1,3,5,7", "2,4,6"]),
    ],
)
def test_generated(
    tmp_path: Path, nodes: list[str], l3: list[str], per_node: int, want: list[str]
) -> None:
    topo = with_gpus(topology(machine(tmp_path, nodes, l3)), per_node)
    placement = plan_placement(topo)
    check_layout(topo, placement)
    assert slices(placement) == want
