"""Every logical path the tuning engine reads or writes, and the key -> path mapping.

Keys are what profiles and plans name:
- sysctls by their dotted name, `net.core.somaxconn` -> `/proc/sys/net/core/somaxconn`;
- sysfs settings as `section:option[:instance]`: `vm:transparent_hugepage`,
  `cpu:governor:policy0`; kernel modules as `module:NAME` (loaded, never written to a file).
"""

from __future__ import annotations

import re

SYSCTL_ROOT = "/proc/sys"
PROC_MODULES = "/proc/modules"
PROC_STATUS = "/proc/self/status"
PROC_CMDLINE = "/proc/cmdline"
SYS_MODULE = "/sys/module"  # built-in modules appear here but not in /proc/modules

THP_KEY = "vm:transparent_hugepage"
THP_ENABLED = "/sys/kernel/mm/transparent_hugepage/enabled"
CPUFREQ_DIR = "/sys/devices/system/cpu/cpufreq"
GOVERNOR_KEY = "cpu:governor"

TCP_CC = "net.ipv4.tcp_congestion_control"
# Preference lists are resolved against what the kernel lists as available for that key.
AVAILABLE_FROM = {TCP_CC: "net.ipv4.tcp_available_congestion_control"}

PROFILE_DIR_LOCAL = "/etc/mcpnode/profiles"
JOURNAL_PATH = "/var/lib/mcpnode/tuning-journal.json"
PERSIST_PATH = "/etc/sysctl.d/90-mcpnode.conf"

# Sysctl names as profiles may write them: dot-separated segments of [a-z0-9_-], so `..`,
# `/`, NUL and absolute paths cannot be expressed: a key resolves strictly under /proc/sys
# (docs/tuning.md).
_SEGMENT = re.compile(r"[a-z0-9_-]+\Z", re.ASCII)
MAX_KEY_LEN = 255
MODULE_NAME = re.compile(r"[a-z0-9_-]{1,64}\Z", re.ASCII)


def sysctl_key_problem(key: str) -> str | None:
    """Why `key` is not an acceptable sysctl name, or None when it is."""
    if not key:
        return "empty key"
    if len(key) > MAX_KEY_LEN:
        return f"key longer than {MAX_KEY_LEN} characters"
    segments = key.split(".")
    if len(segments) < 2:
        return "a sysctl key has at least two dot-separated segments (e.g. vm.swappiness)"
    for seg in segments:
        if not seg:
            return "empty segment (leading, trailing or doubled '.')"
        if not _SEGMENT.match(seg):
            return f"segment {seg[:40]!r} is not made of [a-z0-9_-]"
    return None


def sysctl_path(key: str) -> str:
    """`/proc/sys/...` of a validated key. Raises ValueError for a key that is not valid."""
    problem = sysctl_key_problem(key)
    if problem is not None:
        raise ValueError(f"{key!r}: {problem}")
    return SYSCTL_ROOT + "/" + key.replace(".", "/")


def is_sysctl_path(path: str) -> bool:
    """True for a logical path strictly below /proc/sys with only valid segments."""
    prefix = SYSCTL_ROOT + "/"
    if not path.startswith(prefix):
        return False
    return sysctl_key_problem(path[len(prefix) :].replace("/", ".")) is None


def governor_path(policy: str) -> str:
    return f"{CPUFREQ_DIR}/{policy}/scaling_governor"


def governors_available_path(policy: str) -> str:
    return f"{CPUFREQ_DIR}/{policy}/scaling_available_governors"


_POLICY = re.compile(r"policy[0-9]{1,5}\Z", re.ASCII)


def is_policy(name: str) -> bool:
    return bool(_POLICY.match(name))


def path_of(key: str) -> str | None:
    """The one file a key writes, or None for keys that write no file (modules) or that are not
    keys at all. The journal checks every entry against this, so a tampered journal cannot aim
    a restore anywhere else."""
    if key == THP_KEY:
        return THP_ENABLED
    if key.startswith(GOVERNOR_KEY + ":"):
        policy = key[len(GOVERNOR_KEY) + 1 :]
        return governor_path(policy) if is_policy(policy) else None
    if ":" in key:
        return None
    return sysctl_path(key) if sysctl_key_problem(key) is None else None
