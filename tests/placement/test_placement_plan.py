"""placement/plan.py on every host fixture: the slice invariants, NIC choice against the real
nvidia-smi matrices the fixtures were modelled on, the launcher environment, and the edge
cases (unknown NUMA node, tiny nodes, housekeeping lists, CPU-less nodes)."""

from __future__ import annotations

from functools import cache
from pathlib import Path

import pytest

from mcpnode.codec.record import replace
from mcpnode.errors import UsageError
from mcpnode.host import Host
from mcpnode.placement.plan import (
    GpuPlacement,
    Placement,
    plan_placement,
    select_gpus,
)
from mcpnode.topology.discover import discover_host
from mcpnode.topology.distance import RANK
from mcpnode.topology.model import Cpu, CpuSet, CpuTopology, Topology
from tests.support.nvsmi import parse_topo_matrix

TESTS = Path(__file__).resolve().parents[1]
HOSTS = TESTS / "fixtures" / "hosts"
NVSMI = TESTS / "fixtures" / "nvidia-smi"
FIXTURES = sorted(p.name for p in HOSTS.iterdir() if p.is_dir())
WITH_REFERENCE = sorted(p.stem for p in NVSMI.glob("*.txt") if p.stem in FIXTURES)
HOUSEKEEPING = ["first-core", "none", "0-3"]


@cache
def topology(name: str) -> Topology:
    return discover_host(Host(HOSTS / name))


@cache
def placement(name: str, housekeeping: str = "first-core") -> Placement:
    return plan_placement(topology(name), housekeeping)


def by_index(p: Placement, index: int) -> GpuPlacement:
    (g,) = [g for g in p.gpus if g.index == index]
    return g


def test_fixtures_are_found() -> None:
    assert "hgx-h100-8gpu-8nic" in FIXTURES and len(FIXTURES) >= 8
    assert set(WITH_REFERENCE) >= {"hgx-h100-8gpu-8nic", "dgx-a100"}


# -- invariants, every fixture -------------------------------------------------------------------


@pytest.mark.parametrize("housekeeping", HOUSEKEEPING)
@pytest.mark.parametrize("name", FIXTURES)
def test_slice_invariants(name: str, housekeeping: str) -> None:
    topo = topology(name)
    p = placement(name, housekeeping)
    assert [g.address for g in p.gpus] == sorted(g.address for g in topo.gpus)
    siblings = {c.id: c.siblings & topo.cpus.online for c in topo.cpus.cpus}
    seen: set[int] = set()
    for g in p.gpus:
        # pairwise disjoint
        assert not (g.slice_cpus & seen), f"GPU {g.index} overlaps another slice"
        seen |= g.slice_cpus
        # SMT siblings together
        for cpu in g.slice_cpus:
            assert siblings[cpu] <= g.slice_cpus, f"GPU {g.index}: CPU {cpu} without siblings"
        # inside the GPU's node, online, not housekeeping
        if g.slice_cpus:
            (node_id,) = g.memory_nodes
            node = topo.node(node_id)
            assert node is not None
            assert g.slice_cpus <= node.cpus
            assert g.slice_cpus <= g.local_cpus
        assert g.slice_cpus <= topo.cpus.online
        assert not (g.slice_cpus & p.housekeeping)
        # never a CPU-less node
        for n in g.memory_nodes:
            node = topo.node(n)
            assert node is not None and not node.cpuless and node.cpus


@pytest.mark.parametrize("name", FIXTURES)
def test_slices_use_every_free_core_of_a_gpu_node(name: str) -> None:
    """Nothing is left idle: a node's non-housekeeping cores all go to its GPUs."""
    topo = topology(name)
    p = placement(name)
    for node_id in {n for g in p.gpus for n in g.memory_nodes}:
        node = topo.node(node_id)
        assert node is not None
        given = CpuSet(c for g in p.gpus if node_id in g.memory_nodes for c in g.slice_cpus)
        assert given == (node.cpus & topo.cpus.online) - p.housekeeping


