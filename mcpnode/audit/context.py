"""What every area's collector and checks share: the topology (NVML merged), GPU counts, the
driver version, the cgroup mode, privilege, the tuning profile. Built once per audit."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from mcpnode.audit.expectation import Expectation
from mcpnode.audit.paths import CGROUP_ROOT, DRIVER_VERSION, MOUNTINFO
from mcpnode.audit.xid import XidEvent
from mcpnode.host import HostReader
from mcpnode.state.active import ActiveProfile
from mcpnode.topology.model import CpuSet, Topology
from mcpnode.topology.parse import parse_mountinfo
from mcpnode.tuning.partition import CpuPartition

CgroupMode = Literal["v2", "hybrid", "v1", "unknown"]


@dataclass(frozen=True)
class AuditContext:
    topology: Topology  # NVML facts merged (Gpu.nvml, Topology.nvml)
    gpu_count_sysfs: int  # NVIDIA display/3D controllers on the PCI bus
    gpu_count_nvml: int | None  # None when NVML is unavailable (reason: topology.nvml.reason)
    driver_version: str | None  # NVML's, else /proc/driver/nvidia/version's
    cgroup_mode: CgroupMode
    is_root: bool  # effective uid 0 (recorded in a snapshot; a plain dump counts as root)
    profile: str | None = None  # the tuning profile to check (None: none is active)
    has_rdma: bool = False  # at least one NIC with an RDMA device (mlx5_0, ...)
    profiles_dir: str | None = None  # system profiles directory (None: the shipped ones)
    active: ActiveProfile | None = None  # how `profile` was chosen (None: named by the caller)
    # mcpnode's housekeeping CPUs when the caller planned placement (the manifest build does);
    # None: areas that need them read the published manifest (audit/kubelet.py).
    housekeeping: CpuSet | None = None
    # XIDs the agent received as NVML events (audit/gpu_xid.py uses them when the kernel log
    # cannot be read); empty for a one-shot audit
    observed_xids: tuple[XidEvent, ...] = ()
    # The expected inventory (--expect FILE, the agent's [expect]); None: the expect area looks
    # for an [expect] table in /etc/mcpnode/mcpnode.toml under the root
    expect: Expectation | None = None
    expect_source: str | None = None
    # The housekeeping CPUs and GPU slices `[irq]` is checked against, when the caller planned
    # placement; None: audit/tuning.py reads the published manifest's.
    partition: CpuPartition | None = None
    # Called between areas (audit/run.py): the agent's watchdog ping (agent/notify.py
    # Notifier.keepalive), which must not wait for a whole audit; None for a one-shot audit.
    keepalive: Callable[[], None] | None = None

    @property
    def has_gpus(self) -> bool:
        return self.gpu_count_sysfs > 0 or bool(self.gpu_count_nvml)


def cgroup_mode_of(mountinfo: str) -> tuple[CgroupMode, str]:
    """The cgroup mode the way systemd decides it (cg_unified_cached() in src/basic/
    cgroup-util.c), over the mount table instead of statfs: the file system at /sys/fs/cgroup
    is cgroup2 -> v2; tmpfs with cgroup2 at /sys/fs/cgroup/unified (or, the v232 variant, at
    /sys/fs/cgroup/systemd) -> hybrid; tmpfs with a v1 `cgroup` at /sys/fs/cgroup/systemd ->
    v1. Returns the mode and the evidence (`/sys/fs/cgroup: tmpfs, .../unified: cgroup2`).

    The last mount at a mount point wins: a later mount shadows an earlier one, as statfs
    would see it."""
    fstype: dict[str, str] = {}
    for _root, mnt, fs, _opts in parse_mountinfo(mountinfo):
        fstype[mnt.rstrip("/") or "/"] = fs
    top = fstype.get(CGROUP_ROOT)
    unified = fstype.get(f"{CGROUP_ROOT}/unified")
    sd = fstype.get(f"{CGROUP_ROOT}/systemd")
    seen = ", ".join(
        f"{mnt}: {fs}"
        for mnt, fs in (
            (CGROUP_ROOT, top),
            (f"{CGROUP_ROOT}/unified", unified),
            (f"{CGROUP_ROOT}/systemd", sd),
        )
        if fs is not None
    )
    seen = seen or f"nothing mounted at {CGROUP_ROOT}"
    if top == "cgroup2":
        return "v2", seen
    if top == "tmpfs":
        if unified == "cgroup2" or sd == "cgroup2":
            return "hybrid", seen
        if sd == "cgroup":
            return "v1", seen
    return "unknown", seen


_DRIVER_RE = re.compile(r"Kernel Module(?:\s+for\s+\S+)?\s+([0-9]+(?:\.[0-9]+)+)")


def driver_version_of(text: str) -> str | None:
    """`/proc/driver/nvidia/version` -> "550.54.15". Both shapes: `NVRM version: NVIDIA UNIX
    x86_64 Kernel Module  550.54.15  Tue Mar 5 ...` and the open modules' `NVIDIA UNIX Open
    Kernel Module for x86_64  570.86.15  Release Build ...`."""
    first = text.splitlines()[0] if text else ""
    m = _DRIVER_RE.search(first)
    return m.group(1) if m else None


def build_context(
    host: HostReader,
    topology: Topology,
    profile: str | None = None,
    profiles_dir: str | None = None,
    active: ActiveProfile | None = None,
    housekeeping: CpuSet | None = None,
    *,
    observed_xids: tuple[XidEvent, ...] = (),
) -> AuditContext:
    """The shared facts, from a topology already discovered through `host`. What the caller
    brings on top (an expected inventory, a CPU partition, a keepalive) it sets with
    dataclasses.replace."""
    from mcpnode.audit.facts import read_file

    nvml = topology.nvml
    nvml_count = len(nvml.gpus) if nvml is not None and nvml.available else None
    driver = nvml.driver_version if nvml is not None and nvml.available else None
    if driver is None:
        read = read_file(host, DRIVER_VERSION)
        driver = driver_version_of(read.text) if read.text else None
    mounts = read_file(host, MOUNTINFO)
    mode: CgroupMode = cgroup_mode_of(mounts.text)[0] if mounts.text else "unknown"
    uid = host.effective_uid()
    return AuditContext(
        topology=topology,
        gpu_count_sysfs=len(topology.gpus),
        gpu_count_nvml=nvml_count,
        driver_version=driver,
        cgroup_mode=mode,
        is_root=uid is None or uid == 0,
        profile=profile,
        has_rdma=any(nic.rdma_devices for nic in topology.nics),
        profiles_dir=profiles_dir,
        active=active,
        housekeeping=housekeeping,
        observed_xids=observed_xids,
    )
