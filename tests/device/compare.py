"""nvidia-smi against mcpnode on a real GPU host; run by tests/device/check.sh.

    python3 -m tests.device.compare topo NVSMI_TOPO_M MCPNODE_TOPO
    python3 -m tests.device.compare gpus NVSMI_Q_XML MCPNODE_GPUS_JSON [--nvlink NVLINK_S]
    python3 -m tests.device.compare health NVSMI_Q_XML MCPNODE_GPUS_JSON
    python3 -m tests.device.compare p2p NVSMI_TOPO_P2P_R MCPNODE_TOPO_P2P
    python3 -m tests.device.compare replay SNAPSHOT
    python3 -m tests.device.compare audits LIVE_AUDIT_JSON REPLAYED_AUDIT_JSON

`topo`: both matrices parsed by tests/support/nvsmi.py, GPUs matched by index (GPU0..), NICs by
their legend name (NIC0 -> mlx5_0), every differing cell printed, then CPU Affinity, NUMA Affinity
and GPU NUMA ID per GPU row. nvidia-smi intersects CPU Affinity with the caller's cpuset (an empty
cell inside a 1-CPU Slurm job: tests/fixtures/nvidia-smi/h200-8gpu-10nic-slurm-cgroup.txt) while
mcpnode reports the device's locality, so a CPU Affinity that equals mcpnode's clipped to this
process's CPUs is a note, not a difference.

`gpus`: `nvidia-smi -q -x` (and `nvidia-smi nvlink -s` text for NVLink) against
`mcpnode gpus --format json`, GPUs matched by PCI bus id: index, name, UUID, persistence mode,
ECC mode, MIG mode, remapped rows pending/failure, PCIe gen/width current/max, active NVLinks.
`nvidia-smi nvlink -s` says nothing about a GPU without NVLink; when mcpnode counts 0 links of 0
for it, that is a note, not a difference.

`health`: the clocks, thermal, power and PCIe replay facts of `nvidia-smi -q -x` (clocks event
reasons by name, GPU temperature, enforced and default power limit, maximum, applications and
default applications clocks, replay counter) against mcpnode's NVML facts. Readings taken a
moment apart may move: the GpuIdle reason is not compared, temperatures within 5 C and a replay
counter that grew by less than 1000 between the two reads are the same. A fact mcpnode's root
did not record (NotRecorded: a replay of an older snapshot) is a note.

`p2p`: the `nvidia-smi topo -p2p r` matrix against the NVML matrix `mcpnode topo --p2p` prints
first, cell by cell.

`replay`: a snapshot replayed gives the topology its capture computed (the SHA-256 of the
topology JSON in its `mcpnode-snapshot.json`): every NVML answer and file it needs is in it.
`audits`: the health findings (gpu.xid, gpu.sxid, pcie.*, ib.*, p2p.*) of the live audit and of
the snapshot's replay agree (id, subject, status).

Exit status: 0 all match, 1 something differs (each difference printed), 2 an input could not
be read or parsed.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from mcpnode.topology.model import CpuSet
from mcpnode.topology.parse import ParseError, parse_cpulist
from tests.support.nvsmi import TopoMatrix, TopoParseError, parse_topo_matrix

GPUS_SCHEMA = "mcpnode.gpus/v1"


class InputError(ValueError):
    """An input file is not what its producer should have written."""


@dataclass(frozen=True)
class Diff:
    where: str  # "GPU0 x mlx5_1", "0000:18:00.0"
    what: str  # "cell", "ecc_current"
    nvidia_smi: str
    mcpnode: str
    note: str = ""

    def __str__(self) -> str:
        line = (
            f"DIFF {self.where} {self.what}: nvidia-smi {self.nvidia_smi} | mcpnode {self.mcpnode}"
        )
        return line + (f"  ({self.note})" if self.note else "")


@dataclass(frozen=True)
class Result:
    diffs: tuple[Diff, ...]
    notes: tuple[str, ...]
    compared: int  # how many values were compared, so "0 differences" means something

    def report(self, title: str) -> str:
        out = [str(d) for d in self.diffs]
        out.extend(f"note: {n}" for n in self.notes)
        out.append(f"{title}: {self.compared} values compared, {len(self.diffs)} differ")
        return "\n".join(out)


# -- topology matrix -------------------------------------------------------------------------------


def _keys(m: TopoMatrix) -> dict[str, str]:
    """Stable name -> label: `GPU0` -> `GPU0`, `mlx5_0` -> `NIC0` (or `mlx5_0` in old layouts)."""
    return {m.device_name(label): label for label in m.columns}


def _cpus(text: str) -> CpuSet | None:
    if text in ("", "N/A"):
        return CpuSet() if text == "" else None
    try:
        return parse_cpulist(text)
    except ParseError:
        return None


def compare_topo(smi: TopoMatrix, mcp: TopoMatrix, allowed: CpuSet | None) -> Result:
    """Every cell and affinity of the two matrices. `allowed`: the CPUs this process (and the
    nvidia-smi that ran beside it) may use, to recognise nvidia-smi's clipped CPU Affinity."""
    diffs: list[Diff] = []
    notes: list[str] = []
    compared = 0
    sk, mk = _keys(smi), _keys(mcp)
    for key in sorted(sk.keys() - mk.keys()):
        diffs.append(Diff(key, "device", "listed", "absent"))
    for key in sorted(mk.keys() - sk.keys()):
        diffs.append(Diff(key, "device", "absent", "listed"))
    both = [k for k in sk if k in mk]  # nvidia-smi's order
    for r in both:
        for c in both:
            compared += 1
            a = smi.cells.get((sk[r], sk[c]), "")
            b = mcp.cells.get((mk[r], mk[c]), "")
            if a != b:
                diffs.append(Diff(f"{r} x {c}", "cell", a or "(empty)", b or "(empty)"))
    for key in both:
        if not key.startswith("GPU"):
            continue  # NIC rows leave the affinity cells empty in both
        s, m = sk[key], mk[key]
        for what, smi_col, mcp_col in (
            ("NUMA Affinity", smi.numa_affinity, mcp.numa_affinity),
            ("GPU NUMA ID", smi.gpu_numa_id, mcp.gpu_numa_id),
        ):
            if not smi_col or not mcp_col:
                continue  # an older nvidia-smi without the column
            compared += 1
            if smi_col.get(s, "") != mcp_col.get(m, ""):
                diffs.append(Diff(key, what, smi_col.get(s, "") or "(empty)", mcp_col.get(m, "")))
        if not smi.cpu_affinity:
            continue
        compared += 1
        a, b = smi.cpu_affinity.get(s, ""), mcp.cpu_affinity.get(m, "")
        sa, sb = _cpus(a), _cpus(b)
        if a == b or (sa is not None and sa == sb):
            continue
        if sa is not None and sb is not None and allowed is not None and sa == sb & allowed:
            notes.append(
                f"{key} CPU Affinity: nvidia-smi {a or '(empty)'}, mcpnode {b}: nvidia-smi "
                f"clips it to this process's CPUs ({allowed.cpulist()}); mcpnode does not"
            )
            continue
        note = "nvidia-smi clips CPU affinity to the caller's cpuset"
        if allowed is not None:
            note += f"; this process may use {allowed.cpulist()}"
        diffs.append(Diff(key, "CPU Affinity", a or "(empty)", b or "(empty)", note))
    return Result(tuple(diffs), tuple(notes), compared)


