"""The health areas of the audit: XIDs/SXIDs, clocks/thermal/power, PCIe (AER, replays, NIC
links), NVLink counters and counts, InfiniBand ports, P2P/ACS, Fabric Manager, expected
inventory, GPUDirect over DMA-BUF.

Each case of tests/auditroot.CASES is a fixture variant (a copy of a generated host with one
fault laid over it: a kernel log holding an XID, an NVML recording with a throttle bit, an AER
counter, a DOWN port, a config space with ACS on). test_audit_golden.py checks every case's
whole report against its golden JSON; here each case's intent is asserted on that golden, and
every finding id added here must have a case where it passes and one where it fails (or
warns, where WARN is its worst). The parsers are table-tested below the cases.
"""

from __future__ import annotations

import json
import os
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from mcpnode.audit import pcicfg
from mcpnode.audit.expect import ExpectError, parse_expect_file, parse_table
from mcpnode.audit.expectation import Expectation
from mcpnode.audit.gpu_health import expected_nvlinks, reason_names
from mcpnode.audit.ib import rate_gbps
from mcpnode.audit.p2p import virtualization
from mcpnode.audit.pcie import AerParseError, parse_aer
from mcpnode.audit.run import run_audit
from mcpnode.audit.xid import (
    LogRecord,
    info,
    parse_journal_line,
    parse_kmsg_record,
    parse_sxid,
    parse_xid,
    since_boot,
)
from mcpnode.cli import render_audit
from mcpnode.cli.main import cli
from mcpnode.host import Host
from mcpnode.snapshot import write_snapshot
from mcpnode.topology.model import PciAddress
from tests.support import auditroot
from tests.support.fixtures import RootFactory
from tools.fixturegen import fixturegen

SICK = auditroot.SICK
FIXED = datetime(2025, 1, 1, tzinfo=timezone.utc)


def golden(case: str) -> list[dict[str, Any]]:
    doc: dict[str, Any] = json.loads((auditroot.GOLDEN / f"{case}.json").read_text())
    findings: list[dict[str, Any]] = doc["findings"]
    return findings


def status_of(case: str, fid: str, subject: str | None = None) -> set[str]:
    return {
        f["status"]
        for f in golden(case)
        if f["id"] == fid and (subject is None or f["subject"] == subject)
    }