@pytest.mark.parametrize("name", FIXTURES)
def test_slices_are_even(name: str) -> None:
    """Per node, slice sizes in whole cores differ by at most one, larger first, where the
    node's cores share one L3 (or caches are unknown): across several L3 domains the slices
    follow the domains instead (tests/placement/test_cache_slices.py)."""
    p = placement(name)
    topo = topology(name)
    for node_id in {n for g in p.gpus for n in g.memory_nodes}:
        node = topo.node(node_id)
        assert node is not None
        if sum(1 for c in topo.cache_domains(3) if c.cpus & node.cpus) > 1:
            continue
        sizes = [len(g.slice_cpus) for g in p.gpus if node_id in g.memory_nodes]
        assert sizes == sorted(sizes, reverse=True)
        assert max(sizes) - min(sizes) <= 2  # one core, 2 threads with SMT


@pytest.mark.parametrize("name", FIXTURES)
def test_deterministic(name: str) -> None:
    assert plan_placement(topology(name)) == plan_placement(topology(name))


def test_hgx_slices_exact() -> None:
    p = placement("hgx-h100-8gpu-8nic")
    assert p.housekeeping == CpuSet({0, 48, 96, 144})
    assert [g.slice_cpus.cpulist() for g in p.gpus] == [
        "1-12,97-108",
        "13-24,109-120",
        "25-36,121-132",
        "37-47,133-143",
        "49-60,145-156",
        "61-72,157-168",
        "73-84,169-180",
        "85-95,181-191",
    ]
    assert [g.memory_nodes.cpulist() for g in p.gpus] == ["0"] * 4 + ["1"] * 4
    assert p.problems == ()


def test_grace_hopper_never_binds_gpu_memory_node() -> None:
    topo = topology("grace-hopper-gh200")
    (gpu,) = topo.gpus
    assert gpu.memory_numa_node is not None
    (g,) = placement("grace-hopper-gh200").gpus
    assert gpu.memory_numa_node not in g.memory_nodes
    assert g.memory_nodes == CpuSet({0})


# -- NICs against nvidia-smi -------------------------------------------------------------------


@pytest.mark.parametrize("name", WITH_REFERENCE)
def test_nic_choice_matches_nvidia_smi(name: str) -> None:
    """Each GPU's chosen NICs are exactly the NIC columns of its row with the closest bucket
    nvidia-smi printed (SYS never offered)."""
    ref = parse_topo_matrix((NVSMI / f"{name}.txt").read_text())
    p = placement(name)
    for row in ref.gpus:
        g = by_index(p, int(row.removeprefix("GPU")))
        cells = {ref.device_name(n): ref.cells[row, n] for n in ref.nics}
        near = {n: b for n, b in cells.items() if b != "SYS"}
        if not near:
            assert g.nics == ()
            continue
        best = min(near.values(), key=lambda b: RANK[b])
        assert {c.rdma for c in g.nics} == {n for n, b in near.items() if b == best}, row
        assert {c.bucket for c in g.nics} == {best}


def test_hgx_each_gpu_gets_its_pix_nic() -> None:
    ref = parse_topo_matrix((NVSMI / "hgx-h100-8gpu-8nic.txt").read_text())
    p = placement("hgx-h100-8gpu-8nic")
    for row in ref.gpus:
        pix = [ref.device_name(n) for n in ref.nics if ref.cells[row, n] == "PIX"]
        g = by_index(p, int(row.removeprefix("GPU")))
        assert len(pix) == 1
        assert [(c.rdma, c.bucket) for c in g.nics] == [(pix[0], "PIX")]