# -- per-GPU facts ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class GpuFacts:
    """The facts both tools give, in one vocabulary (None: the tool said N/A or nothing)."""

    index: int
    bus_id: str  # sysfs form, 0000:18:00.0
    name: str | None
    uuid: str | None
    persistence_mode: bool | None
    ecc_current: bool | None
    ecc_pending: bool | None
    mig_current: bool | None
    mig_pending: bool | None
    remapped_rows_pending: bool | None
    remapped_rows_failure: bool | None
    pcie_gen_current: int | None
    pcie_gen_max: int | None
    pcie_width_current: int | None
    pcie_width_max: int | None
    nvlink_active: int | None
    # Links the GPU has, up or down: only to tell a PCIe-only GPU (0) from one whose NVLink
    # answer is missing. Not compared: nvidia-smi lists a link count only for NVLink GPUs.
    nvlink_total: int | None = None


COMPARED = tuple(
    f.name for f in fields(GpuFacts) if f.name not in ("index", "bus_id", "nvlink_total")
)


@dataclass(frozen=True)
class GpuReport:
    driver_version: str | None
    cuda_version: str | None
    nvml_unavailable: str | None  # mcpnode's reason; None when NVML answered (always for smi)
    gpus: tuple[GpuFacts, ...]


_BUS_ID = re.compile(r"([0-9a-fA-F]{1,8}):([0-9a-fA-F]{1,2}):([0-9a-fA-F]{1,2})\.([0-7])")


