"""Per-GPU health from the NVML facts discovery gathered: clock event reasons (throttling),
temperature, power limit, applications clocks, PCIe replays, NVLink error counters and the
NVLink count a model should have. Pure; called by audit/gpu.py for each GPU NVML knows.

Thresholds and where they come from:
- throttling: nvmlClocksEventReasons (NVML API, "Clocks Event Reasons"). FAIL on HW slowdown
  0x8, HW thermal slowdown 0x40, HW power brake 0x80 (the hardware protecting itself: a
  thermal, power-supply or board fault); WARN on SW thermal slowdown 0x20 (the driver cooling
  a GPU that runs too hot). GPU idle, SW power cap, sync boost, applications clocks and display
  settings are normal operation (Azure's NHC check_gpu_clock_throttling ignores idle and the
  SW power cap too).
- temperature: FAIL at or above NVML's slowdown threshold (NVML_TEMPERATURE_THRESHOLD_SLOWDOWN:
  where the hardware itself starts to slow the clocks down).
- power: WARN when the enforced limit is below the board's default management limit (someone
  or something capped the GPU: `nvidia-smi -pl`, a BMC or data-center power cap).
- applications clocks: WARN below the maximum clocks (NHC check_app_gpu_clocks sets them to
  the maximum; a lower setting caps every kernel).
- PCIe replays: WARN above 8 per minute, DCGM's limit (DCGM_LIMIT_MAX_PCIREPLAY_RATE, "8
  replays per minute is the maximum recommended by RM"), averaged over the time since boot.
- NVLink: DCGM's health watch (DcgmHealthWatch.cpp) fails on any replay or recovery error
  within its window and on CRC errors at 100 per second or more (DCGM_LIMIT_MAX_NVLINK_CRC_ERROR,
  "RM has informed us that CRC errors only matter at rates of 100+ per second"). The counters
  NVML gives count since the driver loaded, not in a window, so here a replay or recovery error
  since then is a WARN and CRC errors FAIL at 100/s averaged over the time since boot.
- NVLink count: the links each SXM model has (NVIDIA's product briefs: 18 on H100/H200/B200
  SXM, 12 on A100 SXM4 and H100 NVL, 8 on H800/A800, 6 on V100 SXM2); fewer links reported
  FAIL (a link reported but inactive is gpu.nvlink's FAIL).
"""

from __future__ import annotations

import re

from mcpnode.audit.model import Evidence, Finding, Status
from mcpnode.topology.model import Gpu, NvmlGpu

# nvmlClocksEventReason* (nvml.h); ThrottleReasons before R535, same bits
REASON_NAMES: tuple[tuple[int, str], ...] = (
    (0x1, "GpuIdle"),
    (0x2, "ApplicationsClocksSetting"),
    (0x4, "SwPowerCap"),
    (0x8, "HwSlowdown"),
    (0x10, "SyncBoost"),
    (0x20, "SwThermalSlowdown"),
    (0x40, "HwThermalSlowdown"),
    (0x80, "HwPowerBrakeSlowdown"),
    (0x100, "DisplayClockSetting"),
)
REASONS_FAIL = 0x8 | 0x40 | 0x80
REASONS_WARN = 0x20
PCIE_REPLAYS_PER_MINUTE = 8  # DCGM_LIMIT_MAX_PCIREPLAY_RATE
NVLINK_CRC_PER_SECOND = 100.0  # DCGM_LIMIT_MAX_NVLINK_CRC_ERROR

# NVLinks per GPU by NVML product name, first match wins (PCIe boards and VMs without NVLink
# answer NotSupported and are not checked here).
EXPECTED_NVLINKS: tuple[tuple[re.Pattern[str], int], ...] = (
    (re.compile(r"\bH100 NVL\b"), 12),
    (re.compile(r"\bH(100|200|20)\b(?!.*(PCIe|NVL))"), 18),
    (re.compile(r"\bH800\b(?!.*PCIe)"), 8),
    (re.compile(r"\bGB?200\b|\bB200\b|\bB300\b"), 18),
    (re.compile(r"\bA100-SXM"), 12),
    (re.compile(r"\bA800-SXM"), 8),
    (re.compile(r"\bV100-SXM2"), 6),
)


def expected_nvlinks(name: str | None) -> int | None:
    """The NVLink count of an NVML product name, or None when mcpnode has no figure for it."""
    for pattern, count in EXPECTED_NVLINKS:
        if name and pattern.search(name):
            return count
    return None


