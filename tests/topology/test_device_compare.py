"""tests/device/compare.py (what check.sh runs on a GPU host) on hand-written nvidia-smi output,
and check.sh itself: its exit 2 without nvidia-smi, and a whole run against a stand-in
nvidia-smi over a tree with recorded NVML answers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from mcpnode.cli.main import cli
from mcpnode.codec.record import replace
from mcpnode.topology.model import CpuSet
from tests.cli.test_gpus_cli import nvml_calls, write_nvml
from tests.device.compare import (
    GpuFacts,
    GpuReport,
    InputError,
    compare_audits,
    compare_gpus,
    compare_health,
    compare_p2p,
    compare_replay,
    compare_topo,
    main,
    normalise_bus_id,
    parse_mcpnode_gpus,
    parse_nvlink_status,
    parse_p2p_matrix,
    parse_smi_health,
    parse_smi_xml,
    with_nvlinks,
)
from tests.support.minihost import build
from tests.support.nvsmi import parse_topo_matrix

TESTS = Path(__file__).resolve().parents[1]
SAMPLE = TESTS / "device" / "sample-nvidia-smi-q.xml"
CHECK = TESTS / "device" / "check.sh"
NVSMI = TESTS / "fixtures" / "nvidia-smi"
HOSTS = TESTS / "fixtures" / "hosts"
UUID0 = "GPU-0b5c1f0e-6a1d-4c2e-9f3b-1a2b3c4d5e6f"
UUID1 = "GPU-7d8e9f00-1122-4334-8556-778899aabbcc"

NVLINK_S = f"""\
GPU 0: NVIDIA H100 80GB HBM3 (UUID: {UUID0})
\t Link 0: 26.562 GB/s
\t Link 1: 26.562 GB/s
\t Link 2: 26.562 GB/s
GPU 1: NVIDIA H100 80GB HBM3 (UUID: {UUID1})
\t Link 0: 26.562 GB/s
\t Link 1: <inactive>
\t Link 2: 26.562 GB/s
GPU 2: NVIDIA L40S (UUID: GPU-99999999-0000-0000-0000-000000000000)
"""


def sample() -> GpuReport:
    return parse_smi_xml(SAMPLE.read_text())


# -- nvidia-smi -q -x ------------------------------------------------------------------------------


def test_parse_sample_xml() -> None:
    report = sample()
    assert report.driver_version == "550.54.15"
    assert report.cuda_version == "12.4"
    assert report.gpus == (
        GpuFacts(
            index=0,
            bus_id="0000:18:00.0",
            name="NVIDIA H100 80GB HBM3",
            uuid=UUID0,
            persistence_mode=True,
            ecc_current=True,
            ecc_pending=True,
            mig_current=False,
            mig_pending=False,
            remapped_rows_pending=False,
            remapped_rows_failure=False,
            pcie_gen_current=5,
            pcie_gen_max=5,
            pcie_width_current=16,
            pcie_width_max=16,
            nvlink_active=None,
        ),
        GpuFacts(
            index=1,
            bus_id="0000:2a:00.0",
            name="NVIDIA H100 80GB HBM3",
            uuid=UUID1,
            persistence_mode=True,
            ecc_current=True,
            ecc_pending=True,
            mig_current=False,
            mig_pending=True,
            remapped_rows_pending=True,
            remapped_rows_failure=False,
            pcie_gen_current=1,
            pcie_gen_max=5,
            pcie_width_current=16,
            pcie_width_max=16,
            nvlink_active=None,
        ),
    )


def test_na_values_are_none() -> None:
    xml = SAMPLE.read_text().replace(
        "<current_mig>Disabled</current_mig>", "<current_mig>N/A</current_mig>"
    )
    xml = xml.replace(
        "<max_link_width>16x</max_link_width>", "<max_link_width>N/A</max_link_width>"
    )
    xml = xml.replace("<persistence_mode>Enabled", "<persistence_mode>[Not Supported]")
    g = parse_smi_xml(xml).gpus[0]
    assert (g.mig_current, g.pcie_width_max, g.persistence_mode) == (None, None, None)


@pytest.mark.parametrize(
    ("text", "bus"),
    [
        ("00000000:1B:00.0", "0000:1b:00.0"),
        ("0000:1b:00.0", "0000:1b:00.0"),
        ("00000009:01:00.0", "0009:01:00.0"),  # GB200 / Hyper-V domains
        ("00000000:00:1E.0", "0000:00:1e.0"),  # AWS g5 device numbers
    ],
)
def test_normalise_bus_id(text: str, bus: str) -> None:
    assert normalise_bus_id(text) == bus


def test_bad_inputs_raise_input_error() -> None:
    with pytest.raises(InputError):
        normalise_bus_id("GPU0")
    with pytest.raises(InputError):
        parse_smi_xml("No devices were found")
    with pytest.raises(InputError):
        parse_smi_xml("<other/>")
    with pytest.raises(InputError):
        parse_mcpnode_gpus({"schema": "mcpnode.topology/v1"})


# -- nvidia-smi nvlink -s --------------------------------------------------------------------------


def test_parse_nvlink_status() -> None:
    got = parse_nvlink_status(NVLINK_S)
    assert [(s.index, s.uuid, s.active, s.total) for s in got] == [
        (0, UUID0, 3, 3),
        (1, UUID1, 2, 3),
        (2, "GPU-99999999-0000-0000-0000-000000000000", 0, 0),
    ]
    # without the UUID (older drivers), a GPU is matched by index
    plain = parse_nvlink_status("GPU 0: NVIDIA A100-SXM4-80GB\n\t Link 0: 25 GB/s\n")
    assert [(s.index, s.uuid, s.active) for s in plain] == [(0, None, 1)]


def test_with_nvlinks_matches_by_uuid_then_index() -> None:
    status = parse_nvlink_status(NVLINK_S)
    report = with_nvlinks(sample(), status)
    assert [g.nvlink_active for g in report.gpus] == [3, 2]
    swapped = tuple(replace(s, index=1 - s.index) for s in status[:2])
    assert [g.nvlink_active for g in with_nvlinks(sample(), swapped).gpus] == [3, 2]
    no_uuid = tuple(replace(s, uuid=None) for s in status[:1])
    assert [g.nvlink_active for g in with_nvlinks(sample(), no_uuid).gpus] == [3, None]


# -- the GPU comparison ----------------------------------------------------------------------------


def mcpnode_doc(report: GpuReport, source: str = "nvml") -> dict[str, object]:
    """What `mcpnode gpus --format json` would say about `report`'s GPUs (the keys compare
    reads)."""
    gpus = []
    for g in report.gpus:
        gpus.append(
            {
                "index": g.index,
                "address": g.bus_id,
                "nvml": {
                    "name": g.name,
                    "uuid": g.uuid,
                    "persistence_mode": g.persistence_mode,
                    "ecc_current": g.ecc_current,
                    "ecc_pending": g.ecc_pending,
                    "mig_current": g.mig_current,
                    "mig_pending": g.mig_pending,
                    "remapped_rows_pending": g.remapped_rows_pending,
                    "remapped_rows_failure": g.remapped_rows_failure,
                },
                "pcie": {
                    "source": source,
                    "gen_current": g.pcie_gen_current,
                    "gen_max": g.pcie_gen_max,
                    "width_current": g.pcie_width_current,
                    "width_max": g.pcie_width_max,
                },
                "nvlink": {"active": g.nvlink_active, "total": g.nvlink_total},
            }
        )
    return {
        "schema": "mcpnode.gpus/v1",
        "nvml": {
            "available": True,
            "reason": None,
            "driver_version": report.driver_version,
            "cuda_driver_version": report.cuda_version,
        },
        "gpus": gpus,
    }


def test_matching_reports_have_no_differences() -> None:
    smi = with_nvlinks(sample(), parse_nvlink_status(NVLINK_S))
    mcp, sources = parse_mcpnode_gpus(mcpnode_doc(smi))
    result = compare_gpus(smi, mcp, sources)
    assert result.diffs == ()
    assert result.compared == 2 + 2 * 15
    assert result.report("GPUs").endswith("GPUs: 32 values compared, 0 differ")


def test_each_difference_is_printed() -> None:
    smi = with_nvlinks(sample(), parse_nvlink_status(NVLINK_S))
    g0, g1 = smi.gpus
    changed = replace(
        smi,
        driver_version="550.90.07",
        gpus=(
            replace(g0, ecc_pending=False, nvlink_active=2, uuid=None),
            replace(g1, pcie_gen_current=5, index=3),
        ),
    )
    mcp, sources = parse_mcpnode_gpus(mcpnode_doc(changed))
    lines = [str(d) for d in compare_gpus(smi, mcp, sources).diffs]
    assert lines == [
        "DIFF host driver_version: nvidia-smi 550.54.15 | mcpnode 550.90.07",
        "DIFF GPU0 0000:18:00.0 uuid: nvidia-smi " + UUID0 + " | mcpnode N/A",
        "DIFF GPU0 0000:18:00.0 ecc_pending: nvidia-smi yes | mcpnode no",
        "DIFF GPU0 0000:18:00.0 nvlink_active: nvidia-smi 3 | mcpnode 2",
        "DIFF 0000:2a:00.0 index: nvidia-smi 1 | mcpnode 3",
        "DIFF GPU1 0000:2a:00.0 pcie_gen_current: nvidia-smi 1 | mcpnode 5  (the current link "
        "trains down at idle; the two reads were not simultaneous)",
    ]


def test_missing_gpus_and_unavailable_nvml() -> None:
    smi = sample()
    doc = mcpnode_doc(replace(smi, gpus=smi.gpus[:1]), source="sysfs")
    doc["nvml"] = {"available": False, "reason": "LibraryNotFound: no driver"}
    mcp, sources = parse_mcpnode_gpus(doc)
    lines = [str(d) for d in compare_gpus(smi, mcp, sources).diffs]
    assert (
        lines[0]
        == "DIFF host NVML: nvidia-smi answers | mcpnode unavailable: LibraryNotFound: no driver"
    )
    assert "DIFF 0000:2a:00.0 GPU: nvidia-smi listed | mcpnode absent" in lines


@pytest.mark.parametrize(
    ("nvlink_s", "mcp_active", "mcp_total", "diff"),
    [
        # PCIe-only GPU: nvidia-smi nvlink -s prints nothing for it (H200 KVM guest, 580.159.04)
        ("", 0, 0, None),
        # an NVLink GPU that nvidia-smi said nothing about stays a difference
        ("", 0, 18, "nvlink_active: nvidia-smi N/A | mcpnode 0"),
        ("", 18, 18, "nvlink_active: nvidia-smi N/A | mcpnode 18"),
        # nvidia-smi lists the GPU without links: 0 == 0, compared as any value
        (f"GPU 0: NVIDIA H100 80GB HBM3 (UUID: {UUID0})\n", 0, 0, None),
    ],
)
def test_no_nvlink_answer(nvlink_s: str, mcp_active: int, mcp_total: int, diff: str | None) -> None:
    smi = with_nvlinks(sample(), parse_nvlink_status(nvlink_s))
    smi = replace(smi, gpus=smi.gpus[:1])
    mcp_gpu = replace(smi.gpus[0], nvlink_active=mcp_active, nvlink_total=mcp_total)
    mcp, sources = parse_mcpnode_gpus(mcpnode_doc(replace(smi, gpus=(mcp_gpu,))))
    result = compare_gpus(smi, mcp, sources)
    assert result.compared == 2 + 15
    if diff is None:
        assert result.diffs == ()
    else:
        (d,) = result.diffs
        assert str(d) == (
            f"DIFF GPU0 0000:18:00.0 {diff}  (no `nvidia-smi nvlink -s` answer for this GPU)"
        )
        assert result.notes == ()
    if nvlink_s == "" and diff is None:
        assert result.notes == (
            "GPU0 0000:18:00.0 nvlink_active: no `nvidia-smi nvlink -s` answer, mcpnode 0 of 0 "
            "links: a GPU without NVLink",
        )
        assert "note: GPU0 0000:18:00.0 nvlink_active" in result.report("GPUs")


def test_pcie_from_sysfs_is_said() -> None:
    smi = sample()
    mcp_report = replace(smi, gpus=(replace(smi.gpus[0], pcie_gen_max=4), smi.gpus[1]))
    mcp, sources = parse_mcpnode_gpus(mcpnode_doc(mcp_report, source="sysfs"))
    (diff,) = compare_gpus(smi, mcp, sources).diffs
    assert diff.what == "pcie_gen_max" and "from sysfs" in diff.note


# -- the topology comparison -----------------------------------------------------------------------


def hgx() -> str:
    return (NVSMI / "hgx-h100-8gpu-8nic.txt").read_text()


# `nvidia-smi topo -m > file` verbatim (driver 580.159.04, H200 in a KVM guest, 2026-11-30;
# tests/fixtures/device/h200-kvm-1gpu/nvidia-smi-topo.txt): the header row is underlined with
# ANSI SGR escapes although stdout is not a terminal.
H200_KVM_TOPO = (
    b"\t\x1b[4mGPU0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\x1b[0m\n"
    b"GPU0\t X \t0-15\t0\t\tN/A\n"
    b"\n"
    b"Legend:\n"
)


@pytest.mark.parametrize(
    "raw",
    [
        pytest.param(H200_KVM_TOPO, id="580-ansi-underline"),
        pytest.param(H200_KVM_TOPO.replace(b"\x1b[4m", b"").replace(b"\x1b[0m", b""), id="plain"),
        pytest.param(  # bold row labels and a colour with parameters: any CSI goes
            H200_KVM_TOPO.replace(b"GPU0\t X", b"\x1b[1mGPU0\x1b[22m\t X").replace(
                b"\x1b[4m", b"\x1b[1;4;32m"
            ),
            id="other-sgr",
        ),
    ],
)
def test_parser_strips_ansi_escapes(raw: bytes) -> None:
    m = parse_topo_matrix(raw.decode())
    assert (m.columns, m.rows) == (("GPU0",), ("GPU0",))
    assert m.cells == {("GPU0", "GPU0"): "X"}
    assert (m.cpu_affinity, m.numa_affinity, m.gpu_numa_id) == (
        {"GPU0": "0-15"},
        {"GPU0": "0"},
        {"GPU0": "N/A"},
    )


def test_same_matrix_matches() -> None:
    m = parse_topo_matrix(hgx())
    result = compare_topo(m, m, None)
    assert result.diffs == ()
    assert result.compared == 16 * 16 + 8 * 3


def test_cells_are_matched_by_nic_name_not_position() -> None:
    m = parse_topo_matrix(hgx())
    # mcpnode names its NIC columns in another order: same cells under other labels
    swap = {"NIC0": "NIC1", "NIC1": "NIC0"}
    relabel = replace(
        m,
        cells={(swap.get(r, r), swap.get(c, c)): v for (r, c), v in m.cells.items()},
        nic_legend={swap.get(k, k): v for k, v in m.nic_legend.items()},
    )
    assert compare_topo(m, relabel, None).diffs == ()


def test_cell_and_device_differences() -> None:
    m = parse_topo_matrix(hgx())
    cells = dict(m.cells)
    cells["GPU0", "GPU1"] = "NODE"
    changed = replace(m, cells=cells)
    lines = [str(d) for d in compare_topo(m, changed, None).diffs]
    legend = m.nic_legend
    assert lines == [f"DIFF GPU0 x GPU1 cell: nvidia-smi {m.cells['GPU0', 'GPU1']} | mcpnode NODE"]
    fewer = replace(m, columns=m.columns[:-1])
    lines = [str(d) for d in compare_topo(m, fewer, None).diffs]
    assert lines == [f"DIFF {legend['NIC7']} device: nvidia-smi listed | mcpnode absent"]


def test_clipped_cpu_affinity_is_a_note() -> None:
    smi = parse_topo_matrix((NVSMI / "h200-8gpu-10nic-slurm-cgroup.txt").read_text())
    full = {f"GPU{i}": ("0-55" if i < 4 else "56-111") for i in range(8)}
    mcp = replace(smi, cpu_affinity={**smi.cpu_affinity, **full})
    result = compare_topo(smi, mcp, CpuSet({56}))
    assert result.diffs == ()
    assert len(result.notes) == 8
    assert result.notes[0].startswith("GPU0 CPU Affinity: nvidia-smi (empty), mcpnode 0-55")
    # with no cpuset to explain it, the same is a difference, and says why it may be
    result = compare_topo(smi, mcp, None)
    assert len(result.diffs) == 8
    assert "clips CPU affinity" in result.diffs[0].note
    # a real disagreement is not hidden by the cpuset
    wrong = replace(mcp, cpu_affinity={**mcp.cpu_affinity, "GPU4": "0-55"})
    (diff,) = compare_topo(smi, wrong, CpuSet({56})).diffs
    assert (diff.where, diff.nvidia_smi, diff.mcpnode) == ("GPU4", "56", "0-55")


def test_numa_affinity_and_gpu_numa_id() -> None:
    m = parse_topo_matrix(hgx())
    changed = replace(
        m,
        numa_affinity={**m.numa_affinity, "GPU3": "1"},
        gpu_numa_id={**m.gpu_numa_id, "GPU5": "9"},
    )
    whats = [(d.where, d.what) for d in compare_topo(m, changed, None).diffs]
    assert whats == [("GPU3", "NUMA Affinity"), ("GPU5", "GPU NUMA ID")]


# -- the command line ------------------------------------------------------------------------------


def test_main_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    topo = tmp_path / "topo.txt"
    topo.write_text(hgx())
    assert main(["topo", str(topo), str(topo)]) == 0
    assert "0 differ" in capsys.readouterr().out
    other = tmp_path / "other.txt"
    other.write_text(hgx().replace("NV18", "NV12", 1))  # same width: the copy is TAB-expanded
    assert main(["topo", str(topo), str(other)]) == 1
    assert "DIFF GPU0 x GPU1 cell: nvidia-smi NV18 | mcpnode NV12" in capsys.readouterr().out
    garbage = tmp_path / "garbage.txt"
    garbage.write_text("NVIDIA-SMI has failed because it couldn't communicate with the driver")
    assert main(["topo", str(garbage), str(topo)]) == 2
    assert main(["gpus", str(garbage), str(topo)]) == 2


# -- check.sh -------------------------------------------------------------------------------------


def test_check_sh_is_executable_bash() -> None:
    assert os.access(CHECK, os.X_OK)
    assert CHECK.read_text().startswith("#!/usr/bin/env bash\n")
    subprocess.run(["bash", "-n", str(CHECK)], check=True)


def test_check_sh_without_nvidia_smi_exits_2(tmp_path: Path) -> None:
    empty = tmp_path / "bin"
    empty.mkdir()
    bash = subprocess.run(["which", "bash"], capture_output=True, text=True, check=True)
    proc = subprocess.run(
        [bash.stdout.strip(), str(CHECK)],
        env={"PATH": str(empty), "PYTHON": sys.executable},
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 2
    assert "nvidia-smi not found on PATH" in proc.stderr


FAKE_NVIDIA_SMI = """\
#!/usr/bin/env bash
# Stand-in for nvidia-smi: prints the files next to it.
d=${BASH_SOURCE[0]%/*}
case "$*" in
  "topo -m") cat "$d/topo.txt" ;;
  "-q -x") cat "$d/q.xml" ;;
  "nvlink -s") cat "$d/nvlink.txt" ;;
  *) echo "fake nvidia-smi: $*" >&2; exit 9 ;;
esac
"""


def one_gpu_xml(persistence: str = "Enabled") -> str:
    """The sample's first GPU moved to the minihost's bus 01, as nvml_calls() describes it."""
    xml = SAMPLE.read_text()
    start, end = xml.index("\t<gpu "), xml.index("\t</gpu>") + len("\t</gpu>\n")
    gpu = xml[start:end].replace("00000000:18:00.0", "00000000:01:00.0")
    gpu = gpu.replace(UUID0, "GPU-11111111-2222-3333-4444-555555555555")
    gpu = gpu.replace("<persistence_mode>Enabled", f"<persistence_mode>{persistence}")
    return xml[:start] + gpu + "</nvidia_smi_log>\n"


def run_check(tmp_path: Path, topo: str, xml: str, nvlink: str) -> subprocess.CompletedProcess[str]:
    root = build(tmp_path / "host")
    write_nvml(root, nvml_calls())
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "nvidia-smi").write_text(FAKE_NVIDIA_SMI)
    (fake / "nvidia-smi").chmod(0o755)
    mcp_topo = CliRunner().invoke(cli, ["topo", "--root", str(root)])
    assert mcp_topo.exit_code == 0, mcp_topo.output
    (fake / "topo.txt").write_text(topo or mcp_topo.output)
    (fake / "q.xml").write_text(xml)
    (fake / "nvlink.txt").write_text(nvlink)
    env = dict(os.environ, PATH=f"{fake}:{os.environ['PATH']}", PYTHON=sys.executable)
    env["MCPNODE_ROOT"] = str(root)
    return subprocess.run(
        ["bash", str(CHECK)], env=env, capture_output=True, text=True, check=False, timeout=120
    )


def eighteen_links() -> str:
    links = "".join(f"\t Link {i}: 26.562 GB/s\n" for i in range(18))
    return "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-11111111-2222-3333-4444-555555555555)\n" + links


def test_check_sh_agrees_with_a_matching_nvidia_smi(tmp_path: Path) -> None:
    proc = run_check(tmp_path, "", one_gpu_xml(), eighteen_links())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "DIFF" not in proc.stdout
    assert "check.sh: mcpnode and nvidia-smi agree" in proc.stdout


def test_check_sh_prints_differences(tmp_path: Path) -> None:
    topo = (
        "\tGPU0\tNIC0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n"
        "GPU0\t X \tNODE\t0-1\t0\t\tN/A\n"
        "NIC0\tNODE\t X \t\t\t\t\n"
        "\nLegend:\n\n  X    = Self\n\nNIC Legend:\n\n  NIC0: mlx5_0\n"
    )
    xml = one_gpu_xml(persistence="Disabled")
    proc = run_check(
        tmp_path, topo, xml, eighteen_links().replace("Link 3: 26.562 GB/s", "Link 3: <inactive>")
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    out = proc.stdout
    assert "DIFF GPU0 x mlx5_0 cell: nvidia-smi NODE | mcpnode PHB" in out
    assert "DIFF GPU0 0000:01:00.0 persistence_mode: nvidia-smi no | mcpnode yes" in out
    assert "DIFF GPU0 0000:01:00.0 nvlink_active: nvidia-smi 17 | mcpnode 18" in out
    assert "check.sh: mcpnode and nvidia-smi differ" in out


# -- health facts, the P2P matrix, replay ----------------------------------------------------------


def _mcp_health(**over: int | None) -> dict[str, tuple[dict[str, int | None], dict[str, str]]]:
    facts: dict[str, int | None] = {
        "clocks_event_reasons": 0x1,
        "temperature_c": 33,
        "power_limit_mw": 700_000,
        "power_default_limit_mw": 700_000,
        "clock_sm_max_mhz": 1980,
        "clock_mem_max_mhz": 2619,
        "app_clock_sm_mhz": 1980,
        "app_clock_mem_mhz": 2619,
        "default_app_clock_sm_mhz": 1980,
        "default_app_clock_mem_mhz": 2619,
        "pcie_replay_count": 0,
    }
    facts.update(over)
    why = {"clocks_event_reasons": "NotRecorded"} if facts["clocks_event_reasons"] is None else {}
    return {"0000:18:00.0": (facts, why)}


def test_parse_smi_health() -> None:
    got = parse_smi_health(SAMPLE.read_text())
    assert got["0000:18:00.0"]["clocks_event_reasons"] == 0x1  # GpuIdle
    sick = got["0000:2a:00.0"]
    assert (sick["clocks_event_reasons"], sick["temperature_c"]) == (0x8, 88)
    assert (sick["power_limit_mw"], sick["power_default_limit_mw"]) == (500_000, 700_000)
    assert (sick["app_clock_sm_mhz"], sick["clock_sm_max_mhz"]) == (1410, 1980)


def test_compare_health_tolerates_readings_a_moment_apart() -> None:
    smi = {"0000:18:00.0": parse_smi_health(SAMPLE.read_text())["0000:18:00.0"]}
    # idle bit gone, 3 C cooler, 12 more replays since: the same GPU read twice
    ok = compare_health(smi, _mcp_health(clocks_event_reasons=0x0, pcie_replay_count=0))
    assert ok.diffs == () and ok.compared == 11
    smi["0000:18:00.0"] = {**smi["0000:18:00.0"], "pcie_replay_count": 12}
    assert compare_health(smi, _mcp_health()).diffs == ()
    bad = compare_health(smi, _mcp_health(temperature_c=50, power_limit_mw=500_000))
    assert [str(d) for d in bad.diffs] == [
        "DIFF 0000:18:00.0 temperature_c: nvidia-smi 36 | mcpnode 50",
        "DIFF 0000:18:00.0 power_limit_mw: nvidia-smi 700000 | mcpnode 500000",
    ]
    replayed = compare_health(smi, _mcp_health(clocks_event_reasons=None))
    assert replayed.diffs == ()
    assert replayed.notes == (
        "0000:18:00.0 clocks_event_reasons: not recorded in mcpnode's root (nvidia-smi 1)",
    )


P2P_R = """\
 \tGPU0\tGPU1\tGPU2\t
 GPU0\tX\tOK\tCNS\t
 GPU1\tOK\tX\tCNS\t
 GPU2\tCNS\tCNS\tX\t

Legend:

  X    = Self
  OK   = Status Ok
  CNS  = Chipset not supported
"""


def test_p2p_matrix_against_mcpnode(tmp_path: Path) -> None:
    smi = parse_p2p_matrix(P2P_R)
    assert smi["GPU0", "GPU2"] == "CNS" and smi["GPU1", "GPU1"] == "X"
    res = CliRunner().invoke(cli, ["topo", "--p2p", "--root", str(HOSTS / "pcie-4x-l40s-2socket")])
    mcp = parse_p2p_matrix(res.stdout)  # its first matrix is NVML's
    assert mcp["GPU0", "GPU3"] == "CNS" and mcp["GPU0", "GPU1"] == "OK"
    diff = compare_p2p(smi, {**smi, ("GPU0", "GPU2"): "OK"})
    assert [str(d) for d in diff.diffs] == [
        "DIFF GPU0 x GPU2 p2p read: nvidia-smi CNS | mcpnode OK"
    ]
    with pytest.raises(InputError):
        parse_p2p_matrix("no matrix\n")


def test_replay_of_a_snapshot_equals_its_capture(tmp_path: Path) -> None:
    snap = tmp_path / "snap.tar.gz"
    res = CliRunner().invoke(
        cli, ["snapshot", "--root", str(HOSTS / "hgx-h100-8gpu-8nic"), "-o", str(snap)]
    )
    assert res.exit_code == 0, res.output
    assert compare_replay(snap).diffs == ()
    with tarfile.open(snap) as tf:
        names = set(tf.getnames())
    top = "mcpnode-snapshot"
    assert f"{top}/dev/kmsg" in names  # the kernel log, for the XIDs
    assert f"{top}/sys/devices/pci0000:37/0000:37:01.0/0000:38:00.0/0000:39:00.0/config" in names
    assert any(n.endswith("/aer_dev_fatal") for n in names)
    assert any(n.endswith("/ports/1/counters/link_downed") for n in names)
    live = CliRunner().invoke(
        cli,
        [
            "audit",
            "--root",
            str(HOSTS / "hgx-h100-8gpu-8nic"),
            "--only",
            "gpu.xid",
            "--only",
            "pcie",
            "--only",
            "ib",
            "--only",
            "p2p",
            "--format",
            "json",
        ],
    )
    replay = CliRunner().invoke(
        cli,
        [
            "audit",
            "--root",
            str(snap),
            "--only",
            "gpu.xid",
            "--only",
            "pcie",
            "--only",
            "ib",
            "--only",
            "p2p",
            "--format",
            "json",
        ],
    )
    result = compare_audits(json.loads(live.stdout), json.loads(replay.stdout))
    assert result.diffs == () and result.compared > 40
