"""Every logical path the tuning engine reads or writes, and the key formats. Which file a key
writes is its subsystem's to say (Subsystem.path_of, tuning/plugins/).

Keys are what profiles and plans name:
- sysctls by their dotted name, `net.core.somaxconn` -> `/proc/sys/net/core/somaxconn`;
- sysfs settings as `section:option[:instance]`: `vm:transparent_hugepage`,
  `cpu:governor:policy0`; kernel modules as `module:NAME` (loaded, never written to a file);
- interrupt affinity as `irq:N` -> `/proc/irq/N/smp_affinity_list`, and irqbalance's banned
  CPUs as `irqbalance:debian` / `irqbalance:redhat` -> its environment file, one fixed file per
  key, so a journal entry can name nothing else.
"""

from __future__ import annotations

import re

SYSCTL_ROOT = "/proc/sys"
PROC_ROOT = "/proc"
PROC_MODULES = "/proc/modules"
PROC_STATUS = "/proc/self/status"
PROC_CMDLINE = "/proc/cmdline"
SYS_MODULE = "/sys/module"  # built-in modules appear here but not in /proc/modules

THP_KEY = "vm:transparent_hugepage"
THP_ENABLED = "/sys/kernel/mm/transparent_hugepage/enabled"
CPUFREQ_DIR = "/sys/devices/system/cpu/cpufreq"
GOVERNOR_KEY = "cpu:governor"
CPUS_KEY = "cpu:cpus"  # which CPUs the per-CPU [cpu] keys touch (tuning/plugins/cpupower.py)
HUGEPAGES_NODES_KEY = "vm:hugepages_nodes"  # where [vm] hugepages go (plugins/hugepages.py)
# PM QoS: held by the agent (Host.hold_cpu_latency), never written to a file or journaled.
FORCE_LATENCY_KEY = "cpu:force_latency"
CPU_DMA_LATENCY = "/dev/cpu_dma_latency"
PM_QOS_NONE = 2000000000  # PM_QOS_CPU_LATENCY_DEFAULT_VALUE: no request

# [irq] (tuning/plugins/irq.py, rps.py). The profile's settings; the plan expands
# IRQ_POLICY_KEY into one `irq:N` item per interrupt.
IRQ_POLICY_KEY = "irq:policy"
IRQBALANCE_KEY = "irq:irqbalance"
IRQ_RPS_KEY = "irq:rps"
SYS_CLASS_NET = "/sys/class/net"
PROC_INTERRUPTS = "/proc/interrupts"
PROC_IRQ = "/proc/irq"
# irqbalance's systemd unit reads one EnvironmentFile: Debian and Ubuntu ship
# /etc/default/irqbalance, Fedora/RHEL/SUSE /etc/sysconfig/irqbalance (irqbalance's own
# misc/irqbalance.service names both, each optional).
IRQBALANCE_FILES = {
    "irqbalance:debian": "/etc/default/irqbalance",
    "irqbalance:redhat": "/etc/sysconfig/irqbalance",
}
_IRQ = re.compile(r"irq:([0-9]{1,6})\Z", re.ASCII)
# `rps:DEV:N`: a network interface name (IFNAMSIZ 16: at most 15 bytes, no '/'), an rx queue.
_RPS = re.compile(r"rps:([A-Za-z0-9_.:@-]{1,15}):([0-9]{1,5})\Z", re.ASCII)

# [housekeeping] (tuning/plugins/housekeeping.py): the profile's setting, and one drop-in per
# confined unit; only these three units, each with its one file.
CONFINE_KEY = "housekeeping:confine"
CONFINABLE = ("system.slice", "user.slice", "init.scope")
HOUSEKEEPING_DROPIN = "50-mcpnode-housekeeping.conf"
# What `systemctl set-property UNIT AllowedCPUs=...` writes; /etc/systemd/system.control wins
# over /etc/systemd/system (systemd.unit(5), unit load path).
SET_PROPERTY_DROPIN = "/etc/systemd/system.control/{unit}.d/50-AllowedCPUs.conf"
SYSTEMD_DROPINS = {
    f"systemd:{unit}": f"/etc/systemd/system/{unit}.d/{HOUSEKEEPING_DROPIN}" for unit in CONFINABLE
}
# [bootloader] (tuning/plugins/bootloader.py): the profile's setting, and one key per way of
# changing the command line, each with the one path it changes (grubby edits the BLS entries itself;
# mcpnode never writes under /boot).
BOOTLOADER_KEY = "bootloader:cmdline"
BOOT_PATHS = {
    "bootloader:grub": "/etc/default/grub.d/90-mcpnode.cfg",
    "bootloader:grubby": "/boot/loader/entries",
    "bootloader:kernelstub": "/etc/kernelstub/configuration",
}
GRUB_KEY = "bootloader:grub"
GRUBBY_KEY = "bootloader:grubby"

TCP_CC = "net.ipv4.tcp_congestion_control"
# Preference lists are resolved against what the kernel lists as available for that key.
AVAILABLE_FROM = {TCP_CC: "net.ipv4.tcp_available_congestion_control"}

PROFILE_DIR_LOCAL = "/etc/mcpnode/profiles"
PERSIST_PATH = "/etc/sysctl.d/90-mcpnode.conf"

# Sysctl names as profiles may write them: dot-separated segments of [a-z0-9_-], so `..`,
# `/`, NUL and absolute paths cannot be expressed: a key resolves strictly under /proc/sys
# (docs/tuning.md). A segment starts with a letter or digit: every name the kernel registers
# does (kernel/sysctl.c, net/*/sysctl_net*.c; interface names under net.*.conf too in
# practice), so `kernel.-` or `vm._` is a typo, not a key.
_SEGMENT = re.compile(r"[a-z0-9][a-z0-9_-]*\Z", re.ASCII)
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
            return f"segment {seg[:40]!r} is not a name (a letter or digit, then [a-z0-9_-])"
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


def irq_affinity_path(irq: int) -> str:
    return f"{PROC_IRQ}/{int(irq)}/smp_affinity_list"


def irq_node_path(irq: int) -> str:
    return f"{PROC_IRQ}/{int(irq)}/node"


def rps_path(dev: str, queue: int) -> str:
    return f"{SYS_CLASS_NET}/{dev}/queues/rx-{int(queue)}/rps_cpus"


def rps_key(dev: str, queue: int) -> str | None:
    """`rps:DEV:N` when `dev` is an acceptable interface name, else None."""
    key = f"rps:{dev}:{int(queue)}"
    return key if _RPS.match(key) and dev not in (".", "..") else None


def rps_queue(key: str) -> tuple[str, int] | None:
    """(DEV, N) of an `rps:DEV:N` key with an acceptable interface name, None for any other."""
    m = _RPS.match(key)
    if m is None or m.group(1) in (".", ".."):
        return None
    return m.group(1), int(m.group(2))


def irq_number(key: str) -> int | None:
    """N of an `irq:N` key, None for any other key."""
    m = _IRQ.match(key)
    return int(m.group(1)) if m is not None else None


_POLICY = re.compile(r"policy[0-9]{1,5}\Z", re.ASCII)


def is_policy(name: str) -> bool:
    return bool(_POLICY.match(name))
