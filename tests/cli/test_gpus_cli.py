"""`mcpnode gpus`: this GPU-less machine (NVML really missing), the recorded host fixtures (with
or without their NVML recordings), a tree with hand-recorded NVML answers, and the renderer fed
NvmlGpu facts built in process."""

from __future__ import annotations

import ctypes.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from mcpnode.cli import render_gpus
from mcpnode.cli.main import cli
from mcpnode.codec.record import replace
from mcpnode.host import Host
from mcpnode.topology.discover import discover
from mcpnode.topology.model import NvLink, NvmlGpu, NvmlState, PciAddress, Topology
from tests.support.minihost import build

NOT_A_SNAPSHOT = "NVML unavailable: NotRecorded: not a mcpnode snapshot (no mcpnode-snapshot.json)"

HOSTS = Path(__file__).resolve().parents[1] / "fixtures" / "hosts"
SNAPSHOT_META = "mcpnode-snapshot.json"
NVSWITCH = PciAddress(0, 0x05, 0, 0)


def parse_table(text: str) -> list[dict[str, str]]:
    """The GPU table as one dict per row, cut at the header's column starts (cells such as
    `0 (local-cpus)` or `NVIDIA H100 80GB HBM3` hold single spaces)."""
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("GPU  NAME"))
    header = lines[at]
    starts = []
    pos = 0
    for name in render_gpus.HEADER:
        pos = header.index(name, pos)
        starts.append(pos)
        pos += len(name)
    rows = []
    for line in lines[at + 1 :]:
        if not line.strip():
            break
        cuts = [*starts[1:], None]
        rows.append(
            {
                name: line[start:end].strip()
                for name, start, end in zip(render_gpus.HEADER, starts, cuts, strict=True)
            }
        )
    return rows


# -- NVML answers recorded by hand (the format RecordingNvml writes into a snapshot) -----------


def ok(fn: str, args: list[int], value: Any) -> dict[str, Any]:
    return {"fn": fn, "args": args, "value": value}


def err(fn: str, args: list[int], name: str, code: int) -> dict[str, Any]:
    return {"fn": fn, "args": args, "error": name, "code": code}


def nvml_calls(
    *,
    bus: int = 1,
    name: str = "NVIDIA H100 80GB HBM3",
    uuid: str = "GPU-11111111-2222-3333-4444-555555555555",
    persistence: int = 1,
    ecc: tuple[int, int] = (1, 1),
    mig: tuple[int, int] = (0, 0),
    remapped: tuple[int, int, int, int] = (0, 0, 0, 0),
    pcie: tuple[int, int, int, int] = (5, 5, 16, 16),
    active_links: int = 18,
    links: int = 18,
) -> list[dict[str, Any]]:
    """One H100 SXM at 0000:<bus>:00.0 on an NVSwitch board. Calls not listed replay as
    NotRecorded, which the collector turns into an unknown fact: a `-` in the table."""
    calls = [
        ok("nvmlInit", [], None),
        ok("nvmlSystemGetDriverVersion", [], "550.54.15"),
        ok("nvmlSystemGetCudaDriverVersion", [], 12040),
        ok("nvmlSystemGetNVMLVersion", [], "12.550.54.15"),
        ok("nvmlDeviceGetCount", [], 1),
        ok(
            "nvmlDeviceGetPciInfo",
            [0],
            {
                "domain": 0,
                "bus": bus,
                "device": 0,
                "pciDeviceId": 0x233010DE,
                "pciSubSystemId": 0x16C110DE,
                "busId": f"00000000:{bus:02X}:00.0",
            },
        ),
        ok("nvmlDeviceGetName", [0], name),
        ok("nvmlDeviceGetUUID", [0], uuid),
        ok("nvmlDeviceGetPersistenceMode", [0], persistence),
        ok("nvmlDeviceGetEccMode", [0], list(ecc)),
        ok("nvmlDeviceGetTotalEccErrors", [0, 1, 0], 0),
        ok("nvmlDeviceGetRemappedRows", [0], list(remapped)),
        ok("nvmlDeviceGetMigMode", [0], list(mig)),
        ok("nvmlDeviceGetCurrPcieLinkGeneration", [0], pcie[0]),
        ok("nvmlDeviceGetMaxPcieLinkGeneration", [0], pcie[1]),
        ok("nvmlDeviceGetCurrPcieLinkWidth", [0], pcie[2]),
        ok("nvmlDeviceGetMaxPcieLinkWidth", [0], pcie[3]),
        ok("nvmlDeviceGetGpuFabricInfo", [0], {"state": 3, "status": 0, "cliqueId": 0}),
    ]
    if links == 0:
        calls.append(err("nvmlDeviceGetNvLinkState", [0, 0], "NotSupported", 3))
    for link in range(links):
        calls.append(ok("nvmlDeviceGetNvLinkState", [0, link], int(link < active_links)))
        calls.append(ok("nvmlDeviceGetNvLinkVersion", [0, link], 6))
        calls.append(ok("nvmlDeviceGetNvLinkRemoteDeviceType", [0, link], 2))
    if links:
        # NVML_NVLINK_MAX_LINKS is 36: links past the GPU's count answer InvalidArgument.
        for link in range(links, 36):
            calls.append(err("nvmlDeviceGetNvLinkState", [0, link], "InvalidArgument", 2))
    return calls


