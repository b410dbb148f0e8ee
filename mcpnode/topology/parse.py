"""Parsers for sysfs/procfs text: `str` in, values out, no I/O. Table-tested in
tests/topology/test_parse.py. Each raises ParseError (a ValueError) with the offending text."""

from __future__ import annotations

from mcpnode.codec import cpus
from mcpnode.codec.bounded import BoundError, is_hex, parse_decimal
from mcpnode.errors import McpnodeError
from mcpnode.topology.model import CpuSet, PciAddress

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy reads it the same)
if TYPE_CHECKING:
    from collections.abc import Callable

# No `re` here: these parsers run at every `mcpnode topo`, and `re` with its compiles is a few
# ms of a run that hwloc's lstopo finishes in about ten. Each former pattern is noted where
# its code is; tests/topology/test_parse_noregex.py holds them and checks the code against them.

# What `\s` matches in a pattern with re.ASCII.
_ASCII_SPACE = " \t\n\r\x0b\x0c"


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
    if not (t[:2] in ("0x", "0X") and is_hex(t[2:])):  # `0[xX][0-9a-fA-F]+`
        raise ParseError(f"not a 0x-prefixed hex id: {_clip(text)!r}")
    return int(t, 16)


def parse_cpulist(text: str, limit: int = cpus.MAX_CPU) -> CpuSet:
    """Kernel list format: `0-3,8,10-11`, and the group form `0-15:2/4`; an empty file is the
    empty set (codec/cpus.py's parse_list: no CPU at or above `limit`, bounded, linear)."""
    try:
        return CpuSet(cpus.parse_list(text, limit=limit))
    except BoundError as err:
        raise ParseError(str(err)) from None


def cpulist_within(limit: int) -> Callable[[str], CpuSet]:
    """parse_cpulist with `limit` given: one parser object (read_parsed's, or a memo's key)."""

    def parse_within(text: str) -> CpuSet:
        return parse_cpulist(text, limit)

    return parse_within


def cpumask_within(limit: int) -> Callable[[str], CpuSet]:
    """parse_cpumask with `limit` given, as cpulist_within."""

    def parse_within(text: str) -> CpuSet:
        return parse_cpumask(text, limit)

    return parse_within


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
    kib = _node_memtotal(text)
    if kib is None:
        raise ParseError("no 'Node N MemTotal: ... kB' line in node meminfo")
    return parse_int(kib)


def _node_memtotal(text: str) -> str | None:
    """The digits of the first line (from its start; any text may follow) that reads `Node`,
    ASCII whitespace, digits, ASCII whitespace, `MemTotal:`, ASCII whitespace, digits, optional
    ASCII whitespace, `kB`: the former pattern `^Node\\s+[0-9]+\\s+MemTotal:\\s+([0-9]+)\\s*kB`
    searched with re.MULTILINE and re.ASCII. Its whitespace may run over line ends, as `\\s`
    did. Linear: a try reads past no other line that starts with `Node`."""
    at = 0
    while (at := text.find("Node", at)) >= 0:
        if at == 0 or text[at - 1] == "\n":
            i = _run(text, at + 4, _ASCII_SPACE, 1)
            i = _run(text, i, _DIGITS, 1) if i else 0
            i = _run(text, i, _ASCII_SPACE, 1) if i else 0
            if i and text.startswith("MemTotal:", i):
                start = _run(text, i + 9, _ASCII_SPACE, 1)
                end = _run(text, start, _DIGITS, 1) if start else 0
                if end and text.startswith("kB", _run(text, end, _ASCII_SPACE, 0)):
                    return text[start:end]
        at += 4
    return None


_DIGITS = "0123456789"


def _run(text: str, i: int, chars: str, least: int) -> int:
    """The index past the run of `chars` that starts at `i` in `text`; 0 when it is shorter
    than `least` (never a run's end: every run here follows something)."""
    j = i
    n = len(text)
    while j < n and text[j] in chars:
        j += 1
    return j if j - i >= least else 0