def test_dgx_a100_pxb_pairs_fastest_first() -> None:
    p = placement("dgx-a100")
    pairs = [tuple(c.rdma for c in g.nics) for g in p.gpus]
    assert pairs == [
        ("mlx5_0", "mlx5_1"),
        ("mlx5_0", "mlx5_1"),
        ("mlx5_2", "mlx5_3"),
        ("mlx5_2", "mlx5_3"),
        ("mlx5_6", "mlx5_7"),
        ("mlx5_6", "mlx5_7"),
        ("mlx5_8", "mlx5_9"),
        ("mlx5_8", "mlx5_9"),
    ]
    for g in p.gpus:
        keys = [(-(c.link_speed_gts or 0), -(c.link_width or 0), c.address) for c in g.nics]
        assert keys == sorted(keys)


def test_nic_tie_broken_by_link_speed() -> None:
    """Two NICs in one bucket: the faster link first, whatever the PCI order."""
    topo = topology("dgx-a100")
    slow = topo.nics[0]
    for nic in topo.nics:
        if "mlx5_0" in nic.rdma_devices:
            slow = nic
    slowed = replace(slow, link=replace(slow.link, current_speed_gts=2.5, current_width=1))
    nics = tuple(slowed if n is slow else n for n in topo.nics)
    p = plan_placement(replace(topo, nics=nics))
    assert [c.rdma for c in by_index(p, 0).nics] == ["mlx5_1", "mlx5_0"]


def test_no_nic_within_reach_offers_none() -> None:
    for g in placement("h100-nvl-pair").gpus:
        assert g.nics == ()


# -- environment -------------------------------------------------------------------------------


def test_env_hgx_gpu0() -> None:
    g = by_index(placement("hgx-h100-8gpu-8nic"), 0)
    assert g.env == (
        ("CUDA_VISIBLE_DEVICES", "GPU-70fd9812-8b04-5bc6-aadd-bfb8416c6269"),
        ("CUDA_DEVICE_ORDER", "PCI_BUS_ID"),
        ("NCCL_IB_HCA", "=mlx5_0:1"),
        ("NCCL_SOCKET_IFNAME", "=ibp25s0"),
        ("UCX_NET_DEVICES", "mlx5_0:1"),
    )


def test_env_two_nics_and_none() -> None:
    env = dict(by_index(placement("pcie-4x-l40s-2socket"), 2).env)
    assert env["NCCL_IB_HCA"] == "=mlx5_0:1,mlx5_1:1"
    assert env["NCCL_SOCKET_IFNAME"] == "=enp225s0f0np0,enp225s0f1np1"
    assert env["UCX_NET_DEVICES"] == "mlx5_0:1,mlx5_1:1"
    env0 = dict(by_index(placement("pcie-4x-l40s-2socket"), 0).env)
    assert set(env0) == {"CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER"}


@pytest.mark.parametrize("name", FIXTURES)
def test_env_uses_uuid(name: str) -> None:
    for g in placement(name).gpus:
        env = dict(g.env)
        assert env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
        assert env["CUDA_VISIBLE_DEVICES"] == (g.uuid or str(g.index))
        assert all(v for v in env.values()), "no variable is set empty"


def test_env_without_nvml_uses_index() -> None:
    topo = topology("hgx-h100-8gpu-8nic")
    bare = replace(topo, gpus=tuple(replace(g, nvml=None) for g in topo.gpus))
    p = plan_placement(bare)
    assert [dict(g.env)["CUDA_VISIBLE_DEVICES"] for g in p.gpus] == [str(i) for i in range(8)]
    assert all(g.uuid is None and g.nvlink_peers == () for g in p.gpus)


def test_plain_ethernet_offered_only_without_rdma() -> None:
    topo = topology("single-gpu-kvm-vm-h100-pcie")
    plain = tuple(replace(n, rdma_devices=()) for n in topo.nics)
    (g,) = plan_placement(replace(topo, nics=plain)).gpus
    assert g.nics and all(c.rdma is None for c in g.nics)
    env = dict(g.env)
    assert "NCCL_IB_HCA" not in env
    names = [d for c in g.nics for d in c.netdevs]
    assert "ens4" in names
    assert env["NCCL_SOCKET_IFNAME"] == "=" + ",".join(names)
    assert env["UCX_NET_DEVICES"] == ",".join(names)


