"""A fake host for tuning tests: `proc/sys` as a plain directory tree plus the few other files
the engine reads (/proc/modules, /proc/self/status, THP, cpufreq, sysctl.d), and profile files.

Plain files behave like sysctls for everything but validation (any text is accepted), which
is what tests of the engine need; `net.*` against a real kernel lives in test_tuning_netns.py.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from mcpnode.tuning.values import fields

ALL_CAPS = "000001ffffffffff"
NO_CAPS = "0000000000000000"

# Values as a 6.x kernel prints them (multi-value fields tab-separated).
SYSCTLS: dict[str, str] = {
    "net.core.somaxconn": "4096",
    "net.core.default_qdisc": "fq_codel",
    "net.core.rmem_max": "212992",
    "net.ipv4.tcp_congestion_control": "cubic",
    "net.ipv4.tcp_available_congestion_control": "reno cubic",
    "net.ipv4.tcp_allowed_congestion_control": "reno cubic",
    "net.ipv4.tcp_rmem": "4096\t131072\t6291456",
    "net.ipv4.tcp_wmem": "4096\t16384\t4194304",
    "net.ipv4.tcp_notsent_lowat": "4294967295",
    "net.ipv4.ip_local_port_range": "32768\t60999",
    "vm.swappiness": "60",
    "vm.max_map_count": "65530",
    "kernel.numa_balancing": "1",
    "kernel.io_uring_disabled": "0",
}

BASE_PROFILE = """\
[profile]
name = "base"
summary = "test base"

[sysctl]
# Kernel default 60; keep the page cache.
"vm.swappiness" = 10
"vm.max_map_count" = { min = 1048576 }
"net.core.somaxconn" = 65535
"""

LATENCY_PROFILE = """\
[profile]
name = "latency"
summary = "test latency"
include = ["base"]

[sysctl]
"net.core.somaxconn" = 8192
"net.ipv4.tcp_rmem" = "4096 131072 16777216"
"net.ipv4.tcp_congestion_control" = { prefer = ["bbr"], fallback = "cubic", load = ["tcp_bbr"] }
"net.ipv4.tcp_notsent_lowat" = 131072
"kernel.numa_balancing" = 0
"kernel.io_uring_disabled" = 0

[vm]
transparent_hugepage = "never"

[cpu]
governor = ["performance", "schedutil"]
"""


def put(root: Path, rel: str, text: str, mode: int | None = None) -> Path:
    p = root / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)
    if mode is not None:
        p.chmod(mode)
    return p


def sysctl_file(root: Path, key: str) -> Path:
    return root / "proc/sys" / key.replace(".", "/")


def set_sysctl(root: Path, key: str, value: str) -> None:
    put(root, "proc/sys/" + key.replace(".", "/"), value + "\n")


def get_sysctl(root: Path, key: str) -> str:
    return sysctl_file(root, key).read_text().rstrip("\n")


def build(
    root: Path,
    *,
    sysctls: dict[str, str] | None = None,
    cap_eff: str = ALL_CAPS,
    euid: int = 0,
    modules: str | None = "tcp_cubic 16384 0 - Live 0x0\n",
    policies: int = 2,
) -> Path:
    """Build the fake host under `root`; returns `root`."""
    for key, value in (SYSCTLS if sysctls is None else sysctls).items():
        set_sysctl(root, key, value)
    put(
        root,
        "proc/self/status",
        f"Name:\tmcpnode\nUid:\t{euid}\t{euid}\t{euid}\t{euid}\nCapEff:\t{cap_eff}\n",
    )
    if modules is not None:
        put(root, "proc/modules", modules)
    put(root, "proc/cmdline", "BOOT_IMAGE=/vmlinuz root=/dev/sda1 quiet\n")
    put(root, "sys/kernel/mm/transparent_hugepage/enabled", "always [madvise] never\n")
    for n in range(policies):
        d = f"sys/devices/system/cpu/cpufreq/policy{n}"
        put(root, f"{d}/scaling_governor", "schedutil\n")
        put(root, f"{d}/scaling_available_governors", "performance powersave schedutil\n")
    (root / "etc/sysctl.d").mkdir(parents=True, exist_ok=True)
    return root


def write_profiles(directory: Path, profiles: dict[str, str] | None = None) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in (profiles or {"base": BASE_PROFILE, "latency": LATENCY_PROFILE}).items():
        (directory / f"{name}.toml").write_text(text)
    return directory


# The state lock file stays once created, by design: unlinking a lock file after use races with
# a run already waiting on it (it would lock the unlinked file while a third locks a new one).
LOCK_FILE = "var/lib/mcpnode/mcpnode.lock"


def tree(root: Path) -> dict[str, tuple[int, bytes | str]]:
    """Every file and directory under `root` with its mode and content (byte-identity checks),
    but the state lock file (LOCK_FILE)."""
    out: dict[str, tuple[int, bytes | str]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            st = p.lstat()
            rel = str(p.relative_to(root))
            if rel == LOCK_FILE:
                continue
            if p.is_symlink():
                out[rel] = (st.st_mode, os.readlink(p))
            elif p.is_file():
                out[rel] = (st.st_mode, p.read_bytes())
            else:
                out[rel] = (st.st_mode, b"")
    return out


def kernel_view(root: Path) -> dict[str, object]:
    """What a kernel would report for the tree: proc/sys and sys values by their fields (a
    restored `4096 131072 6291456` equals the kernel's tab-separated print; an enum file by its
    selected token), every other file (binary attributes too) byte for byte, and no stray
    temporary files."""
    out: dict[str, object] = {}
    for rel, (mode, content) in tree(root).items():
        text = None
        if rel.startswith(("proc/sys/", "sys/")) and isinstance(content, bytes) and content:
            # binary attributes (a PCI device's `config` space) stay bytes: byte for byte
            with contextlib.suppress(UnicodeDecodeError):
                text = content.decode()
        if text is not None:
            out[rel] = fields(text)
        else:
            out[rel] = (mode, content)
    return out