def write_nvml(root: Path, calls: list[dict[str, Any]]) -> None:
    """Make `root` a snapshot whose NVML answered `calls`."""
    (root / SNAPSHOT_META).write_text(json.dumps({"nvml": {"calls": calls}}))


# -- this machine: no NVIDIA driver, NVML really fails ------------------------------------------


@pytest.mark.live
def test_live_host_says_why_nvml_is_unavailable() -> None:
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "mcpnode", "gpus", *args],
            capture_output=True,
            text=True,
            check=False,
        )

    text, js = run(), run("--format", "json")
    assert text.returncode == 0 and js.returncode == 0, text.stderr + js.stderr
    doc = json.loads(js.stdout)
    assert doc["schema"] == "mcpnode.gpus/v1"
    assert set(doc["nvml"]) >= {"available", "reason", "driver_version", "cuda_driver_version"}
    first = text.stdout.splitlines()[0]
    if doc["nvml"]["available"]:  # a GPU host running the suite
        assert first.startswith("NVML: driver ")
        return
    assert first == f"NVML unavailable: {doc['nvml']['reason']}"
    if ctypes.util.find_library("nvidia-ml") is None:
        assert doc["nvml"]["reason"].startswith("LibraryNotFound: ")
        assert doc["nvml"]["driver_version"] is None
    if not doc["gpus"]:
        assert text.stdout.splitlines()[1].startswith("No NVIDIA GPUs found")


# -- the recorded hosts: NVML recordings may or may not be there yet ---------------------------

HGX_BUSES = ["18", "2a", "3a", "5d", "9a", "ab", "ba", "db"]


@pytest.mark.parametrize(
    ("host", "bus_ids"),
    [
        ("single-gpu-kvm-vm-h100-pcie", ["0000:03:00.0"]),
        ("hgx-h100-8gpu-8nic", [f"0000:{b}:00.0" for b in HGX_BUSES]),
    ],
)
def test_fixture_hosts(host: str, bus_ids: list[str]) -> None:
    root = HOSTS / host
    runner = CliRunner()
    res = runner.invoke(cli, ["gpus", "--root", str(root)])
    assert res.exit_code == 0, res.output
    doc_res = runner.invoke(cli, ["gpus", "--root", str(root), "--format", "json"])
    assert doc_res.exit_code == 0, doc_res.output
    doc = json.loads(doc_res.output)
    assert doc["schema"] == "mcpnode.gpus/v1"
    assert [g["address"] for g in doc["gpus"]] == bus_ids
    assert [g["index"] for g in doc["gpus"]] == list(range(len(bus_ids)))

    rows = parse_table(res.output)
    assert [r["BUS ID"] for r in rows] == bus_ids
    assert [r["GPU"] for r in rows] == [str(i) for i in range(len(bus_ids))]
    first = res.output.splitlines()[0]
    nvml = doc["nvml"]
    if not (root / SNAPSHOT_META).exists():
        assert not nvml["available"]
        assert first == NOT_A_SNAPSHOT
    if nvml["available"]:
        assert first.startswith(f"NVML: driver {nvml['driver_version']}, ")
    else:
        assert first == f"NVML unavailable: {nvml['reason']}"
        assert f"{len(bus_ids)} GPU" in res.output.splitlines()[1]

    # Whatever NVML said, the table shows what the JSON holds, and `-` for what it lacks.
    for row, gpu in zip(rows, doc["gpus"], strict=True):
        facts = gpu["nvml"]
        link = gpu["nvlink"]
        pci_id = f"({gpu['vendor_id'][2:]}:{gpu['device_id'][2:]})"
        if facts is None:
            assert row["NAME"] == pci_id
            for col in ("NVLINK", "PERSIST", "ECC", "ECC UNC", "REMAP PEND/FAIL", "MIG", "FABRIC"):
                assert row[col] == "-", col
            assert gpu["pcie"]["source"] == "sysfs"
            assert row["PCIE GEN"].endswith("*")
        else:
            assert row["NAME"] == (facts["name"] or pci_id)
            assert row["FABRIC"].split(" ")[0] == (facts["fabric_state"] or "-")
        if link["supported"]:
            assert row["NVLINK"].startswith(f"{link['active']}/{link['total']}")
        sysfs = gpu["link"]
        if gpu["pcie"]["source"] == "sysfs":
            assert row["WIDTH"] == f"{sysfs['current_width']}/{sysfs['max_width']}*"
        numa = row["NUMA"]
        expected = str(gpu["numa_node"]) if gpu["numa_node"] is not None else "-"
        if gpu["numa_source"] != "own" and gpu["numa_node"] is not None:
            expected += f" ({gpu['numa_source']})"
        assert numa == expected