def test_nvlink_peers() -> None:
    assert by_index(placement("hgx-h100-8gpu-8nic"), 3).nvlink_peers == (0, 1, 2, 4, 5, 6, 7)
    assert [g.nvlink_peers for g in placement("h100-nvl-pair").gpus] == [(1,), (0,)]
    assert [g.nvlink_peers for g in placement("h100-nvl-pair-inactive").gpus] == [(), ()]


# -- unknown NUMA, tiny nodes, housekeeping ------------------------------------------------------


def test_unknown_numa_gets_no_slice() -> None:
    topo = topology("single-gpu-kvm-vm-h100-pcie")
    (gpu,) = topo.gpus
    lost = replace(gpu, numa_node=None, numa_source="unknown", local_cpus=None)
    (g,), problems = _plan_gpus(replace(topo, gpus=(lost,)))
    assert g.slice_cpus == CpuSet() and g.memory_nodes == CpuSet() and g.local_cpus == CpuSet()
    assert any("GPU 0" in p and "NUMA node unknown" in p for p in problems)


def test_unknown_numa_with_local_cpus_on_two_nodes_keeps_them() -> None:
    topo = topology("hgx-h100-8gpu-8nic")
    gpu = topo.gpus[0]
    wide = replace(gpu, numa_node=None, numa_source="unknown", local_cpus=CpuSet(range(192)))
    p = plan_placement(replace(topo, gpus=(wide, *topo.gpus[1:])))
    g = by_index(p, 0)
    assert g.local_cpus == CpuSet(range(192))
    assert g.slice_cpus == CpuSet() and g.memory_nodes == CpuSet()
    assert any("GPU 0" in x for x in p.problems)
    # the node's other three GPUs share its cores
    assert by_index(p, 1).slice_cpus.cpulist() == "1-16,97-112"


def test_node_from_local_cpus_when_numa_node_missing() -> None:
    topo = topology("hgx-h100-8gpu-8nic")
    gpu = topo.gpus[5]
    assert gpu.local_cpus is not None
    moved = replace(gpu, numa_node=None, numa_source="local-cpus")
    gpus = tuple(moved if g is gpu else g for g in topo.gpus)
    p = plan_placement(replace(topo, gpus=gpus))
    assert by_index(p, 5).memory_nodes == CpuSet({1})
    assert by_index(p, 5).slice_cpus == placement("hgx-h100-8gpu-8nic").gpus[5].slice_cpus


def test_gpu_on_cpuless_node_falls_back_to_local_cpus() -> None:
    topo = topology("grace-hopper-gh200")
    (gpu,) = topo.gpus
    assert gpu.memory_numa_node is not None
    odd = replace(gpu, numa_node=gpu.memory_numa_node)
    (g,), _ = _plan_gpus(replace(topo, gpus=(odd,)))
    assert g.memory_nodes == CpuSet({0})
    assert g.slice_cpus.cpulist() == "1-71"


def test_one_core_node_keeps_its_core_for_the_gpu() -> None:
    """A 2-CPU VM (one core, two threads) with one GPU: the default housekeeping core is
    waived with a problem instead of leaving the GPU nothing."""
    (g,), problems = _plan_gpus(_tiny("single-gpu-kvm-vm-h100-pcie"))
    assert g.slice_cpus == CpuSet({0, 1})
    assert any("housekeeping core 0-1 left to the GPUs" in p for p in problems)


def test_explicit_housekeeping_is_honoured_even_when_it_starves() -> None:
    p = plan_placement(_tiny("single-gpu-kvm-vm-h100-pcie"), "0")
    (g,) = p.gpus
    assert p.housekeeping == CpuSet({0, 1})  # widened to the whole core
    assert g.slice_cpus == CpuSet()
    assert any("0 core(s)" in x for x in p.problems)


def test_housekeeping_list_widened_to_cores() -> None:
    p = placement("hgx-h100-8gpu-8nic", "0-3")
    assert p.housekeeping == CpuSet({0, 1, 2, 3, 96, 97, 98, 99})
    assert by_index(p, 0).slice_cpus.cpulist() == "4-14,100-110"
    # node 1 reserves nothing
    assert by_index(p, 4).slice_cpus.cpulist() == "48-59,144-155"