# case -> [(finding id, subject or None for any, the status it must have)]
INTENT: dict[str, list[tuple[str, str | None, str]]] = {
    "hgx-healthy": [
        ("gpu.xid", SICK, "PASS"),
        ("gpu.sxid", "0000:07:00.0", "PASS"),
        ("gpu.throttle", SICK, "PASS"),
        ("gpu.temperature", SICK, "PASS"),
        ("gpu.power", SICK, "PASS"),
        ("gpu.clocks", SICK, "PASS"),
        ("gpu.pcie.replay", SICK, "PASS"),
        ("gpu.nvlink.errors", SICK, "PASS"),
        ("gpu.nvlink.count", SICK, "PASS"),
        ("pcie.aer", SICK, "PASS"),
        ("pcie.nic.link", "0000:5e:00.0", "PASS"),
        ("ib.port.state", "mlx5_1/1", "PASS"),
        ("ib.port.rate", "mlx5_2/1", "PASS"),
        ("ib.port.link_downed", "mlx5_0/1", "PASS"),
        ("ib.port.errors", "mlx5_0/1", "PASS"),
        ("p2p.acs", auditroot.SICK_PORT, "PASS"),
        ("expect.config", None, "SKIP"),
    ],
    "hgx-xid-79": [("gpu.xid", SICK, "FAIL"), ("gpu.xid", "0000:18:00.0", "PASS")],
    "hgx-xid-13": [("gpu.xid", SICK, "WARN")],
    "hgx-xid-63-resolved": [("gpu.xid", SICK, "INFO")],
    # NVIDIA's catalogue: Xid 63 is IGNORE; the pending remap is gpu.row-remap's FAIL
    "hgx-xid-63-pending": [("gpu.xid", SICK, "INFO"), ("gpu.row-remap", SICK, "FAIL")],
    "hgx-xid-mig-94": [("gpu.xid", SICK, "WARN")],
    "hgx-xid-149-fatal": [("gpu.xid", SICK, "FAIL")],
    "hgx-xid-109-nhc": [("gpu.xid", SICK, "WARN")],
    "hgx-aer-linux-4.19": [("pcie.aer", SICK, "PASS")],
    "hgx-sxid-fatal": [("gpu.sxid", "0000:07:00.0", "FAIL"), ("gpu.sxid", "0000:05:00.0", "PASS")],
    "hgx-kmsg-absent": [("gpu.xid", None, "SKIP")],
    "hgx-throttle-hw-slowdown": [("gpu.throttle", SICK, "FAIL")],
    "hgx-throttle-sw-thermal": [("gpu.throttle", SICK, "WARN")],
    "hgx-temperature-slowdown": [("gpu.temperature", SICK, "FAIL")],
    "hgx-power-capped": [("gpu.power", SICK, "WARN")],
    "hgx-app-clocks-low": [("gpu.clocks", SICK, "WARN")],
    "hgx-pcie-replays": [("gpu.pcie.replay", SICK, "WARN")],
    "hgx-aer-fatal": [("pcie.aer", SICK, "FAIL")],
    "hgx-aer-correctable": [("pcie.aer", SICK, "WARN")],
    "hgx-nic-x8": [("pcie.nic.link", "0000:5e:00.0", "FAIL")],
    "hgx-nvlink-replay-errors": [("gpu.nvlink.errors", SICK, "WARN")],
    "hgx-nvlink-crc-storm": [("gpu.nvlink.errors", SICK, "FAIL")],
    "hgx-nvlink-missing": [("gpu.nvlink.count", SICK, "FAIL"), ("gpu.nvlink", SICK, "PASS")],
    "hgx-ib-port-down": [
        ("ib.port.state", "mlx5_1/1", "FAIL"),
        ("ib.port.rate", "mlx5_1/1", "FAIL"),
    ],
    "hgx-ib-flapping": [
        ("ib.port.link_downed", "mlx5_0/1", "WARN"),
        ("ib.port.errors", "mlx5_0/1", "WARN"),
    ],
    "hgx-ib-rate-low": [("ib.port.rate", "mlx5_2/1", "FAIL")],
    "hgx-acs-enabled": [
        ("p2p.acs", auditroot.SICK_PORT, "FAIL"),
        ("p2p.acs", auditroot.SICK_NIC_PORT, "FAIL"),
        ("p2p.acs", "0000:17:00.0", "PASS"),
    ],
    "l40s-vm-acs-enabled": [("p2p.acs", "0000:40:01.1", "INFO")],
    "hgx-dmabuf": [("kernel.module.nvidia_peermem", None, "PASS")],
    "hgx-modules-missing": [("kernel.module.nvidia_peermem", None, "WARN")],
    "hgx-expect-met": [
        ("expect.gpu.count", None, "PASS"),
        ("expect.gpu.model", None, "PASS"),
        ("expect.gpu.nvlinks", None, "PASS"),
        ("expect.gpu.pcie", None, "PASS"),
        ("expect.nic.count", None, "PASS"),
        ("expect.numa.nodes", None, "PASS"),
        ("expect.driver", None, "PASS"),
    ],
    # the GPU is gone from the bus and from NVML: they agree, the expectation does not
    "hgx-gpu-gone": [("expect.gpu.count", None, "FAIL"), ("gpu.count", None, "PASS")],
    "hgx-expect-unmet": [
        ("expect.gpu.model", None, "FAIL"),
        ("expect.gpu.nvlinks", None, "FAIL"),
        ("expect.gpu.pcie", None, "FAIL"),
        ("expect.nic.count", None, "FAIL"),
        ("expect.numa.nodes", None, "FAIL"),
        ("expect.driver", None, "FAIL"),
    ],
    "hgx-expect-invalid": [("expect.config", None, "FAIL")],
    "dgx-a100-fabricmanager-active": [("gpu.fabricmanager", None, "PASS")],
    "dgx-a100-fabricmanager-failed": [("gpu.fabricmanager", None, "FAIL")],
    # the unit's state is not in this snapshot (a generated fixture records no commands)
    "dgx-a100-fabric-not-supported": [("gpu.fabricmanager", None, "SKIP")],
}


@pytest.mark.parametrize("case", sorted(INTENT))
def test_case_intent(case: str) -> None:
    assert status_of("hgx-healthy", "gpu.fabricmanager") == set()  # Hopper: gpu.fabric's job
    for fid, subject, status in INTENT[case]:
        got = status_of(case, fid, subject)
        assert got == {status}, f"{case}: {fid} [{subject}] is {got}, expected {status}"


