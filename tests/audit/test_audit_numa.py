"""NUMA sanity: a GPU without a NUMA node on a two-socket host, NUMA balancing on a GPU host,
and the single-socket / no-GPU / absent-file cases that are not faults."""

from __future__ import annotations

from pathlib import Path

from mcpnode.audit import numa
from mcpnode.audit.facts import FileRead
from mcpnode.audit.model import Status
from mcpnode.codec.reading import Absent, Unreadable
from mcpnode.codec.record import replace
from tests.support import auditroot


def test_gpu_numa_unknown_on_two_sockets_warns(tmp_path: Path) -> None:
    report = auditroot.audit_case(tmp_path, "l40s-gpu-numa-unknown", only=["numa.locality"])
    (f,) = report.findings
    assert (f.status, f.subject) == (Status.WARN, "0000:41:00.0")
    assert f.evidence[0].source == "/sys/bus/pci/devices/0000:41:00.0/numa_node"
    assert f.evidence[0].value == "-1"
    assert "2 socket(s)" in f.summary and f.remedy


def test_every_device_located_passes(tmp_path: Path) -> None:
    report = auditroot.audit_case(tmp_path, "hgx-healthy", only=["numa"])
    assert {f.id: f.status.value for f in report.findings} == {
        "numa.locality": "PASS",
        "numa.balancing": "PASS",
    }


def test_numa_balancing_on_warns(tmp_path: Path) -> None:
    report = auditroot.audit_case(tmp_path, "hgx-numa-balancing-on", only=["numa.balancing"])
    (f,) = report.findings
    assert f.status is Status.WARN
    assert f.evidence[0].source == "/proc/sys/kernel/numa_balancing"
    assert f.remedy is not None and "kernel.numa_balancing=0" in f.remedy


def test_single_socket_vm_with_numa_minus_one_is_not_a_fault(tmp_path: Path) -> None:
    ctx = auditroot.context("single-gpu-kvm-vm-h100-pcie")
    facts = numa.collect_from(ctx, FileRead("/proc/sys/kernel/numa_balancing", "0\n"))
    assert any(d.numa_node_raw == -1 for d in facts.devices)  # the VM's GPU says -1
    (loc, _bal) = numa.check(facts, ctx)
    assert loc.status is Status.SKIP and "single socket" in loc.summary


def test_balancing_absent_unreadable_and_no_gpu() -> None:
    ctx = auditroot.context(auditroot.HGX)
    base = numa.collect_from(
        ctx,
        FileRead("/proc/sys/kernel/numa_balancing", Absent("no /proc/sys/kernel/numa_balancing")),
    )
    assert numa.check(base, ctx)[-1].status is Status.SKIP
    denied = replace(
        base,
        balancing=FileRead("/proc/sys/kernel/numa_balancing", Unreadable("EACCES", denied=True)),
    )
    (f,) = [x for x in numa.check(denied, replace(ctx, is_root=False)) if x.id == "numa.balancing"]
    assert f.status is Status.SKIP and "needs root" in f.summary
    nogpu = auditroot.context()
    on = replace(base, balancing=FileRead("/proc/sys/kernel/numa_balancing", "1\n"))
    assert numa.check(on, nogpu)[-1].status is Status.SKIP
