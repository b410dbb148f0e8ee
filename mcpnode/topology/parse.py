"""Parsers for sysfs/procfs text: `str` in, values out, no I/O. Table-tested in
tests/topology/test_parse.py. Each raises ParseError (a ValueError) with the offending text."""

from __future__ import annotations

import re

from mcpnode.codec import cpus
from mcpnode.codec.bounded import BoundError, parse_decimal
from mcpnode.errors import McpnodeError
from mcpnode.topology.model import CpuSet, PciAddress


class ParseError(McpnodeError, ValueError):
    """Text that does not have the kernel's format."""


def _clip(text: str, limit: int = 60) -> str:
    t = text.strip()
    return t if len(t) <= limit else t[:limit] + "…"


def parse_int(text: str, max_digits: int = 20) -> int:
    """A decimal integer file (`numa_node`, `core_id`, `mtu`), surrounding whitespace allowed,
    at most `max_digits` digits (a 5,000-digit `numa_node` is garbage, not a number)."""
    try:
        return parse_decimal(text, max_digits=max_digits)
    except BoundError as err:
        raise ParseError(str(err)) from None


def parse_hex(text: str) -> int:
    """A `0x10de`-style id (`vendor`, `device`, `class`)."""
    t = text.strip()
    if not re.fullmatch(r"0[xX][0-9a-fA-F]+", t):
        raise ParseError(f"not a 0x-prefixed hex id: {_clip(text)!r}")
    return int(t, 16)


def parse_cpulist(text: str, limit: int = cpus.MAX_CPU) -> CpuSet:
    """Kernel list format: `0-3,8,10-11`, and the group form `0-15:2/4`; an empty file is the
    empty set (codec/cpus.py's parse_list: no CPU at or above `limit`, bounded, linear)."""
    try:
        return CpuSet(cpus.parse_list(text, limit=limit))
    except BoundError as err:
        raise ParseError(str(err)) from None


def parse_cpumask(text: str, limit: int = cpus.MAX_CPU) -> CpuSet:
    """Kernel hex mask: comma-separated 32-bit words, most significant first
    (`00000000,0000ffff` = CPUs 0-15), as in `local_cpus`, `cpumap`, `Cpus_allowed`
    (codec/cpus.py's parse_mask: no CPU at or above `limit`, bounded); the commas are only
    separators, so words of any width are read too."""
    try:
        return CpuSet(cpus.parse_mask(text, limit=limit, any_width=True))
    except BoundError as err:
        raise ParseError(str(err)) from None


def parse_numa_node(text: str) -> int | None:
    """`numa_node`: a node id, or None for -1 ("firmware gave no locality": no ACPI _PXM, or a
    VM). Anything below -1 or non-numeric is garbage."""
    value = parse_int(text)
    if value == -1:
        return None
    if value < -1:
        raise ParseError(f"numa_node out of range: {_clip(text)!r}")
    return value


def parse_distances(text: str) -> tuple[int, ...]:
    """`nodeN/distance`: one SLIT distance per online node, space separated (`10 21`)."""
    parts = text.split()
    if not parts:
        raise ParseError("empty distance row")
    try:
        # A SLIT entry is one byte (ACPI 6.5, 5.2.17); the kernel prints node_distance() as %d.
        return tuple(parse_decimal(p, max_digits=3, minimum=0, maximum=255) for p in parts)
    except BoundError as err:
        raise ParseError(f"not a distance row ({err}): {_clip(text)!r}") from None


def parse_node_meminfo_total_kib(text: str) -> int:
    """MemTotal from `nodeN/meminfo` (`Node 0 MemTotal:       16746352 kB`)."""
    m = re.search(r"^Node\s+[0-9]+\s+MemTotal:\s+([0-9]+)\s*kB", text, re.MULTILINE | re.ASCII)
    if not m:
        raise ParseError("no 'Node N MemTotal: ... kB' line in node meminfo")
    return parse_int(m.group(1))


_SPEED_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*GT/s(?:\s+PCIe)?\s*$")