# Each id added by the health work, with the status its failing case must show.
WORST = {
    "gpu.xid": "FAIL",
    "gpu.sxid": "FAIL",
    "gpu.fabricmanager": "FAIL",
    "gpu.throttle": "FAIL",
    "gpu.temperature": "FAIL",
    "gpu.power": "WARN",
    "gpu.clocks": "WARN",
    "gpu.pcie.replay": "WARN",
    "gpu.nvlink.errors": "FAIL",
    "gpu.nvlink.count": "FAIL",
    "pcie.aer": "FAIL",
    "pcie.nic.link": "FAIL",
    "ib.port.state": "FAIL",
    "ib.port.rate": "FAIL",
    "ib.port.link_downed": "WARN",
    "ib.port.errors": "WARN",
    "p2p.acs": "FAIL",
    "expect.gpu.count": "FAIL",
    "expect.gpu.model": "FAIL",
    "expect.gpu.nvlinks": "FAIL",
    "expect.gpu.pcie": "FAIL",
    "expect.nic.count": "FAIL",
    "expect.numa.nodes": "FAIL",
    "expect.driver": "FAIL",
}


def test_expect_config_fails_on_a_bad_table_and_is_silent_on_a_good_one() -> None:
    """expect.config has no PASS: a usable table is checked key by key instead."""
    assert status_of("hgx-expect-invalid", "expect.config") == {"FAIL"}
    assert status_of("hgx-expect-met", "expect.config") == set()
    assert status_of("hgx-healthy", "expect.config") == {"SKIP"}


@pytest.mark.parametrize("fid", sorted(WORST))
def test_every_health_finding_has_a_passing_and_a_failing_case(fid: str) -> None:
    seen = {s for case in INTENT for f, _, s in INTENT[case] if f == fid}
    assert "PASS" in seen, f"{fid}: no case where it passes"
    assert WORST[fid] in seen, f"{fid}: no case where it is {WORST[fid]}"


# One case per kind of new fact (a snapshot of a 14 MB tree takes seconds): the kernel log,
# NVML's new answers, uptime, AER and IB counters, config space, DMI, [expect] in the config,
# the Fabric Manager commands.
REPLAYED = (
    "hgx-xid-79",
    "hgx-sxid-fatal",
    "hgx-throttle-hw-slowdown",
    "hgx-nvlink-crc-storm",
    "hgx-pcie-replays",
    "hgx-aer-fatal",
    "hgx-ib-flapping",
    "hgx-acs-enabled",
    "l40s-vm-acs-enabled",
    "hgx-expect-unmet",
    "dgx-a100-fabricmanager-failed",
)


@pytest.mark.parametrize("case", REPLAYED)
def test_snapshot_of_a_case_replays_its_audit(case: str, tmp_path: Path) -> None:
    """Every new fact is recorded in a snapshot: the replayed audit equals the live one."""
    root = auditroot.build_case(tmp_path / "root", case)
    with Host(root) as h:
        live = render_audit.report_json(run_audit(h, now=FIXED))
        write_snapshot(h, tmp_path / "node.tar.gz")
    with Host(tmp_path / "node.tar.gz") as h:
        replay = render_audit.report_json(run_audit(h, now=FIXED))
    assert replay == live


def test_xid_finding_names_meaning_action_and_time() -> None:
    (f,) = [x for x in golden("hgx-xid-79") if x["id"] == "gpu.xid" and x["subject"] == SICK]
    assert "Xid 79" in f["summary"] and "fallen off the bus" in f["summary"]
    ev = {e["source"]: e["value"] for e in f["evidence"]}
    assert ev["Xid 79 (kmsg)"].startswith("x1, last at 2d 07:33:20 after boot")
    assert "immediate action RESTART_BM, investigatory CONTACT_SUPPORT" in ev["Xid 79 (kmsg)"]
    assert ev["Xid 79 verdict"] == "FAIL: NVIDIA's Xid Catalog: immediate action RESTART_BM"
    assert "reboot" in f["remedy"]


def test_throttle_evidence_names_the_bits() -> None:
    (f,) = [
        x
        for x in golden("hgx-throttle-hw-slowdown")
        if x["id"] == "gpu.throttle" and x["subject"] == SICK
    ]
    assert "HwSlowdown" in f["summary"]
    assert f["evidence"][0]["value"] == "0x0000000000000008 (HwSlowdown)"


def test_aer_counted_at_the_port_is_reported_as_such() -> None:
    (f,) = [x for x in golden("hgx-aer-fatal") if x["id"] == "pcie.aer" and x["subject"] == SICK]
    ev = {e["source"]: e["value"] for e in f["evidence"]}
    assert ev["counted with its upstream port"] == auditroot.SICK_PORT
    assert ev["fatal errors"] == f"{auditroot.SICK_PORT}: DLP=1"


