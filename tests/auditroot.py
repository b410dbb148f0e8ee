"""Audit fixture roots: a temporary copy of a host fixture (tests/fixtures/hosts/<name>) with
the files the audit reads laid over it, and the NVML failure recordings the GPU checks need.

The committed host trees are never modified: `build()` copies one into a temporary directory,
then writes the overlay (modules, mount table, sysctls, sysctl.d files, driver links, IOMMU
groups) and, when given, replaces the NVML answers in its `mcpnode-snapshot.json`.

NVML recordings for the audit (tests/fixtures/audit/nvml/<case>.json) are generated from
tests/nvmlgen.py's simulation over the committed HGX H100 tree, like tests/fixtures/nvml/:
`python -m tests.auditroot` rewrites them, and a test checks the committed ones are current.
"""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from mcpnode.audit.context import AuditContext, build_context
from mcpnode.audit.model import AuditReport
from mcpnode.audit.run import run_audit
from mcpnode.codec.record import replace
from mcpnode.host import Host
from mcpnode.topology.discover import discover_host
from tests import fixturegen, nvmlgen

HERE = Path(__file__).resolve().parent
HOSTS = HERE / "fixtures" / "hosts"
AUDIT = HERE / "fixtures" / "audit"
AUDIT_NVML = AUDIT / "nvml"
NVML_FAILURES = HERE / "fixtures" / "nvml"
GOLDEN = AUDIT / "golden"

HGX = "hgx-h100-8gpu-8nic"
SICK_GPU = 2  # the GPU each per-GPU failure recording breaks (0000:3a:00.0 on the HGX)


def _hgx_case(change: Callable[[nvmlgen.GpuSpec], nvmlgen.GpuSpec]) -> nvmlgen.NvmlSpec:
    host = fixturegen.hgx_h100_8gpu_8nic()
    spec = nvmlgen.hgx_h100_nvml(host)
    gpus = tuple(change(g) if i == SICK_GPU else g for i, g in enumerate(spec.gpus))
    return replace(spec, gpus=gpus)


def _x8(g: nvmlgen.GpuSpec) -> nvmlgen.GpuSpec:
    assert g.pcie is not None
    gen_cur, gen_max, gen_gpu, _width, width_max = g.pcie
    return replace(g, pcie=(gen_cur, gen_max, gen_gpu, 8, width_max))


def _links_down(g: nvmlgen.GpuSpec) -> nvmlgen.GpuSpec:
    assert g.nvlinks is not None
    links = tuple(replace(x, active=i not in (4, 5)) for i, x in enumerate(g.nvlinks))
    return replace(g, nvlinks=links)


def _one_gpu_missing() -> nvmlgen.NvmlSpec:
    spec = _hgx_case(lambda g: g)
    return replace(spec, gpus=spec.gpus[:-1])  # GPU 7 on the bus, unknown to NVML


def _links_missing(g: nvmlgen.GpuSpec) -> nvmlgen.GpuSpec:
    assert g.nvlinks is not None
    return replace(g, nvlinks=g.nvlinks[:16])  # links 16, 17 answer InvalidArgument: gone


