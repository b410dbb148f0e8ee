"""Slurm gres.conf lines: Cores= as Slurm abstract core indices (not CPU ids), Links= by
NVML index, File= by minor number."""

from __future__ import annotations

import re
from collections.abc import Sequence

import pytest

from mcpnode.codec.record import replace
from mcpnode.placement.exporters import slurm
from mcpnode.placement.exporters.slurm import cores_for, slurm_core_indices
from mcpnode.topology.model import Cpu, CpuSet, CpuTopology
from tests.support.exportcase import FIXTURES, placement, topology


def gres_lines(fixture: str, type_form: slurm.TypeForm = "autodetect") -> list[dict[str, str]]:
    text = slurm.render(topology(fixture), placement(fixture), None, type_form=type_form)
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
    assert {ln["Type"] for ln in lines} == {"nvidia_h100_80gb_hbm3"}  # as AutoDetect=nvml
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
    assert {ln["Type"] for ln in lines} == {"nvidia_a100-sxm4-80gb"}
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
        "Name=gpu Type=nvidia_h100_nvl File=/dev/nvidia1 Cores=40-79 Links=12,-1"
    ]


@pytest.mark.parametrize(
    ("name", "autodetect", "short"),
    [
        # gpu_common_underscorify_tolower: tolower() each char, ' ' -> '_' (nothing else).
        ("NVIDIA H100 80GB HBM3", "nvidia_h100_80gb_hbm3", "h100"),
        ("NVIDIA A100-SXM4-80GB", "nvidia_a100-sxm4-80gb", "a100"),
        ("NVIDIA L40S", "nvidia_l40s", "l40s"),
        ("NVIDIA GH200 480GB", "nvidia_gh200_480gb", "gh200"),
        ("Tesla V100-SXM2-16GB", "tesla_v100-sxm2-16gb", "v100"),
        ("NVIDIA H100 NVL", "nvidia_h100_nvl", "h100"),
        ("NVIDIA RTX Ü6000", "nvidia_rtx_Ü6000", "ü6000"),  # C-locale tolower: ASCII only
    ],
)
def test_type_as_autodetect_derives_it(name: str, autodetect: str, short: str) -> None:
    assert slurm.gres_type(name) == autodetect
    assert slurm.gres_type(name, "short") == short
    assert slurm.gres_type(None) is None
    with pytest.raises(ValueError):
        slurm.gres_type(name, "long")  # type: ignore[arg-type]


def test_short_type_form() -> None:
    assert {ln["Type"] for ln in gres_lines("hgx-h100-8gpu-8nic", "short")} == {"h100"}
    assert {ln["Type"] for ln in gres_lines("dgx-a100", "short")} == {"a100"}


def test_nps4_says_numa_node_as_socket() -> None:
    """DGX A100 in NPS4: 8 NUMA nodes on 2 sockets, so the comment states the rule; HGX H100
    (one node per socket) and the no-GPU host do not get it."""
    text = slurm.render(topology("dgx-a100"), placement("dgx-a100"), None)
    assert "# 8 NUMA nodes with CPUs on 2 sockets" in text
    assert "SlurmdParameters=numa_node_as_socket" in text
    assert slurm.sub_socket_numa(topology("dgx-a100")) == (8, 2)
    for fixture in ("hgx-h100-8gpu-8nic", "no-gpu-host", "pcie-4x-l40s-2socket"):
        got = slurm.render(topology(fixture), placement(fixture), None)
        assert "numa_node_as_socket" not in got
        assert slurm.sub_socket_numa(topology(fixture)) is None