# -- NVML errors of the new calls: typed None-with-reason, the checks SKIP naming it -----------


@pytest.mark.parametrize(
    ("recording", "fid", "reason"),
    [
        ("no-permission-counters", "gpu.pcie.replay", "NoPermission"),
        ("no-permission-counters", "gpu.nvlink.errors", "NoPermission"),
        ("gpu-lost", "gpu.throttle", "GpuIsLost"),
        ("gpu-lost", "gpu.power", "GpuIsLost"),
    ],
)
def test_nvml_errors_become_skips_with_the_reason(
    audit_root: RootFactory, recording: str, fid: str, reason: str
) -> None:
    root = audit_root(nvml=recording)
    with Host(root) as host:
        from mcpnode.audit.run import run_audit

        report = run_audit(host, only=[fid])
    subject = "0000:5d:00.0" if recording == "gpu-lost" else SICK  # gpu-lost loses GPU 3
    (f,) = [x for x in report.findings if x.subject == subject]
    assert f.status.value == "SKIP" and reason in f.summary


def test_function_not_found_driver_still_reports_throttling(audit_root: RootFactory) -> None:
    """R470 (DGX A100 of its era) has only nvmlDeviceGetCurrentClocksThrottleReasons."""
    root = audit_root(auditroot.DGX, nvml="function-not-found")
    from mcpnode.audit.run import run_audit

    with Host(root) as host:
        report = run_audit(host, only=["gpu.throttle"])
    assert {f.status.value for f in report.findings} == {"PASS"}
    assert len(report.findings) == 8


def test_captured_snapshot_without_the_new_facts_skips_them() -> None:
    """A snapshot from before these checks: every new NVML fact NotRecorded, no kernel log,
    no AER files: SKIP with the reason, never a PASS."""
    from mcpnode.audit.run import run_audit

    root = Path(__file__).resolve().parents[1] / "fixtures" / "hosts" / "captured-h200-kvm-1gpu"
    with Host(root) as host:
        report = run_audit(host, only=["gpu", "pcie"], skip=["container"])
    by_id = {f.id: f for f in report.findings}
    for fid in ("gpu.throttle", "gpu.temperature", "gpu.power", "gpu.clocks", "gpu.pcie.replay"):
        assert by_id[fid].status.value == "SKIP" and "NotRecorded" in by_id[fid].summary, fid
    assert by_id["gpu.xid"].status.value == "SKIP"
    assert by_id["pcie.aer"].status.value == "SKIP"


# -- the journal stands in for an unreadable /dev/kmsg ----------------------------------------


def test_xids_from_the_journal_when_kmsg_is_not_there(audit_root: RootFactory) -> None:
    from mcpnode.audit.gpu_xid import JOURNAL_ARGV
    from mcpnode.audit.run import run_audit

    journal = (
        "[    5.123456] hgx-h100-node01 kernel: Linux version 5.15.0-119-generic\n"
        "[200000.000001] hgx-h100-node01 kernel: NVRM: Xid (PCI:0000:3a:00): 79, pid=1, "
        "name=x, GPU has fallen off the bus.\n"
    )
    root = audit_root(
        files={"dev/kmsg": None},
        commands={" ".join(JOURNAL_ARGV): auditroot.answer(journal)},
    )
    with Host(root) as host:
        report = run_audit(host, only=["gpu.xid"])
    (f,) = [x for x in report.findings if x.subject == SICK]
    assert f.status.value == "FAIL"
    assert any(e.source == "Xid 79 (journal)" for e in f.evidence)
    assert f.evidence[0].source.startswith("journalctl -k -b")


def test_nvml_events_stand_in_when_no_log_could_be_read(audit_root: RootFactory) -> None:
    """The agent passes the XIDs NVML's event set gave it; without a kernel log they decide."""
    from mcpnode.audit import gpu_xid
    from mcpnode.audit.context import build_context
    from mcpnode.audit.xid import XidEvent
    from mcpnode.topology.discover import discover_host

    root = audit_root(files={"dev/kmsg": None})
    event = XidEvent(79, PciAddress(0, 0x3A, 0, 0), None, None, "NVML XID event", "nvml")
    with Host(root) as host:
        ctx = build_context(host, discover_host(host), observed_xids=(event,))
        findings = gpu_xid.check(gpu_xid.collect(host, ctx), ctx)
    (f,) = [x for x in findings if x.subject == SICK]
    assert f.status.value == "FAIL" and any(e.source == "Xid 79 (nvml)" for e in f.evidence)


