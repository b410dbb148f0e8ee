"""What the kernel accepts for a sysctl's integers, checked when a profile is read (pure).

The kernel parses sysctl integers with the handler the key registers: proc_dointvec* (C int),
proc_douintvec* (unsigned int), proc_doulongvec* (unsigned long), proc_dou8vec* (u8), some
with a min/max (`extra1`/`extra2`). The widest of them takes an unsigned long, so no integer
field may exceed 64 bits or 20 digits whatever the key; for the keys mcpnode's profiles set,
the handler's own range is known and checked, so `{ min = 10^30 }` or a 4000-digit string fails
at `profiles show` time with the key's range instead of EINVAL halfway through an apply.

Ranges are from the handlers of Linux 6.x (kernel/sysctl.c, fs/file_table.c, fs/file.c,
fs/notify/inotify/inotify_user.c, io_uring/io_uring.c, kernel/sched/core.c,
kernel/time/timer.c, mm/vmstat.c, mm/mmap.c, mm/vmscan.c, net/core/sysctl_net_core.c,
net/ipv4/sysctl_net_ipv4.c) and Documentation/admin-guide/sysctl/*.rst and
Documentation/networking/ip-sysctl.rst.
"""

from __future__ import annotations

import re

INT = (-(1 << 31), (1 << 31) - 1)
UINT = (0, (1 << 32) - 1)
ULONG = (0, (1 << 64) - 1)
# Any integer a sysctl handler can take: proc_get_long() parses an unsigned long with a sign.
ANY = (-(1 << 63), (1 << 64) - 1)
MAX_DIGITS = 20

# key -> (lo, hi) for every field
RANGES: dict[str, tuple[int, int]] = {
    "fs.file-max": ULONG,  # proc_doulongvec_minmax
    "fs.nr_open": (64, 2147483584),  # sysctl_nr_open_min/max on 64-bit (fs/file.c)
    "fs.inotify.max_user_instances": (0, INT[1]),
    "fs.inotify.max_user_watches": (0, INT[1]),
    "kernel.io_uring_disabled": (0, 2),
    "kernel.numa_balancing": (0, 3),  # NUMA_BALANCING_NORMAL | NUMA_BALANCING_MEMORY_TIERING
    "kernel.timer_migration": (0, 1),
    "net.core.netdev_max_backlog": INT,
    "net.core.rmem_max": (0, INT[1]),
    "net.core.wmem_max": (0, INT[1]),
    "net.core.rmem_default": (0, INT[1]),
    "net.core.wmem_default": (0, INT[1]),
    "net.core.somaxconn": (0, INT[1]),
    "net.core.busy_read": (0, INT[1]),
    "net.core.busy_poll": (0, INT[1]),
    "net.ipv4.ip_local_port_range": (1, 65535),
    "net.ipv4.tcp_fastopen": INT,
    "net.ipv4.tcp_max_syn_backlog": INT,
    "net.ipv4.tcp_notsent_lowat": UINT,  # proc_douintvec
    "net.ipv4.tcp_rmem": (1, INT[1]),
    "net.ipv4.tcp_wmem": (1, INT[1]),
    "net.ipv4.tcp_slow_start_after_idle": (0, 1),  # proc_dou8vec_minmax
    "vm.max_map_count": (0, INT[1]),
    "vm.stat_interval": (0, INT[1]),  # proc_dointvec_jiffies, seconds
    "vm.swappiness": (0, 200),  # 0..100 before Linux 5.8
    "vm.overcommit_memory": (0, 2),
    "vm.min_free_kbytes": (0, INT[1]),
    "kernel.threads-max": (0, INT[1]),
}

_INTEGER = re.compile(r"[+-]?[0-9]+\Z", re.ASCII)


def integer_problem(key: str, value: int) -> str | None:
    """Why the kernel would refuse integer `value` for `key`, or None."""
    lo, hi = RANGES.get(key, ANY)
    if lo <= value <= hi:
        return None
    kind = "the key's range" if key in RANGES else "any sysctl integer (64 bits)"
    return f"{_short(value)} is outside {kind} {lo}..{hi}"


def text_problem(key: str, text: str) -> str | None:
    """Why the kernel would refuse one of the whitespace-separated integer fields of `text`
    (words that are not integers, `bbr`, `fq`, are not judged here), or None."""
    for field in text.split():
        if not _INTEGER.match(field):
            continue
        digits = len(field.lstrip("+-").lstrip("0")) or 1
        if digits > MAX_DIGITS:
            return f"{_short(field)} has {digits} digits; no sysctl takes more than {MAX_DIGITS}"
        problem = integer_problem(key, int(field))
        if problem is not None:
            return problem
    return None


def _short(value: int | str) -> str:
    """A number for a one-line message (an integer parsed from TOML has at most 4300 digits,
    CPython's int/str conversion limit, so str() is safe)."""
    text = str(value)
    return text if len(text) <= 24 else f"{text[:10]}... ({len(text.lstrip('+-'))} digits)"