def test_single_gpu_vm_numa_source_is_shown() -> None:
    res = CliRunner().invoke(cli, ["gpus", "--root", str(HOSTS / "single-gpu-kvm-vm-h100-pcie")])
    (row,) = parse_table(res.output)
    assert row["NUMA"] in ("0 (local-cpus)", "0 (nvml-memory-affinity)", "0 (nvml-cpu-affinity)")


def test_no_gpu_host() -> None:
    res = CliRunner().invoke(cli, ["gpus", "--root", str(HOSTS / "no-gpu-host")])
    assert res.exit_code == 0, res.output
    assert res.output.splitlines()[1].startswith("No NVIDIA GPUs found")
    doc = json.loads(
        CliRunner()
        .invoke(cli, ["gpus", "--root", str(HOSTS / "no-gpu-host"), "--format", "json"])
        .output
    )
    assert doc["gpus"] == []


def test_plain_dump_lists_sysfs_gpus_and_says_nvml_is_unavailable(mini_root: Path) -> None:
    root = mini_root  # a sysfs dump, no mcpnode-snapshot.json
    res = CliRunner().invoke(cli, ["gpus", "--root", str(root)])
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert lines[0] == NOT_A_SNAPSHOT
    assert lines[1] == "1 GPU seen by sysfs; NVML facts are unknown (-)."
    (row,) = parse_table(res.output)
    assert row == {
        "GPU": "0",
        "NAME": "(10de:2330)",
        "BUS ID": "0000:01:00.0",
        "NUMA": "0",
        "PCIE GEN": "5/5*",
        "WIDTH": "16/16*",
        "NVLINK": "-",
        "PERSIST": "-",
        "ECC": "-",
        "ECC UNC": "-",
        "REMAP PEND/FAIL": "-",
        "MIG": "-",
        "FABRIC": "-",
    }
    assert "* PCIe link from sysfs (NVML gave none)" in res.output
    doc = json.loads(
        CliRunner().invoke(cli, ["gpus", "--root", str(root), "--format", "json"]).output
    )
    assert doc["nvml"]["available"] is False
    assert doc["gpus"][0]["nvml"] is None
    assert doc["gpus"][0]["nvlink"]["supported"] is None


# -- NVML answers replayed from a hand-written recording ----------------------------------------