# -- parsers ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("message", "xid", "address"),
    [
        (
            "NVRM: Xid (PCI:0000:3a:00): 79, pid=1234, name=python3, GPU has fallen off the bus.",
            79,
            "0000:3a:00.0",
        ),
        (
            "NVRM: Xid (0000:01:00): 13, Graphics Exception: ESR 0x404600=0x80000010",
            13,
            "0000:01:00.0",
        ),
        (
            "NVRM: Xid (PCI:0009:01:00): 154, GPU recovery action changed from 0x0 (None) to 0x1 "
            "(GPU Reset Required)",
            154,
            "0009:01:00.0",
        ),
        (
            "NVRM: Xid (PCI:00000001:00:00): 74, pid=7, NVLink: fatal error detected on link 4",
            74,
            "0001:00:00.0",
        ),
    ],
)
def test_parse_xid(message: str, xid: int, address: str) -> None:
    got = parse_xid(LogRecord(message, 9, 5_000_000))
    assert got is not None
    assert (got.xid, str(got.address), got.usec, got.seq) == (xid, address, 5_000_000, 9)


def test_xid_154_takes_its_action_from_the_message() -> None:
    reset = parse_xid(
        LogRecord(
            "NVRM: Xid (PCI:0000:3a:00): 154, GPU recovery action changed "
            "from 0x0 (None) to 0x2 (Node Reboot Required)",
            None,
            None,
        )
    )
    none = parse_xid(
        LogRecord(
            "NVRM: Xid (PCI:0000:3a:00): 154, GPU recovery action changed "
            "from 0x1 (GPU Reset Required) to 0x0 (None)",
            None,
            None,
        )
    )
    assert reset is not None and reset.action == "RESTART_BM" and reset.fatal
    assert none is not None and none.action == "NONE" and not none.fatal


def test_unknown_xid_says_so_without_guessing() -> None:
    unknown = info(999)
    assert not unknown.known and unknown.immediate is None and unknown.investigatory is None
    assert unknown.name.startswith("not in NVIDIA's Xid Catalog as of ")
    assert info(79).immediate == "RESTART_BM" and info(13).immediate == "RESTART_APP"


@pytest.mark.parametrize(
    "text",
    ["", "no header here", "6;missing fields", "x,1,2,-;not numbers"],
)
def test_parse_kmsg_record_rejects(text: str) -> None:
    assert parse_kmsg_record(text) is None


def test_parse_kmsg_and_journal_records() -> None:
    r = parse_kmsg_record("4,812,5123456,-;NVRM: hi\n SUBSYSTEM=pci")
    assert r == LogRecord("NVRM: hi", 812, 5123456)
    j = parse_journal_line("[   12.5] node kernel: NVRM: hi")
    assert j == LogRecord("NVRM: hi", None, 12_500_000)
    assert parse_journal_line("-- Boot 1f2e --") is None
    assert since_boot(200_000 * 1_000_000) == "2d 07:33:20" and since_boot(None) == "unknown"


def test_parse_sxid() -> None:
    fatal = parse_sxid(
        LogRecord(
            "nvidia-nvswitch2: SXid (PCI:0000:07:00.0): 24007, Fatal, "
            "Link 28 sourcetrack TCEN0 crumbstore ECC DBE Error",
            1,
            2,
        )
    )
    detail = parse_sxid(
        LogRecord(
            "nvidia-nvswitch2: SXid (PCI:0000:07:00.0): 24007, "
            "Severity 1 Engine instance 28 Sub-engine instance 00",
            2,
            3,
        )
    )
    assert fatal is not None and fatal.severity == "fatal" and str(fatal.switch) == "0000:07:00.0"
    assert detail is not None and detail.severity is None
    assert parse_sxid(LogRecord("nvidia-nvswitch2: probing", 3, 4)) is None


def test_parse_aer() -> None:
    got = parse_aer(fixturegen.aer_text("fatal", {"DLP": 2}), "fatal")
    assert got["DLP"] == 2 and got["TOTAL"] == 2
    with pytest.raises(AerParseError, match="no TOTAL_ERR_COR"):
        parse_aer("RxErr 0\n", "correctable")
    with pytest.raises(AerParseError, match="not `NAME COUNT`"):
        parse_aer("RxErr zero\nTOTAL_ERR_COR 0\n", "correctable")