def parse_link_speed(text: str) -> float | None:
    """`current_link_speed`/`max_link_speed` in GT/s.

    Formats seen: `8 GT/s` (kernels before 4.17), `8.0 GT/s PCIe` (4.20+, drivers/pci/pci-sysfs.c
    uses pci_speed_string()), `2.5 GT/s`. `Unknown` (link down, or a device that does not
    report: PCI_SPEED_UNKNOWN) returns None.
    """
    t = text.strip()
    if t.lower().startswith("unknown") or t == "":
        return None
    # The former pattern `^\s*([0-9]+(?:\.[0-9]+)?)\s*GT/s(?:\s+PCIe)?\s*$` (no re.ASCII:
    # `\s` was any Unicode space, which is what str.strip() and str.isspace() take). `t` is
    # stripped, so the leading and trailing spaces and `$`'s final newline are gone already.
    number, unit, tail = t.partition("GT/s")
    number = number.rstrip()
    whole, dot, fraction = number.partition(".")
    if not (
        unit
        and whole.isdigit()
        and whole.isascii()  # with isdigit(): is_digits(), inline, as the number is read hot
        and (not dot or (fraction.isdigit() and fraction.isascii()))
        and (not tail or (tail.endswith("PCIe") and tail[:-4].isspace()))
    ):
        raise ParseError(f"not a link speed: {_clip(text)!r}")
    return float(number)


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


def parse_pci_address(text: str) -> PciAddress:
    """`0000:1b:00.0` (sysfs), also NVML's `00000000:1B:00.0` (8-digit domain, upper case)."""
    t = text.strip()
    if not is_pci_address(t):
        raise ParseError(f"not a PCI address: {_clip(text)!r}")
    return PciAddress(int(t[:-8], 16), int(t[-7:-5], 16), int(t[-4:-2], 16), int(t[-1]))


def is_pci_address(name: str) -> bool:
    """`DDDD:BB:DD.F`: a domain of 4 to 8 hex digits, bus and device of 2, a function 0 to 7,
    what the former pattern `^([0-9a-fA-F]{4,8}):([0-9a-fA-F]{2}):([0-9a-fA-F]{2})\\.([0-7])$`
    took, one final newline included (`$` matches before it; parse_pci_address strips it).
    The walk asks this of every directory name with a ':': one translate and one set lookup
    are faster than the compiled pattern, a check per field three times slower."""
    if not name.isascii():
        return False
    shape = name.encode().translate(_AS_HEX)
    if shape in _BDF_SHAPES:
        return name[-1] in _FUNCTIONS
    return shape in _BDF_SHAPES_NEWLINE and name[-2] in _FUNCTIONS


def is_host_bridge_name(name: str) -> bool:
    """`pci0000:00`, and VMD's nested `pci10000:00` domains: the former pattern
    `^pci[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}$`, one final newline included (`$` matches before it)."""
    if not (name.isascii() and name.startswith("pci")):
        return False
    return name.encode().translate(_AS_HEX) in _BRIDGE_SHAPES


# An ASCII name's shape: each hex digit as `h`, `h` itself as `x`, every other byte as it is.
_AS_HEX = bytes.maketrans(b"0123456789abcdefABCDEFh", b"h" * 22 + b"x")
_BDF_SHAPES = frozenset(b"h" * n + b":hh:hh.h" for n in range(4, 9))
_BDF_SHAPES_NEWLINE = frozenset(shape + b"\n" for shape in _BDF_SHAPES)
_FUNCTIONS = frozenset("01234567")
# `pci` is `phi`: its `c` is a hex digit.
_BRIDGE_SHAPES = frozenset(
    b"phi" + b"h" * n + b":hh" + end for n in range(4, 9) for end in (b"", b"\n")
)


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
        mnt = _unescape_octal(parts[1])
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
        mnt = _unescape_octal(lparts[4])
        opts = tuple(rparts[2].split(",")) if len(rparts) > 2 else ()
        out.append((lparts[3], mnt, rparts[0], opts))
    return out


def _unescape_octal(text: str) -> str:
    """Every backslash followed by three octal digits as the character they number, left to
    right, the result not read again (the former `re.sub(r"\\\\([0-7]{3})", ...)`). String code,
    not `re`: discovery reads the mount table (sysfs.read_process_cpus, for a root without
    /proc/self/status), so this runs on `mcpnode topo`'s path."""
    if "\\" not in text:
        return text
    first, *rest = text.split("\\")
    out = [first]
    for piece in rest:
        code = piece[:3]
        if len(code) == 3 and not code.strip("01234567"):
            out.append(chr(int(code, 8)) + piece[3:])
        else:
            out.append("\\" + piece)
    return "".join(out)