# Recordings generated here (the HGX H100 with one GPU broken each way).
AUDIT_NVML_CASES: dict[str, Callable[[], nvmlgen.NvmlSpec]] = {
    # (correctable, uncorrectable, pending, failure): a remap waiting for a GPU reset
    "remap-pending": lambda: _hgx_case(lambda g: replace(g, remapped_rows=(0, 1, 1, 0))),
    "remap-failure": lambda: _hgx_case(lambda g: replace(g, remapped_rows=(0, 512, 0, 1))),
    "ecc-uncorrected": lambda: _hgx_case(lambda g: replace(g, ecc_uncorrected=(3, 3))),
    "persistence-off": lambda: _hgx_case(lambda g: replace(g, persistence=False)),
    "pcie-x8-on-x16": lambda: _hgx_case(_x8),
    "nvlink-down": lambda: _hgx_case(_links_down),
    "gpu-missing-from-nvml": _one_gpu_missing,
    # clocks, thermal, power (nvmlClocksEventReason bits: HwSlowdown 0x8, SwThermal 0x20)
    "throttle-hw-slowdown": lambda: _hgx_case(
        lambda g: replace(g, clocks_event_reasons=nvmlgen.REASON_HW_SLOWDOWN)
    ),
    "throttle-sw-thermal": lambda: _hgx_case(
        lambda g: replace(g, clocks_event_reasons=nvmlgen.REASON_SW_THERMAL)
    ),
    "temperature-slowdown": lambda: _hgx_case(lambda g: replace(g, temperature=(88, 87, 92))),
    "power-capped": lambda: _hgx_case(lambda g: replace(g, power=(72_000, 500_000, 700_000))),
    "app-clocks-low": lambda: _hgx_case(lambda g: replace(g, app_clocks=(1410, 2619, 1980, 2619))),
    # 5 million replays in the fixtures' three days up: ~1157 per minute
    "pcie-replays": lambda: _hgx_case(lambda g: replace(g, pcie_replays=5_000_000)),
    # (link, counter, value): DL_REPLAY 0, DL_RECOVERY 1, DL_CRC_FLIT 2
    "nvlink-replay-errors": lambda: _hgx_case(
        lambda g: replace(g, nvlink_errors=((3, 0, 12), (3, 1, 2)))
    ),
    "nvlink-crc-storm": lambda: _hgx_case(
        lambda g: replace(g, nvlink_errors=((7, 2, 30_000_000_000),))
    ),
    "nvlink-missing": lambda: _hgx_case(_links_missing),
}


def write_audit_nvml(dest: Path = AUDIT_NVML) -> list[Path]:
    """Record every audit NVML case over the committed HGX tree into `dest/<case>.json`."""
    dest.mkdir(parents=True, exist_ok=True)
    out = []
    for name, make in AUDIT_NVML_CASES.items():
        path = dest / f"{name}.json"
        path.write_text(nvmlgen.nvml_json(nvmlgen.record(HOSTS / HGX, make())["nvml"]))
        out.append(path)
    return out


def nvml_calls(case: str) -> list[dict[str, Any]]:
    """A recording by name: the audit's own, else one of tests/fixtures/nvml/."""
    path = AUDIT_NVML / f"{case}.json"
    if not path.exists():
        path = NVML_FAILURES / f"{case}.json"
    calls: list[dict[str, Any]] = json.loads(path.read_text())["calls"]
    return calls


# -- overlays ----------------------------------------------------------------------------------

MODULE_LINE = "{name} 16384 0 - Live 0x0000000000000000"
HEALTHY_MODULES = ("nvidia", "nvidia_uvm", "nvidia_modeset", "nvidia_peermem", "mlx5_ib")

MOUNTINFO_V2 = """\
28 1 259:2 / / rw,relatime shared:1 - ext4 /dev/nvme0n1p2 rw
22 28 0:21 / /sys rw,nosuid,nodev,noexec shared:7 - sysfs sysfs rw
23 28 0:22 / /proc rw,nosuid,nodev,noexec shared:13 - proc proc rw
31 22 0:27 / /sys/fs/cgroup rw,nosuid,nodev,noexec shared:9 - cgroup2 cgroup2 rw,nsdelegate
"""
# Ubuntu 20.04 / RHEL 8 default: tmpfs at /sys/fs/cgroup, cgroup2 at unified/ for systemd.
MOUNTINFO_HYBRID = """\
28 1 259:2 / / rw,relatime shared:1 - ext4 /dev/nvme0n1p2 rw
22 28 0:21 / /sys rw,nosuid,nodev,noexec shared:7 - sysfs sysfs rw
31 22 0:26 / /sys/fs/cgroup ro,nosuid,nodev,noexec shared:9 - tmpfs tmpfs ro,mode=755
32 31 0:27 / /sys/fs/cgroup/unified rw,nosuid shared:10 - cgroup2 cgroup2 rw,nsdelegate
33 31 0:28 / /sys/fs/cgroup/systemd rw,nosuid shared:11 - cgroup cgroup rw,xattr,name=systemd
35 31 0:30 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid shared:15 - cgroup cgroup rw,cpu,cpuacct
36 31 0:31 / /sys/fs/cgroup/memory rw,nosuid shared:16 - cgroup cgroup rw,memory
"""
# CentOS 7 / systemd.unified_cgroup_hierarchy=0 legacy: no unified/ at all.
MOUNTINFO_V1 = """\
28 1 259:2 / / rw,relatime shared:1 - xfs /dev/sda2 rw
22 28 0:21 / /sys rw,nosuid,nodev,noexec shared:7 - sysfs sysfs rw
31 22 0:26 / /sys/fs/cgroup ro,nosuid,nodev,noexec shared:9 - tmpfs tmpfs ro,mode=755
33 31 0:28 / /sys/fs/cgroup/systemd rw,nosuid shared:11 - cgroup cgroup rw,xattr,name=systemd
35 31 0:30 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid shared:15 - cgroup cgroup rw,cpu,cpuacct
36 31 0:31 / /sys/fs/cgroup/memory rw,nosuid shared:16 - cgroup cgroup rw,memory
"""