def normalise_bus_id(text: str) -> str:
    """`00000000:1B:00.0` (NVML, nvidia-smi) -> `0000:1b:00.0` (sysfs, mcpnode)."""
    m = _BUS_ID.fullmatch(text.strip())
    if m is None:
        raise InputError(f"not a PCI bus id: {text!r}")
    d, b, dev, fn = m.groups()
    return f"{int(d, 16):04x}:{int(b, 16):02x}:{int(dev, 16):02x}.{fn}"


def _text(el: ET.Element, path: str) -> str | None:
    found = el.find(path)
    if found is None or found.text is None:
        return None
    return found.text.strip()


def _word(value: str | None, true: str, false: str) -> bool | None:
    """nvidia-smi's Enabled/Disabled, Yes/No; N/A, [Not Supported] and the like are None."""
    if value == true:
        return True
    if value == false:
        return False
    return None


def _int(value: str | None) -> int | None:
    """`5`, `16x`; None for N/A."""
    if value is None:
        return None
    m = re.fullmatch(r"(\d+)x?", value)
    return int(m.group(1)) if m else None


def parse_smi_xml(text: str) -> GpuReport:
    """`nvidia-smi -q -x`: one `<gpu id="00000000:18:00.0">` per GPU, in NVML index order."""
    try:
        root = ET.fromstring(text)
    except ET.ParseError as err:
        raise InputError(f"nvidia-smi -q -x: not XML: {err}") from err
    if root.tag != "nvidia_smi_log":
        raise InputError(f"nvidia-smi -q -x: root element <{root.tag}>, not <nvidia_smi_log>")
    gpus = []
    for i, g in enumerate(root.findall("gpu")):
        bus = g.get("id") or _text(g, "pci/pci_bus_id")
        if bus is None:
            raise InputError(f"nvidia-smi -q -x: GPU {i} has no bus id")
        link = "pci/pci_gpu_link_info"
        gpus.append(
            GpuFacts(
                index=i,
                bus_id=normalise_bus_id(bus),
                name=_text(g, "product_name"),
                uuid=_text(g, "uuid"),
                persistence_mode=_word(_text(g, "persistence_mode"), "Enabled", "Disabled"),
                ecc_current=_word(_text(g, "ecc_mode/current_ecc"), "Enabled", "Disabled"),
                ecc_pending=_word(_text(g, "ecc_mode/pending_ecc"), "Enabled", "Disabled"),
                mig_current=_word(_text(g, "mig_mode/current_mig"), "Enabled", "Disabled"),
                mig_pending=_word(_text(g, "mig_mode/pending_mig"), "Enabled", "Disabled"),
                remapped_rows_pending=_word(
                    _text(g, "remapped_rows/remapped_row_pending"), "Yes", "No"
                ),
                remapped_rows_failure=_word(
                    _text(g, "remapped_rows/remapped_row_failure"), "Yes", "No"
                ),
                pcie_gen_current=_int(_text(g, f"{link}/pcie_gen/current_link_gen")),
                pcie_gen_max=_int(_text(g, f"{link}/pcie_gen/max_link_gen")),
                pcie_width_current=_int(_text(g, f"{link}/link_widths/current_link_width")),
                pcie_width_max=_int(_text(g, f"{link}/link_widths/max_link_width")),
                nvlink_active=None,
            )
        )
    return GpuReport(
        driver_version=_text(root, "driver_version"),
        cuda_version=_text(root, "cuda_version"),
        nvml_unavailable=None,
        gpus=tuple(gpus),
    )