def parse_link_speed(text: str) -> float | None:
    """`current_link_speed`/`max_link_speed` in GT/s.

    Formats seen: `8 GT/s` (kernels before 4.17), `8.0 GT/s PCIe` (4.20+, drivers/pci/pci-sysfs.c
    uses pci_speed_string()), `2.5 GT/s`. `Unknown` (link down, or a device that does not
    report: PCI_SPEED_UNKNOWN) returns None.
    """
    t = text.strip()
    if t.lower().startswith("unknown") or t == "":
        return None
    m = _SPEED_RE.match(t)
    if not m:
        raise ParseError(f"not a link speed: {_clip(text)!r}")
    return float(m.group(1))


def parse_link_width(text: str) -> int | None:
    """`current_link_width`: lanes (`16`). 0 means the link is down or unknown -> None.
    Some kernels print `x16`; both forms accepted."""
    t = text.strip().lower().removeprefix("x")
    value = parse_int(t)
    if value < 0 or value > 32:
        raise ParseError(f"link width out of range: {_clip(text)!r}")
    return value or None


def parse_pci_class(text: str) -> tuple[int, int]:
    """`class` (`0x030200`) -> (class code 0x0302, programming interface 0x00)."""
    value = parse_hex(text)
    if value > 0xFFFFFF:
        raise ParseError(f"pci class wider than 24 bits: {_clip(text)!r}")
    return value >> 8, value & 0xFF


_BDF_RE = re.compile(r"^([0-9a-fA-F]{4,8}):([0-9a-fA-F]{2}):([0-9a-fA-F]{2})\.([0-7])$")


def parse_pci_address(text: str) -> PciAddress:
    """`0000:1b:00.0` (sysfs), also NVML's `00000000:1B:00.0` (8-digit domain, upper case)."""
    m = _BDF_RE.match(text.strip())
    if not m:
        raise ParseError(f"not a PCI address: {_clip(text)!r}")
    domain, bus, dev, fn = m.groups()
    return PciAddress(int(domain, 16), int(bus, 16), int(dev, 16), int(fn))


def is_pci_address(name: str) -> bool:
    return _BDF_RE.match(name) is not None


_HOST_BRIDGE_RE = re.compile(r"^pci[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}$")


def is_host_bridge_name(name: str) -> bool:
    """`pci0000:00`, and VMD's nested `pci10000:00` domains."""
    return _HOST_BRIDGE_RE.match(name) is not None


def parse_status_field(status: str, field: str) -> str | None:
    """One `Field:\\tvalue` line of /proc/<pid>/status, or None when absent."""
    prefix = field + ":"
    for line in status.splitlines():
        if line.startswith(prefix):
            return line[len(prefix) :].strip()
    return None


def parse_cgroup_v2_path(text: str) -> str | None:
    """The unified-hierarchy path from /proc/self/cgroup (`0::/user.slice/...`)."""
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3 and parts[0] == "0" and parts[1] == "":
            return parts[2].strip() or "/"
    return None


def parse_cgroup_v1_cpuset_path(text: str) -> str | None:
    """The cpuset controller's path from /proc/self/cgroup (`3:cpuset:/slurm/job1`)."""
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3 and "cpuset" in parts[1].split(","):
            return parts[2].strip() or "/"
    return None


def parse_mounts(text: str) -> list[tuple[str, str, str, tuple[str, ...]]]:
    """`/proc/mounts` lines -> (source, mountpoint, fstype, options). Octal escapes (`\\040`)
    in mount points are decoded as the kernel writes them (fs/proc_namespace.c)."""
    out = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 4:
            continue
        mnt = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), parts[1])
        out.append((parts[0], mnt, parts[2], tuple(parts[3].split(","))))
    return out


def parse_mountinfo(text: str) -> list[tuple[str, str, str, tuple[str, ...]]]:
    """`/proc/self/mountinfo` -> (root, mountpoint, fstype, super options), same shape as
    parse_mounts. Fields after the ` - ` separator: fstype, source, super options
    (Documentation/filesystems/proc.rst, 3.5)."""
    out = []
    for line in text.splitlines():
        left, sep, right = line.partition(" - ")
        if not sep:
            continue
        lparts = left.split()
        rparts = right.split()
        if len(lparts) < 5 or len(rparts) < 1:
            continue
        mnt = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), lparts[4])
        opts = tuple(rparts[2].split(",")) if len(rparts) > 2 else ()
        out.append((lparts[3], mnt, rparts[0], opts))
    return out
