"""Xid lines as the drivers print them, NVIDIA's catalogue as data, and the verdict policies.

Every line in LINES was copied from a public report or NVIDIA document (the URL beside it), or,
where no public copy was found, built from the driver's printf format (the source line named).
tests/audit/test_audit_health.py holds the audit cases (fixture roots with a kernel log) these lines
end up in; this file holds the parser's and the policy's tables.
"""

from __future__ import annotations

import pytest

from mcpnode.agent.config import ConfigError, parse_config
from mcpnode.audit.run import run_audit
from mcpnode.audit.xid import LogRecord, info, parse_kmsg_record, parse_xid
from mcpnode.audit.xid_catalog import CATALOG, CATALOG_VERSION, lookup
from mcpnode.audit.xid_policy import (
    DEFAULT,
    NHC_FAIL,
    PolicyError,
    XidPolicy,
    decide,
    parse_audit_table,
)
from mcpnode.host import Host
from tests.support import auditroot
from tests.support.fixtures import RootFactory

SICK = auditroot.SICK

KERNEL_RC = (
    "https://github.com/NVIDIA/open-gpu-kernel-modules/blob/main/src/nvidia/src/kernel/gpu/rc/"
    "kernel_rc.c"
)
CATALOG_PAGE = "https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html"
AKASH_244 = "https://github.com/akash-network/support/issues/244"
GPUD_46 = "https://github.com/leptonai/gpud/pull/46"
MEM_ERR = "https://docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/index.html"
ARCH_WIKI = "https://wiki.archlinux.org/title/NVIDIA/Troubleshooting"
NVSENTINEL = "https://github.com/NVIDIA/NVSentinel"