@dataclass(frozen=True)
class NvlinkStatus:
    index: int
    uuid: str | None
    active: int
    total: int


_NVLINK_GPU = re.compile(r"^GPU (\d+):.*?(?:\(UUID: (\S+?)\))?\s*$")
_NVLINK_LINK = re.compile(r"^\s+Link (\d+):\s*(.*?)\s*$")


def parse_nvlink_status(text: str) -> tuple[NvlinkStatus, ...]:
    """`nvidia-smi nvlink -s`: a `GPU n: <name> (UUID: ...)` line, then `Link k: 26.562 GB/s`
    per link, `Link k: <inactive>` for a link that is down. A GPU without NVLink lists no links
    (or a message line, which is not a link)."""
    out: list[NvlinkStatus] = []
    current: tuple[int, str | None] | None = None
    active = total = 0

    def flush() -> None:
        if current is not None:
            out.append(NvlinkStatus(current[0], current[1], active, total))

    for line in text.splitlines():
        g = _NVLINK_GPU.match(line)
        if g:
            flush()
            current, active, total = (int(g.group(1)), g.group(2)), 0, 0
            continue
        link = _NVLINK_LINK.match(line)
        if link and current is not None:
            total += 1
            speed = re.match(r"([\d.]+)\s*GB/s", link.group(2))
            if speed and float(speed.group(1)) > 0:
                active += 1
    flush()
    return tuple(out)


def with_nvlinks(report: GpuReport, status: Iterable[NvlinkStatus]) -> GpuReport:
    """nvidia-smi's GPUs with their active NVLink count, matched by UUID, else by index."""
    by_uuid = {s.uuid: s for s in status if s.uuid}
    by_index = {s.index: s for s in status}
    gpus = []
    for g in report.gpus:
        s = by_uuid.get(g.uuid) if g.uuid else None
        s = s or by_index.get(g.index)
        gpus.append(
            _replace(
                g,
                nvlink_active=None if s is None else s.active,
                nvlink_total=None if s is None else s.total,
            )
        )
    return GpuReport(report.driver_version, report.cuda_version, None, tuple(gpus))


def _replace(g: GpuFacts, **over: Any) -> GpuFacts:
    return GpuFacts(**{**{f.name: getattr(g, f.name) for f in fields(GpuFacts)}, **over})


def parse_mcpnode_gpus(doc: Mapping[str, Any]) -> tuple[GpuReport, dict[str, str]]:
    """`mcpnode gpus --format json` -> the report, and per bus id where its PCIe came from."""
    if doc.get("schema") != GPUS_SCHEMA:
        raise InputError(f"mcpnode gpus: schema {doc.get('schema')!r}, expected {GPUS_SCHEMA}")
    nvml = doc["nvml"]
    gpus = []
    sources = {}
    for g in doc["gpus"]:
        f = g.get("nvml") or {}
        link = g["pcie"]
        nv = g["nvlink"]
        sources[g["address"]] = str(link["source"])
        gpus.append(
            GpuFacts(
                index=int(g["index"]),
                bus_id=str(g["address"]),
                name=f.get("name"),
                uuid=f.get("uuid"),
                persistence_mode=f.get("persistence_mode"),
                ecc_current=f.get("ecc_current"),
                ecc_pending=f.get("ecc_pending"),
                mig_current=f.get("mig_current"),
                mig_pending=f.get("mig_pending"),
                remapped_rows_pending=f.get("remapped_rows_pending"),
                remapped_rows_failure=f.get("remapped_rows_failure"),
                pcie_gen_current=link["gen_current"],
                pcie_gen_max=link["gen_max"],
                pcie_width_current=link["width_current"],
                pcie_width_max=link["width_max"],
                nvlink_active=nv["active"],
                nvlink_total=nv["total"],
            )
        )
    report = GpuReport(
        driver_version=nvml.get("driver_version"),
        cuda_version=nvml.get("cuda_driver_version"),
        nvml_unavailable=None if nvml.get("available") else str(nvml.get("reason")),
        gpus=tuple(gpus),
    )
    return report, sources


