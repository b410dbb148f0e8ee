"""PCI configuration space: the ACS extended capability. Pure (bytes in, facts out).

PCI Express Base Specification (6.0, 7.6 "PCI Express Extended Capabilities"): the extended
capabilities start at offset 0x100, each with a 32-bit header: capability ID bits 15:0,
version 19:16, next capability offset 31:20 (0 ends the list). Access Control Services
(7.7.11, capability ID 0x000D): ACS Capability Register at +4, ACS Control Register at +6, the
same bit per feature in both: Source Validation 0, Translation Blocking 1, P2P Request Redirect
2, P2P Completion Redirect 3, Upstream Forwarding 4, P2P Egress Control 5, Direct Translated
P2P 6.

sysfs `config` gives root the whole 4096 bytes of a PCIe function; any other user gets the
first 64 bytes only (drivers/pci/pci-sysfs.c pci_read_config), which cannot hold the extended
capabilities.
"""

from __future__ import annotations

from dataclasses import dataclass

EXTENDED_START = 0x100
ACS_CAP_ID = 0x000D
ACS_BITS: tuple[tuple[int, str], ...] = (
    (0x01, "SrcValid"),
    (0x02, "TransBlk"),
    (0x04, "ReqRedir"),
    (0x08, "CmpltRedir"),
    (0x10, "UpstreamFwd"),
    (0x20, "EgressCtrl"),
    (0x40, "DirectTrans"),
)
# What sends peer-to-peer traffic up to the root complex (or drops it): Source Validation,
# P2P Request Redirect, P2P Completion Redirect. NCCL's troubleshooting guide
# (https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/troubleshooting.html, "PCI Access
# Control Services (ACS)"): with ACS enabled, "all PCI point-to-point traffic" is redirected to
# the CPU root complex, "causing a significant performance reduction or even a hang".
ACS_REDIRECTING = 0x01 | 0x04 | 0x08
_MAX_CAPS = (4096 - EXTENDED_START) // 4  # a loop in a corrupt list ends here


class ConfigTooShort(ValueError):
    """The config space read does not reach the extended capabilities (not root)."""


@dataclass(frozen=True)
class Acs:
    offset: int
    capability: int
    control: int

    @property
    def redirecting(self) -> int:
        return self.control & ACS_REDIRECTING


def acs_names(bits: int) -> str:
    names = [name for bit, name in ACS_BITS if bits & bit]
    return "+".join(names) if names else "none"


def find_acs(data: bytes) -> Acs | None:
    """The ACS capability of a function's config space, or None when it has none. Raises
    ConfigTooShort when `data` ends before the extended capabilities."""
    if len(data) < EXTENDED_START + 4:
        raise ConfigTooShort(f"{len(data)} bytes: the extended capabilities start at 0x100")
    offset = EXTENDED_START
    seen: set[int] = set()
    while offset >= EXTENDED_START and offset + 8 <= len(data) and offset not in seen:
        if len(seen) >= _MAX_CAPS:
            break
        seen.add(offset)
        header = int.from_bytes(data[offset : offset + 4], "little")
        if header in (0, 0xFFFFFFFF):  # no extended capabilities (or the device is gone)
            return None
        if header & 0xFFFF == ACS_CAP_ID:
            cap = int.from_bytes(data[offset + 4 : offset + 6], "little")
            ctrl = int.from_bytes(data[offset + 6 : offset + 8], "little")
            return Acs(offset, cap, ctrl)
        offset = (header >> 20) & 0xFFC
    return None