def test_recorded_nvml_fills_the_row(mini_root: Path) -> None:
    root = mini_root
    write_nvml(root, nvml_calls(remapped=(0, 1, 1, 0)))
    res = CliRunner().invoke(cli, ["gpus", "--root", str(root)])
    assert res.exit_code == 0, res.output
    assert res.output.splitlines()[0] == "NVML: driver 550.54.15, CUDA 12.4, NVML 12.550.54.15"
    (row,) = parse_table(res.output)
    assert row == {
        "GPU": "0",
        "NAME": "NVIDIA H100 80GB HBM3",
        "BUS ID": "0000:01:00.0",
        "NUMA": "0",
        "PCIE GEN": "5/5",
        "WIDTH": "16/16",
        "NVLINK": "18/18",
        "PERSIST": "on",
        "ECC": "on/on",
        "ECC UNC": "0",
        "REMAP PEND/FAIL": "yes/no",
        "MIG": "off/off",
        "FABRIC": "COMPLETED",
    }
    assert "* PCIe link from sysfs" not in res.output
    doc = json.loads(
        CliRunner().invoke(cli, ["gpus", "--root", str(root), "--format", "json"]).output
    )
    assert doc["nvml"] == {
        "available": True,
        "reason": None,
        "driver_version": "550.54.15",
        "cuda_driver_version": "12.4",
        "nvml_version": "12.550.54.15",
    }
    (gpu,) = doc["gpus"]
    assert gpu["nvlink"] == {"supported": True, "active": 18, "total": 18, "unreadable": 0}
    assert gpu["pcie"] == {
        "source": "nvml",
        "gen_current": 5,
        "gen_max": 5,
        "width_current": 16,
        "width_max": 16,
    }
    assert gpu["nvml"]["uuid"] == "GPU-11111111-2222-3333-4444-555555555555"
    assert gpu["nvml"]["remapped_rows_pending"] is True
    # unrecorded answers are unknown, and JSON says why
    assert gpu["nvml"]["serial"] is None
    assert ["serial", "NotRecorded"] in gpu["nvml"]["unavailable"]


def test_recorded_nvml_pcie_gpu_without_nvlink(mini_root: Path) -> None:
    root = mini_root
    write_nvml(root, nvml_calls(name="NVIDIA H100 PCIe", links=0, pcie=(1, 5, 16, 16)))
    res = CliRunner().invoke(cli, ["gpus", "--root", str(root)])
    (row,) = parse_table(res.output)
    assert row["NVLINK"] == "none"
    assert row["PCIE GEN"] == "1/5"


# -- the renderer over NvmlGpu facts built in process -------------------------------------------


def facts(**over: Any) -> NvmlGpu:
    base: dict[str, Any] = {
        "index": 0,
        "address": PciAddress(0, 1, 0, 0),
        "minor": 0,
        "uuid": "GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee",
        "name": "NVIDIA H200",
        "architecture": "Hopper",
        "compute_capability": "9.0",
        "memory_total_mib": 143771,
        "serial": None,
        "board_id": None,
        "module_id": 1,
        "persistence_mode": None,
        "ecc_current": True,
        "ecc_pending": False,
        "ecc_uncorrected_volatile": 3,
        "ecc_uncorrected_aggregate": None,
        "remapped_rows_correctable": 0,
        "remapped_rows_uncorrectable": 2,
        "remapped_rows_pending": True,
        "remapped_rows_failure": False,
        "mig_current": None,
        "mig_pending": None,
        "compute_mode": "Default",
        "pcie_gen_current": 5,
        "pcie_gen_max": 5,
        "pcie_gen_gpu_max": 5,
        "pcie_width_current": 16,
        "pcie_width_max": None,
        "nvlinks": tuple(NvLink(i, True, "4.0", "SWITCH", NVSWITCH) for i in range(18)),
        "fabric_state": "COMPLETED",
        "fabric_status": "Success",
        "cpu_affinity_node": None,
        "cpu_affinity_socket": None,
        "memory_affinity_nodes": None,
        "memory_numa_node": None,
        "processes": None,
        "lost": False,
        "unavailable": (("persistence_mode", "NotSupported"), ("mig_mode", "NotSupported")),
    }
    base.update(over)
    return NvmlGpu(**base)


def with_facts(tmp_path: Path, gpu_facts: NvmlGpu) -> Topology:
    with Host(build(tmp_path)) as host:
        topo = discover(host)
    (gpu,) = topo.gpus
    state = NvmlState(True, None, "560.35.03", "12.6", None, (gpu_facts,))
    return replace(topo, gpus=(replace(gpu, nvml=gpu_facts),), nvml=state)


