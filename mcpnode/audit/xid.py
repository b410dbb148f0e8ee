"""XID and SXID events from the kernel log, and what NVIDIA says each one means. Pure: text in,
events out (the audit's gpu_xid area and the agent's kernel-log watcher both use it).

Record formats:
- /dev/kmsg: `PRIORITY,SEQ,USEC,FLAGS;MESSAGE` (Documentation/ABI/testing/dev-kmsg), USEC the
  time since boot in microseconds; ` KEY=VALUE` continuation lines follow.
- `journalctl -k -o short-monotonic`: `[  SECONDS.USEC] HOST kernel: MESSAGE`.

Messages (NVIDIA, "XID Errors", https://docs.nvidia.com/deploy/xid-errors/):
- `NVRM: Xid (PCI:0000:3a:00): 79, pid=1234, name=python3, GPU has fallen off the bus.`
  (older drivers print `Xid (0000:01:00)` without `PCI:`); the address has no function: the
  GPU is function 0;
- `NVRM: Xid (PCI:0000:3a:00): 154, GPU recovery action changed from 0x0 (None) to 0x1 (GPU
  Reset Required)` (R550+);
- `nvidia-nvswitch3: SXid (PCI:0000:07:00.0): 12028, Non-fatal, Link 32 egress non-posted PRIV
  error (First)` (the NVSwitch driver; NVIDIA Fabric Manager User Guide, "NVSwitch SXid
  errors"); follow-up detail lines repeat the SXid without the severity.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from mcpnode.topology.model import PciAddress

Cause = Literal["hardware", "driver", "application"]
# NVIDIA's "Resolution Bucket (Immediate Action)" of the Xid catalog
# (https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html), most drastic last.
Action = Literal["NONE", "RESTART_APP", "CONTACT_SUPPORT", "RESET_GPU", "RESTART_BM"]
ACTION_ORDER: tuple[Action, ...] = (
    "NONE",
    "RESTART_APP",
    "CONTACT_SUPPORT",
    "RESET_GPU",
    "RESTART_BM",
)
ACTION_TEXT: dict[Action, str] = {
    "NONE": "nothing to do",
    "RESTART_APP": "restart the application (check its code and inputs if it recurs)",
    "CONTACT_SUPPORT": "collect `nvidia-bug-report.sh` and contact NVIDIA support",
    "RESET_GPU": "drain the GPU and reset it (`nvidia-smi -r -i BUS`), or reboot the node",
    "RESTART_BM": "drain the node and reboot (power-cycle) it; reseat or RMA the GPU if it recurs",
}


@dataclass(frozen=True)
class XidInfo:
    xid: int
    name: str  # NVIDIA's description
    cause: Cause  # what NVIDIA lists as the likely cause
    action: Action  # NVIDIA's immediate action
    fatal: bool  # a hardware or driver fault: the audit FAILs; else it WARNs


# Which XIDs make the node unfit to serve (FAIL): Azure's NHC fails a node on exactly
# 48 56 57 58 62 63 64 65 69 73 74 79 80 81 92 119 120 (azurehpc-health-checks,
# customTests/azure_gpu_xid.nhc); mcpnode adds the ECC and GSP events of later drivers
# (93-95, 140, 143) and Xid 154 when it asks for a reset or a reboot. Application-class XIDs
# only WARN: the Kubernetes device plugin ignores 13, 31, 43, 45, 68 and 109 when it decides
# whether a GPU is healthy (NVIDIA/k8s-device-plugin internal/rm/health.go) - the process that
# caused them is the one that failed. NHC does fail on 68 (NVDEC); mcpnode follows the device
# plugin there. Names and actions: the Xid catalog (analyzing-xid-catalog.html) and the XID
# table of https://docs.nvidia.com/deploy/xid-errors/.
# fmt: off
_ROWS: tuple[tuple[int, str, Cause, Action, bool], ...] = (
    (8, "GPU stopped processing", "driver", "RESTART_APP", False),
    (13, "Graphics Engine Exception", "application", "RESTART_APP", False),
    (31, "GPU memory page fault", "application", "RESTART_APP", False),
    (32, "Invalid or corrupted push buffer stream", "driver", "CONTACT_SUPPORT", False),
    (38, "Driver firmware error", "driver", "CONTACT_SUPPORT", False),
    (43, "GPU stopped processing (reset channel verification)", "application", "RESTART_APP",
     False),
    (45, "Preemptive cleanup, due to previous errors", "application", "NONE", False),
    (48, "Double Bit ECC Error (DBE)", "hardware", "RESET_GPU", True),
    (56, "Display Engine error", "hardware", "CONTACT_SUPPORT", True),
    (57, "Error programming video memory interface", "hardware", "CONTACT_SUPPORT", True),
    (58, "Unstable video memory interface detected", "hardware", "CONTACT_SUPPORT", True),
    (61, "Internal micro-controller breakpoint/warning", "driver", "CONTACT_SUPPORT", False),
    (62, "Internal micro-controller halt", "hardware", "RESET_GPU", True),
    (63, "ECC page retirement or row remapping recording event", "hardware", "RESET_GPU",
     True),
    (64, "ECC page retirement or row remapper recording failure", "hardware", "RESET_GPU",
     True),
    (65, "Video processor exception", "hardware", "RESET_GPU", True),
    (68, "NVDEC0 Exception (video decoder)", "application", "RESTART_APP", False),
    (69, "Graphics Engine class error", "hardware", "RESET_GPU", True),
    (73, "NVENC2 Error", "hardware", "RESET_GPU", True),
    (74, "NVLink Error", "hardware", "RESET_GPU", True),
    (79, "GPU has fallen off the bus", "hardware", "RESTART_BM", True),
    (80, "Corrupted data sent to GPU", "hardware", "RESET_GPU", True),
    (81, "VGA Subsystem Error", "hardware", "RESET_GPU", True),
    (92, "High single-bit ECC error rate", "hardware", "CONTACT_SUPPORT", True),
    (93, "Non-fatal violation of provisioned InfoROM wear limit", "hardware",
     "CONTACT_SUPPORT", True),
    (94, "Contained ECC error", "hardware", "RESET_GPU", True),
    (95, "Uncontained ECC error", "hardware", "RESET_GPU", True),
    (109, "Context Switch Timeout Error", "application", "RESTART_APP", False),
    (119, "GSP RPC Timeout", "driver", "RESET_GPU", True),
    (120, "GSP Error", "driver", "RESET_GPU", True),
    (121, "C2C Link Error", "hardware", "RESET_GPU", True),
    (140, "Unrecovered ECC Error", "hardware", "RESET_GPU", True),
    (143, "GPU Initialization Failure", "hardware", "RESTART_BM", True),
    (154, "GPU Recovery Action Changed", "driver", "RESET_GPU", True),
)
# fmt: on
CATALOG: dict[int, XidInfo] = {row[0]: XidInfo(*row) for row in _ROWS}
XID_ROW_REMAP = 63  # resolved once NVML no longer reports a pending remap (the reset happened)
XID_RECOVERY_ACTION = 154
# Xid 154's new recovery action (NVML's nvmlDeviceGpuRecoveryAction_t): 0 None, 1 GPU Reset
# Required, 2 Node Reboot Required, 3 Drain P2P, 4 Drain and Reset.
RECOVERY_ACTIONS: dict[int, Action] = {
    0: "NONE",
    1: "RESET_GPU",
    2: "RESTART_BM",
    3: "RESET_GPU",
    4: "RESET_GPU",
}


def info(xid: int) -> XidInfo:
    """The catalog's entry, or for an XID mcpnode has no row for a WARN pointing at NVIDIA's
    catalog (never a silent pass: it is still the driver reporting an error)."""
    unknown = XidInfo(
        xid, "not in mcpnode's table (see the Xid catalog)", "driver", "CONTACT_SUPPORT", False
    )
    return CATALOG.get(xid, unknown)


@dataclass(frozen=True)
class LogRecord:
    """One kernel log record: its message, sequence number and time since boot."""

    message: str
    seq: int | None
    usec: int | None  # microseconds since boot (CLOCK_MONOTONIC), None when unknown


@dataclass(frozen=True)
class XidEvent:
    xid: int
    address: PciAddress  # the GPU, function 0
    usec: int | None  # time since boot
    seq: int | None
    detail: str  # the message after the XID number
    source: str  # "kmsg", "journal", "nvml"

    @property
    def info(self) -> XidInfo:
        return info(self.xid)

    @property
    def action(self) -> Action:
        """The action this event asks for: the catalog's, or for Xid 154 the new recovery
        action it names."""
        if self.xid == XID_RECOVERY_ACTION:
            m = _RECOVERY_TO.search(self.detail)
            if m is not None:
                return RECOVERY_ACTIONS.get(int(m.group(1), 16), "CONTACT_SUPPORT")
        return self.info.action

    @property
    def fatal(self) -> bool:
        if self.xid == XID_RECOVERY_ACTION:
            return self.action != "NONE"
        return self.info.fatal


@dataclass(frozen=True)
class SxidEvent:
    sxid: int
    switch: PciAddress
    severity: Literal["fatal", "non-fatal"] | None  # None: a detail line without it
    usec: int | None
    seq: int | None
    detail: str


_KMSG_HEAD = re.compile(r"(\d+),(\d+),(\d+),[^;]*;")
_JOURNAL = re.compile(r"\[\s*(\d+)\.(\d{1,6})\]\s+\S+\s+kernel:\s?(.*)")
_ADDR = r"([0-9a-fA-F]{4,8}):([0-9a-fA-F]{2}):([0-9a-fA-F]{2})"
_XID = re.compile(r"NVRM: Xid \((?:PCI:)?" + _ADDR + r"(?:\.[0-7])?\): (\d+),?\s*(.*)")
_SXID = re.compile(r"nvidia-nvswitch\d*: SXid \((?:PCI:)?" + _ADDR + r"\.([0-7])\): (\d+),?\s*(.*)")
_SEVERITY = re.compile(r"(Fatal|Non-fatal)\b,?\s*(.*)", re.IGNORECASE)
_RECOVERY_TO = re.compile(r"\bto 0x([0-9a-fA-F]+)")


def parse_kmsg_record(text: str) -> LogRecord | None:
    """A /dev/kmsg record (its first line; the continuation lines carry no message text).
    None for text that is not one."""
    head = text.split("\n", 1)[0]
    m = _KMSG_HEAD.match(head)
    if m is None:
        return None
    return LogRecord(head[m.end() :], int(m.group(2)), int(m.group(3)))


def parse_journal_line(line: str) -> LogRecord | None:
    """A `journalctl -k -o short-monotonic` line; None for anything else (the `-- Boot ... --`
    separators, `-- No entries --`)."""
    m = _JOURNAL.match(line.strip())
    if m is None:
        return None
    usec = int(m.group(1)) * 1_000_000 + int(m.group(2).ljust(6, "0"))
    return LogRecord(m.group(3), None, usec)


def _address(domain: str, bus: str, dev: str, fn: str = "0") -> PciAddress:
    return PciAddress(int(domain, 16), int(bus, 16), int(dev, 16), int(fn, 16))


def parse_xid(record: LogRecord, source: str = "kmsg") -> XidEvent | None:
    m = _XID.search(record.message)
    if m is None:
        return None
    return XidEvent(
        xid=int(m.group(4)),
        address=_address(m.group(1), m.group(2), m.group(3)),
        usec=record.usec,
        seq=record.seq,
        detail=m.group(5).strip(),
        source=source,
    )


def parse_sxid(record: LogRecord) -> SxidEvent | None:
    m = _SXID.search(record.message)
    if m is None:
        return None
    rest = m.group(6).strip()
    severity: Literal["fatal", "non-fatal"] | None = None
    sev = _SEVERITY.match(rest)
    if sev is not None:
        severity = "fatal" if sev.group(1).lower() == "fatal" else "non-fatal"
        rest = sev.group(2)
    return SxidEvent(
        sxid=int(m.group(5)),
        switch=_address(m.group(1), m.group(2), m.group(3), m.group(4)),
        severity=severity,
        usec=record.usec,
        seq=record.seq,
        detail=rest,
    )


def worst_action(actions: list[Action]) -> Action:
    return max(actions, key=ACTION_ORDER.index) if actions else "NONE"


def since_boot(usec: int | None) -> str:
    """`3d 04:05:06` / `04:05:06` after boot, for people; `?` when unknown."""
    if usec is None:
        return "?"
    s = usec // 1_000_000
    days, s = divmod(s, 86400)
    clock = f"{s // 3600:02d}:{s % 3600 // 60:02d}:{s % 60:02d}"
    return f"{days}d {clock}" if days else clock
