"""Slurm gres.conf lines: Cores= as Slurm abstract core indices (not CPU ids), Links= by
NVML index, File= by minor number."""

from __future__ import annotations

import re
from collections.abc import Sequence

import pytest

from mcpnode.placement.exporters import slurm
from mcpnode.placement.exporters.slurm import cores_for, slurm_core_indices
from mcpnode.topology.model import Cpu, CpuSet, CpuTopology, replace
from tests.exportcase import FIXTURES, placement, topology


def gres_lines(fixture: str) -> list[dict[str, str]]:
    text = slurm.render(topology(fixture), placement(fixture), None)
    out = []
    for line in text.splitlines():
        if line.startswith("#") or not line:
            continue
        out.append(dict(field.split("=", 1) for field in line.split()))
    return out


def cpu_topology(
    rows: Sequence[tuple[int, int | None, int | None, tuple[int, ...]]],
) -> CpuTopology:
    """(cpu id, package, core_id, siblings) rows."""
    cpus = tuple(
        Cpu(i, True, core, pkg, None, None, CpuSet(sib)) for i, pkg, core, sib in sorted(rows)
    )
    ids = CpuSet(c.id for c in cpus)
    return CpuTopology(ids, ids, ids, cpus)


def test_hgx_cores_are_physical_cores_socket_major() -> None:
    # 2 sockets x 48 cores x 2 threads: CPUs 0-47 + 96-143 are socket 0's threads.
    lines = gres_lines("hgx-h100-8gpu-8nic")
    assert [ln["File"] for ln in lines] == [f"/dev/nvidia{i}" for i in range(8)]
    assert [ln["Cores"] for ln in lines] == ["0-47"] * 4 + ["48-95"] * 4
    assert {ln["Type"] for ln in lines} == {"h100"}
    assert lines[0]["Links"] == "-1,18,18,18,18,18,18,18"
    assert lines[5]["Links"] == "18,18,18,18,18,-1,18,18"


def test_dgx_a100_nps4_cores() -> None:
    # 2 sockets x 64 cores, 4 NUMA nodes per socket (NPS4): GPU0/1 on node 3 (cores 48-63 of
    # socket 0), GPU4/5 on node 7 (cores 48-63 of socket 1 = Slurm cores 112-127).
    lines = gres_lines("dgx-a100")
    assert [ln["Cores"] for ln in lines] == [
        "48-63",
        "48-63",
        "16-31",
        "16-31",
        "112-127",
        "112-127",
        "80-95",
        "80-95",
    ]
    assert {ln["Type"] for ln in lines} == {"a100"}
    assert lines[0]["Links"] == "-1," + ",".join(["12"] * 7)


def test_pcie_only_host_has_no_links() -> None:
    lines = gres_lines("pcie-4x-l40s-2socket")
    assert [ln["Cores"] for ln in lines] == ["0-95", "0-95", "96-191", "96-191"]
    assert all("Links" not in ln for ln in lines)


def test_nvl_pair_links() -> None:
    lines = gres_lines("h100-nvl-pair")
    assert [ln["Links"] for ln in lines] == ["-1,12", "12,-1"]
    assert [ln["Cores"] for ln in lines] == ["0-39", "40-79"]


def test_no_gpu_host() -> None:
    text = slurm.render(topology("no-gpu-host"), placement("no-gpu-host"), None)
    assert "# no GPU found" in text
    assert not [ln for ln in text.splitlines() if ln and not ln.startswith("#")]


@pytest.mark.parametrize("fixture", FIXTURES)
def test_every_line_is_well_formed(fixture: str) -> None:
    n = len(topology(fixture).gpus)
    for ln in gres_lines(fixture):
        assert ln["Name"] == "gpu"
        assert re.fullmatch(r"/dev/nvidia\d+", ln["File"])
        assert re.fullmatch(r"\d+(-\d+)?(,\d+(-\d+)?)*", ln["Cores"])
        if "Links" in ln:
            links = [int(x) for x in ln["Links"].split(",")]
            assert len(links) == n and links.count(-1) == 1


def test_core_indices_ignore_core_id_gaps_and_interleaved_sockets() -> None:
    # Sockets interleaved by CPU id (even CPUs on socket 0), core_ids with a gap (0,1,8,9) as
    # some Xeons number them, SMT siblings n and n+8.
    rows = []
    for cpu in range(16):
        pkg = cpu % 2
        pos = (cpu % 8) // 2
        rows.append((cpu, pkg, [0, 1, 8, 9][pos], (cpu % 8, cpu % 8 + 8)))
    index = slurm_core_indices(cpu_topology(rows))
    # socket 0 (lowest CPU 0): its cores by lowest CPU: 0,2,4,6 -> 0..3; socket 1: 4..7
    assert [index[c] for c in range(8)] == [0, 4, 1, 5, 2, 6, 3, 7]
    assert all(index[c] == index[c + 8] for c in range(8))  # siblings share a core
    assert cores_for(CpuSet({0, 2, 8, 10}), index) == CpuSet({0, 1})


def test_unknown_core_ids_give_no_cores() -> None:
    index = slurm_core_indices(cpu_topology([(0, 0, 0, (0,)), (1, None, None, (1,))]))
    assert index == {0: 0}
    assert cores_for(CpuSet({0, 1}), index) is None
    assert cores_for(CpuSet(), index) is None


def test_gpu_without_minor_gets_a_comment_not_a_line() -> None:
    topo = topology("h100-nvl-pair")
    g0 = topo.gpus[0]
    assert g0.nvml is not None
    gpus = (replace(g0, nvml=replace(g0.nvml, minor=None)), topo.gpus[1])
    text = slurm.render(replace(topo, gpus=gpus), placement("h100-nvl-pair"), None)
    assert "# GPU0 0001:00:00.0: minor number unknown" in text
    assert [ln for ln in text.splitlines() if ln.startswith("Name=")] == [
        "Name=gpu Type=h100 File=/dev/nvidia1 Cores=40-79 Links=12,-1"
    ]
