"""The gpu.xid check over a hostile kernel log: however many addresses and XID numbers the log
names, the findings are one per GPU of the host, at most MAX_ABSENT_GPUS for addresses no GPU
here has plus one for the rest, and per GPU at most MAX_XIDS_PER_GPU evidence lines plus one.
(The audit of the fixture's ordinary XIDs is golden-tested in test_audit_health.py.)"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from mcpnode.audit import gpu_xid
from mcpnode.audit.context import build_context
from mcpnode.audit.model import Finding, Status
from mcpnode.host import Host
from mcpnode.topology.discover import discover_host
from tests.support import auditroot
from tools.fixturegen import fixturegen

SICK = auditroot.SICK  # GPU 2 of the HGX
GPUS = 8


def _audit(tmp_path: Path, messages: list[str], area: str = "gpu.xid") -> list[Finding]:
    root = auditroot.build(tmp_path, auditroot.HGX)
    with (root / "dev/kmsg").open("a") as fh:
        fh.writelines(
            fixturegen.kmsg_record(10_000 + i, 210_000_000_000 + i, m, 4)
            for i, m in enumerate(messages)
        )
    with Host(root) as host:
        ctx = build_context(host, discover_host(host))
        return [f for f in gpu_xid.check(gpu_xid.collect(host, ctx), ctx) if f.id == area]


def _json_bytes(findings: list[Finding]) -> int:
    return len(json.dumps([dataclasses.asdict(f) for f in findings], default=str))


def _xid(address: str, xid: int, detail: str = "GPU has fallen off the bus.") -> str:
    return f"NVRM: Xid (PCI:{address}): {xid}, pid=7, name=python3, {detail}"


def test_65536_distinct_addresses_make_a_bounded_number_of_findings(tmp_path: Path) -> None:
    messages = [_xid(f"{i >> 8:04x}:{i & 0xFF:02x}:00", 79) for i in range(65_536)]
    messages.append(_xid(SICK[:-2], 79))
    findings = _audit(tmp_path, messages)
    assert len(findings) <= GPUS + gpu_xid.MAX_ABSENT_GPUS + 1
    (other,) = [f for f in findings if f.subject == gpu_xid.OTHER_SUBJECT]
    assert other.status is Status.FAIL
    assert other.summary.startswith(f"more than {gpu_xid.MAX_ABSENT_GPUS} more addresses")
    assert "x65" in other.evidence[1].value  # every event still counted
    (sick,) = [f for f in findings if f.subject == SICK]
    assert sick.status is Status.FAIL and sick.evidence[1].value.startswith("x")
    assert _json_bytes(findings) < 64 << 10


def test_200000_distinct_xids_make_bounded_evidence(tmp_path: Path) -> None:
    messages = [_xid(SICK[:-2], 1000 + i, f"unknown {i}") for i in range(200_000)]
    findings = _audit(tmp_path, messages)
    assert len(findings) == GPUS
    (sick,) = [f for f in findings if f.subject == SICK]
    # the log, then per number (32, and one for the rest) its line and its verdict
    assert len(sick.evidence) == 1 + 2 * (gpu_xid.MAX_XIDS_PER_GPU + 1)
    rest, verdict = sick.evidence[-2:]
    assert rest.source == "other XIDs (kmsg)"
    assert verdict.source == "other XIDs verdict" and verdict.value.startswith("WARN: ")
    # every event the read kept is counted (the read keeps the newest 16 MiB of the log)
    assert int(rest.value[1:].split()[0]) > 150_000 and " of numbers past" in rest.value
    assert "unknown 199999" in rest.value  # the last message
    assert sick.status is Status.WARN  # XIDs mcpnode has no row for warn, never pass
    assert _json_bytes(findings) < 64 << 10


def test_one_xid_many_times_is_one_line_with_first_and_last(tmp_path: Path) -> None:
    messages = [_xid(SICK[:-2], 79, f"time {i}") for i in range(1000)]
    findings = _audit(tmp_path, messages)
    (sick,) = [f for f in findings if f.subject == SICK]
    (line,) = [e for e in sick.evidence if e.source == "Xid 79 (kmsg)"]
    assert line.value.startswith("x1000, first at 2d 10:20:00, last at 2d 10:20:00 after boot")
    assert line.value.endswith("time 999")
    assert sick.status is Status.FAIL


def test_distinct_nvswitch_addresses_and_sxids_are_bounded_alike(tmp_path: Path) -> None:
    messages = [
        f"nvidia-nvswitch0: SXid (PCI:{i >> 8:04x}:{i & 0xFF:02x}:00.0): {20000 + i % 100}, "
        "Non-fatal, Link 3 egress error"
        for i in range(65_536)
    ]
    findings = _audit(tmp_path, messages, "gpu.sxid")
    switches = 4  # the HGX's NVSwitches
    assert len(findings) <= switches + gpu_xid.MAX_ABSENT_GPUS + 1
    assert findings[-1].subject == gpu_xid.OTHER_SUBJECT
    assert all(len(f.evidence) <= 1 + gpu_xid.MAX_XIDS_PER_GPU + 1 for f in findings)
    assert findings[-1].evidence[-1].source == "other SXIDs"
    assert _json_bytes(findings) < 128 << 10
