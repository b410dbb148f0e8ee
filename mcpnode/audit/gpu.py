"""GPU health from the NVML facts discovery already gathered (no second pass over NVML): the
subset of DCGM's level-1 "software" diagnostic and Azure's NHC GPU checks that a snapshot can
answer (NVIDIA DCGM `dcgmi diag -r 1`; Azure/azurehpc-health-checks' GPU checks; `nvidia-smi -q`).

Each per-GPU finding carries the GPU's PCI bus id as `subject`. A fact NVML did not give is a
SKIP naming NVML's reason (NotSupported on consumer boards, NoPermission without root), never
a pass and never a fault.
"""

from __future__ import annotations

from dataclasses import dataclass

from mcpnode.audit import gpu_health
from mcpnode.audit.context import AuditContext
from mcpnode.audit.facts import read_file
from mcpnode.audit.model import Evidence, Finding, Status, skipped
from mcpnode.audit.paths import PCI_DEVICES, UPTIME
from mcpnode.host import HostReader
from mcpnode.topology.model import Gpu, NvmlGpu, NvmlState

NO_GPU = "no NVIDIA GPU on the PCI bus"


@dataclass(frozen=True)
class GpuFacts:
    gpus: tuple[Gpu, ...]  # sysfs GPUs with NVML merged
    nvml: NvmlState | None  # None: NVML was not asked
    nvml_only: tuple[NvmlGpu, ...]  # NVML GPUs no sysfs GPU matched (a trimmed dump)
    uptime_s: float | None = None  # /proc/uptime: the window the error counters cover


def uptime_of(text: str | None) -> float | None:
    """The uptime file's first field (seconds since boot, fs/proc/uptime.c); None if garbage."""
    try:
        value = float((text or "").split()[0])
    except (IndexError, ValueError):
        return None
    return value if value > 0 else None


def collect(host: HostReader, ctx: AuditContext) -> GpuFacts:
    topo = ctx.topology
    merged = {g.nvml.index for g in topo.gpus if g.nvml is not None}
    extra = tuple(
        g for g in (topo.nvml.gpus if topo.nvml is not None else ()) if g.index not in merged
    )
    return GpuFacts(topo.gpus, topo.nvml, extra, uptime_of(read_file(host, UPTIME).text))


def _ev(fn: str, gpu: Gpu, value: object) -> Evidence:
    return Evidence(f"NVML {fn} ({gpu.address})", str(value))


def _why(facts: NvmlGpu, *names: str) -> str:
    for fact, reason in facts.unavailable:
        if fact in names:
            return reason
    return "not reported"


def _skip(fid: str, gpu: Gpu, what: str, fn: str, reason: str) -> Finding:
    return Finding(
        fid,
        Status.SKIP,
        f"GPU {gpu.index}: {what} not checked: NVML {reason}",
        (_ev(fn, gpu, reason),),
        None,
        str(gpu.address),
    )


