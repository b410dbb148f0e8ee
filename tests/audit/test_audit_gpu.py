"""GPU health from recorded NVML: one recording per fault (tests/fixtures/audit/nvml/, made by
tests/support/auditroot.py from tools/fixturegen/nvmlgen.py), the NVML failure recordings of
tests/fixtures/nvml/, and the committed GPU fixtures. Each fault FAILs (or WARNs) on the broken GPU
only."""

from __future__ import annotations

from pathlib import Path

import pytest

from mcpnode.audit import gpu
from mcpnode.audit.model import AuditReport, Status
from mcpnode.audit.run import run_audit
from mcpnode.codec.record import replace
from mcpnode.host import Host
from tests.support import auditroot

SICK = "0000:3a:00.0"  # GPU 2 of the HGX, broken in each audit recording


def audit(tmp: Path, host: str = auditroot.HGX, nvml: str | None = None) -> AuditReport:
    with Host(auditroot.build(tmp, host, nvml=nvml)) as h:
        return run_audit(h, only=["gpu"])


@pytest.mark.parametrize(
    ("case", "finding", "status"),
    [
        ("hgx-remap-pending", "gpu.row-remap", "FAIL"),
        ("hgx-remap-failure", "gpu.row-remap", "FAIL"),
        ("hgx-ecc-uncorrected", "gpu.ecc", "FAIL"),
        ("hgx-persistence-off", "gpu.persistence", "WARN"),
        ("hgx-pcie-x8-on-x16", "gpu.pcie.width", "FAIL"),
        ("hgx-nvlink-down", "gpu.nvlink", "FAIL"),
    ],
)
def test_fault_on_the_sick_gpu_only(case: str, finding: str, status: str, tmp_path: Path) -> None:
    report = auditroot.audit_case(tmp_path, case, only=["gpu"])
    got = auditroot.statuses(report, finding)
    assert got[SICK] == status
    assert {s for bus, s in got.items() if bus != SICK} == {"PASS"}
    (sick,) = [f for f in report.findings if f.id == finding and f.subject == SICK]
    assert sick.evidence and sick.remedy
    assert all(f.status in (Status.PASS, Status.INFO) for f in report.findings if f is not sick)


def test_healthy_hgx_passes_everything(tmp_path: Path) -> None:
    report = auditroot.audit_case(tmp_path, "hgx-healthy", only=["gpu"])
    assert {f.status for f in report.findings} == {Status.PASS}
    assert len(auditroot.statuses(report, "gpu.fabric")) == 8


def test_details_of_each_fault(tmp_path: Path) -> None:
    pending = audit(tmp_path / "a", nvml="remap-pending")
    (f,) = [x for x in pending.findings if x.id == "gpu.row-remap" and x.subject == SICK]
    assert "pending" in f.summary and f.remedy is not None and f"-i {SICK}" in f.remedy
    assert "pending=True" in f.evidence[0].value
    width = audit(tmp_path / "b", nvml="pcie-x8-on-x16")
    (w,) = [x for x in width.findings if x.id == "gpu.pcie.width" and x.subject == SICK]
    assert "x8" in w.summary and "x16" in w.summary
    links = audit(tmp_path / "c", nvml="nvlink-down")
    (n,) = [x for x in links.findings if x.id == "gpu.nvlink" and x.subject == SICK]
    assert "2 of 18 NVLinks inactive" in n.summary and "inactive: 4, 5" in n.evidence[0].value


def test_fabric_in_progress_fails_every_gpu_with_802(tmp_path: Path) -> None:
    report = auditroot.audit_case(tmp_path, "hgx-fabric-in-progress", only=["gpu.fabric"])
    assert set(auditroot.statuses(report, "gpu.fabric").values()) == {"FAIL"}
    assert all("802" in f.summary for f in report.findings)
    assert all("nvidia-fabricmanager" in (f.remedy or "") for f in report.findings)


@pytest.mark.parametrize("host", ["dgx-a100", "pcie-4x-l40s-2socket", "grace-hopper-gh200"])
def test_fabric_not_supported_is_one_skip_not_a_fault(host: str, tmp_path: Path) -> None:
    report = audit(tmp_path, host)
    assert auditroot.statuses(report, "gpu.fabric") == {None: "SKIP"}
    assert not report.failed


