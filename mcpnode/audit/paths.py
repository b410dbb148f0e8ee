"""Logical paths the audit reads (Host maps them under the root). Named here, in one place,
like topology/sysfs.py and tuning/paths.py, so nothing else spells a /proc or /sys path."""

from __future__ import annotations

MOUNTINFO = "/proc/self/mountinfo"
CMDLINE = "/proc/cmdline"
PROC_VERSION = "/proc/version"
PROC_MODULES = "/proc/modules"
UPTIME = "/proc/uptime"
KMSG = "/dev/kmsg"
DMI_VENDOR = "/sys/class/dmi/id/sys_vendor"
DMI_PRODUCT = "/sys/class/dmi/id/product_name"
CPUINFO = "/proc/cpuinfo"
DRIVER_VERSION = "/proc/driver/nvidia/version"
TCP_AVAILABLE_CC = "/proc/sys/net/ipv4/tcp_available_congestion_control"
NUMA_BALANCING = "/proc/sys/kernel/numa_balancing"
IOMMU_GROUPS = "/sys/kernel/iommu_groups"
PCI_DEVICES = "/sys/bus/pci/devices"
INFINIBAND_CLASS = "/sys/class/infiniband"
CPU_NODE_TOPOLOGY = "/sys/devices/system/{cpu,node}"
CGROUP_ROOT = "/sys/fs/cgroup"


def module_dir(kernel_release: str) -> str:
    """Where the tcp_bbr module of a kernel lives (net/ipv4/tcp_bbr.c)."""
    return f"/lib/modules/{kernel_release}/kernel/net/ipv4"


# What a machine root has for the audit to read; a root with none of them is no machine.
MACHINE_DIRS = ("/sys/devices", "/sys/bus", "/sys/class", "/proc/self", "/proc/sys")
