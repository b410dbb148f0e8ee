"""mcpnode replaying a real host: the snapshot of an H200 KVM guest (driver 580.159.04,
2026-11-30; tests/fixtures/hosts/CAPTURED.md) against what ran on that host.

- `mcpnode topo` / `gpus` on the snapshot agree with the real `nvidia-smi topo -m` and
  `nvidia-smi -q -x` recorded beside it (tests/fixtures/device/h200-kvm-1gpu/);
- `mcpnode topo --format json` and `mcpnode audit --format json` on the snapshot equal what
  mcpnode printed on the host itself, except `generated_at` (the topology JSON names no root,
  so nothing else may differ);
- tests/device/check.sh over the snapshot, with a stand-in nvidia-smi printing the recorded
  outputs, exits 0.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from mcpnode.cli.main import cli
from tests.device.compare import (
    compare_gpus,
    compare_topo,
    parse_mcpnode_gpus,
    parse_nvlink_status,
    parse_smi_xml,
    with_nvlinks,
)
from tests.support.nvsmi import parse_topo_matrix
from tests.topology.test_device_compare import CHECK, FAKE_NVIDIA_SMI

TESTS = Path(__file__).resolve().parents[1]
ROOT = TESTS / "fixtures" / "hosts" / "captured-h200-kvm-1gpu"
DEVICE = TESTS / "fixtures" / "device" / "h200-kvm-1gpu"
BUS = "0000:00:06.0"
# `nvidia-smi nvlink -s` printed nothing for this GPU: NVLink is not exposed to the guest.
NVLINK_S = ""


def mcpnode(*args: str) -> str:
    """`mcpnode ARGS --root <the snapshot>`; its stdout (exit 1 is audit's FAIL verdict)."""
    res = CliRunner().invoke(cli, [*args, "--root", str(ROOT)])
    assert res.exit_code in (0, 1), res.output
    return res.stdout


def device_json(name: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((DEVICE / name).read_text())
    return doc


def test_the_capture_is_committable() -> None:
    """git keeps neither empty directories nor absolute paths outside the tree: what is tested
    here is what a clone has. Absolute symlinks (`dev/fd -> /proc/self/fd`) are the host's own
    and mcpnode's Host resolves them inside the root."""
    assert (ROOT / "mcpnode-snapshot.json").is_file()
    empty = [d for d, dirs, files in os.walk(ROOT) if not dirs and not files]
    assert empty == []


def test_topo_matches_the_real_nvidia_smi() -> None:
    smi = parse_topo_matrix((DEVICE / "nvidia-smi-topo.txt").read_text())
    mcp = parse_topo_matrix(mcpnode("topo"))
    # nvidia-smi ran with every CPU of the VM: its CPU Affinity is not clipped, so no cpuset
    result = compare_topo(smi, mcp, None)
    assert result.diffs == (), result.report("topology")
    assert result.notes == ()
    assert result.compared == 1 + 3  # GPU0 x GPU0, then CPU / NUMA Affinity, GPU NUMA ID
    assert (smi.cpu_affinity, smi.numa_affinity, smi.gpu_numa_id) == (
        {"GPU0": "0-15"},
        {"GPU0": "0"},
        {"GPU0": "N/A"},
    )


def test_gpus_match_the_real_nvidia_smi() -> None:
    smi = with_nvlinks(
        parse_smi_xml((DEVICE / "nvidia-smi-q.xml").read_text()), parse_nvlink_status(NVLINK_S)
    )
    mcp, sources = parse_mcpnode_gpus(json.loads(mcpnode("gpus", "--format", "json")))
    assert sources == {BUS: "nvml"}
    result = compare_gpus(smi, mcp, sources)
    assert result.diffs == (), result.report("GPUs")
    assert result.compared == 2 + 15  # driver, CUDA; then the index and 14 facts of GPU0
    (note,) = result.notes  # PCIe-only: nvidia-smi nvlink -s is silent, mcpnode counts 0 of 0
    assert note.startswith(f"GPU0 {BUS} nvlink_active:")
    (g,) = mcp.gpus
    assert (g.name, g.pcie_gen_current, g.pcie_width_current) == ("NVIDIA H200", 5, 16)


# NVML facts mcpnode asks since this capture (the clocks, thermal, power, PCIe replay facts of
# mcpnode/topology/nvml_facts.py): the snapshot holds no answer, so they replay as None with
# reason NotRecorded, never as a value.
FACTS_SINCE_CAPTURE = {
    "clocks_event_reasons": "clocks_event_reasons",
    "temperature_c": "temperature",
    "temperature_slowdown_c": "temperature_slowdown",
    "temperature_shutdown_c": "temperature_shutdown",
    "power_usage_mw": "power_usage",
    "power_limit_mw": "power_limit",
    "power_default_limit_mw": "power_default_limit",
    "clock_sm_mhz": "clock_sm",
    "clock_sm_max_mhz": "clock_max_sm",
    "clock_mem_mhz": "clock_mem",
    "clock_mem_max_mhz": "clock_max_mem",
    "app_clock_sm_mhz": "app_clock_sm",
    "app_clock_mem_mhz": "app_clock_mem",
    "default_app_clock_sm_mhz": "default_app_clock_sm",
    "default_app_clock_mem_mhz": "default_app_clock_mem",
    "pcie_replay_count": "pcie_replay_count",
}
# Findings added since the capture, and what the old snapshot can say for each.
FINDINGS_SINCE_CAPTURE = {
    ("expect.config", None): "SKIP",
    ("gpu.throttle", BUS): "SKIP",
    ("gpu.temperature", BUS): "SKIP",
    ("gpu.power", BUS): "SKIP",
    ("gpu.clocks", BUS): "SKIP",
    ("gpu.pcie.replay", BUS): "SKIP",
    ("gpu.nvlink.count", BUS): "SKIP",  # an H200 with its NVLinks not passed to the guest
    ("gpu.xid", None): "SKIP",  # no dev/kmsg in the snapshot
    ("pcie.aer", BUS): "SKIP",
    ("ib.port.state", None): "SKIP",
    ("p2p.acs", None): "SKIP",
    ("container.cgroup.driver", None): "SKIP",
}


def _without_new_facts(nvml: dict[str, Any]) -> dict[str, Any]:
    why = dict(map(tuple, nvml["unavailable"]))
    for field, fact in FACTS_SINCE_CAPTURE.items():
        assert nvml.pop(field) is None, field
        assert why[fact] == "NotRecorded", fact
    nvml["unavailable"] = [
        u for u in nvml["unavailable"] if u[0] not in FACTS_SINCE_CAPTURE.values()
    ]
    return nvml


def test_topo_json_replays_as_on_the_host() -> None:
    replayed = json.loads(mcpnode("topo", "--format", "json"))
    assert replayed["nvml"].pop("p2p_read") == []  # one GPU: no pair
    # DMI's product_name is read since the capture, which did not record it: unknown
    assert replayed["identity"].pop("machine") is None
    # cpu*/cache was not read when this was captured, so the snapshot holds none
    assert replayed.pop("caches") == []
    # lspci's class names were added to the JSON after the capture (firecracker's 0xffff
    # class is no class lspci names)
    for dev in replayed["pci_devices"]:
        name = dev.pop("class_name")
        assert (name is None) == (dev["class_code"] in (None, "0xffff")), dev
    for nic in replayed["nics"]:
        assert nic.pop("rdma_ports") == []  # added after the capture; a virtio NIC has none
    for gpu in replayed["gpus"]:
        _without_new_facts(gpu["nvml"])
    for gpu in replayed["nvml"]["gpus"]:
        _without_new_facts(gpu)
    assert replayed == device_json("mcpnode-topo.json")


def test_audit_replays_as_on_the_host() -> None:
    """The audit the device ran was made by an mcpnode that checked an untuned host against
    `base` by default. Replayed against base, every finding is the same but for the remedy of
    the drifted keys, which is now one command for all of them. The capture predates the
    kubelet area (the H200 host is no Kubernetes node either)."""
    replayed = json.loads(
        mcpnode("audit", "--format", "json", "--profile", "base", "--skip", "kubelet")
    )
    on_host = device_json("mcpnode-audit.json")
    assert replayed["result"] == on_host["result"] == "fail"  # base profile's sysctls not applied
    findings = {(f["id"], f["subject"]): f for f in replayed["findings"]}
    want = {(f["id"], f["subject"]): f for f in on_host["findings"]}
    added = {k: f["status"] for k, f in findings.items() if k not in want}
    assert added == FINDINGS_SINCE_CAPTURE
    assert [k for k in findings if k in want] == list(want)
    for key, f in want.items():
        if key[0] == "tuning.drift" and f["status"] == "FAIL":
            assert findings[key]["remedy"] == "mcpnode apply --profile base"
            f = {**f, "remedy": findings[key]["remedy"]}
        assert findings[key] == f, key
    for doc in (replayed, on_host):
        del doc["generated_at"], doc["findings"], doc["summary"]
    assert replayed == on_host


def test_untuned_capture_is_not_a_tuning_failure() -> None:
    """Nobody tuned that host (no agent, journal, persisted file or config): by default the
    audit says so once, as INFO, instead of nine FAILs against a profile nobody chose."""
    replayed = json.loads(mcpnode("audit", "--format", "json"))
    tuning = [f for f in replayed["findings"] if f["area"] == "tuning"]
    assert [(f["id"], f["status"]) for f in tuning] == [("tuning.profile", "INFO")]
    assert replayed["profile"] is None
    assert not any(f["status"] == "FAIL" and f["area"] == "tuning" for f in replayed["findings"])


def test_check_sh_agrees_on_the_capture(tmp_path: Path) -> None:
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "nvidia-smi").write_text(FAKE_NVIDIA_SMI)
    (fake / "nvidia-smi").chmod(0o755)
    (fake / "topo.txt").write_bytes((DEVICE / "nvidia-smi-topo.txt").read_bytes())
    (fake / "q.xml").write_bytes((DEVICE / "nvidia-smi-q.xml").read_bytes())
    (fake / "nvlink.txt").write_text(NVLINK_S)
    env = dict(os.environ, PATH=f"{fake}:{os.environ['PATH']}", PYTHON=sys.executable)
    env["MCPNODE_ROOT"] = str(ROOT)
    proc = subprocess.run(
        ["bash", str(CHECK)], env=env, capture_output=True, text=True, check=False, timeout=120
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "DIFF" not in proc.stdout
    assert f"note: GPU0 {BUS} nvlink_active:" in proc.stdout
    assert "check.sh: mcpnode and nvidia-smi agree" in proc.stdout