def test_parse_aer_of_linux_4_19_names_with_spaces() -> None:
    """4.19 - 5.x print aer.c's long names (`RELAY_NUM Rollover 0`): a clean Debian 10-era
    host must not read as malformed (the hgx-aer-linux-4.19 case holds the whole files)."""
    got = parse_aer(auditroot.AER_419_CORRECTABLE, "correctable")
    assert got["RELAY_NUM Rollover"] == 0 and got["Receiver Error"] == 0 and got["TOTAL"] == 0
    got = parse_aer("Receiver Error 2\nBad TLP 0\nTOTAL_ERR_COR 2\n", "correctable")
    assert got == {"Receiver Error": 2, "Bad TLP": 0, "TOTAL": 2}
    with pytest.raises(AerParseError, match="not `NAME COUNT`"):
        parse_aer("Receiver Error two\nTOTAL_ERR_COR 0\n", "correctable")
    with pytest.raises(AerParseError, match="not `NAME COUNT`"):
        parse_aer("7\nTOTAL_ERR_COR 0\n", "correctable")


def test_device_without_aer_capability_is_judged_by_its_port(audit_root: RootFactory) -> None:
    """The kernel creates aer_dev_* only for a device with the AER capability; its port's
    counters still say what happened on the link."""
    root = audit_root(
        device_files={
            auditroot.SICK_PORT: {"aer_dev_fatal": fixturegen.aer_text("fatal", {"DLP": 1})}
        },
    )
    for kind in ("fatal", "nonfatal", "correctable"):
        (auditroot.device_dir(root, SICK) / f"aer_dev_{kind}").unlink()
    with Host(root) as host:
        report = run_audit(host, only=["pcie.aer"])
    (f,) = [x for x in report.findings if x.subject == SICK]
    assert f.status.value == "FAIL"
    assert any("no AER capability" in e.value for e in f.evidence)


def test_malformed_aer_file_is_a_fail_naming_it(audit_root: RootFactory) -> None:
    from mcpnode.audit.run import run_audit

    root = audit_root(device_files={SICK: {"aer_dev_fatal": "garbage\n"}})
    with Host(root) as host:
        report = run_audit(host, only=["pcie.aer"])
    (f,) = [x for x in report.findings if x.subject == SICK]
    assert f.status.value == "FAIL"
    assert f"/sys/bus/pci/devices/{SICK}/aer_dev_fatal is malformed" in f.summary


def _config(acs_ctrl: int | None, size: int = 4096) -> bytes:
    spec = fixturegen.fixture_hosts()[auditroot.HGX]
    (f,) = [x for x in fixturegen.pci_functions(spec) if x.address == auditroot.SICK_PORT]
    data = fixturegen.config_space(f, acs_ctrl=acs_ctrl)
    return data[:size]


def test_find_acs() -> None:
    acs = pcicfg.find_acs(_config(0x1D))
    assert acs is not None and acs.offset == fixturegen.ACS_OFFSET
    assert acs.redirecting == 0x0D and pcicfg.acs_names(acs.control) == (
        "SrcValid+ReqRedir+CmpltRedir+UpstreamFwd"
    )
    assert pcicfg.find_acs(_config(0)) is not None
    with pytest.raises(pcicfg.ConfigTooShort):
        pcicfg.find_acs(_config(0, size=64))  # what a non-root reader gets
    assert pcicfg.find_acs(bytes(4096)) is None  # no extended capabilities
    assert pcicfg.find_acs(b"\xff" * 4096) is None  # a device that is gone
    looped = bytearray(bytes(4096))
    looped[0x100:0x104] = (0x0001 | 1 << 16 | 0x100 << 20).to_bytes(4, "little")
    assert pcicfg.find_acs(bytes(looped)) is None  # a list pointing at itself ends


def test_acs_finding_names_the_setpci_fix() -> None:
    (f,) = [
        x
        for x in golden("hgx-acs-enabled")
        if x["id"] == "p2p.acs" and x["subject"] == auditroot.SICK_PORT
    ]
    assert "SrcValid+ReqRedir+CmpltRedir" in f["summary"]
    assert f"setpci -s {auditroot.SICK_PORT} ECAP_ACS+0x6.w=0000" in f["remedy"]
    carries = next(e["value"] for e in f["evidence"] if e["source"] == "P2P paths through it")
    assert carries == "GPU 2 <-> mlx5_2"


@pytest.mark.parametrize(
    ("vendor", "product", "cpuinfo", "virtual"),
    [
        ("QEMU", "Standard PC (Q35 + ICH9, 2009)", None, True),
        ("Microsoft Corporation", "Virtual Machine", None, True),
        ("Microsoft Corporation", "Surface Laptop", None, False),
        ("Amazon EC2", "p5.48xlarge", None, True),
        ("Supermicro", "SYS-821GE-TNHR", None, False),
        (None, None, "flags\t\t: fpu vme hypervisor avx512f", True),
        (None, None, "flags\t\t: fpu vme avx512f", False),
        (None, None, None, None),
    ],
)
def test_virtualization(
    vendor: str | None, product: str | None, cpuinfo: str | None, virtual: bool | None
) -> None:
    assert virtualization(vendor, product, cpuinfo) is virtual