def test_pcie_generation_below_max_is_info_never_fail(tmp_path: Path) -> None:
    report = audit(tmp_path, "pcie-4x-l40s-2socket")  # Gen1 of Gen4 at idle
    assert set(auditroot.statuses(report, "gpu.pcie.gen").values()) == {"INFO"}
    assert not report.failed


def test_gpu_count_mismatch_names_the_missing_gpu(tmp_path: Path) -> None:
    report = auditroot.audit_case(tmp_path, "hgx-gpu-missing-from-nvml", only=["gpu"])
    (count,) = [f for f in report.findings if f.id == "gpu.count"]
    assert count.status is Status.FAIL
    assert "8 GPU(s) on the PCI bus but NVML sees 7" in count.summary
    assert "0000:db:00.0" in count.summary
    assert auditroot.statuses(report, "gpu.health") == {"0000:db:00.0": "SKIP"}


@pytest.mark.parametrize(
    ("case", "reason"),
    [
        ("driver-not-loaded", "DriverNotLoaded"),
        ("library-not-found", "LibraryNotFound"),
        ("driver-library-mismatch", "LibRmVersionMismatch"),
        ("no-permission", "NoPermission"),
    ],
)
def test_nvml_unavailable_with_gpus_fails_naming_the_reason(
    case: str, reason: str, tmp_path: Path
) -> None:
    report = audit(tmp_path, nvml=case)
    (f,) = [x for x in report.findings if x.id == "gpu.nvml"]
    assert f.status is Status.FAIL
    assert reason in f.summary and "8 GPU(s)" in f.summary
    assert f.remedy
    assert auditroot.statuses(report, "gpu.health") == {None: "SKIP"}


def test_gpu_lost_fails(tmp_path: Path) -> None:
    report = audit(tmp_path, nvml="gpu-lost")
    assert auditroot.statuses(report, "gpu.lost") == {"0000:5d:00.0": "FAIL"}
    # What NVML could no longer say about the lost GPU is a SKIP naming GpuIsLost.
    ecc = [f for f in report.findings if f.id == "gpu.ecc" and f.subject == "0000:5d:00.0"]
    assert ecc[0].status is Status.SKIP and "GpuIsLost" in ecc[0].summary


def test_mig_enabled_row_remap_skips_with_the_reason(tmp_path: Path) -> None:
    report = audit(tmp_path, "single-gpu-kvm-vm-h100-pcie", nvml="mig-enabled")
    (f,) = [x for x in report.findings if x.id == "gpu.row-remap"]
    assert f.status is Status.SKIP and "MIG" in f.summary


def test_nvlink_inactive_bridges_fail(tmp_path: Path) -> None:
    report = auditroot.audit_case(tmp_path, "h100-nvl-bridges-inactive", only=["gpu.nvlink"])
    assert set(auditroot.statuses(report, "gpu.nvlink").values()) == {"FAIL"}


def test_no_gpu_skips_with_a_clear_reason(tmp_path: Path) -> None:
    report = auditroot.audit_case(tmp_path, "nogpu-cgroup-v2", only=["gpu"])
    (f,) = report.findings
    assert (f.id, f.status) == ("gpu.present", Status.SKIP)
    assert "no NVIDIA GPU on the PCI bus" in f.summary


def test_pure_check_on_edited_facts() -> None:
    """Facts NVML did not give are SKIPs with NVML's reason; sysfs stands in for width."""
    ctx = auditroot.context(auditroot.HGX)
    g = ctx.topology.gpus[0]
    assert g.nvml is not None
    blank = replace(
        g.nvml,
        persistence_mode=None,
        pcie_width_current=None,
        pcie_width_max=None,
        unavailable=(("persistence_mode", "NotSupported"),),
    )
    facts = gpu.GpuFacts((replace(g, nvml=blank),), ctx.topology.nvml, ())
    found = {f.id: f for f in gpu.check(facts, ctx) if f.subject == str(g.address)}
    assert found["gpu.persistence"].status is Status.SKIP
    assert "NotSupported" in found["gpu.persistence"].summary
    assert found["gpu.pcie.width"].status is Status.PASS  # sysfs x16 of x16
    assert "/sys/bus/pci/devices" in found["gpu.pcie.width"].evidence[0].source