def _show(value: object) -> str:
    if value is None:
        return "N/A"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def compare_gpus(
    smi: GpuReport, mcp: GpuReport, pcie_source: Mapping[str, str] | None = None
) -> Result:
    diffs: list[Diff] = []
    notes: list[str] = []
    compared = 0
    if mcp.nvml_unavailable is not None:
        diffs.append(Diff("host", "NVML", "answers", f"unavailable: {mcp.nvml_unavailable}"))
    for what, a, b in (
        ("driver_version", smi.driver_version, mcp.driver_version),
        ("cuda_version", smi.cuda_version, mcp.cuda_version),
    ):
        compared += 1
        if a != b:
            diffs.append(Diff("host", what, _show(a), _show(b)))
    ms = {g.bus_id: g for g in mcp.gpus}
    ss = {g.bus_id: g for g in smi.gpus}
    for bus in sorted(ss.keys() - ms.keys()):
        diffs.append(Diff(bus, "GPU", "listed", "absent"))
    for bus in sorted(ms.keys() - ss.keys()):
        diffs.append(Diff(bus, "GPU", "absent", "listed"))
    for s in smi.gpus:
        m = ms.get(s.bus_id)
        if m is None:
            continue
        compared += 1
        if s.index != m.index:
            diffs.append(Diff(s.bus_id, "index", str(s.index), str(m.index)))
        for name in COMPARED:
            compared += 1
            a, b = getattr(s, name), getattr(m, name)
            if a == b:
                continue
            if name == "nvlink_active" and a is None and b == 0 and m.nvlink_total == 0:
                # A GPU without NVLink: `nvidia-smi nvlink -s` prints nothing for it (an H200
                # passed through to a KVM guest, driver 580.159.04, 2026-11-30) and mcpnode
                # counts 0 links of 0. With links on mcpnode's side, silence stays a difference.
                notes.append(
                    f"GPU{s.index} {s.bus_id} nvlink_active: no `nvidia-smi nvlink -s` answer, "
                    "mcpnode 0 of 0 links: a GPU without NVLink"
                )
                continue
            note = ""
            if name.startswith("pcie_") and (pcie_source or {}).get(s.bus_id) == "sysfs":
                note = "mcpnode's PCIe figures came from sysfs: NVML gave none"
            elif name.endswith("_current") and name.startswith("pcie_"):
                note = "the current link trains down at idle; the two reads were not simultaneous"
            elif name == "nvlink_active" and a is None:
                note = "no `nvidia-smi nvlink -s` answer for this GPU"
            diffs.append(Diff(f"GPU{s.index} {s.bus_id}", name, _show(a), _show(b), note))
    return Result(tuple(diffs), tuple(notes), compared)


# -- health facts: clocks, thermal, power, PCIe replays -------------------------------------------

# nvidia-smi -q -x's clocks event reasons (R535+; clocks_throttle_reason_* before) -> NVML bit
REASON_BITS = {
    "gpu_idle": 0x1,
    "applications_clocks_setting": 0x2,
    "sw_power_cap": 0x4,
    "hw_slowdown": 0x8,
    "sync_boost": 0x10,
    "sw_thermal_slowdown": 0x20,
    "hw_thermal_slowdown": 0x40,
    "hw_power_brake_slowdown": 0x80,
    "display_clocks_setting": 0x100,
}
HEALTH_FACTS = (
    "clocks_event_reasons",
    "temperature_c",
    "power_limit_mw",
    "power_default_limit_mw",
    "clock_sm_max_mhz",
    "clock_mem_max_mhz",
    "app_clock_sm_mhz",
    "app_clock_mem_mhz",
    "default_app_clock_sm_mhz",
    "default_app_clock_mem_mhz",
    "pcie_replay_count",
)
# mcpnode's `unavailable` fact name for each field
_FACT_OF = {
    "clocks_event_reasons": "clocks_event_reasons",
    "temperature_c": "temperature",
    "power_limit_mw": "power_limit",
    "power_default_limit_mw": "power_default_limit",
    "clock_sm_max_mhz": "clock_max_sm",
    "clock_mem_max_mhz": "clock_max_mem",
    "app_clock_sm_mhz": "app_clock_sm",
    "app_clock_mem_mhz": "app_clock_mem",
    "default_app_clock_sm_mhz": "default_app_clock_sm",
    "default_app_clock_mem_mhz": "default_app_clock_mem",
    "pcie_replay_count": "pcie_replay_count",
}
TEMPERATURE_SLACK_C = 5
REPLAY_SLACK = 1000