def reason_names(mask: int) -> str:
    names = [name for bit, name in REASON_NAMES if mask & bit]
    unknown = mask & ~sum(bit for bit, _ in REASON_NAMES)
    if unknown:
        names.append(f"0x{unknown:x}")
    return ", ".join(names) or "none"


def _why(n: NvmlGpu, *facts: str) -> str:
    for fact, reason in n.unavailable:
        if fact in facts:
            return reason
    return "not reported"


def _ev(fn: str, gpu: Gpu, value: object) -> Evidence:
    return Evidence(f"NVML {fn} ({gpu.address})", str(value))


def _f(
    fid: str,
    status: Status,
    gpu: Gpu,
    summary: str,
    ev: tuple[Evidence, ...],
    remedy: str | None = None,
) -> Finding:
    return Finding(fid, status, f"GPU {gpu.index}: {summary}", ev, remedy, str(gpu.address))


def _skip(fid: str, gpu: Gpu, what: str, fn: str, reason: str) -> Finding:
    return _f(fid, Status.SKIP, gpu, f"{what} not checked: NVML {reason}", (_ev(fn, gpu, reason),))


def checks(gpu: Gpu, n: NvmlGpu, uptime_s: float | None) -> list[Finding]:
    """Every health finding of one GPU NVML answered for."""
    out = [_throttle(gpu, n), _temperature(gpu, n), _power(gpu, n), _clocks(gpu, n)]
    out.append(_replays(gpu, n, uptime_s))
    if n.nvlinks:
        out.append(_nvlink_errors(gpu, n, uptime_s))
    count = _nvlink_count(gpu, n)
    if count is not None:
        out.append(count)
    return out


def _throttle(gpu: Gpu, n: NvmlGpu) -> Finding:
    fid, fn = "gpu.throttle", "nvmlDeviceGetCurrentClocksEventReasons"
    mask = n.clocks_event_reasons
    if mask is None:
        return _skip(fid, gpu, "clock event reasons", fn, _why(n, "clocks_event_reasons"))
    ev = (_ev(fn, gpu, f"0x{mask:016x} ({reason_names(mask)})"),)
    if mask & REASONS_FAIL:
        return _f(
            fid,
            Status.FAIL,
            gpu,
            f"clocks held down by the hardware ({reason_names(mask & REASONS_FAIL)}): a "
            "thermal, power-supply or board fault slows every kernel",
            ev,
            "Check cooling and power: `nvidia-smi -q -d PERFORMANCE,TEMPERATURE,POWER -i "
            f"{gpu.address}`; HwPowerBrakeSlowdown is the board's power-brake signal (PSU or "
            "external power alarm); drain the node if it persists",
        )
    if mask & REASONS_WARN:
        return _f(
            fid,
            Status.WARN,
            gpu,
            "clocks reduced by the driver to cool the GPU (SwThermalSlowdown)",
            ev,
            "Check airflow and fan/chassis cooling; "
            f"`nvidia-smi -q -d TEMPERATURE -i {gpu.address}`",
        )
    return _f(fid, Status.PASS, gpu, f"no hardware or thermal slowdown ({reason_names(mask)})", ev)


def _temperature(gpu: Gpu, n: NvmlGpu) -> Finding:
    fid, fn = "gpu.temperature", "nvmlDeviceGetTemperature(GPU)"
    temp = n.temperature_c
    if temp is None:
        return _skip(fid, gpu, "temperature", fn, _why(n, "temperature"))
    slow, shut = n.temperature_slowdown_c, n.temperature_shutdown_c
    value = f"{temp} C; slowdown {f'{slow} C' if slow is not None else 'not reported'}, "
    value += f"shutdown {f'{shut} C' if shut is not None else 'not reported'}"
    ev = (_ev(f"{fn}, nvmlDeviceGetTemperatureThreshold", gpu, value),)
    if slow is None:
        why = _why(n, "temperature_slowdown")
        return _f(
            fid,
            Status.INFO,
            gpu,
            f"{temp} C; slowdown threshold not reported (NVML {why}): gpu.throttle's "
            "HwThermalSlowdown bit is the verdict",
            ev,
        )
    if temp >= slow:
        return _f(
            fid,
            Status.FAIL,
            gpu,
            f"{temp} C, at or above its slowdown threshold {slow} C: the hardware slows the clocks",
            ev,
            "Check the GPU's cooling (fans, airflow, inlet temperature, heatsink contact); "
            "drain the node until it runs below the threshold",
        )
    return _f(fid, Status.PASS, gpu, f"{temp} C, {slow - temp} C below slowdown", ev)