# (where the line comes from, message, xid, GPU address, MIG GPU-I, GPU-CI, action asked for)
LINES: list[tuple[str, str, int, str, int | None, int | None, str]] = [
    # drivers before R450: no `PCI:`
    (CATALOG_PAGE, "NVRM: Xid (0000:03:00): 14, Channel 00000001", 14, "0000:03:00.0", None,
     None, "IGNORE"),
    # no pid=/name= (the driver had no process to name)
    (CATALOG_PAGE, "NVRM: Xid (PCI:0000:5a:00): 79, GPU has fallen off the bus.", 79,
     "0000:5a:00.0", None, None, "RESTART_BM"),
    # pid='<unknown>', name=<unknown>
    (AKASH_244, "NVRM: Xid (PCI:0000:00:08): 94, pid='<unknown>', name=<unknown>, Contained: SM "
     "(0x1). RST: No, D-RST: No", 94, "0000:00:08.0", None, None, "RESTART_APP"),
    (AKASH_244, "NVRM: Xid (PCI:0000:00:05): 43, pid=1045242, name=pt_main_thread, Ch 00000008",
     43, "0000:00:05.0", None, None, "IGNORE"),
    (AKASH_244, "NVRM: Xid (PCI:0000:00:07): 31, pid=2512125, name=python3.10, Ch 00000008, "
     "intr 00000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_8 faulted @ 0x73ac_1c000000. "
     "Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_WRITE", 31, "0000:00:07.0", None, None,
     "RESTART_APP"),
    (GPUD_46, "NVRM: Xid (PCI:0000:cb:00): 13, pid='<unknown>', name=<unknown>, Graphics SM "
     "Warp Exception on (GPC 7, TPC 7, SM 0): Illegal Instruction Parameter", 13,
     "0000:cb:00.0", None, None, "RESTART_APP"),
    (GPUD_46, "NVRM: Xid (PCI:0000:cb:00): 109, pid=1797828, name=pt_main_thread, Ch 00000008, "
     "errorString CTX SWITCH TIMEOUT, Info 0x58005", 109, "0000:cb:00.0", None, None,
     "RESET_GPU"),
    # MIG: the GPU instance only (NVIDIA's contained-error example)
    (MEM_ERR, "NVRM: Xid (PCI:0000:01:00 GPU-I:05): 94, pid=7194, Contained: CE User Channel "
     "(0x9). RST: No, D-RST: No", 94, "0000:01:00.0", 5, None, "RESTART_APP"),
    # MIG: GPU and compute instance, built from kernel_rc.c's
    # "NVRM: Xid (PCI:%04x:%02x:%02x GPU-I:%02u GPU-CI:%02u): %d, pid=%s, name=%s, %s%s"
    (KERNEL_RC, "NVRM: Xid (PCI:0000:3b:00 GPU-I:01 GPU-CI:02): 13, pid=2406, name=python3, "
     "Graphics SM Warp Exception on (GPC 0, TPC 0, SM 0): Out Of Range Address", 13,
     "0000:3b:00.0", 1, 2, "RESTART_APP"),
    # GSP RPC timeout (the banner line before it is no Xid: test_gsp_banners_are_not_xids)
    (ARCH_WIKI, "NVRM: Xid (PCI:0000:01:00): 119, Timeout after 6s of waiting for RPC response "
     "from GPU0 GSP! Expected function 76 (GSP_RM_CONTROL) sequence 1321", 119, "0000:01:00.0",
     None, None, "RESET_GPU"),
    # Grace hosts: PCI domains other than 0000; NVLink 5 Xids carry their severity
    (NVSENTINEL, "NVRM: Xid (PCI:0009:01:00): 149, NETIR_LINK_EVT  Fatal   XC0 i0 Link 01 "
     "(0x021425c6 0x00000000 0x00000000 0x00000000 0x00000000 0x00000000)", 149,
     "0009:01:00.0", None, None, "RESET_GPU"),
    (NVSENTINEL, "NVRM: Xid (PCI:0018:01:00): 149, NETIR_LINK_EVT  Fatal   XC0 i0 Link 09 "
     "(0x025525c6 0x00000000 0x00000000 0x00000000 0x00000000 0x00000000)", 149,
     "0018:01:00.0", None, None, "RESET_GPU"),
    # R550+ recovery action (the catalogue's Xid 154 row quotes the string)
    (CATALOG_PAGE, "NVRM: Xid (PCI:0000:01:00): 154, GPU recovery action changed from 0x0 "
     "(None) to 0x2 (Node Reboot Required)", 154, "0000:01:00.0", None, None, "RESTART_BM"),
    (CATALOG_PAGE, "NVRM: Xid (PCI:0000:01:00): 154, GPU recovery action changed from 0x1 "
     "(GPU Reset Required) to 0x0 (None)", 154, "0000:01:00.0", None, None, "NONE"),
    # Xid 45 naming its root cause: kernel_rc.c's " caused by previous Xid %d"
    (KERNEL_RC, "NVRM: Xid (PCI:0018:01:00): 45, pid=2407, name=python3, Ch 00000008 caused by "
     "previous Xid 149", 45, "0018:01:00.0", None, None, "WORKFLOW_XID_45"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("url", "message", "xid", "address", "gi", "ci", "action"),
    LINES,
    ids=[f"xid{x[2]}-{i}" for i, x in enumerate(LINES)],
)
def test_every_driver_format(
    url: str,
    message: str,
    xid: int,
    address: str,
    gi: int | None,
    ci: int | None,
    action: str,
) -> None:
    assert url.startswith("https://")
    got = parse_xid(LogRecord(message, 7, 9_000_000))
    assert got is not None, message
    assert (got.xid, str(got.address), got.gpu_instance, got.compute_instance) == (
        xid,
        address,
        gi,
        ci,
    )
    assert got.action == action


def test_pid_and_process_are_read_when_printed() -> None:
    unknown = parse_xid(LogRecord(LINES[2][1], None, None))
    assert unknown is not None and unknown.pid == "'<unknown>'" and unknown.process == "<unknown>"
    mig = parse_xid(LogRecord(LINES[7][1], None, None))
    assert mig is not None and mig.pid == "7194" and mig.process is None
    assert mig.mig == "MIG GPU instance 5"
    none = parse_xid(LogRecord(LINES[1][1], None, None))
    assert none is not None and none.pid is None and none.detail == "GPU has fallen off the bus."


def test_kmsg_caller_field_and_continuation_lines() -> None:
    """CONFIG_PRINTK_CALLER adds `,caller=T123` to the record's prefix (Documentation/ABI/
    testing/dev-kmsg); the ` KEY=VALUE` lines after it are no message."""
    rec = parse_kmsg_record(
        "4,2207,200000000001,-,caller=T311207;NVRM: Xid (PCI:0000:3a:00): 79, pid=311207, "
        "name=python3, GPU has fallen off the bus.\n SUBSYSTEM=pci\n DEVICE=+pci:0000:3a:00.0"
    )
    assert rec is not None and rec.seq == 2207 and rec.usec == 200000000001
    got = parse_xid(rec)
    assert got is not None and got.xid == 79 and got.detail.endswith("off the bus.")


def test_gsp_banners_are_not_xids() -> None:
    for line in (
        "NVRM: _kgspLogXid119: ********************************* GSP Timeout "
        "**********************************",
        "NVRM: _kgspLogXid119: Note: Please also check logs above.",
        "NVRM: GPU0 GSP RPC buffer contains function 76 (GSP_RM_CONTROL) and data 0x...",
        "NVRM: Rate limiting GSP RPC error prints for GPU at PCI:0000:61:00 (printing 1 of "
        "every 30).  The GPU likely needs to be reset.",
    ):
        assert parse_xid(LogRecord(line, None, None)) is None


@pytest.mark.parametrize(
    ("detail", "action"),
    [
        ("NETIR_LINK_EVT  Fatal   XC0 i0 Link 01 (0x021425c6 0x0 0x0 0x0 0x0 0x0)", "RESET_GPU"),
        ("RLW_REMAP Non-fatal XC0 i0 Link 03 (0x00000082 0x00000001 0x0 0x0 0x0 0x0)",
         "XID_154_EVAL"),
        ("some future layout without a severity", "WORKFLOW_NVLINK5_ERR"),
    ],
)  # fmt: skip
def test_nvlink5_severity_decides_the_action(detail: str, action: str) -> None:
    got = parse_xid(LogRecord(f"NVRM: Xid (PCI:0008:01:00): 145, {detail}", None, None))
    assert got is not None and got.action == action


# -- the catalogue ------------------------------------------------------------------------------


def test_catalogue_lists_every_xid_1_to_172() -> None:
    assert set(CATALOG) == set(range(1, 173))
    for xid in (144, 145, 146, 147, 148, 149, 150):  # NVLink 5, Blackwell
        row = lookup(xid)
        assert row.known and row.immediate == "WORKFLOW_NVLINK5_ERR"
        assert row.applies_to == ("B100", "GB200") and row.linked_since == "R565"
    assert lookup(56).unused and lookup(56).immediate == "CONTACT_SUPPORT"
    assert lookup(167).immediate is None  # the catalogue gives no action: none is invented


@pytest.mark.parametrize(
    ("xid", "immediate", "investigatory"),
    [
        (48, "WORKFLOW_XID_48", "WORKFLOW_XID_48"),
        (63, "IGNORE", "IGNORE"),
        (64, "RESET_GPU", "CONTACT_SUPPORT"),
        (74, "WORKFLOW_NVLINK_ERR", "CONTACT_SUPPORT"),
        (79, "RESTART_BM", "CONTACT_SUPPORT"),
        (92, "IGNORE", "CONTACT_SUPPORT"),
        (94, "RESTART_APP", "IGNORE (sympathetic)"),
        (95, "RESET_GPU", "IGNORE (sympathetic)"),
        (109, "RESET_GPU", "CONTACT_SUPPORT"),
        (119, "RESET_GPU", "INVESTIGATE_SW"),
        (121, "IGNORE", "CONTACT_SUPPORT"),
        (143, "RESET_GPU", "CONTACT_SUPPORT"),
        (154, "XID_154", "N/A: informational, about another Xid"),
    ],
)
def test_catalogue_rows_as_nvidia_gives_them(xid: int, immediate: str, investigatory: str) -> None:
    row = info(xid)
    assert (row.immediate, row.investigatory) == (immediate, investigatory)


def test_unknown_xid_names_the_catalogue_edition() -> None:
    row = lookup(400)
    assert not row.known and row.name == f"not in NVIDIA's Xid Catalog as of {CATALOG_VERSION}"
    assert decide(DEFAULT, 400, row.action).status == "WARN"


# -- verdicts -------------------------------------------------------------------------------------

# Xids whose verdict changed with the catalogue (before -> after), each for NVIDIA's reason
CHANGED = {
    109: ("WARN", "FAIL"),  # RESET_GPU (was: the app restarts)
    94: ("FAIL", "WARN"),  # RESTART_APP, "RST: No" (was: reset the GPU)
    63: ("FAIL", "INFO"),  # IGNORE (the pending remap is gpu.row-remap's FAIL)
    92: ("FAIL", "INFO"),  # IGNORE
    93: ("FAIL", "INFO"),  # IGNORE
    121: ("FAIL", "INFO"),  # IGNORE: corrected C2C errors
    69: ("FAIL", "WARN"),  # RESTART_APP
    80: ("FAIL", "WARN"),  # RESTART_APP
    43: ("WARN", "INFO"),  # IGNORE
    38: ("WARN", "INFO"),  # IGNORE
    8: ("WARN", "WARN"),
    46: ("WARN", "FAIL"),  # RESET_GPU (unknown before)
    149: ("WARN", "WARN"),  # without a severity; a Fatal one FAILs (LINES)
    158: ("WARN", "FAIL"),  # RESET_GPU
}


@pytest.mark.parametrize("xid", sorted(CHANGED))
def test_default_verdict_follows_nvidia(xid: int) -> None:
    assert decide(DEFAULT, xid, info(xid).action).status == CHANGED[xid][1]


def test_fatal_149_fails_and_mig_94_names_the_instance() -> None:
    (f149,) = [
        f for f in _golden("hgx-xid-149-fatal") if f["id"] == "gpu.xid" and f["subject"] == SICK
    ]
    assert f149["status"] == "FAIL" and "NETIR" in f149["summary"]
    assert "application-class" not in f149["summary"]
    (f94,) = [f for f in _golden("hgx-xid-mig-94") if f["id"] == "gpu.xid" and f["subject"] == SICK]
    assert f94["status"] == "WARN" and "MIG GPU instance 5" in f94["summary"]


def _golden(case: str) -> list[dict[str, str]]:
    import json

    doc = json.loads((auditroot.GOLDEN / f"{case}.json").read_text())
    findings: list[dict[str, str]] = doc["findings"]
    return findings


def test_nhc_policy_fails_exactly_its_list() -> None:
    nhc = XidPolicy("nhc")
    for xid in range(1, 173):
        status = decide(nhc, xid, info(xid).action).status
        assert (status == "FAIL") == (xid in NHC_FAIL), xid
    d = decide(nhc, 109, "RESET_GPU")
    assert d.status == "WARN" and "Azure NHC" in d.why


def test_site_overrides_win_and_say_so() -> None:
    policy = XidPolicy("nvidia", fail=frozenset({94}), info=frozenset({79}), source="/x.toml")
    d94 = decide(policy, 94, "RESTART_APP")
    assert d94.status == "FAIL" and d94.why == "site policy: Xid 94 in [audit.xid] fail (/x.toml)"
    assert decide(policy, 79, "RESTART_BM").status == "INFO"
    assert decide(policy, 13, "RESTART_APP").status == "WARN"


@pytest.mark.parametrize(
    ("table", "key", "fragment"),
    [
        ({"xid": {"policy": "strict"}}, "audit.xid.policy", "must be one of nvidia, nhc"),
        ({"xid": {"fail": ["48"]}}, "audit.xid.fail", "'48' is not an Xid number"),
        ({"xid": {"fail": [48], "info": [48]}}, "audit.xid.info", "Xid 48 is also in"),
        ({"xid": {"ignore": [13]}}, "audit.xid.ignore", "unknown key"),
        ({"xids": {}}, "audit.xids", "unknown key"),
        ({"xid": {"warn": 13}}, "audit.xid.warn", "must be a list"),
    ],
)
def test_policy_table_is_strict(table: dict[str, object], key: str, fragment: str) -> None:
    with pytest.raises(PolicyError) as err:
        parse_audit_table(table, "f.toml")
    assert err.value.key == key and fragment in err.value.detail


def test_agent_config_validates_audit_xid() -> None:
    cfg = parse_config('[audit.xid]\npolicy = "nhc"\nfail = [94]\n', "m.toml")
    assert cfg.xid_policy == XidPolicy("nhc", fail=frozenset({94}), source="m.toml")
    with pytest.raises(ConfigError, match=r"m.toml: audit.xid.policy: must be one of"):
        parse_config('[audit.xid]\npolicy = "all"\n', "m.toml")


def test_bad_policy_in_the_root_is_a_fail_and_nvidia_decides(audit_root: RootFactory) -> None:
    root = audit_root(
        files={
            "dev/kmsg": auditroot.kmsg(auditroot.HGX, auditroot.XID_79),
            "etc/mcpnode/mcpnode.toml": '[audit.xid]\nfail = ["x"]\n',
        },
    )
    with Host(root) as host:
        report = run_audit(host, only=["gpu.xid"])
    by = {(f.id, f.subject): f for f in report.findings}
    assert by["gpu.xid.policy", None].status.value == "FAIL"
    assert "audit.xid.fail" in by["gpu.xid.policy", None].summary
    assert by["gpu.xid", SICK].status.value == "FAIL"