def _number(value: str | None, unit: str) -> float | None:
    """`700.00 W`, `1980 MHz`, `36 C`; None for N/A and anything else."""
    if value is None:
        return None
    m = re.fullmatch(rf"(\d+(?:\.\d+)?)\s*{unit}", value.strip())
    return float(m.group(1)) if m else None


def _reasons(gpu: ET.Element) -> int | None:
    for section, prefix in (
        ("clocks_event_reasons", "clocks_event_reason_"),
        ("clocks_throttle_reasons", "clocks_throttle_reason_"),
    ):
        el = gpu.find(section)
        if el is None:
            continue
        mask, seen = 0, False
        for child in el:
            bit = REASON_BITS.get(child.tag.removeprefix(prefix))
            if bit is None or child.text is None:
                continue
            seen = True
            if child.text.strip() == "Active":
                mask |= bit
        return mask if seen else None
    return None


def parse_smi_health(text: str) -> dict[str, dict[str, int | None]]:
    """`nvidia-smi -q -x` -> bus id -> the HEALTH_FACTS it shows (mW for power)."""
    try:
        root = ET.fromstring(text)
    except ET.ParseError as err:
        raise InputError(f"nvidia-smi -q -x: not XML: {err}") from err
    out: dict[str, dict[str, int | None]] = {}

    def mhz(g: ET.Element, path: str) -> int | None:
        v = _number(_text(g, path), "MHz")
        return None if v is None else int(v)

    def mw(g: ET.Element, *paths: str) -> int | None:
        for path in paths:
            v = _number(_text(g, path), "W")
            if v is not None:
                return round(v * 1000)
        return None

    for g in root.findall("gpu"):
        bus = g.get("id") or _text(g, "pci/pci_bus_id")
        if bus is None:
            raise InputError("nvidia-smi -q -x: a GPU has no bus id")
        temp = _number(_text(g, "temperature/gpu_temp"), "C")
        out[normalise_bus_id(bus)] = {
            "clocks_event_reasons": _reasons(g),
            "temperature_c": None if temp is None else int(temp),
            "power_limit_mw": mw(
                g, "gpu_power_readings/current_power_limit", "power_readings/power_limit"
            ),
            "power_default_limit_mw": mw(
                g, "gpu_power_readings/default_power_limit", "power_readings/default_power_limit"
            ),
            "clock_sm_max_mhz": mhz(g, "max_clocks/sm_clock"),
            "clock_mem_max_mhz": mhz(g, "max_clocks/mem_clock"),
            "app_clock_sm_mhz": mhz(g, "applications_clocks/graphics_clock"),
            "app_clock_mem_mhz": mhz(g, "applications_clocks/mem_clock"),
            "default_app_clock_sm_mhz": mhz(g, "default_applications_clocks/graphics_clock"),
            "default_app_clock_mem_mhz": mhz(g, "default_applications_clocks/mem_clock"),
            "pcie_replay_count": _int(_text(g, "pci/replay_counter")),
        }
    return out


def parse_mcpnode_health(
    doc: Mapping[str, Any],
) -> dict[str, tuple[dict[str, int | None], dict[str, str]]]:
    """`mcpnode gpus --format json` -> bus id -> (HEALTH_FACTS, why each missing one is)."""
    if doc.get("schema") != GPUS_SCHEMA:
        raise InputError(f"mcpnode gpus: schema {doc.get('schema')!r}, expected {GPUS_SCHEMA}")
    out = {}
    for g in doc["gpus"]:
        f = g.get("nvml") or {}
        why = {str(k): str(v) for k, v in f.get("unavailable", [])}
        out[str(g["address"])] = ({k: f.get(k) for k in HEALTH_FACTS}, why)
    return out