def check(facts: GpuFacts, ctx: AuditContext) -> list[Finding]:
    out: list[Finding] = []
    nvml = facts.nvml
    sysfs_count = len(facts.gpus)
    nvml_ok = nvml is not None and nvml.available
    if sysfs_count == 0 and not (nvml_ok and nvml is not None and nvml.gpus):
        return skipped(
            "gpu.present",
            f"GPU health not checked: {NO_GPU} (NVIDIA class 0x0300/0x0302, vendor 0x10de)",
            Evidence(f"{PCI_DEVICES}/*/{{class,vendor}}", "0 NVIDIA GPUs"),
        )
    if not nvml_ok:
        reason = "NVML was not asked" if nvml is None else (nvml.reason or "unavailable")
        out.append(
            Finding(
                "gpu.nvml",
                Status.FAIL,
                f"NVML unavailable with {sysfs_count} GPU(s) on the bus: {reason}",
                (
                    Evidence("nvmlInit", reason),
                    Evidence(f"{PCI_DEVICES} (NVIDIA GPUs)", str(sysfs_count)),
                ),
                _nvml_remedy(reason),
            )
        )
        out.append(
            Finding(
                "gpu.health",
                Status.SKIP,
                "GPU health (persistence, ECC, row remapping, PCIe, NVLink, fabric) not "
                "checked: NVML unavailable",
                (Evidence("nvmlInit", reason),),
            )
        )
        return out
    assert nvml is not None
    out.append(
        Finding(
            "gpu.nvml",
            Status.PASS,
            f"NVML {nvml.nvml_version or 'version not reported'}, driver "
            f"{nvml.driver_version or 'version not reported'}, "
            f"CUDA {nvml.cuda_driver_version or 'version not reported'}",
            (
                Evidence("nvmlSystemGetDriverVersion", nvml.driver_version or "not reported"),
                Evidence("nvmlSystemGetNVMLVersion", nvml.nvml_version or "not reported"),
            ),
        )
    )
    out.append(_count(facts, nvml))
    for gpu in facts.gpus:
        out.extend(_per_gpu(gpu, facts.uptime_s))
    out.extend(_not_applicable(facts.gpus))
    if facts.gpus and not any(f.id == "gpu.nvlink.count" for f in out):
        names = sorted({g.nvml.name or "unknown model" for g in facts.gpus if g.nvml is not None})
        out.append(
            Finding(
                "gpu.nvlink.count",
                Status.SKIP,
                "NVLink count not checked: no expected count for "
                f"{', '.join(names) or 'these GPUs'} (PCIe boards; set [expect] "
                "nvlinks_per_gpu to check one)",
                (Evidence("nvmlDeviceGetName", ", ".join(names) or "not reported"),),
            )
        )
    return out


def _nvml_remedy(reason: str) -> str:
    if reason.startswith("LibraryNotFound"):
        return "Install the NVIDIA driver (user-space libnvidia-ml.so.1 matching the module)"
    if reason.startswith("DriverNotLoaded"):
        return "modprobe nvidia (and check `dmesg | grep -i nvrm` for why it did not load)"
    if reason.startswith("LibRmVersionMismatch"):
        return (
            "Reboot, or reload the module: rmmod nvidia_uvm nvidia_drm nvidia_modeset nvidia; "
            "modprobe nvidia"
        )
    if reason.startswith("NoPermission"):
        return "Run as root, or give the user access to /dev/nvidia* (the video group)"
    if reason.startswith("NotRecorded"):
        return "Capture the host with `mcpnode snapshot` so NVML answers are recorded"
    return "Check `nvidia-smi` and `dmesg | grep -i nvrm` on the host"


def _count(facts: GpuFacts, nvml: NvmlState) -> Finding:
    sysfs_count = len(facts.gpus)
    nvml_count = len(nvml.gpus)
    ev = (
        Evidence(f"{PCI_DEVICES} (NVIDIA class 0x0300/0x0302)", str(sysfs_count)),
        Evidence("nvmlDeviceGetCount", str(nvml_count)),
    )
    if sysfs_count == nvml_count:
        return Finding("gpu.count", Status.PASS, f"{nvml_count} GPU(s) in sysfs and NVML", ev)
    missing = [str(g.address) for g in facts.gpus if g.nvml is None]
    detail = f"; not seen by NVML: {', '.join(missing)}" if missing else ""
    return Finding(
        "gpu.count",
        Status.FAIL,
        f"{sysfs_count} GPU(s) on the PCI bus but NVML sees {nvml_count}{detail}",
        ev,
        "Check `dmesg | grep -iE 'nvrm|xid'` for GPUs that failed to initialise (XID 79: fell "
        "off the bus); drain the node and reseat or replace the GPU; GPUs bound to vfio-pci "
        "for passthrough are expected to be missing from NVML",
    )


def _per_gpu(gpu: Gpu, uptime_s: float | None = None) -> list[Finding]:
    bus = str(gpu.address)
    n = gpu.nvml
    if n is None:
        return [
            Finding(
                "gpu.health",
                Status.SKIP,
                f"GPU {gpu.index}: health not checked: NVML has no GPU at {bus}",
                (Evidence("nvmlDeviceGetPciInfo", f"no handle for {bus}"),),
                None,
                bus,
            )
        ]
    out: list[Finding] = []
    if n.lost:
        out.append(
            Finding(
                "gpu.lost",
                Status.FAIL,
                f"GPU {gpu.index}: NVML answered GpuIsLost (fell off the bus, XID 79)",
                (_ev("*", gpu, "GpuIsLost"),),
                "Drain the node, collect `nvidia-bug-report.sh`, reboot; reseat or RMA the GPU "
                "if it recurs",
                bus,
            )
        )
    out.append(_persistence(gpu, n))
    out.extend(_remap(gpu, n))
    out.append(_ecc(gpu, n))
    out.extend(_pcie(gpu, n))
    nvlink = _nvlink(gpu, n)
    if nvlink is not None:
        out.append(nvlink)
    fabric = _fabric(gpu, n)
    if fabric is not None:
        out.append(fabric)
    out.extend(gpu_health.checks(gpu, n, uptime_s))
    return out