# Values that satisfy profiles/base.toml (each key's rule), as the kernel prints them.
BASE_SYSCTLS = {
    "kernel.numa_balancing": "0",
    "kernel.io_uring_disabled": "0",
    "vm.max_map_count": "1048576",
    "vm.swappiness": "10",
    "fs.file-max": "9223372036854775807",
    "fs.nr_open": "1048576",
    "fs.inotify.max_user_watches": "524288",
    "fs.inotify.max_user_instances": "65535",
    "net.core.somaxconn": "65535",
    "net.ipv4.tcp_max_syn_backlog": "8192",
    "net.core.netdev_max_backlog": "10000",
    "net.core.default_qdisc": "fq",
    "net.ipv4.tcp_congestion_control": "bbr",
    "net.ipv4.tcp_available_congestion_control": "reno cubic bbr",
    "net.ipv4.tcp_allowed_congestion_control": "reno cubic bbr",
    "net.ipv4.tcp_slow_start_after_idle": "0",
}
THP = "sys/kernel/mm/transparent_hugepage/enabled"


def sysctl_rel(key: str) -> str:
    return "proc/sys/" + key.replace(".", "/")


def modules_text(names: tuple[str, ...]) -> str:
    return "".join(MODULE_LINE.format(name=n) + "\n" for n in names)


def healthy_files(kernel_release: str = "5.15.0-119-generic") -> dict[str, str]:
    """What a well-kept GPU host shows the audit: the NVIDIA modules and peermem loaded, cgroup
    v2, BBR registered, NUMA balancing off, the base profile applied and persisted."""
    files = {
        "proc/modules": modules_text(HEALTHY_MODULES),
        "proc/self/mountinfo": MOUNTINFO_V2,
        "proc/cmdline": f"BOOT_IMAGE=/vmlinuz-{kernel_release} root=/dev/nvme0n1p2 ro quiet\n",
        "proc/version": f"Linux version {kernel_release} (buildd@lcy02-amd64-001) (gcc 11.4.0) "
        "#129-Ubuntu SMP Fri Aug 2 19:25:20 UTC 2024\n",
        THP: "always [madvise] never\n",
        "etc/sysctl.d/90-mcpnode.conf": "# Generated by mcpnode: do not edit.\n"
        "# profile: base (merged: base)\n",
    }
    for key, value in BASE_SYSCTLS.items():
        files[sysctl_rel(key)] = value + "\n"
    return files


def device_dir(root: Path, address: str) -> Path:
    """The real directory of a PCI function inside a root (bus/pci/devices/X is a link)."""
    return (root / "sys/bus/pci/devices" / address).resolve()


