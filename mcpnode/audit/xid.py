"""XID and SXID events from the kernel log. Pure: text in, events out (the audit's gpu_xid area
and the agent's kernel-log watcher both use it). What each Xid means is audit/xid_catalog.py
(NVIDIA's Xid Catalog as data); which status it gets, audit/xid_policy.py.

Record formats:
- /dev/kmsg: `PRIORITY,SEQ,USEC,FLAGS[,caller=T123];MESSAGE` (Documentation/ABI/testing/
  dev-kmsg; `caller=` with CONFIG_PRINTK_CALLER), USEC the time since boot in microseconds;
  ` KEY=VALUE` continuation lines follow.
- `journalctl -k -o short-monotonic`: `[  SECONDS.USEC] HOST kernel: MESSAGE`.

Xid messages, as open-gpu-kernel-modules prints them (src/nvidia/src/kernel/gpu/rc/
kernel_rc.c, krcReportXid; the closed driver prints the same):
- `NVRM: Xid (PCI:%04x:%02x:%02x): %d, pid=%s, name=%s, %s` - the domain is 4 hex digits or
  more (Grace hosts print `0009:`, `0018:`), the address has no function (the GPU is function
  0); `pid='<unknown>', name=<unknown>` when no process is attributable, and no `pid=`/`name=`
  at all when the driver has no process name (`NVRM: Xid (...): %d, %s`);
- on a GPU in MIG mode: `(PCI:0000:3b:00 GPU-I:05)` or `(PCI:0000:3b:00 GPU-I:05 GPU-CI:02)`,
  the GPU instance (and compute instance) the error is attributed to;
- drivers before R450 print `Xid (0000:01:00)`, without `PCI:`;
- Xid 45 may end with ` caused by previous Xid N`;
- Xid 154 (R550+): `GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)`;
- Xid 144-150 (NVLink 5, R565+): `149, NETIR_LINK_EVT  Fatal   XC0 i0 Link 01 (0x021425c6 ...)`,
  the sub-unit then `Fatal` or `Non-fatal`.
The GSP banners around Xid 119/120 (`NVRM: _kgspLogXid119: ***** GSP Timeout *****`, the RPC
history tables) are not Xid lines and are not events.

SXid messages (NVIDIA Fabric Manager User Guide, "NVSwitch SXid errors"):
`nvidia-nvswitch3: SXid (PCI:0000:07:00.0): 12028, Non-fatal, Link 32 egress non-posted PRIV
error (First)`; follow-up detail lines repeat the SXid without the severity.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from mcpnode.audit.xid_catalog import (
    BUCKET_TEXT,
    CATALOG,
    NVLINK5,
    RECOVERY_ACTIONS,
    XID_RECOVERY_ACTION,
    XidInfo,
    lookup,
)
from mcpnode.audit.xid_policy import nvidia_status
from mcpnode.topology.model import PciAddress

__all__ = [
    "ACTION_TEXT",
    "CATALOG",
    "RECOVERY_ACTIONS",
    "XID_RECOVERY_ACTION",
    "XID_ROW_REMAP",
    "LogRecord",
    "SxidEvent",
    "XidEvent",
    "XidInfo",
    "info",
    "parse_journal_line",
    "parse_kmsg_record",
    "parse_sxid",
    "parse_xid",
    "since_boot",
]

Action = str  # a Resolution Bucket of the catalogue (RESET_GPU, RESTART_APP, ...)
ACTION_TEXT = BUCKET_TEXT
XID_ROW_REMAP = 63  # resolved once NVML no longer reports a pending remap (the reset happened)


def info(xid: int) -> XidInfo:
    """The catalogue's row; for an Xid it does not list, a row saying so."""
    return lookup(xid)


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
    gpu_instance: int | None = None  # MIG: `GPU-I:NN`, the GPU instance it is attributed to
    compute_instance: int | None = None  # MIG: `GPU-CI:NN`
    pid: str | None = None  # `pid=`, as printed (`'<unknown>'` kept)
    process: str | None = None  # `name=`

    @property
    def info(self) -> XidInfo:
        return info(self.xid)

    @property
    def mig(self) -> str | None:
        """`MIG GPU instance 5, compute instance 2` when the driver attributed it, else None."""
        if self.gpu_instance is None:
            return None
        out = f"MIG GPU instance {self.gpu_instance}"
        if self.compute_instance is not None:
            out += f", compute instance {self.compute_instance}"
        return out

    @property
    def nvlink_severity(self) -> Literal["fatal", "non-fatal"] | None:
        """Xid 144-150: the severity the message carries (None: not printed)."""
        if self.xid not in NVLINK5:
            return None
        m = _NVL5_SEVERITY.search(self.detail)
        if m is None:
            return None
        return "fatal" if m.group(1).lower() == "fatal" else "non-fatal"

    @property
    def action(self) -> Action:
        """The action this event asks for: the catalogue's immediate action; for Xid 154 the new
        recovery action it names; for Xid 144-150 the one its severity decodes to (Fatal, Link
        Fatal: RESET_GPU; Non-fatal: XID_154_EVAL; not printed: the decode workflow)."""
        if self.xid == XID_RECOVERY_ACTION:
            m = _RECOVERY_TO.search(self.detail)
            if m is not None:
                return RECOVERY_ACTIONS.get(int(m.group(1), 16), "XID_154")
            return "XID_154"
        severity = self.nvlink_severity
        if severity == "fatal":
            return "RESET_GPU"
        if severity == "non-fatal":
            return "XID_154_EVAL"
        return self.info.action

    @property
    def fatal(self) -> bool:
        """FAIL under NVIDIA's catalogue (the default policy; audit/xid_policy.py)."""
        return nvidia_status(self.action) == "FAIL"


