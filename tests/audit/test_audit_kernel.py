"""Kernel and modules: NVIDIA modules with GPUs, nouveau bound to a GPU, GPUDirect RDMA's
peer-memory module (and its legacy name), BBR built in / as an unloaded module / absent, and
the ACS hint for a GPU and an RDMA NIC under one PCIe switch."""

from __future__ import annotations

from pathlib import Path

import pytest

from mcpnode.audit import kernel
from mcpnode.audit.facts import FileRead
from mcpnode.audit.model import Status
from mcpnode.audit.run import run_audit
from mcpnode.codec.reading import Absent, Unreadable
from mcpnode.codec.record import replace
from mcpnode.host import Host
from tests.support import auditroot
from tests.support.fixtures import RootFactory


@pytest.mark.parametrize(
    ("text", "names"),
    [
        (
            "nvidia_uvm 1789952 0 - Live 0x0 (POE)\nnvidia 6 2 nvidia_uvm, Live 0x0\n",
            {"nvidia_uvm", "nvidia"},
        ),
        ("nv-peer-mem 16384 0 - Live 0x0\n", {"nv_peer_mem"}),
        ("\n\n  \n", set()),
        ("\x00\xff garbage", {"\x00\xff"}),
    ],
)
def test_loaded_modules(text: str, names: set[str]) -> None:
    assert kernel.loaded_modules(text) == names


def test_healthy_gpu_host(tmp_path: Path) -> None:
    report = auditroot.audit_case(tmp_path, "hgx-healthy", only=["kernel"])
    got = {f.id: f.status.value for f in report.findings if f.subject is None}
    assert got == {
        "kernel.version": "INFO",
        "kernel.module.nvidia": "PASS",
        "kernel.module.nvidia_uvm": "PASS",
        "kernel.module.nouveau": "PASS",
        "kernel.module.nvidia_peermem": "PASS",
        "kernel.tcp_bbr": "PASS",
    }
    assert set(auditroot.statuses(report, "kernel.iommu.acs").values()) == {"PASS"}


def test_modules_missing(tmp_path: Path) -> None:
    report = auditroot.audit_case(tmp_path, "hgx-modules-missing", only=["kernel.module"])
    assert auditroot.statuses(report, "kernel.module.nvidia") == {None: "FAIL"}
    assert auditroot.statuses(report, "kernel.module.nvidia_uvm") == {None: "FAIL"}
    # loaded but bound to no GPU: not a fault
    assert auditroot.statuses(report, "kernel.module.nouveau") == {None: "PASS"}
    (peermem,) = [f for f in report.findings if f.id == "kernel.module.nvidia_peermem"]
    assert peermem.status is Status.WARN
    assert peermem.remedy is not None and "modprobe nvidia-peermem" in peermem.remedy
    (uvm,) = [f for f in report.findings if f.id == "kernel.module.nvidia_uvm"]
    assert uvm.evidence[0].source == "/proc/modules"
    assert uvm.remedy is not None and "modules-load.d" in uvm.remedy


def test_legacy_peer_mem_accepted(tmp_path: Path) -> None:
    report = auditroot.audit_case(tmp_path, "hgx-legacy-peermem", only=["kernel.module"])
    (f,) = [x for x in report.findings if x.id == "kernel.module.nvidia_peermem"]
    assert f.status is Status.PASS and "nv_peer_mem" in f.summary


def test_nouveau_bound_fails(tmp_path: Path) -> None:
    report = auditroot.audit_case(tmp_path, "l40s-nouveau-bound", only=["kernel.module.nouveau"])
    (f,) = report.findings
    assert f.status is Status.FAIL and "0000:41:00.0" in f.summary
    assert f.remedy is not None and "blacklist nouveau" in f.remedy
    assert any(e.value == "nouveau" for e in f.evidence)


def test_peermem_needs_rdma_and_gpus(audit_root: RootFactory) -> None:
    pair = audit_root("h100-nvl-pair")  # two GPUs, no RDMA NIC
    with Host(pair) as h:
        report = run_audit(h, only=["kernel.module.nvidia_peermem"])
    (f,) = report.findings
    assert f.status is Status.SKIP and "no RDMA NIC" in f.summary