def compare_health(
    smi: Mapping[str, Mapping[str, int | None]],
    mcp: Mapping[str, tuple[Mapping[str, int | None], Mapping[str, str]]],
) -> Result:
    diffs: list[Diff] = []
    notes: list[str] = []
    compared = 0
    for bus in sorted(smi):
        if bus not in mcp:
            diffs.append(Diff(bus, "GPU", "listed", "absent"))
            continue
        facts, why = mcp[bus]
        for name in HEALTH_FACTS:
            a, b = smi[bus].get(name), facts.get(name)
            if a is None and b is None:
                continue
            compared += 1
            if name == "clocks_event_reasons" and a is not None and b is not None:
                a, b = a & ~0x1, b & ~0x1  # GpuIdle comes and goes between two reads
            if a == b:
                continue
            if a is not None and b is not None:
                if name == "temperature_c" and abs(a - b) <= TEMPERATURE_SLACK_C:
                    continue
                if name == "pcie_replay_count" and 0 <= a - b < REPLAY_SLACK:
                    continue
            if b is None and why.get(_FACT_OF[name]) == "NotRecorded":
                notes.append(f"{bus} {name}: not recorded in mcpnode's root (nvidia-smi {a})")
                continue
            note = ""
            if b is None:
                note = f"NVML: {why.get(_FACT_OF[name], 'not reported')}"
            diffs.append(Diff(bus, name, _show(a), _show(b), note))
    return Result(tuple(diffs), tuple(notes), compared)


# -- peer-to-peer matrix ------------------------------------------------------------------------


def parse_p2p_matrix(text: str) -> dict[tuple[str, str], str]:
    """The first GPU x GPU matrix of `nvidia-smi topo -p2p r` (or `mcpnode topo --p2p`, whose
    first matrix is NVML's): a header of GPU labels, one row per GPU, ` X ` on the diagonal."""
    lines = [line for line in text.replace("\x1b[4m", "").replace("\x1b[0m", "").splitlines()]
    for i, line in enumerate(lines):
        cols = line.split()
        if cols and all(re.fullmatch(r"GPU\d+", c) for c in cols):
            out = {}
            for row in lines[i + 1 : i + 1 + len(cols)]:
                cells = row.split()
                if len(cells) != len(cols) + 1 or cells[0] not in cols:
                    raise InputError(f"P2P matrix row {row!r} does not match its header")
                out.update({(cells[0], c): v for c, v in zip(cols, cells[1:], strict=True)})
            return out
    raise InputError("no GPU matrix found")


def compare_p2p(smi: Mapping[tuple[str, str], str], mcp: Mapping[tuple[str, str], str]) -> Result:
    diffs = [
        Diff(f"{r} x {c}", "p2p read", smi.get((r, c), "(absent)"), mcp.get((r, c), "(absent)"))
        for r, c in sorted(set(smi) | set(mcp))
        if smi.get((r, c)) != mcp.get((r, c))
    ]
    return Result(tuple(diffs), (), len(set(smi) | set(mcp)))


# -- replay: a snapshot gives what its capture saw --------------------------------------------

HEALTH_IDS = ("gpu.xid", "gpu.sxid", "pcie.", "ib.", "p2p.")


def compare_replay(snapshot: Path) -> Result:
    """The topology a snapshot replays to, against the hash its capture recorded."""
    import hashlib

    from mcpnode.host import Host
    from mcpnode.topology.discover import discover_host
    from mcpnode.topology.jsonify import topology_json

    with Host(snapshot) as host:
        meta = json.loads(host.read_text("/mcpnode-snapshot.json"))
        body = json.dumps(topology_json(discover_host(host)), sort_keys=True).encode()
    want = meta.get("topology_sha256")
    got = hashlib.sha256(body).hexdigest()
    if want is None:
        raise InputError(f"{snapshot}: no topology_sha256 in its metadata")
    diffs = () if got == want else (Diff(str(snapshot), "topology", want[:16], got[:16]),)
    return Result(tuple(diffs), (), 1)