def _persistence(gpu: Gpu, n: NvmlGpu) -> Finding:
    fid, fn = "gpu.persistence", "nvmlDeviceGetPersistenceMode"
    if n.persistence_mode is None:
        return _skip(fid, gpu, "persistence mode", fn, _why(n, "persistence_mode"))
    if n.persistence_mode:
        return Finding(
            fid,
            Status.PASS,
            f"GPU {gpu.index}: persistence mode on",
            (_ev(fn, gpu, "Enabled"),),
            None,
            str(gpu.address),
        )
    return Finding(
        fid,
        Status.WARN,
        f"GPU {gpu.index}: persistence mode off: the driver tears the GPU down when the last "
        "client exits, so every start pays the initialisation (DCGM_FR_PERSISTENCE_MODE)",
        (_ev(fn, gpu, "Disabled"),),
        "systemctl enable --now nvidia-persistenced  (or, legacy: nvidia-smi -pm 1)",
        str(gpu.address),
    )


def _remap(gpu: Gpu, n: NvmlGpu) -> list[Finding]:
    fid, fn = "gpu.row-remap", "nvmlDeviceGetRemappedRows"
    bus = str(gpu.address)
    if n.remapped_rows_pending is None and n.remapped_rows_failure is None:
        why = _why(n, "remapped_rows")
        if n.mig_current:
            why += " (MIG is enabled: NVML does not report row remapping then)"
        return [_skip(fid, gpu, "row remapping", fn, why)]
    value = (
        f"correctable={n.remapped_rows_correctable} uncorrectable="
        f"{n.remapped_rows_uncorrectable} pending={n.remapped_rows_pending} "
        f"failure={n.remapped_rows_failure}"
    )
    ev = (_ev(fn, gpu, value),)
    out = []
    if n.remapped_rows_failure:
        out.append(
            Finding(
                fid,
                Status.FAIL,
                f"GPU {gpu.index}: row remapping failed: the GPU ran out of spare rows "
                "(DCGM_FR_ROW_REMAP_FAILURE)",
                ev,
                "Drain the node and RMA the GPU: a remapping failure does not clear on reset",
                bus,
            )
        )
    if n.remapped_rows_pending:
        out.append(
            Finding(
                fid,
                Status.FAIL,
                f"GPU {gpu.index}: row remap pending: it takes effect only after a GPU reset "
                "(DCGM_FR_PENDING_ROW_REMAP)",
                ev,
                f"Drain the GPU, then `nvidia-smi -r -i {bus}` (or reboot the node)",
                bus,
            )
        )
    if not out:
        out.append(
            Finding(fid, Status.PASS, f"GPU {gpu.index}: no row remap pending", ev, None, bus)
        )
    return out


def _ecc(gpu: Gpu, n: NvmlGpu) -> Finding:
    fid, fn = "gpu.ecc", "nvmlDeviceGetTotalEccErrors(UNCORRECTED, VOLATILE)"
    bus = str(gpu.address)
    if n.ecc_uncorrected_volatile is None:
        why = _why(n, "ecc_uncorrected_volatile", "ecc_mode")
        if n.ecc_current is False:
            why = "ECC is disabled on this GPU"
        return _skip(fid, gpu, "uncorrectable ECC errors", fn, why)
    ev = (_ev(fn, gpu, n.ecc_uncorrected_volatile),)
    if n.ecc_uncorrected_volatile > 0:
        return Finding(
            fid,
            Status.FAIL,
            f"GPU {gpu.index}: {n.ecc_uncorrected_volatile} uncorrectable ECC error(s) since "
            "the driver loaded",
            ev,
            f"Drain the GPU and reset it (`nvidia-smi -r -i {bus}`) so the row is remapped; "
            "check `nvidia-smi -q -d ECC,ROW_REMAPPER -i " + bus + "` and RMA if they recur",
            bus,
        )
    return Finding(fid, Status.PASS, f"GPU {gpu.index}: no uncorrectable ECC errors", ev, None, bus)


