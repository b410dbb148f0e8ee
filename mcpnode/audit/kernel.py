"""Kernel and modules: the NVIDIA modules a GPU host needs, nouveau kept off the GPUs,
GPUDirect RDMA's peer-memory module, BBR when the profile asks for it, and the ACS hint for a
GPU and a NIC under one PCIe switch (read from /proc/modules, /proc/version, /proc/cmdline,
tcp_available_congestion_control, the PCI driver links and the IOMMU groups)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from mcpnode.audit import paths
from mcpnode.audit.context import AuditContext, driver_version_of
from mcpnode.audit.facts import (
    FileRead,
    clip,
    file_evidence,
    list_dir,
    read_file,
    unreadable_finding,
)
from mcpnode.audit.model import Evidence, Finding, Status, skipped
from mcpnode.errors import HostError, McpnodeError
from mcpnode.host import HostReader
from mcpnode.topology.distance import classify
from mcpnode.topology.model import PciAddress
from mcpnode.tuning.values import Exact, Prefer

CC_KEY = "net.ipv4.tcp_congestion_control"
# GPUDirect RDMA: nvidia-peermem ships with the driver since 470; nv_peer_mem is Mellanox's
# older out-of-tree module. Either lets the HCA DMA straight into GPU memory.
PEERMEM_MODULES = ("nvidia_peermem", "nv_peer_mem")
# The other path needs neither: DMA-BUF, which NVIDIA recommends where it is supported (GPU
# Operator, "GPUDirect RDMA and GPUDirect Storage",
# https://docs.nvidia.com/datacenter/cloud-native/gpu-operator/latest/gpu-operator-rdma.html):
# Linux >= 5.12 (ib_umem_dmabuf) and the NVIDIA open GPU kernel modules, which exist since
# R515; NCCL uses it by default then (NCCL_DMABUF_ENABLE=1).
DMABUF_KERNEL = (5, 12)
DMABUF_DRIVER = (515,)


@dataclass(frozen=True)
class SwitchPair:
    """A GPU and an RDMA NIC under one PCIe switch (nvidia-smi's PIX)."""

    gpu: PciAddress
    nic: PciAddress
    nic_name: str  # rdma device (mlx5_0) or netdev, for people
    bridge: PciAddress | None  # their closest common bridge (the switch's downstream side)
    gpu_group: str | None  # iommu_group link name; None when IOMMU is off or unknown
    nic_group: str | None


@dataclass(frozen=True)
class KernelFacts:
    modules: FileRead
    version: FileRead
    cmdline: FileRead
    cc_available: FileRead
    gpu_drivers: tuple[tuple[PciAddress, str | None], ...]  # each GPU's bound driver
    profile_cc: tuple[str, ...] | None  # algorithms the profile wants, None: it sets none
    profile_error: str | None
    bbr_module_files: tuple[str, ...] | None  # tcp_bbr.ko* found, None when not looked
    module_dir: str | None
    iommu_groups: int | None  # number of IOMMU groups; None: directory absent
    switch_pairs: tuple[SwitchPair, ...]
    nvidia_version: FileRead | None = None  # /proc/driver/nvidia/version (open or proprietary)


def loaded_modules(text: str) -> frozenset[str]:
    """`/proc/modules` -> module names (first field; `-` and `_` are the same to the kernel
    and it prints `_`)."""
    return frozenset(
        line.split()[0].replace("-", "_") for line in text.splitlines() if line.split()
    )


def _profile_cc(host: HostReader, ctx: AuditContext) -> tuple[tuple[str, ...] | None, str | None]:
    from mcpnode.tuning.profile import load_profile

    if ctx.profile is None:
        return None, None  # no active profile: none asks for BBR
    try:
        profile = load_profile(
            ctx.profile, host, Path(ctx.profiles_dir) if ctx.profiles_dir else None
        )
    except McpnodeError as err:
        return None, f"{type(err).__name__}: {err}"
    setting = profile.setting(CC_KEY)
    if setting is None:
        return None, None
    desired = setting.desired
    if isinstance(desired, Prefer):
        return desired.prefer, None
    if isinstance(desired, Exact):
        return (desired.text.strip(),), None
    return None, None


def _link_group(host: HostReader, sysfs_path: str) -> str | None:
    try:
        return host.link_name(f"{sysfs_path}/iommu_group")
    except HostError:
        return None


def _switch_pairs(host: HostReader, ctx: AuditContext) -> tuple[SwitchPair, ...]:
    topo = ctx.topology
    out = []
    for gpu in topo.gpus:
        gdev = topo.pci(gpu.address)
        if gdev is None:
            continue
        for nic in topo.nics:
            if nic.is_virtual_function or not nic.rdma_devices:
                continue
            ndev = topo.pci(nic.address)
            if ndev is None or classify(gdev, ndev) != "PIX":
                continue
            common = [a for a, b in zip(gdev.ancestors, ndev.ancestors, strict=False) if a == b]
            out.append(
                SwitchPair(
                    gpu.address,
                    nic.address,
                    nic.rdma_devices[0],
                    common[-1] if common else None,
                    _link_group(host, gdev.sysfs_path),
                    _link_group(host, ndev.sysfs_path),
                )
            )
    return tuple(out)


def collect(host: HostReader, ctx: AuditContext) -> KernelFacts:
    cc = read_file(host, paths.TCP_AVAILABLE_CC)
    profile_cc, profile_error = _profile_cc(host, ctx)
    bbr_files: tuple[str, ...] | None = None
    mod_dir = None
    release = ctx.topology.identity.kernel_release
    wants_bbr = profile_cc is not None and any(a.startswith("bbr") for a in profile_cc)
    if wants_bbr and "bbr" not in (cc.text or "").split() and release:
        # Not registered: is it at least a loadable module of the running kernel?
        mod_dir = paths.module_dir(release)
        names = list_dir(host, mod_dir)
        bbr_files = tuple(n for n in names or () if n.startswith("tcp_bbr."))
    groups = list_dir(host, paths.IOMMU_GROUPS)
    return KernelFacts(
        modules=read_file(host, paths.PROC_MODULES),
        version=read_file(host, paths.PROC_VERSION),
        cmdline=read_file(host, paths.CMDLINE),
        cc_available=cc,
        gpu_drivers=tuple((g.address, g.driver) for g in ctx.topology.gpus),
        profile_cc=profile_cc,
        profile_error=profile_error,
        bbr_module_files=bbr_files,
        module_dir=mod_dir,
        iommu_groups=None if groups is None else len(groups),
        switch_pairs=_switch_pairs(host, ctx),
        nvidia_version=read_file(host, paths.DRIVER_VERSION),
    )


def check(facts: KernelFacts, ctx: AuditContext) -> list[Finding]:
    out: list[Finding] = []
    if facts.version.text:
        out.append(
            Finding(
                "kernel.version",
                Status.INFO,
                f"kernel {ctx.topology.identity.kernel_release or 'release unknown'}",
                (file_evidence(facts.version),),
            )
        )
    out.extend(_nvidia_modules(facts, ctx))
    out.append(_nouveau(facts, ctx))
    out.append(_peermem(facts, ctx))
    out.append(_bbr(facts, ctx))
    out.extend(_acs(facts, ctx))
    return out


def _no_gpu(fid: str, what: str) -> Finding:
    return Finding(
        fid,
        Status.SKIP,
        f"{what} not checked: no NVIDIA GPU on the PCI bus",
        (Evidence(f"{paths.PCI_DEVICES} (NVIDIA GPUs)", "0"),),
    )


def _modules_unknown(fid: str, facts: KernelFacts, ctx: AuditContext, what: str) -> Finding:
    if not facts.modules.missing:
        return unreadable_finding(fid, facts.modules, ctx.is_root, what)
    return Finding(
        fid,
        Status.SKIP,
        f"{what} not checked: {paths.PROC_MODULES} not in this root",
        (file_evidence(facts.modules),),
    )


def _nvidia_modules(facts: KernelFacts, ctx: AuditContext) -> list[Finding]:
    wanted = (
        ("nvidia", "the driver's core module: without it there is no /dev/nvidia* and no NVML"),
        ("nvidia_uvm", "CUDA's unified memory module: cuInit fails without it"),
    )
    out = []
    for name, why in wanted:
        fid = f"kernel.module.{name}"
        if not ctx.has_gpus:
            out.append(_no_gpu(fid, f"module {name}"))
            continue
        if facts.modules.text is None:
            out.append(_modules_unknown(fid, facts, ctx, f"module {name}"))
            continue
        loaded = name in loaded_modules(facts.modules.text)
        ev = (Evidence(paths.PROC_MODULES, f"{name} {'loaded' if loaded else 'not loaded'}"),)
        if loaded:
            out.append(Finding(fid, Status.PASS, f"{name} loaded", ev))
        else:
            modprobe = "nvidia-modprobe -u -c=0" if name == "nvidia_uvm" else "modprobe nvidia"
            out.append(
                Finding(
                    fid,
                    Status.FAIL,
                    f"{name} not loaded with {ctx.gpu_count_sysfs} GPU(s) present: {why}",
                    ev,
                    f"{modprobe}; make it persistent: echo {name} > "
                    f"/etc/modules-load.d/{name}.conf (check `dmesg | grep -i nvrm` if it "
                    "refuses to load)",
                )
            )
    return out


def _nouveau(facts: KernelFacts, ctx: AuditContext) -> Finding:
    fid = "kernel.module.nouveau"
    if not ctx.has_gpus:
        return _no_gpu(fid, "nouveau binding")
    bound = [addr for addr, drv in facts.gpu_drivers if drv == "nouveau"]
    ev = tuple(
        Evidence(f"{paths.PCI_DEVICES}/{addr}/driver", drv or "no driver bound")
        for addr, drv in facts.gpu_drivers
    )
    if bound:
        return Finding(
            fid,
            Status.FAIL,
            f"nouveau drives {len(bound)} GPU(s) ({', '.join(str(a) for a in bound)}): the "
            "NVIDIA driver cannot bind them (DCGM denylist)",
            ev,
            "printf 'blacklist nouveau\\noptions nouveau modeset=0\\n' > "
            "/etc/modprobe.d/blacklist-nouveau.conf; update-initramfs -u (Debian/Ubuntu) or "
            "dracut -f (RHEL); reboot",
        )
    return Finding(fid, Status.PASS, "nouveau bound to no GPU", ev)


def _peermem(facts: KernelFacts, ctx: AuditContext) -> Finding:
    fid = "kernel.module.nvidia_peermem"
    if not ctx.has_gpus:
        return _no_gpu(fid, "GPUDirect RDMA module")
    if not ctx.has_rdma:
        return Finding(
            fid,
            Status.SKIP,
            "GPUDirect RDMA module not checked: no RDMA NIC on this host",
            (Evidence(paths.INFINIBAND_CLASS, "no RDMA devices"),),
        )
    if facts.modules.text is None:
        return _modules_unknown(fid, facts, ctx, "GPUDirect RDMA module")
    loaded = [m for m in PEERMEM_MODULES if m in loaded_modules(facts.modules.text)]
    ev: tuple[Evidence, ...] = (
        Evidence(paths.PROC_MODULES, ", ".join(loaded) or "nvidia_peermem not loaded"),
    )
    if loaded:
        return Finding(fid, Status.PASS, f"GPUDirect RDMA: {loaded[0]} loaded", ev)
    dmabuf, why = dmabuf_path(ctx.topology.identity.kernel_release, facts.nvidia_version)
    ev += (Evidence("DMA-BUF path (kernel >= 5.12, open kernel modules >= R515)", why),)
    if dmabuf:
        return Finding(
            fid,
            Status.PASS,
            f"GPUDirect RDMA through DMA-BUF ({why}): nvidia_peermem is not needed",
            ev,
        )
    return Finding(
        fid,
        Status.WARN,
        "GPUs and RDMA NICs share this host but nvidia_peermem is not loaded and DMA-BUF is "
        f"not available ({why}): NCCL/UCX stage GPU buffers through host memory",
        ev,
        "modprobe nvidia-peermem; make it persistent: echo nvidia-peermem > "
        "/etc/modules-load.d/nvidia-peermem.conf (or move to the open kernel modules on a "
        "kernel >= 5.12 for DMA-BUF)",
    )


def _numbers(text: str | None) -> tuple[int, ...] | None:
    # At most 9 digits a part, ASCII only: a release string is a file's text.
    m = re.match(r"([0-9]{1,9}(?:\.[0-9]{1,9})*)(?![0-9])", text or "")
    return tuple(int(x) for x in m.group(1).split(".")) if m else None


def dmabuf_path(release: str | None, version: FileRead | None) -> tuple[bool, str]:
    """Whether GPUDirect RDMA can go through DMA-BUF here, and what was seen."""
    kernel = _numbers(release)
    text = version.text if version is not None else None
    first = text.splitlines()[0] if text else ""
    is_open = "Open Kernel Module" in first
    driver = _numbers(driver_version_of(text)) if text else None
    parts = [
        f"kernel {release or 'release unknown'}",
        "open kernel modules"
        if is_open
        else ("proprietary modules" if text else "modules unknown"),
        f"driver {'.'.join(map(str, driver)) if driver else 'version not recorded'}",
    ]
    ok = (
        kernel is not None
        and kernel[:2] >= DMABUF_KERNEL
        and is_open
        and driver is not None
        and driver[:1] >= DMABUF_DRIVER
    )
    return ok, ", ".join(parts)


def _bbr(facts: KernelFacts, ctx: AuditContext) -> Finding:
    fid = "kernel.tcp_bbr"
    if facts.profile_error is not None:
        return Finding(
            fid,
            Status.SKIP,
            f"BBR availability not checked: profile {ctx.profile!r} did not load",
            (Evidence(f"profile {ctx.profile}", clip(facts.profile_error)),),
        )
    wants = facts.profile_cc
    if ctx.profile is None:
        return Finding(
            fid,
            Status.SKIP,
            "BBR not checked: no tuning profile is active to ask for it",
            (Evidence("mcpnode profiles active", "none"),),
        )
    if not wants or not any(a.startswith("bbr") for a in wants):
        return Finding(
            fid,
            Status.SKIP,
            f"BBR not checked: profile {ctx.profile!r} does not ask for it",
            (Evidence(f"profile {ctx.profile} {CC_KEY}", " > ".join(wants or ()) or "unset"),),
        )
    read = facts.cc_available
    if read.text is None:
        return Finding(
            fid,
            Status.SKIP,
            f"BBR availability not checked: {read.path} "
            + ("not in this root" if read.missing else f"unreadable ({read.error})"),
            (file_evidence(read),),
        )
    available = read.text.split()
    ev = [Evidence(read.path, " ".join(available))]
    if "bbr" in available or any(a in available for a in wants):
        # Registered: built in or loaded; built in counts (no tcp_bbr in /proc/modules then).
        return Finding(fid, Status.PASS, "BBR available (registered congestion control)", tuple(ev))
    if facts.bbr_module_files:
        ev.append(
            Evidence(facts.module_dir or "module directory", ", ".join(facts.bbr_module_files))
        )
        return Finding(
            fid,
            Status.WARN,
            "BBR is a module that is not loaded: `mcpnode apply` loads it, a reboot forgets it",
            tuple(ev),
            "modprobe tcp_bbr; echo tcp_bbr > /etc/modules-load.d/tcp_bbr.conf",
        )
    if facts.module_dir is not None:
        ev.append(Evidence(facts.module_dir, "no tcp_bbr module"))
    return Finding(
        fid,
        Status.WARN,
        f"profile {ctx.profile!r} wants BBR but this kernel has none (built in or as a "
        "module): the profile falls back",
        tuple(ev),
        "Install a kernel built with CONFIG_TCP_CONG_BBR (upstream since 4.9; most distribution "
        "kernels ship it as the tcp_bbr module, e.g. linux-modules-extra on Ubuntu)",
    )


def _iommu_on(cmdline: str | None) -> tuple[bool, bool, list[str]]:
    """(IOMMU asked for on the command line, passthrough mode, the words)."""
    words = (cmdline or "").split()
    relevant = [w for w in words if w.split("=", 1)[0] in ("intel_iommu", "amd_iommu", "iommu")]
    on = any(w in ("intel_iommu=on", "amd_iommu=on", "iommu=on", "iommu=force") for w in words)
    pt = "iommu=pt" in words
    return on, pt, relevant


def _acs(facts: KernelFacts, ctx: AuditContext) -> list[Finding]:
    """PCIe ACS on a switch's downstream ports redirects peer-to-peer traffic up to the root
    complex (NCCL's troubleshooting guide: "ACS ... redirect all PCI point-to-point traffic to
    the CPU root complex"), which halves or worse GPUDirect RDMA between a GPU and a NIC under
    the same switch. When ACS is on, the kernel puts the two in different IOMMU groups: the
    groups are the visible sign."""
    fid = "kernel.iommu.acs"
    if not facts.switch_pairs:
        return skipped(
            fid,
            "ACS not checked: no GPU shares a PCIe switch with an RDMA NIC",
            Evidence("PCIe topology", "no GPU/NIC pair at PIX distance"),
        )
    on, pt, words = _iommu_on(facts.cmdline.text)
    cmd_ev = Evidence(paths.CMDLINE, " ".join(words) or "no IOMMU options")
    out = []
    for p in facts.switch_pairs:
        subject = f"{p.gpu}<->{p.nic}"
        where = f"GPU {p.gpu} and {p.nic_name} ({p.nic}) under switch port {p.bridge}"
        ev = (
            Evidence(f"{paths.PCI_DEVICES}/{p.gpu}/iommu_group", p.gpu_group or "none"),
            Evidence(f"{paths.PCI_DEVICES}/{p.nic}/iommu_group", p.nic_group or "none"),
            cmd_ev,
        )
        status, summary, remedy = _acs_verdict(p, where, on, pt)
        out.append(Finding(fid, status, summary, ev, remedy, subject))
    return out


def _acs_verdict(p: SwitchPair, where: str, on: bool, pt: bool) -> tuple[Status, str, str | None]:
    """What a GPU/NIC pair under one switch concludes: by their IOMMU groups when the kernel
    made them, else by the IOMMU options on the command line (status, summary, remedy)."""
    if p.gpu_group is not None and p.nic_group is not None:
        if p.gpu_group != p.nic_group:
            return (
                Status.WARN,
                f"{where} sit in different IOMMU groups: ACS redirects their P2P "
                "traffic through the root complex (GPUDirect RDMA slows down)",
                f"On bare metal, disable ACS on the switch's downstream ports: "
                f"`setpci -s {p.bridge} ECAP_ACS+0x6.w=0000` for each port at boot (or "
                "the BIOS PCIe ACS setting), or boot with iommu=pt; in a VM keep ACS "
                "and enable ATS on the NIC instead",
            )
        return (
            Status.PASS,
            f"{where} share IOMMU group {p.gpu_group}: P2P stays in the switch",
            None,
        )
    if on and not pt:
        return (
            Status.INFO,
            f"{where}: the IOMMU is on without passthrough; if ACS is enabled on the "
            "switch, P2P goes through the root complex",
            "Boot with iommu=pt (kernel command line) and check `lspci -vvv | grep "
            "ACSCtl` on the switch ports",
        )
    return Status.PASS, f"{where}: no IOMMU groups (IOMMU off), P2P is not redirected", None