def build(
    tmp: Path,
    host: str = HGX,
    *,
    files: Mapping[str, str | bytes | None] | None = None,
    healthy: bool = True,
    nvml: str | None = None,
    euid: int | None = 0,
    driver: Mapping[str, str] | None = None,
    numa_node: Mapping[str, str] | None = None,
    iommu: Mapping[str, int] | None = None,
    device_files: Mapping[str, Mapping[str, str | bytes]] | None = None,
    commands: Mapping[str, Mapping[str, Any]] | None = None,
    unplug: tuple[str, ...] = (),
) -> Path:
    """A copy of host fixture `host` under `tmp`, with the overlay written:

    files        relative path -> text or bytes (None removes the file); over the healthy set
    nvml         a recording name (nvml_calls) replacing the fixture's NVML answers
    euid         recorded effective uid (None: not recorded, a plain dump)
    driver       PCI address -> driver name its `driver` link is pointed at
    numa_node    PCI address -> text written to its `numa_node`
    iommu        PCI address -> IOMMU group its `iommu_group` link names
    device_files PCI address -> {attribute: content} written in its sysfs directory
    commands     command line -> recorded answer (found, returncode, stdout, stderr, reason)
    unplug       PCI addresses removed as a surprise removal leaves sysfs (the directory and
                 every bus/class link into it)
    """
    root = tmp / host
    shutil.copytree(HOSTS / host, root, symlinks=True)
    meta_path = root / nvmlgen.SNAPSHOT_NAME
    meta: dict[str, Any] = json.loads(meta_path.read_text()) if meta_path.exists() else {}
    release = meta.get("kernel_release") or "5.15.0-119-generic"
    overlay: dict[str, str | bytes | None] = dict(healthy_files(release)) if healthy else {}
    overlay.update(files or {})
    for rel, text in overlay.items():
        path = root / rel
        if text is None:
            path.unlink(missing_ok=True)
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.is_symlink():
            path.unlink()
        if isinstance(text, bytes):
            path.write_bytes(text)
        else:
            path.write_text(text)
    for addr, name in (driver or {}).items():
        link = device_dir(root, addr) / "driver"
        link.unlink(missing_ok=True)
        link.symlink_to(f"../../../../bus/pci/drivers/{name}")
    for addr, text in (numa_node or {}).items():
        (device_dir(root, addr) / "numa_node").write_text(text)
    for addr, attrs in (device_files or {}).items():
        for name, content in attrs.items():
            target = device_dir(root, addr) / name
            target.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(content, bytes):
                target.write_bytes(content)
            else:
                target.write_text(content)
    for addr in unplug:
        shutil.rmtree(device_dir(root, addr))
        tops = [root / t for t in ("sys/bus/pci/devices", "sys/class/net", "sys/class/infiniband")]
        tops += sorted((root / "sys/bus/pci/drivers").glob("*"))
        for d in tops:
            for link in d.iterdir() if d.is_dir() else ():
                if link.is_symlink() and not link.exists():
                    link.unlink()
    if commands:
        meta["commands"] = {**meta.get("commands", {}), **commands}
    for addr, group in (iommu or {}).items():
        (root / "sys/kernel/iommu_groups" / str(group)).mkdir(parents=True, exist_ok=True)
        link = device_dir(root, addr) / "iommu_group"
        link.unlink(missing_ok=True)
        link.symlink_to(f"../../../../kernel/iommu_groups/{group}")
    if nvml is not None:
        meta["nvml"] = {"calls": nvml_calls(nvml)}
    if euid is not None:
        meta["euid"] = euid
    else:
        meta.pop("euid", None)
    meta_path.write_text(json.dumps(meta, indent=1, sort_keys=True) + "\n")
    return root


if __name__ == "__main__":
    for p in write_audit_nvml(Path(sys.argv[1]) if len(sys.argv) > 1 else AUDIT_NVML):
        print(p)


# -- the audit fixtures: one golden JSON each (tests/fixtures/audit/golden/<case>.json) ---------

L40S = "pcie-4x-l40s-2socket"
NO_GPU = "no-gpu-host"
L40S_RELEASE = "6.8.0-45-generic"
DGX = "dgx-a100"
SICK = "0000:3a:00.0"  # GPU 2 of the HGX
SICK_PORT = "0000:39:00.0"  # the switch downstream port above it
SICK_NIC_PORT = "0000:39:01.0"  # and the one above mlx5_2, its PIX neighbour
UP_S = 200_000  # seconds after boot the injected kernel messages carry (of 259200 up)


def kmsg(host: str, *extra: tuple[int, str, int]) -> str:
    """The fixture's boot log (tests/fixturegen.py) with `extra` (seconds, message, priority)
    records after it, as /dev/kmsg shows them."""
    spec = fixturegen.fixture_hosts()[host]
    return fixturegen.boot_log(spec, [(t * 1_000_000, m, p) for t, m, p in extra])


