"""A tiny sysfs tree for bad-input tests: one node, two CPUs, one GPU behind a root port, one
NIC. Each test breaks one file of it. (The realistic machines come from
tools/fixturegen/fixturegen.py.)"""

from __future__ import annotations

import os
from pathlib import Path

GPU = "0000:01:00.0"
NIC = "0000:02:00.0"
RP1 = "0000:00:01.0"
RP2 = "0000:00:02.0"
GPU_DIR = f"sys/devices/pci0000:00/{RP1}/{GPU}"
NIC_DIR = f"sys/devices/pci0000:00/{RP2}/{NIC}"


def put(root: Path, rel: str, text: str) -> Path:
    p = root / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)
    return p


def link(root: Path, rel: str, target: str) -> None:
    p = root / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    if p.is_symlink() or p.exists():
        p.unlink()
    os.symlink(target, p)


def _pci(root: Path, rel: str, cls: str, vendor: str, device: str, numa: str) -> None:
    put(root, f"{rel}/class", f"{cls}\n")
    put(root, f"{rel}/vendor", f"{vendor}\n")
    put(root, f"{rel}/device", f"{device}\n")
    put(root, f"{rel}/numa_node", f"{numa}\n")
    put(root, f"{rel}/local_cpulist", "0-1\n")
    put(root, f"{rel}/local_cpus", "00000003\n")
    name = rel.rsplit("/", 1)[-1]
    depth = rel.count("/")
    link(root, f"sys/bus/pci/devices/{name}", "../../../" + rel.removeprefix("sys/"))
    link(root, f"{rel}/subsystem", "../" * depth + "bus/pci")


def build(root: Path) -> Path:
    put(root, "proc/sys/kernel/hostname", "mini\n")
    put(root, "proc/sys/kernel/osrelease", "6.8.0-mini\n")
    put(root, "proc/self/status", "Name:\tx\nCpus_allowed_list:\t0-1\nMems_allowed_list:\t0\n")
    for f, v in (("possible", "0-1"), ("present", "0-1"), ("online", "0-1")):
        put(root, f"sys/devices/system/cpu/{f}", v + "\n")
    for cpu in (0, 1):
        t = f"sys/devices/system/cpu/cpu{cpu}/topology"
        put(root, f"{t}/core_id", f"{cpu}\n")
        put(root, f"{t}/physical_package_id", "0\n")
        put(root, f"{t}/thread_siblings_list", f"{cpu}\n")
    put(root, "sys/devices/system/node/online", "0\n")
    put(root, "sys/devices/system/node/node0/cpulist", "0-1\n")
    put(root, "sys/devices/system/node/node0/distance", "10\n")
    put(root, "sys/devices/system/node/node0/meminfo", "Node 0 MemTotal:       4194304 kB\n")
    for rp in (RP1, RP2):
        _pci(root, f"sys/devices/pci0000:00/{rp}", "0x060400", "0x8086", "0x1234", "0")
    _pci(root, GPU_DIR, "0x030200", "0x10de", "0x2330", "0")
    put(root, f"{GPU_DIR}/current_link_speed", "32.0 GT/s PCIe\n")
    put(root, f"{GPU_DIR}/current_link_width", "16\n")
    put(root, f"{GPU_DIR}/max_link_speed", "32.0 GT/s PCIe\n")
    put(root, f"{GPU_DIR}/max_link_width", "16\n")
    link(root, f"{GPU_DIR}/driver", "../../../../bus/pci/drivers/nvidia")
    _pci(root, NIC_DIR, "0x020000", "0x15b3", "0x1021", "0")
    put(root, f"{NIC_DIR}/net/eth0/operstate", "up\n")
    put(root, f"{NIC_DIR}/net/eth0/mtu", "9000\n")
    put(root, f"{NIC_DIR}/net/eth0/speed", "-1\n")
    (root / NIC_DIR / "infiniband/mlx5_0").mkdir(parents=True)
    return root


def split_into_two_nodes(root: Path) -> None:
    """Node 0 holds CPU 0, node 1 CPU 1 (SLIT 10/21); the devices keep local CPUs 0-1."""
    put(root, "sys/devices/system/node/online", "0-1\n")
    put(root, "sys/devices/system/node/node0/cpulist", "0\n")
    put(root, "sys/devices/system/node/node0/distance", "10 21\n")
    put(root, "sys/devices/system/node/node1/cpulist", "1\n")
    put(root, "sys/devices/system/node/node1/distance", "21 10\n")