def test_rendered_cells_from_facts(tmp_path: Path) -> None:
    topo = with_facts(tmp_path, facts())
    cells = dict(zip(render_gpus.HEADER, render_gpus.row(topo.gpus[0]), strict=True))
    assert cells == {
        "GPU": "0",
        "NAME": "NVIDIA H200",
        "BUS ID": "0000:01:00.0",
        "NUMA": "0",
        "PCIE GEN": "5/5",
        "WIDTH": "16/-",  # max width unknown: a dash, not 0
        "NVLINK": "18/18",
        "PERSIST": "-",  # NotSupported: unknown, not "off"
        "ECC": "on/off",
        "ECC UNC": "3",
        "REMAP PEND/FAIL": "yes/no",
        "MIG": "-",
        "FABRIC": "COMPLETED",
    }
    text = render_gpus.as_text(topo)
    assert text.splitlines()[0] == "NVML: driver 560.35.03, CUDA 12.6"
    assert parse_table(text) == [cells]


def test_rendered_cells_partial_links_and_fabric_status(tmp_path: Path) -> None:
    links = tuple(NvLink(i, i != 3, "4.0", "SWITCH", NVSWITCH) for i in range(17))
    topo = with_facts(
        tmp_path,
        facts(
            nvlinks=links,
            unavailable=(("nvlink17", "Unknown"),),
            fabric_state="IN_PROGRESS",
            fabric_status="NotReady",
            ecc_uncorrected_volatile=None,
            remapped_rows_pending=None,
            remapped_rows_failure=None,
        ),
    )
    cells = dict(zip(render_gpus.HEADER, render_gpus.row(topo.gpus[0]), strict=True))
    assert cells["NVLINK"] == "16/17 (+1?)"
    assert cells["FABRIC"] == "IN_PROGRESS (NotReady)"
    assert cells["ECC UNC"] == "-"
    assert cells["REMAP PEND/FAIL"] == "-"
    doc = render_gpus.gpus_json(topo)
    assert doc["gpus"][0]["nvlink"] == {
        "supported": True,
        "active": 16,
        "total": 17,
        "unreadable": 1,
    }


def test_lost_gpu_has_unknown_links(tmp_path: Path) -> None:
    topo = with_facts(tmp_path, facts(lost=True, nvlinks=()))
    cells = dict(zip(render_gpus.HEADER, render_gpus.row(topo.gpus[0]), strict=True))
    assert cells["NVLINK"] == "-"


def test_sysfs_pcie_fallback_maps_speed_to_generation(mini_root: Path) -> None:
    with Host(mini_root) as host:
        topo = discover(host)  # no NVML asked: topo.nvml is None
    cells = dict(zip(render_gpus.HEADER, render_gpus.row(topo.gpus[0]), strict=True))
    assert cells["PCIE GEN"] == "5/5*"  # 32 GT/s
    assert cells["WIDTH"] == "16/16*"
    assert render_gpus.as_text(topo).splitlines()[0] == "NVML unavailable: NVML was not queried"


def test_json_shapes_with_facts(tmp_path: Path) -> None:
    topo = with_facts(tmp_path, facts())
    doc = json.loads(render_gpus.as_json(topo))
    assert doc["schema"] == "mcpnode.gpus/v1"
    (gpu,) = doc["gpus"]
    assert gpu["local_cpus"] == "0-1"  # CpuSet as a cpulist string
    assert gpu["nvml"]["address"] == "0000:01:00.0"
    assert gpu["nvml"]["nvlinks"][0]["remote_address"] == "0000:05:00.0"
    assert gpu["nvml"]["persistence_mode"] is None
    assert gpu["pcie"]["width_max"] is None


def test_help_lists_gpus() -> None:
    res = CliRunner().invoke(cli, ["--help"])
    assert "gpus" in res.output


@pytest.mark.parametrize(
    ("meta", "reason"),
    [
        ("{not json", "mcpnode-snapshot.json is malformed"),
        ('{"format": "mcpnode.snapshot/v1", "nvml": null}', "the snapshot holds no NVML answers"),
        ('{"nvml": {"nocalls": []}}', "mcpnode-snapshot.json is malformed"),
    ],
)
def test_unusable_snapshot_metadata_says_why(mini_root: Path, meta: str, reason: str) -> None:
    root = mini_root
    (root / "mcpnode-snapshot.json").write_text(meta)
    res = CliRunner().invoke(cli, ["gpus", "--root", str(root)])
    assert res.exit_code == 0, res.output
    first = res.output.splitlines()[0]
    assert first.startswith("NVML unavailable: NotRecorded: ") and reason in first, first