def _health_findings(doc: Mapping[str, Any]) -> dict[tuple[str, str | None], str]:
    return {
        (str(f["id"]), f.get("subject")): str(f["status"])
        for f in doc["findings"]
        if str(f["id"]).startswith(HEALTH_IDS)
    }


def compare_audits(live: Mapping[str, Any], replay: Mapping[str, Any]) -> Result:
    a, b = _health_findings(live), _health_findings(replay)
    diffs = [
        Diff(
            f"{fid} [{subject}]",
            "status",
            a.get((fid, subject), "absent"),
            b.get((fid, subject), "absent"),
        )
        for fid, subject in sorted(set(a) | set(b), key=lambda k: (k[0], k[1] or ""))
        if a.get((fid, subject)) != b.get((fid, subject))
    ]
    return Result(tuple(diffs), (), len(set(a) | set(b)))


# -- command line ----------------------------------------------------------------------------------


def allowed_cpus() -> CpuSet | None:
    getaffinity: Callable[[int], set[int]] | None = getattr(os, "sched_getaffinity", None)
    return None if getaffinity is None else CpuSet(getaffinity(0))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m tests.device.compare")
    sub = parser.add_subparsers(dest="what", required=True)
    topo = sub.add_parser("topo", help="nvidia-smi topo -m vs mcpnode topo")
    topo.add_argument("nvsmi", type=Path)
    topo.add_argument("mcpnode", type=Path)
    gpus = sub.add_parser("gpus", help="nvidia-smi -q -x vs mcpnode gpus --format json")
    gpus.add_argument("nvsmi_xml", type=Path)
    gpus.add_argument("mcpnode_json", type=Path)
    gpus.add_argument("--nvlink", type=Path, help="`nvidia-smi nvlink -s` output")
    health = sub.add_parser("health", help="clocks/thermal/power/replays: nvidia-smi vs mcpnode")
    health.add_argument("nvsmi_xml", type=Path)
    health.add_argument("mcpnode_json", type=Path)
    p2p = sub.add_parser("p2p", help="nvidia-smi topo -p2p r vs mcpnode topo --p2p")
    p2p.add_argument("nvsmi", type=Path)
    p2p.add_argument("mcpnode", type=Path)
    replay = sub.add_parser("replay", help="a snapshot replays to the topology it captured")
    replay.add_argument("snapshot", type=Path)
    audits = sub.add_parser("audits", help="health findings: live audit vs the replay's")
    audits.add_argument("live", type=Path)
    audits.add_argument("replay", type=Path)
    args = parser.parse_args(argv)
    try:
        if args.what == "health":
            result = compare_health(
                parse_smi_health(args.nvsmi_xml.read_text()),
                parse_mcpnode_health(json.loads(args.mcpnode_json.read_text())),
            )
            title = "GPU health facts"
        elif args.what == "p2p":
            result = compare_p2p(
                parse_p2p_matrix(args.nvsmi.read_text()), parse_p2p_matrix(args.mcpnode.read_text())
            )
            title = "P2P matrix"
        elif args.what == "replay":
            result = compare_replay(args.snapshot)
            title = "snapshot replay"
        elif args.what == "audits":
            result = compare_audits(
                json.loads(args.live.read_text()), json.loads(args.replay.read_text())
            )
            title = "health findings, live vs replay"
        elif args.what == "topo":
            result = compare_topo(
                parse_topo_matrix(args.nvsmi.read_text()),
                parse_topo_matrix(args.mcpnode.read_text()),
                allowed_cpus(),
            )
            title = "topology"
        else:
            smi = parse_smi_xml(args.nvsmi_xml.read_text())
            if args.nvlink is not None:
                smi = with_nvlinks(smi, parse_nvlink_status(args.nvlink.read_text()))
            mcp, sources = parse_mcpnode_gpus(json.loads(args.mcpnode_json.read_text()))
            result = compare_gpus(smi, mcp, sources)
            title = "GPUs"
    except (OSError, TopoParseError, InputError, ValueError, KeyError, TypeError) as err:
        print(f"compare {args.what}: cannot read the inputs: {type(err).__name__}: {err}")
        return 2
    print(result.report(title))
    return 1 if result.diffs else 0


if __name__ == "__main__":
    sys.exit(main())