def _pcie(gpu: Gpu, n: NvmlGpu) -> list[Finding]:
    bus = str(gpu.address)
    out = []
    # Width: NVML's max is min(GPU, slot), so current < max is a link that trained narrower
    # than both ends allow: a riser, a dirty or badly seated card. sysfs is the fallback.
    cur, mx = n.pcie_width_current, n.pcie_width_max
    src = "nvmlDeviceGetCurrPcieLinkWidth/MaxPcieLinkWidth"
    if cur is None or mx is None:
        cur, mx = gpu.link.current_width, gpu.link.max_width
        src = f"{PCI_DEVICES}/{bus}/{{current,max}}_link_width"
    if cur is None or mx is None:
        why = _why(n, "pcie_width_current", "pcie_width_max")
        out.append(
            _skip("gpu.pcie.width", gpu, "PCIe link width", "nvmlDeviceGetCurrPcieLinkWidth", why)
        )
    else:
        ev = (Evidence(f"{src} ({bus})", f"x{cur} of x{mx}"),)
        if 0 < cur < mx:
            out.append(
                Finding(
                    "gpu.pcie.width",
                    Status.FAIL,
                    f"GPU {gpu.index}: PCIe link x{cur}, below its maximum x{mx} (downtrained: "
                    "host-to-device bandwidth cut accordingly)",
                    ev,
                    f"Drain the node, reseat the GPU (and riser/cable) at {bus}; confirm with "
                    f"`nvidia-smi -q -d PCIE -i {bus}` and `lspci -vv -s {bus} | grep LnkSta`",
                    bus,
                )
            )
        else:
            out.append(
                Finding(
                    "gpu.pcie.width",
                    Status.PASS,
                    f"GPU {gpu.index}: PCIe link x{cur} of x{mx}",
                    ev,
                    None,
                    bus,
                )
            )
    # Generation: drops with the P-state at idle (P8 -> Gen1; open-gpu-kernel-modules#731), so
    # below max is only worth knowing, never a fault.
    gcur, gmax = n.pcie_gen_current, n.pcie_gen_max
    if gcur is not None and gmax is not None:
        ev = (
            Evidence(
                f"nvmlDeviceGetCurrPcieLinkGeneration/MaxPcieLinkGeneration ({bus})",
                f"Gen{gcur} of Gen{gmax}",
            ),
        )
        if gcur < gmax:
            out.append(
                Finding(
                    "gpu.pcie.gen",
                    Status.INFO,
                    f"GPU {gpu.index}: PCIe Gen{gcur} of Gen{gmax}: normal at idle (the link "
                    "slows down with the P-state); check under load if in doubt",
                    ev,
                    None,
                    bus,
                )
            )
        else:
            out.append(
                Finding(
                    "gpu.pcie.gen",
                    Status.PASS,
                    f"GPU {gpu.index}: PCIe Gen{gcur} of Gen{gmax}",
                    ev,
                    None,
                    bus,
                )
            )
    slot_max, gpu_max = n.pcie_gen_max, n.pcie_gen_gpu_max
    if slot_max is not None and gpu_max is not None and slot_max < gpu_max:
        out.append(
            Finding(
                "gpu.pcie.slot",
                Status.INFO,
                f"GPU {gpu.index}: the slot limits the link to Gen{slot_max} (GPU "
                f"supports Gen{gpu_max})",
                (
                    Evidence(
                        f"nvmlDeviceGetMaxPcieLinkGeneration/GpuMaxPcieLinkGeneration ({bus})",
                        f"Gen{slot_max} / Gen{gpu_max}",
                    ),
                ),
                "Check the slot's generation setting in the BIOS, or move the card to a "
                "faster slot",
                bus,
            )
        )
    return out