def test_housekeeping_none() -> None:
    p = placement("hgx-h100-8gpu-8nic", "none")
    assert p.housekeeping == CpuSet()
    assert by_index(p, 0).slice_cpus.cpulist() == "0-11,96-107"


def test_housekeeping_offline_cpus_noted() -> None:
    p = plan_placement(topology("hgx-h100-8gpu-8nic"), "0,4000")
    assert any("4000" in x and "not online" in x for x in p.problems)


def test_fewer_cores_than_gpus() -> None:
    p = plan_placement(topology("hgx-h100-8gpu-8nic"), "0-46,96-142")
    sizes = [len(g.slice_cpus) for g in p.gpus[:4]]
    assert sizes == [2, 0, 0, 0]
    assert any("node 0: 1 core(s)" in x and "GPUs 1,2,3" in x for x in p.problems)


@pytest.mark.parametrize("bad", ["first", "0-", "a,b", "3-1"])
def test_bad_housekeeping(bad: str) -> None:
    with pytest.raises(UsageError, match="housekeeping"):
        plan_placement(topology("hgx-h100-8gpu-8nic"), bad)


# -- select_gpus ---------------------------------------------------------------------------------


def test_select_by_index_and_uuid() -> None:
    p = placement("hgx-h100-8gpu-8nic")
    assert select_gpus(p, "3") == (by_index(p, 3),)
    uuid = by_index(p, 5).uuid
    assert uuid is not None
    assert select_gpus(p, uuid) == (by_index(p, 5),)
    assert select_gpus(p, uuid.upper()) == (by_index(p, 5),)


def test_select_all_local() -> None:
    p = placement("hgx-h100-8gpu-8nic")
    assert [g.index for g in select_gpus(p, "all-local", CpuSet({50, 150}))] == [4, 5, 6, 7]
    assert [g.index for g in select_gpus(p, "all-local", CpuSet({0}))] == [0, 1, 2, 3]


@pytest.mark.parametrize(
    ("selector", "cpus", "message"),
    [
        ("8", None, "'8': no GPU with that index"),
        ("GPU-00000000-0000-0000-0000-000000000000", None, "not a GPU index"),
        ("-1", None, "'-1'"),
        ("00", None, "'00': not a GPU index"),  # a leading zero is refused, never GPU 0
        ("03", None, "'03': not a GPU index"),
        ("", None, "''"),
        ("all-local", None, "all-local"),
        ("all-local", CpuSet({0, 48}), "all-local: no GPU's NUMA node holds"),
    ],
)
def test_select_errors(selector: str, cpus: CpuSet | None, message: str) -> None:
    with pytest.raises(UsageError, match=message.replace("(", r"\(")):
        select_gpus(placement("hgx-h100-8gpu-8nic"), selector, cpus)


def test_select_on_gpuless_host() -> None:
    with pytest.raises(UsageError, match="GPUs: none"):
        select_gpus(placement("no-gpu-host"), "0")


# -- helpers -----------------------------------------------------------------------------------


def _plan_gpus(topo: Topology) -> tuple[tuple[GpuPlacement, ...], tuple[str, ...]]:
    p = plan_placement(topo)
    return p.gpus, p.problems


def _tiny(name: str) -> Topology:
    """`name` cut down to CPUs 0-1, one core with two threads, on node 0."""
    topo = topology(name)
    both = CpuSet({0, 1})
    cpus = tuple(Cpu(i, True, 0, 0, 0, 0, both) for i in (0, 1))
    node = replace(topo.numa_nodes[0], cpus=both)
    gpus = tuple(replace(g, local_cpus=both) for g in topo.gpus)
    return replace(
        topo,
        cpus=CpuTopology(both, both, both, cpus),
        numa_nodes=(node,),
        gpus=gpus,
    )