def config_with_acs(host: str, address: str, acs_ctrl: int) -> bytes:
    """A port's config space with its ACS Control register set to `acs_ctrl`."""
    spec = fixturegen.fixture_hosts()[host]
    (f,) = [x for x in fixturegen.pci_functions(spec) if x.address == address]
    return fixturegen.config_space(f, acs_ctrl=acs_ctrl)


def ib(rdma: str, **attrs: str) -> dict[str, str]:
    """Files of port 1 of an RDMA device, relative to its PCI function's directory."""
    return {f"infiniband/{rdma}/ports/1/{k.replace('__', '/')}": v for k, v in attrs.items()}


def answer(stdout: str, returncode: int = 0) -> dict[str, Any]:
    return {"found": True, "returncode": returncode, "stdout": stdout, "stderr": "", "reason": None}


XID_79 = (
    UP_S,
    "NVRM: Xid (PCI:0000:3a:00): 79, pid=311207, name=python3, GPU has fallen off the bus.",
    4,
)
XID_13 = (
    UP_S,
    "NVRM: Xid (PCI:0000:3a:00): 13, pid=311207, name=python3, Graphics SM Warp "
    "Exception on (GPC 0, TPC 1, SM 0): Out Of Range Address",
    4,
)
XID_63 = (
    UP_S,
    "NVRM: Xid (PCI:0000:3a:00): 63, pid='<unknown>', name=<unknown>, Row "
    "Remapper: New row (0x0000000000abcdef) was marked for remapping, reset gpu to "
    "activate.",
    4,
)
SXID_FATAL = (
    UP_S,
    "nvidia-nvswitch2: SXid (PCI:0000:07:00.0): 24007, Fatal, Link 28 "
    "sourcetrack TCEN0 crumbstore ECC DBE Error",
    3,
)
# NVIDIA, "GPU Memory Error Management", the contained-error example with MIG attribution
# (https://docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/index.html), on GPU 2's address
XID_94_MIG = (
    UP_S,
    "NVRM: Xid (PCI:0000:3a:00 GPU-I:05): 94, pid=7194, Contained: CE User Channel (0x9). "
    "RST: No, D-RST: No",
    4,
)
# A GB200's NVLink 5 fatal link event (the R575 format: sub-unit, severity, registers)
XID_149_FATAL = (
    UP_S,
    "NVRM: Xid (PCI:0000:3a:00): 149, NETIR_LINK_EVT  Fatal   XC0 i0 Link 01 (0x021425c6 "
    "0x00000000 0x00000000 0x00000000 0x00000000 0x00000000)",
    4,
)
XID_109 = (
    UP_S,
    "NVRM: Xid (PCI:0000:3a:00): 109, pid=1797828, name=pt_main_thread, Ch 00000008, "
    "errorString CTX SWITCH TIMEOUT, Info 0x58005",
    4,
)
# Linux 4.19 - 5.x name the AER counters with spaces (drivers/pci/pcie/aer.c,
# aer_correctable_error_string before the short names of later kernels)
AER_419_CORRECTABLE = (
    "Receiver Error 0\nBad TLP 0\nBad DLLP 0\nRELAY_NUM Rollover 0\nReplay Timer Timeout 0\n"
    "Advisory Non-Fatal 0\nCorrected Internal Error 0\nHeader Log Overflow 0\n"
    "TOTAL_ERR_COR 0\n"
)
AER_419_FATAL = (
    "Undefined 0\nData Link Protocol 0\nSurprise Down Error 0\nPoisoned TLP 0\n"
    "Flow Control Protocol 0\nCompletion Timeout 0\nCompleter Abort 0\n"
    "Unexpected Completion 0\nReceiver Overflow 0\nMalformed TLP 0\nECRC 0\n"
    "Unsupported Request 0\nACS Violation 0\nUncorrectable Internal Error 0\n"
    "MC Blocked TLP 0\nAtomicOp Egress Blocked 0\nTLP Prefix Blocked Error 0\n"
)
AER_419 = {
    "aer_dev_correctable": AER_419_CORRECTABLE,
    "aer_dev_fatal": AER_419_FATAL + "TOTAL_ERR_FATAL 0\n",
    "aer_dev_nonfatal": AER_419_FATAL + "TOTAL_ERR_NONFATAL 0\n",
}
OPEN_DRIVER = (
    "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.133.20  Release Build  "
    "(dvs-builder@U16-I3-B03-4-3)  Tue Feb 25 10:17:04 UTC 2025\n"
    "GCC version:  gcc version 12.3.0 (Ubuntu 12.3.0-1ubuntu1~22.04)\n"
)
EXPECT_HGX = """\
[expect]
gpu_count = 8
gpu_model = "NVIDIA H100 80GB HBM3"
nvlinks_per_gpu = 18
pcie_gen = 5
pcie_width = 16
nic_count = 8
nic_rate_gbps = 400.0
numa_nodes = 2
driver_min = "570.133.20"
"""
FM_ACTIVE = "systemctl is-active nvidia-fabricmanager"
FM_JOURNAL = "journalctl -u nvidia-fabricmanager -b --no-pager -q -o cat -n 500"