def _power(gpu: Gpu, n: NvmlGpu) -> Finding:
    fid = "gpu.power"
    fn = "nvmlDeviceGetEnforcedPowerLimit/PowerManagementDefaultLimit"
    limit, default = n.power_limit_mw, n.power_default_limit_mw
    if limit is None or default is None:
        reason = _why(n, "power_limit", "power_default_limit")
        return _skip(fid, gpu, "power limit", fn, reason)
    usage = "not reported" if n.power_usage_mw is None else f"{n.power_usage_mw / 1000:g} W"
    value = f"draw {usage}, enforced limit {limit / 1000:g} W, default {default / 1000:g} W"
    ev = (_ev(fn, gpu, value),)
    if limit < default:
        return _f(
            fid,
            Status.WARN,
            gpu,
            f"power limit {limit / 1000:g} W, below the default {default / 1000:g} W: the GPU "
            "is capped",
            ev,
            f"`nvidia-smi -i {gpu.address} -pl {default // 1000}` restores the default unless "
            "a BMC or data-center power cap enforces the lower limit",
        )
    return _f(fid, Status.PASS, gpu, f"power limit {limit / 1000:g} W (the default)", ev)


def _clocks(gpu: Gpu, n: NvmlGpu) -> Finding:
    fid, fn = "gpu.clocks", "nvmlDeviceGetApplicationsClock/MaxClockInfo"
    app_sm, app_mem = n.app_clock_sm_mhz, n.app_clock_mem_mhz
    max_sm, max_mem = n.clock_sm_max_mhz, n.clock_mem_max_mhz
    if None in (app_sm, app_mem, max_sm, max_mem):
        reason = _why(n, "app_clock_sm", "app_clock_mem", "clock_max_sm", "clock_max_mem")
        return _skip(fid, gpu, "applications clocks", fn, reason)
    assert app_sm is not None and app_mem is not None
    assert max_sm is not None and max_mem is not None
    now = (
        f"SM {f'{n.clock_sm_mhz} MHz' if n.clock_sm_mhz is not None else 'not reported'}, "
        f"memory {f'{n.clock_mem_mhz} MHz' if n.clock_mem_mhz is not None else 'not reported'}"
        " now"
    )
    value = (
        f"applications SM {app_sm} / max {max_sm} MHz, memory {app_mem} / max {max_mem} MHz; {now}"
    )
    ev = (_ev(fn, gpu, value),)
    if app_sm < max_sm or app_mem < max_mem:
        return _f(
            fid,
            Status.WARN,
            gpu,
            f"applications clocks SM {app_sm} MHz / memory {app_mem} MHz, below the maximum "
            f"{max_sm} / {max_mem} MHz: every kernel runs slower",
            ev,
            f"`nvidia-smi -i {gpu.address} -ac {max_mem},{max_sm}` (or `-rac` for the defaults)",
        )
    return _f(fid, Status.PASS, gpu, f"applications clocks at the maximum; {now}", ev)


def _replays(gpu: Gpu, n: NvmlGpu, uptime_s: float | None) -> Finding:
    fid, fn = "gpu.pcie.replay", "nvmlDeviceGetPcieReplayCounter"
    count = n.pcie_replay_count
    if count is None:
        return _skip(fid, gpu, "PCIe replays", fn, _why(n, "pcie_replay_count"))
    if uptime_s is None or uptime_s <= 0:
        ev = (_ev(fn, gpu, f"{count} (time since boot unknown)"),)
        if count == 0:
            return _f(fid, Status.PASS, gpu, "no PCIe replays", ev)
        return _f(
            fid,
            Status.WARN,
            gpu,
            f"{count} PCIe replays; the rate is unknown (no /proc/uptime)",
            ev,
            _REPLAY_REMEDY.format(bus=gpu.address),
        )
    rate = count / (uptime_s / 60)
    ev = (_ev(fn, gpu, f"{count} in {uptime_s / 3600:.1f} h = {rate:.3g}/min"),)
    if rate > PCIE_REPLAYS_PER_MINUTE:
        return _f(
            fid,
            Status.WARN,
            gpu,
            f"{rate:.3g} PCIe replays per minute since boot, above DCGM's limit of "
            f"{PCIE_REPLAYS_PER_MINUTE}: the link retransmits, a signal-integrity problem",
            ev,
            _REPLAY_REMEDY.format(bus=gpu.address),
        )
    return _f(fid, Status.PASS, gpu, f"{count} PCIe replays since boot ({rate:.3g}/min)", ev)