def test_rates_reasons_and_link_counts() -> None:
    assert rate_gbps("400 Gb/sec (4X NDR)\n") == 400.0 and rate_gbps("2.5 Gb/sec (1X SDR)") == 2.5
    assert rate_gbps("") is None and rate_gbps("fast") is None
    assert reason_names(0x1) == "GpuIdle" and reason_names(0) == "none"
    assert reason_names(0x8 | 0x40 | 0x1000) == "HwSlowdown, HwThermalSlowdown, 0x1000"
    assert expected_nvlinks("NVIDIA H100 80GB HBM3") == 18
    assert expected_nvlinks("NVIDIA H200") == 18
    assert expected_nvlinks("NVIDIA H100 NVL") == 12
    assert expected_nvlinks("NVIDIA A100-SXM4-80GB") == 12
    assert expected_nvlinks("NVIDIA H100 PCIe") is None
    assert expected_nvlinks("NVIDIA L40S") is None


# -- expectations: strict parsing, the CLI ------------------------------------------------------


def test_parse_expect_file_errors_name_file_and_key() -> None:
    with pytest.raises(ExpectError, match=r"^f.toml: not valid TOML"):
        parse_expect_file("[expect\n", "f.toml")
    with pytest.raises(ExpectError, match=r"^f.toml: expect: no \[expect\] table"):
        parse_expect_file("[other]\nx = 1\n", "f.toml")
    with pytest.raises(ExpectError, match=r"^f.toml: expect.gpu_count: must be an integer"):
        parse_expect_file("[expect]\ngpu_count = 'eight'\n", "f.toml")
    assert parse_table({}, "f.toml") == Expectation()


def test_expect_write_then_audit_round_trips(tmp_path: Path) -> None:
    """`mcpnode expect --write` on a host, then `audit --expect` of the same host: every
    expectation holds; of a host that lost a GPU: expect.gpu.count FAILs."""
    out = tmp_path / "hgx.toml"
    runner = CliRunner()
    res = runner.invoke(
        cli, ["expect", "--root", str(auditroot.HOSTS / auditroot.HGX), "--write", str(out)]
    )
    assert res.exit_code == 0, res.output
    assert parse_expect_file(out.read_text(), str(out)).gpu_count == 8
    healthy = auditroot.build(tmp_path / "a", auditroot.HGX)
    res = runner.invoke(
        cli,
        [
            "audit",
            "--root",
            str(healthy),
            "--expect",
            str(out),
            "--only",
            "expect",
            "--format",
            "json",
        ],
    )
    doc = json.loads(res.stdout)
    assert {f["status"] for f in doc["findings"]} == {"PASS"} and len(doc["findings"]) == 7
    gone = auditroot.build(tmp_path / "b", nvml="gpu-missing-from-nvml", unplug=("0000:db:00.0",))
    res = runner.invoke(
        cli, ["audit", "--root", str(gone), "--expect", str(out), "--only", "expect.gpu"]
    )
    assert res.exit_code == 1
    assert "[FAIL] expect.gpu.count: 7 on the PCI bus, 7 in NVML; expected 8" in res.stdout


def test_audit_expect_bad_file_is_one_line_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from mcpnode.cli.main import main

    bad = tmp_path / "bad.toml"
    bad.write_text("[expect]\nnvlinks_per_gpu = 99\n")
    absent = tmp_path / "absent.toml"
    # adversarial: a dotted-key bomb (tomllib alone takes seconds and a GiB on it), a FIFO
    # (an unbounded read would block forever), a file past the size cap
    bomb = tmp_path / "bomb.toml"
    bomb.write_text("[expect]\n" + ".".join(["a"] * 5000) + " = 1\n")
    fifo = tmp_path / "fifo.toml"
    os.mkfifo(fifo)
    huge = tmp_path / "huge.toml"
    huge.write_text("[expect]\n#" + "x" * (2 << 20) + "\n")
    for path, fragment in (
        (bad, f"{bad}: expect.nvlinks_per_gpu: must be an integer 0..36"),
        (absent, f"{absent}: cannot be read"),
        (bomb, f"{bomb}: not valid TOML: line 2: a dotted key of more than"),
        (fifo, f"{fifo}: cannot be read"),
        (huge, f"{huge}: larger than"),
    ):
        with pytest.raises(SystemExit) as exit_info:
            main(
                ["audit", "--root", str(auditroot.HOSTS / auditroot.NO_GPU), "--expect", str(path)]
            )
        assert exit_info.value.code == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "Traceback" not in err, err
        assert fragment in err, err


