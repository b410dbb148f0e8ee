"""Numbers and CPU lists from files, parsed with bounds: pure codecs every layer may use.

A file can hold anything. Python's `int()` turns 4,300 digits into a ValueError of its own and
fewer into numbers no kernel answers; a cpulist such as `0-65535,0-65535,…` repeated over a
megabyte costs minutes when each range is expanded as it is met. Here a decimal is at most
`max_digits` digits, and a cpulist is at most MAX_CPULIST_BYTES, names no CPU at or above its
`limit`, and is parsed in time linear in its length plus the CPUs it names: plain ranges are
merged before they are expanded, and stride groups (`0-15:2/4`) share one budget of ids.
"""

from __future__ import annotations

import re

__all__ = [
    "MAX_CPU",
    "MAX_CPULIST_BYTES",
    "BoundError",
    "cpulist_ids",
    "parse_decimal",
]

# NR_CPUS is at most 8192 on x86_64 distro kernels and 16384 on arm64/ppc64 configs (Linux 6.x,
# arch/*/Kconfig: NR_CPUS range); 65536 leaves room for any machine built so far.
MAX_CPU = 1 << 16
# A sysfs attribute fills at most one page, 64 KiB at most (fs/sysfs/file.c); the longest real
# cpulist (every other CPU of 16384) is about 44 KiB.
MAX_CPULIST_BYTES = 64 << 10
_PART = re.compile(r"([0-9]{1,7})(?:-([0-9]{1,7})(?::([0-9]{1,7})/([0-9]{1,7}))?)?\Z", re.ASCII)
_DECIMAL = re.compile(r"-?[0-9]+\Z", re.ASCII)


class BoundError(ValueError):
    """Text that is not the format asked for, or is past a bound; the message says which."""


def _clip(text: str, limit: int = 60) -> str:
    t = text.strip()
    return repr(t if len(t) <= limit else t[:limit] + "…")


def parse_decimal(
    text: str, *, max_digits: int = 20, minimum: int | None = None, maximum: int | None = None
) -> int:
    """A decimal integer (optional `-`, ASCII digits, surrounding whitespace allowed), at most
    `max_digits` digits (20: every 64-bit value) and inside [minimum, maximum] when given.
    Raises BoundError."""
    t = text.strip()
    if not _DECIMAL.match(t):
        raise BoundError(f"not an integer: {_clip(text)}")
    if len(t.lstrip("-")) > max_digits:
        raise BoundError(f"integer of {len(t.lstrip('-'))} digits (at most {max_digits})")
    value = int(t)
    if minimum is not None and value < minimum:
        raise BoundError(f"{value} is below {minimum}")
    if maximum is not None and value > maximum:
        raise BoundError(f"{value} is above {maximum}")
    return value


def cpulist_ids(text: str, *, limit: int = MAX_CPU, groups: bool = True) -> frozenset[int]:
    """The kernel's list format (`0-3,8,10-11`, and with `groups` the `0-15:2/4` form of
    bitmap_parselist in lib/bitmap.c: the first 2 of every 4) as CPU ids; an empty or blank text
    is the empty set. Every id is below `limit` (the kernel's possible CPUs, or MAX_CPU).
    Raises BoundError naming the part that is wrong."""
    if len(text) > MAX_CPULIST_BYTES:
        raise BoundError(f"cpu list of {len(text)} bytes (at most {MAX_CPULIST_BYTES})")
    t = text.strip()
    if not t:
        return frozenset()
    limit = min(limit, MAX_CPU)
    plain: list[tuple[int, int]] = []
    strided: set[tuple[int, int, int, int]] = set()
    for part in t.split(","):
        m = _PART.match(part.strip())
        if m is None or (m.group(3) is not None and not groups):
            raise BoundError(f"not a cpu list: {_clip(text)}")
        lo = int(m.group(1))
        hi = int(m.group(2)) if m.group(2) is not None else lo
        if hi < lo:
            raise BoundError(f"bad cpu range {part.strip()!r}: reversed")
        if hi >= limit:
            raise BoundError(
                f"cpu {hi} in {part.strip()!r} is past the last possible cpu {limit - 1}"
            )
        if m.group(3) is None:
            plain.append((lo, hi))
            continue
        used, group = int(m.group(3)), int(m.group(4))
        if used == 0 or group == 0 or used > group:
            raise BoundError(f"bad cpu range stride {part.strip()!r}")
        strided.add((lo, hi, used, group))
    out: set[int] = set()
    plain.sort()
    start, end = -1, -2
    for lo, hi in plain:  # merged first: a range repeated 10,000 times is expanded once
        if lo <= end + 1:
            end = max(end, hi)
            continue
        if end >= start >= 0:
            out.update(range(start, end + 1))
        start, end = lo, hi
    if end >= start >= 0:
        out.update(range(start, end + 1))
    budget = 4 * limit  # distinct stride groups may overlap; their work is bounded all together
    for lo, hi, used, group in sorted(strided):
        for base in range(lo, hi + 1, group):
            budget -= used
            if budget < 0:
                raise BoundError(f"cpu list {_clip(text)} names too many cpus")
            out.update(range(base, min(base + used, hi + 1)))
    return frozenset(out)