@dataclass(frozen=True)
class SxidEvent:
    sxid: int
    switch: PciAddress
    severity: Literal["fatal", "non-fatal"] | None  # None: a detail line without it
    usec: int | None
    seq: int | None
    detail: str


# Every number is bounded where it is matched, so int() never sees more digits than the
# field can hold. /dev/kmsg's sequence number and timestamp are u64 (at most 20 digits: a
# longer head is not a record); journalctl's seconds fit 12. An XID or SXID is a 32-bit number
# (10 digits); the digit after those is captured rather than refused by the pattern, so a
# record with a longer one is still seen, and rejected by _search (ValueError: the agent counts
# it as skipped, agent/health.py) instead of silently not matching.
_KMSG_HEAD = re.compile(r"(\d{1,20}),(\d{1,20}),(\d{1,20}),[^;]*;")
_JOURNAL = re.compile(r"\[\s*(\d{1,12})\.(\d{1,6})\]\s+\S+\s+kernel:\s?(.*)")
_ADDR = r"([0-9a-fA-F]{4,8}):([0-9a-fA-F]{2}):([0-9a-fA-F]{2})"
_XID_NUMBER = r"(\d{1,10})(\d?)"
_XID = re.compile(
    r"NVRM: Xid \((?:PCI:)?"
    + _ADDR
    + r"(?:\.[0-7])?(?:\s+GPU-I:(\d{1,3}))?(?:\s+GPU-CI:(\d{1,3}))?\): "
    + _XID_NUMBER
    + r",?\s*(.*)",
    re.DOTALL,
)
_PROC = re.compile(r"pid=([^,]*),\s*(?:name=([^,]*),\s*)?(.*)", re.DOTALL)
_SXID = re.compile(
    r"nvidia-nvswitch\d{0,5}: SXid \((?:PCI:)?"
    + _ADDR
    + r"\.([0-7])\): "
    + _XID_NUMBER
    + r",?\s*(.*)"
)
_SEVERITY = re.compile(r"(Fatal|Non-fatal)\b,?\s*(.*)", re.IGNORECASE)
_NVL5_SEVERITY = re.compile(r"\b(non-?fatal|fatal)\b", re.IGNORECASE)
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


def _search(
    pattern: re.Pattern[str], record: LogRecord, group: int, what: str
) -> tuple[re.Match[str], int, str] | None:
    """`pattern`'s match in the record, the _XID_NUMBER at `group` and the text after it
    (stripped); None when the record has no such line. Raises ValueError when a digit follows
    the ten the number allows: past 32 bits, which no driver writes."""
    m = pattern.search(record.message)
    if m is None:
        return None
    if m.group(group + 1):
        raise ValueError(f"{what} longer than 10 digits: {m.group(group)}...")
    return m, int(m.group(group)), m.group(group + 2).strip()


def parse_xid(record: LogRecord, source: str = "kmsg") -> XidEvent | None:
    """The XID a kernel log record reports, or None. Raises ValueError (see _search)."""
    found = _search(_XID, record, 6, "XID")
    if found is None:
        return None
    m, xid, detail = found
    pid = process = None
    proc = _PROC.match(detail)
    if proc is not None:
        pid, process = proc.group(1).strip(), proc.group(2)
    return XidEvent(
        xid=xid,
        address=_address(m.group(1), m.group(2), m.group(3)),
        usec=record.usec,
        seq=record.seq,
        detail=detail,
        source=source,
        gpu_instance=int(m.group(4)) if m.group(4) is not None else None,
        compute_instance=int(m.group(5)) if m.group(5) is not None else None,
        pid=pid,
        process=process.strip() if process is not None else None,
    )


def parse_sxid(record: LogRecord) -> SxidEvent | None:
    """The SXID a kernel log record reports, or None. Raises ValueError (see _search)."""
    found = _search(_SXID, record, 5, "SXID")
    if found is None:
        return None
    m, sxid, rest = found
    severity: Literal["fatal", "non-fatal"] | None = None
    sev = _SEVERITY.match(rest)
    if sev is not None:
        severity = "fatal" if sev.group(1).lower() == "fatal" else "non-fatal"
        rest = sev.group(2)
    return SxidEvent(
        sxid=sxid,
        switch=_address(m.group(1), m.group(2), m.group(3), m.group(4)),
        severity=severity,
        usec=record.usec,
        seq=record.seq,
        detail=rest,
    )


def since_boot(usec: int | None) -> str:
    """`3d 04:05:06` / `04:05:06` after boot, for people; `unknown` when the record has no
    time (an NVML event)."""
    if usec is None:
        return "unknown"
    s = usec // 1_000_000
    days, s = divmod(s, 86400)
    clock = f"{s // 3600:02d}:{s % 3600 // 60:02d}:{s % 60:02d}"
    return f"{days}d {clock}" if days else clock