# -- topo --p2p --------------------------------------------------------------------------------


def _p2p(root: Path, *extra: str) -> str:
    res = CliRunner().invoke(cli, ["topo", "--p2p", "--root", str(root), *extra])
    assert res.exit_code == 0, res.output
    return res.stdout


def _matrix(text: str, title: str) -> dict[tuple[str, str], str]:
    block = text[text.index(title) :].splitlines()[1:]
    cols = block[0].split()
    out = {}
    for line in block[1 : 1 + len(cols)]:
        cells = line.split()
        out.update({(cells[0], c): v for c, v in zip(cols, cells[1:], strict=True)})
    return out


def test_topo_p2p_hgx_is_nvlink_everywhere() -> None:
    text = _p2p(auditroot.HOSTS / auditroot.HGX)
    nvml = _matrix(text, "NVML peer-to-peer read status")
    mine = _matrix(text, "mcpnode peer-to-peer readiness")
    assert nvml["GPU0", "GPU7"] == "OK" and nvml["GPU3", "GPU3"] == "X"
    assert mine["GPU0", "GPU7"] == "NV18" and set(mine.values()) == {"X", "NV18"}
    assert "Legend:" in text and "CNS  = Chipset not supported" in text


def test_topo_p2p_shows_acs_on_the_path(audit_root: RootFactory) -> None:
    spec = {
        a: {"config": auditroot.config_with_acs(auditroot.L40S, a, 0x1D)}
        for a in ("0000:40:01.1", "0000:60:01.1")
    }
    root = audit_root(auditroot.L40S, device_files=spec)
    text = _p2p(root)
    mine = _matrix(text, "mcpnode peer-to-peer readiness")
    assert mine["GPU0", "GPU1"] == "ACS"  # both root ports redirect
    assert mine["GPU2", "GPU3"] == "OK" and mine["GPU0", "GPU2"] == "CNS"
    assert "0000:40:01.1: ACSCtl SrcValid+ReqRedir+CmpltRedir+UpstreamFwd" in text
    doc = json.loads(_p2p(root, "--format", "json"))
    assert doc["schema"] == "mcpnode.p2p/v1" and doc["readiness"][0][1] == "ACS"
    assert doc["nvml"][0][2] == "CNS"


def test_topo_p2p_without_gpus() -> None:
    assert _p2p(auditroot.HOSTS / auditroot.NO_GPU).startswith("No NVIDIA GPUs found")


def test_expect_write_then_audit_without_nvml_passes(tmp_path: Path) -> None:
    """A host without NVML audited against the inventory it wrote: the PCI functions are
    counted and match; NVML's count is named as missing, never a FAIL of the inventory."""
    root = auditroot.build(tmp_path / "root", nvml="driver-not-loaded")
    out = tmp_path / "n.toml"
    runner = CliRunner()
    res = runner.invoke(cli, ["expect", "--root", str(root), "--write", str(out)])
    assert res.exit_code == 0, res.output
    res = runner.invoke(
        cli,
        [
            "audit",
            "--root",
            str(root),
            "--expect",
            str(out),
            "--only",
            "expect",
            "--format",
            "json",
        ],
    )
    doc = json.loads(res.stdout)
    statuses = {f["id"]: f["status"] for f in doc["findings"]}
    assert "FAIL" not in statuses.values(), doc["findings"]
    (count,) = [f for f in doc["findings"] if f["id"] == "expect.gpu.count"]
    assert count["status"] == "PASS" and "not counted in NVML" in count["summary"]
    nvml = {e["source"]: e["value"] for e in count["evidence"]}["nvmlDeviceGetCount"]
    assert nvml.startswith("not counted: NVML unavailable (")
    # one GPU fewer on the bus than written: the PCI count alone FAILs, without a reboot hint
    # that blames NVML
    gone = auditroot.build(tmp_path / "gone", nvml="driver-not-loaded", unplug=("0000:db:00.0",))
    res = runner.invoke(
        cli, ["audit", "--root", str(gone), "--expect", str(out), "--only", "expect.gpu.count"]
    )
    assert res.exit_code == 1
    assert "7 on the PCI bus, expected 8 (not counted in NVML: unavailable)" in res.stdout