def _nvlink(gpu: Gpu, n: NvmlGpu) -> Finding | None:
    if not n.nvlinks:
        return None  # no NVLink on this GPU: said once for all GPUs in _not_applicable
    bus = str(gpu.address)
    down = [x.link for x in n.nvlinks if not x.active]
    value = f"{n.active_links} of {len(n.nvlinks)} active"
    if down:
        value += f"; inactive: {', '.join(str(i) for i in down)}"
    ev = (_ev("nvmlDeviceGetNvLinkState", gpu, value),)
    if down:
        return Finding(
            "gpu.nvlink",
            Status.FAIL,
            f"GPU {gpu.index}: {len(down)} of {len(n.nvlinks)} NVLinks inactive (peer traffic "
            "falls back to fewer links or PCIe)",
            ev,
            f"Check `nvidia-smi nvlink -s -i {bus}` and `nvidia-smi nvlink -e -i {bus}`; reset "
            "the GPUs (or reboot); on an NVSwitch system restart nvidia-fabricmanager; reseat "
            "the bridge on NVLink-bridged PCIe cards",
            bus,
        )
    return Finding("gpu.nvlink", Status.PASS, f"GPU {gpu.index}: {value} NVLinks", ev, None, bus)


def _on_nvswitch(n: NvmlGpu) -> bool:
    return any(x.remote_type == "SWITCH" for x in n.nvlinks)


def _fabric(gpu: Gpu, n: NvmlGpu) -> Finding | None:
    """Hopper+ on NVSwitch systems registers each GPU with Fabric Manager; until the state is
    COMPLETED with status Success, CUDA init fails with error 802 "system not yet initialized"
    (NVIDIA/gpu-operator#2781). NotSupported (PCIe, single GPU, A100) is not unhealthy."""
    bus = str(gpu.address)
    fn = "nvmlDeviceGetGpuFabricInfo"
    if n.fabric_state is None or n.fabric_state == "NOT_SUPPORTED":
        return None  # said once for all GPUs in _not_applicable
    value = f"state={n.fabric_state} status={n.fabric_status}"
    ev = (_ev(fn, gpu, value),)
    remedy = (
        "systemctl restart nvidia-fabricmanager; check `journalctl -u nvidia-fabricmanager` "
        "(the Fabric Manager version must equal the driver's) and `nvidia-smi -q | grep -A2 "
        "Fabric`"
    )
    if n.fabric_state != "COMPLETED":
        return Finding(
            "gpu.fabric",
            Status.FAIL,
            f"GPU {gpu.index}: NVSwitch fabric {n.fabric_state}: CUDA fails with error 802 "
            "(system not yet initialized) until Fabric Manager registers the GPU",
            ev,
            remedy,
            bus,
        )
    if n.fabric_status not in (None, "Success"):
        return Finding(
            "gpu.fabric",
            Status.FAIL,
            f"GPU {gpu.index}: NVSwitch fabric registration failed ({n.fabric_status})",
            ev,
            remedy,
            bus,
        )
    return Finding(
        "gpu.fabric", Status.PASS, f"GPU {gpu.index}: NVSwitch fabric COMPLETED", ev, None, bus
    )


def _not_applicable(gpus: tuple[Gpu, ...]) -> list[Finding]:
    """One SKIP per check that applies to no GPU here, rather than one per GPU."""
    with_nvml = [g for g in gpus if g.nvml is not None]
    if not with_nvml:
        return []
    out = []
    if not any(g.nvml is not None and g.nvml.nvlinks for g in with_nvml):
        out.append(
            Finding(
                "gpu.nvlink",
                Status.SKIP,
                "NVLink not checked: no GPU here has NVLinks (PCIe-only GPUs)",
                (Evidence("nvmlDeviceGetNvLinkState", "NotSupported on every GPU"),),
            )
        )
    reported = [
        g
        for g in with_nvml
        if g.nvml is not None and g.nvml.fabric_state not in (None, "NOT_SUPPORTED")
    ]
    if not reported:
        switch = any(g.nvml is not None and _on_nvswitch(g.nvml) for g in with_nvml)
        reason = (
            "fabric state NotSupported (pre-Hopper NVSwitch systems do not report it)"
            if switch
            else "fabric state NotSupported: not an NVSwitch system (PCIe or single GPU)"
        )
        out.append(
            Finding(
                "gpu.fabric",
                Status.SKIP,
                f"NVSwitch fabric not checked: {reason}",
                (Evidence("nvmlDeviceGetGpuFabricInfo", "NotSupported"),),
            )
        )
    return out