_REPLAY_REMEDY = (
    "Reseat the GPU (and its riser or cable) at {bus}; watch `nvidia-smi -q -d PCIE -i {bus}` "
    "(Replays Since Reset) and the AER counters under /sys/bus/pci/devices/{bus}/"
)


def _nvlink_errors(gpu: Gpu, n: NvmlGpu, uptime_s: float | None) -> Finding:
    fid, fn = "gpu.nvlink.errors", "nvmlDeviceGetNvLinkErrorCounter"
    links = n.nvlinks
    if all(x.replay_errors is None and x.crc_flit_errors is None for x in links):
        reason = _why(n, "nvlink0.replay_errors", "nvlink0.crc_flit_errors")
        return _skip(fid, gpu, "NVLink error counters", fn, reason)
    replay = sum(x.replay_errors or 0 for x in links)
    recovery = sum(x.recovery_errors or 0 for x in links)
    crc = sum((x.crc_flit_errors or 0) + (x.crc_data_errors or 0) for x in links)
    bad = [
        x.link
        for x in links
        if (x.replay_errors or 0)
        + (x.recovery_errors or 0)
        + (x.crc_flit_errors or 0)
        + (x.crc_data_errors or 0)
    ]
    value = f"replay {replay}, recovery {recovery}, CRC {crc} over {len(links)} links"
    if bad:
        value += f"; links with errors: {', '.join(str(i) for i in bad)}"
    rate = None if not uptime_s or uptime_s <= 0 else crc / uptime_s
    if rate is not None:
        value += f"; CRC {rate:.3g}/s since boot"
    ev = (_ev(fn, gpu, value),)
    remedy = (
        f"`nvidia-smi nvlink -e -i {gpu.address}` shows the counters per link; reset the GPU "
        f"(or reboot) and watch them; reseat the GPU/baseboard connection if they keep rising"
    )
    if rate is not None and rate >= NVLINK_CRC_PER_SECOND:
        return _f(
            fid,
            Status.FAIL,
            gpu,
            f"NVLink CRC errors at {rate:.3g}/s since boot, at or above DCGM's "
            f"{NVLINK_CRC_PER_SECOND:g}/s",
            ev,
            remedy,
        )
    if replay or recovery:
        return _f(
            fid,
            Status.WARN,
            gpu,
            f"{replay} NVLink replay and {recovery} recovery errors since the driver loaded "
            "(DCGM fails a GPU on any within its watch window)",
            ev,
            remedy,
        )
    return _f(fid, Status.PASS, gpu, "no NVLink replay or recovery errors", ev)


def _nvlink_count(gpu: Gpu, n: NvmlGpu) -> Finding | None:
    fid, fn = "gpu.nvlink.count", "nvmlDeviceGetNvLinkState"
    want = expected_nvlinks(n.name)
    if want is None:
        return None  # no figure for this model: said once in gpu.py's not-applicable list
    if not n.nvlinks:
        reason = _why(n, "nvlink")
        return _f(
            fid,
            Status.SKIP,
            gpu,
            f"NVLink count not checked: NVML reports no NVLink ({reason}): a PCIe board or a "
            "VM without the GPU's links",
            (_ev(fn, gpu, reason),),
        )
    # Links NVML does not report at all; an inactive one is gpu.nvlink's finding.
    present, active = len(n.nvlinks), n.active_links
    ev = (_ev(fn, gpu, f"{present} reported ({active} active); a {n.name} has {want}"),)
    if present < want:
        return _f(
            fid,
            Status.FAIL,
            gpu,
            f"{present} NVLinks reported, fewer than the {want} a {n.name} has: peer bandwidth "
            "is cut by the links missing",
            ev,
            f"`nvidia-smi nvlink -s -i {gpu.address}`; reset the GPU, restart "
            "nvidia-fabricmanager on NVSwitch systems; reseat the GPU or RMA the baseboard if "
            "links stay missing",
        )
    return _f(fid, Status.PASS, gpu, f"{present} of {want} NVLinks present", ev)