@pytest.mark.parametrize(
    ("case", "wording"),
    [("l40s-bbr-not-loaded", "module that is not loaded"), ("l40s-bbr-absent", "has none")],
)
def test_bbr_wanted_but_not_registered(case: str, wording: str, tmp_path: Path) -> None:
    report = auditroot.audit_case(tmp_path, case, only=["kernel.tcp_bbr"])
    (f,) = report.findings
    assert f.status is Status.WARN and wording in f.summary
    assert f.evidence[0].value == "reno cubic"
    assert f.remedy


def test_bbr_built_in_counts_without_the_module() -> None:
    """Registered in tcp_available_congestion_control is enough: built in, no tcp_bbr in
    /proc/modules."""
    facts = _facts(cc="reno cubic bbr", modules="nvidia 1 0 - Live 0x0\n")
    (f,) = [x for x in kernel.check(facts, auditroot.context()) if x.id == "kernel.tcp_bbr"]
    assert f.status is Status.PASS


def test_bbr_not_asked_for_skips() -> None:
    facts = replace(_facts(cc="reno cubic"), profile_cc=("cubic",))
    (f,) = [x for x in kernel.check(facts, auditroot.context()) if x.id == "kernel.tcp_bbr"]
    assert f.status is Status.SKIP and "does not ask" in f.summary


def test_bbr_profile_that_does_not_load_skips(audit_root: RootFactory) -> None:
    with Host(audit_root(auditroot.NO_GPU)) as h:
        report = run_audit(h, only=["kernel.tcp_bbr", "tuning"], profile="no-such-profile")
    statuses = {f.id: f.status.value for f in report.findings}
    assert statuses == {"kernel.tcp_bbr": "SKIP", "tuning.profile": "FAIL"}


def test_acs_redirect(tmp_path: Path) -> None:
    report = auditroot.audit_case(tmp_path, "hgx-acs-redirect", only=["kernel.iommu.acs"])
    got = auditroot.statuses(report, "kernel.iommu.acs")
    assert got["0000:18:00.0<->0000:19:00.0"] == "WARN"  # separate IOMMU groups
    assert got["0000:2a:00.0<->0000:2b:00.0"] == "PASS"  # one group
    # the others: no group links, but intel_iommu=on without iommu=pt: a hint
    assert got["0000:3a:00.0<->0000:3b:00.0"] == "INFO"
    (warn,) = [f for f in report.findings if f.status is Status.WARN]
    assert warn.remedy is not None and "setpci -s 0000:16:00.0" in warn.remedy
    assert [e.value for e in warn.evidence[:2]] == ["40", "41"]


def test_acs_not_applicable_without_a_shared_switch(tmp_path: Path) -> None:
    report = auditroot.audit_case(tmp_path, "l40s-bbr-absent", only=["kernel.iommu.acs"])
    assert auditroot.statuses(report, "kernel.iommu.acs") == {None: "SKIP"}


def test_modules_file_absent_or_unreadable() -> None:
    """Absent: SKIP. Refused without root: SKIP saying so. Refused as root: WARN."""
    ctx = auditroot.context(auditroot.HGX)
    denied = FileRead("/proc/modules", Unreadable("Permission denied", denied=True))
    for read, as_root, status in (
        (FileRead("/proc/modules", Absent("no /proc/modules")), True, Status.SKIP),
        (denied, False, Status.SKIP),
        (denied, True, Status.WARN),
    ):
        facts = replace(_facts(), modules=read)
        found = kernel.check(facts, replace(ctx, is_root=as_root))
        got = {f.id: f.status for f in found if f.id.startswith("kernel.mod")}
        assert got["kernel.module.nvidia"] is status
        assert got["kernel.module.nvidia_peermem"] is status


def _facts(cc: str = "reno cubic bbr", modules: str = "") -> kernel.KernelFacts:
    return kernel.KernelFacts(
        modules=FileRead("/proc/modules", modules),
        version=FileRead("/proc/version", "Linux version 6.8.0\n"),
        cmdline=FileRead("/proc/cmdline", "ro\n"),
        cc_available=FileRead("/proc/sys/net/ipv4/tcp_available_congestion_control", cc),
        gpu_drivers=(),
        profile_cc=("bbr",),
        profile_error=None,
        bbr_module_files=None,
        module_dir=None,
        iommu_groups=None,
        switch_pairs=(),
    )
