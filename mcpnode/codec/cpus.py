"""The kernel's two CPU set formats, parsed and printed in one place for every layer: the list
format (`0-3,8,10-11`; `cpulist`, `local_cpulist`, `smp_affinity_list`, irqbalance's banned list,
a manifest's CPUs) and the hex mask (`00000000,0000ffff`; `local_cpus`, `cpumap`, `rps_cpus`,
`smp_affinity`). Pure: text in, frozensets of ids out, and back.

A file can hold anything, so parsing is bounded: at most MAX_CPULIST_BYTES of text, no CPU at or
above the caller's `limit` (the kernel's possible CPUs, else MAX_CPU), and time linear in the
text plus the CPUs it names (a cpulist such as `0-65535,0-65535,…` repeated over a megabyte
costs minutes when each range is expanded as it is met). What differs between callers is
policy, and is a parameter: the possible-CPU `limit`; whether the list format's group form
`0-15:2/4` is accepted (discovery and the manifest accept it; the kernel's interrupt files and
irqbalance never print it, so tuning refuses it); and whether a mask's words must be the
kernel's 32-bit ones (tuning) or may be any width (discovery). Every refusal is a BoundError
(a ValueError) naming the part that is wrong.
"""

from __future__ import annotations

from mcpnode.codec.bounded import BoundError, _clip, is_digits, is_hex

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy reads it the same)
if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = [
    "MAX_CPU",
    "MAX_CPULIST_BYTES",
    "format_list",
    "format_mask",
    "parse_list",
    "parse_mask",
]

# NR_CPUS is at most 8192 on x86_64 distro kernels and 16384 on arm64/ppc64 configs (Linux 6.x,
# arch/*/Kconfig: NR_CPUS range); 65536 leaves room for any machine built so far.
MAX_CPU = 1 << 16
# A sysfs attribute fills at most one page, 64 KiB at most (fs/sysfs/file.c); the longest real
# cpulist (every other CPU of 16384) is about 44 KiB.
MAX_CPULIST_BYTES = 64 << 10
# An id of a list is 1 to 7 ASCII digits: past MAX_CPU, and never a 4,300-digit int().
_ID_DIGITS = 7


def _part(text: str) -> tuple[str, str | None, str | None, str | None] | None:
    """One comma-separated part of a list, `lo`, `lo-hi` or `lo-hi:used/group`, as its ids'
    digits (None for those it lacks); None when it is not one of the three forms (each id 1 to 7
    ASCII digits, nothing else, no whitespace inside). The former pattern
    `([0-9]{1,7})(?:-([0-9]{1,7})(?::([0-9]{1,7})/([0-9]{1,7}))?)?\\Z` with re.ASCII: a text
    of ASCII characters only, so that str.isdigit() is `[0-9]`, in as few calls as it took."""
    if not text.isascii():
        return None
    lo, dash, hi = text.partition("-")
    if not (lo.isdigit() and len(lo) <= _ID_DIGITS):
        return None
    if not dash:
        return lo, None, None, None
    if hi.isdigit() and len(hi) <= _ID_DIGITS:
        return lo, hi, None, None
    hi, _, stride = hi.partition(":")
    used, slash, group = stride.partition("/")
    if slash and is_digits(hi, 1, _ID_DIGITS) and is_digits(used, 1, 7) and is_digits(group, 1, 7):
        return lo, hi, used, group
    return None


def parse_list(text: str, *, limit: int = MAX_CPU, groups: bool = True) -> frozenset[int]:
    """The kernel's list format (`0-3,8,10-11`, and with `groups` the `0-15:2/4` form of
    bitmap_parselist in lib/bitmap.c: the first 2 of every 4) as CPU ids; an empty or blank text
    is the empty set. The `N` shorthand for the last id is refused: it is valid only as kernel
    *input*. Every id is below `limit` (the kernel's possible CPUs, or MAX_CPU).
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
        m = _part(part.strip())
        if m is None or (m[2] is not None and not groups):
            raise BoundError(f"not a cpu list: {_clip(text)}")
        lo = int(m[0])
        hi = int(m[1]) if m[1] is not None else lo
        if hi < lo:
            raise BoundError(f"bad cpu range {part.strip()!r}: reversed")
        if hi >= limit:
            raise BoundError(
                f"cpu {hi} in {part.strip()!r} is past the last possible cpu {limit - 1}"
            )
        if m[2] is None or m[3] is None:
            plain.append((lo, hi))
            continue
        used, group = int(m[2]), int(m[3])
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


def format_list(ids: Iterable[int]) -> str:
    """The kernel's list format, ranges collapsed (Documentation/admin-guide/cputopology.rst):
    {0, 1, 2, 8} -> `0-2,8`; the empty set -> ``."""
    runs: list[tuple[int, int]] = []
    for i in sorted(ids if isinstance(ids, (set, frozenset)) else set(ids)):
        if runs and runs[-1][1] == i - 1:
            runs[-1] = (runs[-1][0], i)
        else:
            runs.append((i, i))
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def parse_mask(text: str, *, limit: int = MAX_CPU, any_width: bool = False) -> frozenset[int]:
    """A kernel CPU bitmap: comma-separated hex words of 32 bits (1 to 8 digits), most
    significant first, `00000000,00000105` -> {0, 2, 8}. With `any_width` the commas are only
    separators and the digits are read as one number, whatever the words' widths (discovery's
    reading, which has always taken `ffffffffff` as CPUs 0-39). Bounded as parse_list: at most
    MAX_CPULIST_BYTES, no CPU at or above `limit`. Raises BoundError."""
    if len(text) > MAX_CPULIST_BYTES:
        raise BoundError(f"cpu mask of {len(text)} bytes (at most {MAX_CPULIST_BYTES})")
    t = text.strip()
    if any_width:
        digits = t.replace(",", "")
        ok = is_hex(digits)
    else:
        words = t.split(",") if t else []
        # One 32-bit word of a bitmap as the kernel prints it (%*pb, lib/bitmap-str.c): the most
        # significant word may have fewer than 8 digits.
        ok = bool(words) and all(is_hex(w, 1, 8) for w in words)
        digits = "".join(w.rjust(8, "0") for w in words) if ok else ""
    if not ok:
        raise BoundError(f"not a hex cpu mask: {_clip(text)}")
    value = int(digits, 16)  # base 16: linear, and no digit cap applies
    limit = min(limit, MAX_CPU)
    over = value >> limit
    if over:
        cpu = limit + (over & -over).bit_length() - 1  # the lowest CPU past the limit
        raise BoundError(f"cpu {cpu} in the mask is past the last possible cpu {limit - 1}")
    bits = f"{value:b}"
    top = len(bits) - 1
    return frozenset(top - i for i, bit in enumerate(bits) if bit == "1")


def format_mask(ids: Iterable[int], words: int = 1) -> str:
    """`ids` as the kernel prints a bitmap: 32-bit words of 8 hex digits, most significant
    first, at least `words` of them (zero-padded): {0, 32} -> `00000001,00000001`."""
    cpus = ids if isinstance(ids, (set, frozenset)) else set(ids)
    n = max(words, (max(cpus) // 32 + 1) if cpus else 1)
    value = sum(1 << c for c in cpus)
    digits = f"{value:0{8 * n}x}"
    return ",".join(digits[i : i + 8] for i in range(0, 8 * n, 8))
