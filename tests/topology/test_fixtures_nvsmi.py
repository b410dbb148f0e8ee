"""`mcpnode topo` on the realistic host fixtures against the real nvidia-smi matrices they were
modelled on, plus the matrix parser itself on every published copy.

References live in tests/fixtures/nvidia-smi/ (verbatim copies of ../shared/nvidia-topo/, so a
plain clone has them). NV# cells come from NVML: each GPU fixture root carries the NVML answers
mcpnode's discovery got from tools/fixturegen/nvmlgen.py's simulation (`mcpnode-snapshot.json`), so
every cell, NV# included, must equal nvidia-smi's.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.support.nvsmi import TopoMatrix, TopoParseError, parse_topo_matrix

TESTS = Path(__file__).resolve().parents[1]
HOSTS = TESTS / "fixtures" / "hosts"
NVSMI = TESTS / "fixtures" / "nvidia-smi"
SHARED = TESTS.parent.parent / "shared" / "nvidia-topo"

FIXTURES_WITH_REFERENCE = [
    "dgx-a100",
    "hgx-h100-8gpu-8nic",
    "pcie-4x-l40s-2socket",
    "single-gpu-kvm-vm-h100-pcie",
]
REFERENCE_FILES = sorted(p.name for p in NVSMI.glob("*.txt"))
PCIE_BUCKETS = ("PIX", "PXB", "PHB", "NODE", "SYS")


def reference(name: str) -> TopoMatrix:
    return parse_topo_matrix((NVSMI / f"{name}.txt").read_text())


# -- the parser on the published matrices ---------------------------------------------------


def test_reference_copies_are_present() -> None:
    expected = [f"{n}.txt" for n in FIXTURES_WITH_REFERENCE]
    expected.append("h200-8gpu-10nic-slurm-cgroup.txt")
    assert sorted(expected) == REFERENCE_FILES


@pytest.mark.parametrize("filename", REFERENCE_FILES)
def test_reference_copies_are_verbatim(filename: str) -> None:
    original = SHARED / filename
    if not original.exists():
        pytest.skip(f"{original} not present (plain clone)")
    assert (NVSMI / filename).read_bytes() == original.read_bytes()


@pytest.mark.parametrize("filename", REFERENCE_FILES)
def test_parser_square_matrix(filename: str) -> None:
    m = parse_topo_matrix((NVSMI / filename).read_text())
    assert m.rows == m.columns
    for r in m.rows:
        assert m.cells[r, r] == "X"
        for c in m.columns:
            v = m.cells[r, c]
            assert v == "X" or v in PCIE_BUCKETS or re.fullmatch(r"NV\d+", v), (r, c, v)
            assert m.cells[c, r] == v  # nvidia-smi matrices are symmetric
    for g in m.gpus:
        assert m.numa_affinity[g] != ""
    for n in m.nics:
        assert m.cpu_affinity[n] == "" and m.numa_affinity[n] == ""


def test_parser_hgx_h100_space_expanded() -> None:
    m = reference("hgx-h100-8gpu-8nic")
    assert m.gpus == tuple(f"GPU{i}" for i in range(8))
    assert m.nics == tuple(f"NIC{i}" for i in range(8))
    assert m.cells["GPU0", "NIC0"] == "PIX"
    assert m.cells["GPU0", "NIC1"] == "NODE"
    assert m.cells["GPU0", "NIC4"] == "SYS"
    assert m.cells["GPU3", "GPU5"] == "NV18"
    assert m.cells["NIC7", "NIC7"] == "X"
    assert m.cpu_affinity["GPU5"] == "48-95,144-191"
    assert m.numa_affinity["GPU5"] == "1"
    assert m.gpu_numa_id["GPU0"] == "N/A"
    assert m.nic_legend == {f"NIC{i}": f"mlx5_{i}" for i in range(8)}
    assert m.device_name("NIC3") == "mlx5_3"


def test_parser_l40s_skips_prompt() -> None:
    m = reference("pcie-4x-l40s-2socket")
    assert m.rows == ("GPU0", "GPU1", "GPU2", "GPU3", "NIC0", "NIC1")
    assert m.cells["GPU0", "GPU1"] == "NODE"
    assert m.cells["NIC0", "NIC1"] == "PIX"
    assert m.cells["GPU2", "NIC1"] == "NODE"
    assert m.cpu_affinity["GPU2"] == "96-191,288-383"


def test_parser_dgx_a100_old_format() -> None:
    m = reference("dgx-a100")
    assert m.nics == tuple(f"mlx5_{i}" for i in range(12))
    assert m.nic_legend == {}
    assert m.gpu_numa_id == {}  # no GPU NUMA ID column in that driver era
    assert m.cells["GPU0", "mlx5_1"] == "PXB"
    assert m.cells["mlx5_4", "mlx5_5"] == "PIX"
    assert m.cells["mlx5_10", "GPU7"] == "SYS"
    assert m.cpu_affinity["GPU4"] == "112-127,240-255"
    assert m.numa_affinity["GPU6"] == "5"


def test_parser_vm() -> None:
    m = reference("single-gpu-kvm-vm-h100-pcie")
    assert m.cells == {
        ("GPU0", "GPU0"): "X",
        ("GPU0", "NIC0"): "PHB",
        ("NIC0", "GPU0"): "PHB",
        ("NIC0", "NIC0"): "X",
    }
    assert (m.cpu_affinity["GPU0"], m.numa_affinity["GPU0"]) == ("0-251", "0")
    assert m.gpu_numa_id["GPU0"] == "N/A"


def test_parser_empty_cells_in_space_expanded_copy() -> None:
    """Inside a 1-CPU Slurm job GPU0-3 have an empty CPU Affinity; splitting on whitespace
    would shift NUMA Affinity into its place."""
    m = parse_topo_matrix((NVSMI / "h200-8gpu-10nic-slurm-cgroup.txt").read_text())
    assert m.cpu_affinity["GPU0"] == ""
    assert m.numa_affinity["GPU0"] == "0"
    assert m.gpu_numa_id["GPU0"] == "N/A"
    assert (m.cpu_affinity["GPU4"], m.numa_affinity["GPU4"]) == ("56", "1")
    assert m.cells["NIC1", "NIC2"] == "PIX"
    assert len(m.nic_legend) == 10


@pytest.mark.parametrize("filename", ["dgx-a100.txt"])
def test_parser_tabs_and_expanded_agree(filename: str) -> None:
    """Expanding the TABs of a TAB-separated copy must not change the parse, even where a
    15-character CPU list leaves a single space before the next cell."""
    text = (NVSMI / filename).read_text()
    assert "\t" in text
    expanded = "\n".join(line.expandtabs(8) for line in text.splitlines())
    assert "112-127,240-255 7" in expanded
    assert parse_topo_matrix(expanded) == parse_topo_matrix(text)


def test_parser_mcpnode_layout() -> None:
    text = (
        "\tGPU0\tNIC0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n"
        "GPU0\t X \tPHB\t0-1\t0\t\tN/A\n"
        "NIC0\tPHB\t X \t\t\t\t\n"
        "\nLegend:\n\n  X    = Self\n\nNIC Legend:\n\n  NIC0: mlx5_0\n"
    )
    for variant in (text, text.expandtabs(8)):
        m = parse_topo_matrix(variant)
        assert m.cells["GPU0", "NIC0"] == "PHB"
        assert (m.cpu_affinity["GPU0"], m.numa_affinity["GPU0"]) == ("0-1", "0")
        assert m.gpu_numa_id["GPU0"] == "N/A"
        assert m.nic_legend == {"NIC0": "mlx5_0"}


def test_parser_rejects_garbage() -> None:
    with pytest.raises(TopoParseError):
        parse_topo_matrix("no matrix here\n")
    with pytest.raises(TopoParseError):
        parse_topo_matrix("\tGPU0\tCPU Affinity\nGPU0\t X \t0-1\t0\t\tN/A\textra\tmore\n")


def shared(filename: str) -> str:
    path = SHARED / filename
    if not path.exists():
        pytest.skip(f"{path} not present (plain clone)")
    return path.read_text()


def test_parser_shared_hgx_h100_10nic_partial_tabs() -> None:
    m = parse_topo_matrix(shared("hgx-h100-10nic-tabs-PARTIAL.txt"))
    assert len(m.columns) == 18 and m.rows[-1] == "NIC2"  # truncated after NIC2
    assert m.cells["GPU3", "NIC5"] == "PIX"
    assert m.cells["NIC2", "GPU2"] == "PIX"
    assert m.cpu_affinity["GPU7"] == "56-111,168-223"
    assert m.cpu_affinity["NIC0"] == ""  # 4 trailing TABs


def test_parser_shared_dgx_h100_damaged_then_repaired() -> None:
    text = shared("dgx-h100-12nic-tabs-PARTIAL.txt")
    with pytest.raises(TopoParseError):
        parse_topo_matrix(text)  # "NIC8NIC9" lost its TAB in the source
    repaired = (
        text.replace("NIC8NIC9", "NIC8\tNIC9")
        .replace("NODENODE", "NODE\tNODE")
        .replace("NODEPXB", "NODE\tPXB")
    )
    m = parse_topo_matrix(repaired)
    assert m.nics == tuple(f"NIC{i}" for i in range(12))
    assert m.cells["GPU5", "NIC9"] == "PXB"
    assert m.cells["GPU0", "NIC0"] == "PXB"
    assert m.cpu_affinity["GPU4"] == "56-111,168-223"


# -- mcpnode topo on the host fixtures ------------------------------------------------------


def run_topo(name: str) -> str:
    from mcpnode.cli.main import cli

    res = CliRunner().invoke(cli, ["topo", "--root", str(HOSTS / name)])
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exception
    assert res.exit_code == 0, res.output
    return res.stdout


@pytest.mark.parametrize("name", FIXTURES_WITH_REFERENCE)
def test_mcpnode_topo_matches_nvidia_smi(name: str) -> None:
    out = run_topo(name)
    header = out.splitlines()[0]
    assert header.startswith("\tGPU0\t") and header.endswith(
        "\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID"
    ), header
    ours = parse_topo_matrix(out)
    ref = reference(name)
    assert all(re.fullmatch(r"NIC\d+", n) for n in ours.nics)
    assert ours.nic_legend.keys() == set(ours.nics)
    # labels -> device names (GPU0 / mlx5_3) on both sides
    label_of = {ours.device_name(c): c for c in ours.columns}
    assert sorted(label_of) == sorted(ref.device_name(c) for c in ref.columns)

    def mine(label: str) -> str:
        return label_of[ref.device_name(label)]

    mismatches = []
    for (row, col), want in sorted(ref.cells.items()):
        got = ours.cells.get((mine(row), mine(col)))
        if got != want:
            mismatches.append(f"{row}/{col}: {got} != {want}")
    assert not mismatches, "\n".join(mismatches)
    assert len(ours.cells) == len(ref.cells)  # every cell, nothing extra
    for g in ref.gpus:
        assert ours.cpu_affinity[mine(g)] == ref.cpu_affinity[g], g
        assert ours.numa_affinity[mine(g)] == ref.numa_affinity[g], g
        if ref.gpu_numa_id:  # the old (R470) layout of dgx-a100.txt has no such column
            assert ours.gpu_numa_id[mine(g)] == ref.gpu_numa_id[g], g
    assert " X " in out.splitlines()[1]


def test_mcpnode_topo_no_gpu_host() -> None:
    """An ASPEED BMC VGA is display class but not a GPU; there are no RDMA NICs either."""
    out = run_topo("no-gpu-host")
    assert not re.search(r"^GPU\d", out, re.MULTILINE)
    assert not re.search(r"\bNIC\d", out)
