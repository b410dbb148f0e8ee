"""`mcpnode profiles recommend` on recorded hosts (text and JSON), the pure rules table, and the
virtualization check against temporary roots."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mcpnode.host import Host
from mcpnode.topology.virt import Virtualization, detect
from mcpnode.tuning.recommend import HostFacts, recommend
from tests.support.tuningcli import run_cli

HOSTS = Path(__file__).resolve().parents[1] / "fixtures" / "hosts"


@pytest.mark.parametrize(
    ("fixture", "profile", "virtual", "reason"),
    [
        ("hgx-h100-8gpu-8nic", "inference-throughput", False, "an NVSwitch fabric"),
        ("dgx-a100", "inference-throughput", False, "12 RDMA NIC(s)"),
        ("h100-nvl-pair", "inference-latency", True, "few GPUs and no fabric"),
        ("no-gpu-host", "base", False, "no NVIDIA GPU found"),
        ("captured-h200-kvm-1gpu", "inference-latency", None, "bare metal or VM unknown"),
    ],
)
def test_recommend_on_recorded_hosts(
    fixture: str, profile: str, virtual: bool | None, reason: str
) -> None:
    code, out, err = run_cli("profiles", "recommend", "--root", str(HOSTS / fixture))
    assert code == 0, err
    assert out.splitlines()[0] == f"recommended profile: {profile}"
    assert any(reason in line for line in out.splitlines()[1:])
    code, out, err = run_cli(
        "profiles", "recommend", "--root", str(HOSTS / fixture), "--format", "json"
    )
    assert code == 0, err
    doc = json.loads(out)
    assert doc["schema"] == "mcpnode.tuning-recommend/v1"
    assert doc["profile"] == profile and doc["facts"]["virtual"] is virtual
    assert any(reason in r for r in doc["reasons"])


def facts(**over: object) -> HostFacts:
    base: dict[str, object] = {
        "virtual": False,
        "hypervisor": None,
        "virt_evidence": "test",
        "gpus": ("NVIDIA L4",),
        "nvswitch": False,
        "rdma_nics": (),
        "numa_nodes": 1,
        "gpu_nodes": (0,),
        "smt": True,
    }
    base.update(over)
    return HostFacts(**base)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("over", "profile"),
    [
        ({}, "inference-latency"),
        ({"gpus": ()}, "base"),
        ({"nvswitch": True}, "inference-throughput"),
        ({"rdma_nics": ("mlx5_0",)}, "inference-throughput"),
        ({"gpus": ("a", "b", "c")}, "inference-latency"),
        ({"gpus": ("a", "b", "c", "d")}, "inference-throughput"),
        ({"virtual": True, "hypervisor": "kvm"}, "inference-latency"),
        ({"virtual": True, "gpus": ()}, "base"),
        ({"nvswitch": None}, "inference-latency"),
    ],
)
def test_rules(over: dict[str, object], profile: str) -> None:
    assert recommend(facts(**over)).profile == profile


def test_every_reason_is_said() -> None:
    r = recommend(facts(virtual=True, hypervisor="kvm", nvswitch=None, numa_nodes=2))
    text = "\n".join(r.reasons)
    assert "virtual machine (kvm)" in text and "not applicable in a guest" in text
    assert "NVLink fabric unknown" in text and "2 NUMA nodes" in text and "SMT on" in text


def _root(tmp_path: Path, files: dict[str, str]) -> Host:
    for rel, text in files.items():
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return Host(tmp_path)


DMI = "sys/class/dmi/id"
CPUINFO = "processor\t: 0\nvendor_id\t: GenuineIntel\nflags\t\t: fpu vme {}\n\nprocessor\t: 1\n"


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        (
            {
                f"{DMI}/sys_vendor": "Microsoft Corporation\n",
                f"{DMI}/product_name": "Virtual Machine\n",
            },
            Virtualization(True, "microsoft", "DMI: Microsoft Corporation Virtual Machine"),
        ),
        ({f"{DMI}/sys_vendor": "QEMU\n"}, Virtualization(True, "qemu", "DMI sys_vendor: QEMU")),
        (
            {f"{DMI}/sys_vendor": "Amazon EC2\n", f"{DMI}/product_name": "p5.48xlarge\n"},
            Virtualization(True, "amazon", "DMI sys_vendor: Amazon EC2"),
        ),
        (
            {"sys/hypervisor/type": "xen\n"},
            Virtualization(True, "xen", "/sys/hypervisor/type: xen"),
        ),
        (
            {"proc/cpuinfo": CPUINFO.format("hypervisor sse")},
            Virtualization(True, None, "the CPU's hypervisor flag (/proc/cpuinfo)"),
        ),
        (
            {f"{DMI}/sys_vendor": "Supermicro\n", "proc/cpuinfo": CPUINFO.format("sse")},
            Virtualization(False, None, "no hypervisor flag in /proc/cpuinfo"),
        ),
        ({}, Virtualization(None, None, "no DMI strings and no /proc/cpuinfo to tell")),
        # a hostile 5 MiB cpuinfo is not read at all: unknown, not "bare metal"
        (
            {"proc/cpuinfo": "flags : " + "x " * (5 << 19)},
            Virtualization(None, None, "no DMI strings and no /proc/cpuinfo to tell"),
        ),
    ],
)
def test_virtualization(tmp_path: Path, files: dict[str, str], expected: Virtualization) -> None:
    assert detect(_root(tmp_path, files)) == expected


def test_a_snapshot_replays_the_virtualization_answer(tmp_path: Path) -> None:
    """`mcpnode snapshot` records what the check reads, so `profiles recommend --root
    SNAPSHOT` says what it said on the host (a Hyper-V guest here)."""
    out = tmp_path / "node.tar.gz"
    code, _, err = run_cli("snapshot", "--root", str(HOSTS / "h100-nvl-pair"), "-o", str(out))
    assert code == 0, err
    code, text, err = run_cli("profiles", "recommend", "--root", str(out), "--format", "json")
    assert code == 0, err
    doc = json.loads(text)
    assert doc["facts"]["virtual"] is True and doc["facts"]["hypervisor"] == "microsoft"
    assert doc["profile"] == "inference-latency"