CASES: dict[str, dict[str, Any]] = {
    # GPU host, everything in order: PASS everywhere
    "hgx-healthy": {},
    # GPU health, one cause each (GPU 2 = 0000:3a:00.0 broken in the recording)
    "hgx-remap-pending": {"nvml": "remap-pending"},
    "hgx-remap-failure": {"nvml": "remap-failure"},
    "hgx-ecc-uncorrected": {"nvml": "ecc-uncorrected"},
    "hgx-persistence-off": {"nvml": "persistence-off"},
    "hgx-pcie-x8-on-x16": {"nvml": "pcie-x8-on-x16"},
    "hgx-nvlink-down": {"nvml": "nvlink-down"},
    "hgx-fabric-in-progress": {"nvml": "fabric-in-progress"},
    "hgx-gpu-missing-from-nvml": {"nvml": "gpu-missing-from-nvml"},
    "hgx-nvml-driver-not-loaded": {"nvml": "driver-not-loaded"},
    "h100-nvl-bridges-inactive": {"host": "h100-nvl-pair-inactive"},
    "dgx-a100-fabric-not-supported": {"host": "dgx-a100"},
    "vm-h100-pcie": {"host": "single-gpu-kvm-vm-h100-pcie"},
    # kernel and modules
    "hgx-modules-missing": {"files": {"proc/modules": modules_text(("mlx5_ib", "nouveau"))}},
    "hgx-legacy-peermem": {
        "files": {"proc/modules": modules_text(("nvidia", "nvidia_uvm", "nv_peer_mem"))}
    },
    "hgx-acs-redirect": {
        "iommu": {
            "0000:18:00.0": 40,  # GPU 0 and mlx5_0: separate groups, ACS on
            "0000:19:00.0": 41,
            "0000:2a:00.0": 42,  # GPU 1 and mlx5_1: one group, P2P stays in the switch
            "0000:2b:00.0": 42,
        },
        "files": {"proc/cmdline": "BOOT_IMAGE=/vmlinuz root=/dev/nvme0n1p2 intel_iommu=on\n"},
    },
    "l40s-nouveau-bound": {"host": L40S, "driver": {"0000:41:00.0": "nouveau"}},
    "l40s-gpu-numa-unknown": {"host": L40S, "numa_node": {"0000:41:00.0": "-1\n"}},
    "l40s-bbr-not-loaded": {
        "host": L40S,
        "files": {
            sysctl_rel("net.ipv4.tcp_available_congestion_control"): "reno cubic\n",
            sysctl_rel("net.ipv4.tcp_congestion_control"): "cubic\n",
            f"lib/modules/{L40S_RELEASE}/kernel/net/ipv4/tcp_bbr.ko.zst": "",
        },
    },
    "l40s-bbr-absent": {
        "host": L40S,
        "files": {
            sysctl_rel("net.ipv4.tcp_available_congestion_control"): "reno cubic\n",
            sysctl_rel("net.ipv4.tcp_congestion_control"): "cubic\n",
            f"lib/modules/{L40S_RELEASE}/kernel/net/ipv4/tcp_cubic.ko.zst": "",
        },
    },
    # NUMA and tuning
    "hgx-numa-balancing-on": {"files": {sysctl_rel("kernel.numa_balancing"): "1\n"}},
    "hgx-tuning-drift-override": {
        "files": {
            sysctl_rel("vm.swappiness"): "60\n",
            sysctl_rel("net.core.somaxconn"): "4096\n",
            "etc/sysctl.d/99-local.conf": "# local admin\nvm.swappiness = 60\n",
            "etc/sysctl.d/10-early.conf": "net.core.somaxconn = 4096\n",
        }
    },
    "hgx-not-root": {"euid": 1000},
    # cgroup modes (a host without GPUs: GPU checks SKIP with the reason)
    "nogpu-cgroup-v2": {"host": NO_GPU},
    "nogpu-cgroup-hybrid": {"host": NO_GPU, "files": {"proc/self/mountinfo": MOUNTINFO_HYBRID}},
    "nogpu-cgroup-v1": {"host": NO_GPU, "files": {"proc/self/mountinfo": MOUNTINFO_V1}},
    # a plain dump: nothing the audit reads beyond sysfs, no euid recorded
    "nogpu-bare-dump": {"host": NO_GPU, "healthy": False, "euid": None},
    # -- health: one failure each, on GPU 2 (0000:3a:00.0) or its neighbours ------------------
    # XIDs and SXIDs in the kernel log (dev/kmsg)
    "hgx-xid-79": {"files": {"dev/kmsg": kmsg(HGX, XID_79)}},
    "hgx-xid-13": {"files": {"dev/kmsg": kmsg(HGX, XID_13)}},
    "hgx-xid-63-resolved": {"files": {"dev/kmsg": kmsg(HGX, XID_63)}},
    "hgx-xid-63-pending": {"files": {"dev/kmsg": kmsg(HGX, XID_63)}, "nvml": "remap-pending"},
    "hgx-sxid-fatal": {"files": {"dev/kmsg": kmsg(HGX, SXID_FATAL)}},
    "hgx-xid-mig-94": {"files": {"dev/kmsg": kmsg(HGX, XID_94_MIG)}},
    "hgx-xid-149-fatal": {"files": {"dev/kmsg": kmsg(HGX, XID_149_FATAL)}},
    "hgx-xid-109-nhc": {
        "files": {
            "dev/kmsg": kmsg(HGX, XID_109),
            "etc/mcpnode/mcpnode.toml": '[audit.xid]\npolicy = "nhc"\n',
        }
    },
    "hgx-kmsg-absent": {"files": {"dev/kmsg": None}},
    # clocks, thermal, power (NVML)
    "hgx-throttle-hw-slowdown": {"nvml": "throttle-hw-slowdown"},
    "hgx-throttle-sw-thermal": {"nvml": "throttle-sw-thermal"},
    "hgx-temperature-slowdown": {"nvml": "temperature-slowdown"},
    "hgx-power-capped": {"nvml": "power-capped"},
    "hgx-app-clocks-low": {"nvml": "app-clocks-low"},
    # PCIe: replays (NVML), AER counters (sysfs, on the GPU's port), a NIC trained x8
    "hgx-pcie-replays": {"nvml": "pcie-replays"},
    "hgx-aer-fatal": {
        "device_files": {SICK_PORT: {"aer_dev_fatal": fixturegen.aer_text("fatal", {"DLP": 1})}}
    },
    "hgx-aer-correctable": {
        "device_files": {
            SICK: {"aer_dev_correctable": fixturegen.aer_text("correctable", {"BadTLP": 3_000_000})}
        }
    },
    "hgx-aer-linux-4.19": {"device_files": {SICK: AER_419, SICK_PORT: AER_419}},
    "hgx-nic-x8": {"device_files": {"0000:5e:00.0": {"current_link_width": "8\n"}}},
    # NVLink: error counters, links missing
    "hgx-nvlink-replay-errors": {"nvml": "nvlink-replay-errors"},
    "hgx-nvlink-crc-storm": {"nvml": "nvlink-crc-storm"},
    "hgx-nvlink-missing": {"nvml": "nvlink-missing"},
    # InfiniBand ports: one DOWN, one flapping with symbol errors, one trained at HDR
    "hgx-ib-port-down": {
        "device_files": {
            "0000:2b:00.0": ib(
                "mlx5_1", state="1: DOWN\n", phys_state="3: Disabled\n", rate="10 Gb/sec (4X SDR)\n"
            )
        }
    },
    "hgx-ib-flapping": {
        "device_files": {
            "0000:19:00.0": ib("mlx5_0", counters__link_downed="3\n", counters__symbol_error="17\n")
        }
    },
    "hgx-ib-rate-low": {
        "device_files": {"0000:3b:00.0": ib("mlx5_2", rate="200 Gb/sec (4X HDR)\n")}
    },
    # PCIe ACS: Linux's default ACS on GPU 2's and mlx5_2's switch ports, bare metal; and on
    # the L40S's root ports inside a VM
    "hgx-acs-enabled": {
        "device_files": {
            a: {"config": config_with_acs(HGX, a, fixturegen.ACS_LINUX_DEFAULT)}
            for a in (SICK_PORT, SICK_NIC_PORT)
        }
    },
    "l40s-vm-acs-enabled": {
        "host": L40S,
        "files": {
            "sys/class/dmi/id/sys_vendor": "QEMU\n",
            "sys/class/dmi/id/product_name": "Standard PC (Q35 + ICH9, 2009)\n",
        },
        "device_files": {
            a: {"config": config_with_acs(L40S, a, fixturegen.ACS_LINUX_DEFAULT)}
            for a in ("0000:40:01.1", "0000:60:01.1")
        },
    },
    # GPUDirect RDMA through DMA-BUF: no nvidia_peermem, open kernel modules, kernel 5.15
    "hgx-dmabuf": {
        "files": {
            "proc/modules": modules_text(("nvidia", "nvidia_uvm", "nvidia_modeset", "mlx5_ib")),
            "proc/driver/nvidia/version": OPEN_DRIVER,
        }
    },
    # expected inventory: met; a GPU gone from sysfs and NVML alike; an invalid table
    "hgx-expect-met": {"files": {"etc/mcpnode/mcpnode.toml": EXPECT_HGX}},
    "hgx-gpu-gone": {
        "files": {"etc/mcpnode/mcpnode.toml": EXPECT_HGX},
        "nvml": "gpu-missing-from-nvml",
        "unplug": ("0000:db:00.0",),
    },
    "hgx-expect-unmet": {
        "files": {
            "etc/mcpnode/mcpnode.toml": '[expect]\ngpu_model = "NVIDIA H200"\n'
            "nvlinks_per_gpu = 36\npcie_gen = 6\npcie_width = 32\nnic_count = 10\n"
            'numa_nodes = 4\ndriver_min = "575"\n'
        }
    },
    "hgx-expect-invalid": {
        "files": {"etc/mcpnode/mcpnode.toml": "[expect]\ngpu_count = 8\ngpus = 8\n"}
    },
    # Fabric Manager on an A100 NVSwitch system (no NVML fabric state there)
    "dgx-a100-fabricmanager-active": {
        "host": DGX,
        "commands": {
            FM_ACTIVE: answer("active\n"),
            FM_JOURNAL: answer(
                "Successfully configured all the available GPUs and NVSwitches to route "
                "NVLink traffic.\n"
            ),
        },
    },
    "dgx-a100-fabricmanager-failed": {
        "host": DGX,
        "commands": {FM_ACTIVE: answer("failed\n", 3), FM_JOURNAL: answer("")},
    },
}


def build_case(tmp: Path, name: str) -> Path:
    kwargs = dict(CASES[name])
    host = kwargs.pop("host", HGX)
    return build(tmp, host, **kwargs)


def audit_case(tmp: Path, name: str, **kwargs: Any) -> AuditReport:
    """The AuditReport of a case (the container area skipped unless asked for)."""
    kwargs.setdefault("skip", ["container"])
    with Host(build_case(tmp, name)) as host:
        return run_audit(host, **kwargs)


def statuses(report: AuditReport, finding_id: str) -> dict[str | None, str]:
    """subject -> status value of every finding with this id."""
    return {f.subject: f.status.value for f in report.findings if f.id == finding_id}


def context(host: str = NO_GPU, **overrides: Any) -> AuditContext:
    """An AuditContext over a committed host fixture's topology (NVML replayed), for checks
    tested on facts built by hand, checking profile "base"; `overrides` replace fields
    (is_root=False, profile=None, ...)."""
    with Host(HOSTS / host) as h:
        ctx = build_context(h, discover_host(h), "base")
    return replace(ctx, **overrides)
