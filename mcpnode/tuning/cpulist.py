"""Linux cpulists (`0-3,8,96-99`) for the tuning engine, which sits beside discovery and does not
import its CpuSet: `/proc/irq/N/smp_affinity_list`, irqbalance's IRQBALANCE_BANNED_CPULIST and
the housekeeping and slice CPUs of a CpuPartition are all in this format. Pure."""

from __future__ import annotations

import re
from collections.abc import Iterable

from mcpnode.codec import bounded

MAX_CPU = bounded.MAX_CPU


def parse(text: str) -> frozenset[int]:
    """`0-3,8` -> {0, 1, 2, 3, 8}; an empty or blank text is the empty set. Raises ValueError
    for anything else (a mask in hex, `N`, a reversed range, ids past MAX_CPU, the `0-15:2/4`
    group form, which irqbalance and smp_affinity_list do not print). Bounded and linear
    (mcpnode/codec/bounded.py)."""
    return bounded.cpulist_ids(text, groups=False)


def format_list(ids: Iterable[int]) -> str:
    """The kernel's list format, ranges collapsed: {0, 1, 2, 8} -> `0-2,8`; empty -> ``."""
    runs: list[tuple[int, int]] = []
    for i in sorted(set(ids)):
        if runs and runs[-1][1] == i - 1:
            runs[-1] = (runs[-1][0], i)
        else:
            runs.append((i, i))
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def parse_mask(text: str) -> frozenset[int]:
    """A kernel CPU bitmap (`rps_cpus`, `smp_affinity`): comma-separated hex words of 32 bits,
    most significant first, `00000000,00000101` -> {0, 2, 32}. Raises ValueError."""
    text = text.strip()
    words = text.split(",") if text else []
    if not words or not all(re.fullmatch(r"[0-9a-fA-F]{1,8}", w, re.ASCII) for w in words):
        raise ValueError(f"not a CPU mask: {text[:60]!r}")
    out: set[int] = set()
    for i, word in enumerate(reversed(words)):
        value = int(word, 16)
        out.update(32 * i + b for b in range(32) if value >> b & 1)
    return frozenset(out)


def format_mask(ids: Iterable[int], groups: int = 1) -> str:
    """`ids` as the kernel prints a bitmap, at least `groups` 32-bit words (zero-padded)."""
    cpus = set(ids)
    n = max(groups, (max(cpus) // 32 + 1) if cpus else 1)
    words = []
    for i in reversed(range(n)):
        value = sum(1 << (c - 32 * i) for c in cpus if 32 * i <= c < 32 * (i + 1))
        words.append(f"{value:08x}")
    return ",".join(words)
