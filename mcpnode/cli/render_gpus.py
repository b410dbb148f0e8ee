"""`mcpnode gpus`: one row per GPU sysfs sees, with what NVML says about it; JSON beside it.

A value nobody could read prints as `-`, never as 0 (STYLE habit 4): a GPU whose ECC mode NVML
could not give is "-", not "off". When NVML is unavailable the table says why on its first
line and still lists the GPUs from sysfs, with the PCIe link read from sysfs.
"""

from __future__ import annotations

from mcpnode.codec import jsonout
from mcpnode.codec.printable import printable
from mcpnode.codec.record import record
from mcpnode.topology.jsonify import jsonable
from mcpnode.topology.model import Gpu, NvmlGpu, Problem, Topology

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (codec/typenames.py)
if TYPE_CHECKING:
    from typing import Any

SCHEMA_VERSION = "mcpnode.gpus/v1"

# PCIe generation by transfer rate per lane (PCI-SIG base specs 1.0 .. 6.0). sysfs gives the
# rate (`current_link_speed` "32.0 GT/s PCIe"); NVML and nvidia-smi give the generation.
_GEN_BY_GTS = {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5, 64.0: 6}
# Problem codes about GPUs that the table repeats under itself (the full list is in `topo`).
_GPU_CODES = ("gpu.", "nvlink.", "nvml.")


@record(frozen=True)
class Pcie:
    """The PCIe link as shown: NVML's figures when NVML gave any, else sysfs's (`source`)."""

    source: str | None  # "nvml", "sysfs", or None when neither knows anything
    gen_current: int | None
    gen_max: int | None
    width_current: int | None
    width_max: int | None


@record(frozen=True)
class NvLinks:
    """`supported` False: NVML says the GPU has no NVLink (NotSupported on link 0). None: not
    known (no NVML facts, GPU lost). `unreadable`: links whose state query failed."""

    supported: bool | None
    active: int | None
    total: int | None
    unreadable: int


def pcie(gpu: Gpu) -> Pcie:
    f = gpu.nvml
    if f is not None:
        got = (f.pcie_gen_current, f.pcie_gen_max, f.pcie_width_current, f.pcie_width_max)
        if any(v is not None for v in got):
            return Pcie("nvml", *got)
    link = gpu.link
    sysfs = (
        _gen(link.current_speed_gts),
        _gen(link.max_speed_gts),
        link.current_width,
        link.max_width,
    )
    if any(v is not None for v in sysfs):
        return Pcie("sysfs", *sysfs)
    return Pcie(None, None, None, None, None)


def _gen(gts: float | None) -> int | None:
    return None if gts is None else _GEN_BY_GTS.get(round(gts, 1))


def nvlinks(facts: NvmlGpu | None) -> NvLinks:
    if facts is None or facts.lost:
        return NvLinks(None, None, None, 0)
    why = dict(facts.unavailable)
    if why.get("nvlink") == "NotSupported":
        return NvLinks(False, 0, 0, 0)
    if "nvlink" in why:
        return NvLinks(None, None, None, 0)
    # `nvlinkN` (state query failed) is skipped by the collector; `nvlinkN.version` etc. are not.
    # isdecimal() is re's \d (Unicode Nd), without importing re into `gpus`.
    unreadable = sum(
        1 for fact, _ in facts.unavailable if fact[:6] == "nvlink" and fact[6:].isdecimal()
    )
    return NvLinks(True, facts.active_links, len(facts.nvlinks), unreadable)


def gpu_problems(topo: Topology) -> tuple[Problem, ...]:
    """Problems about GPUs or NVML, minus `nvml.unavailable` (the table's first line says it)."""
    addresses = {str(g.address) for g in topo.gpus}
    return tuple(
        p
        for p in topo.problems
        if p.code != "nvml.unavailable" and (p.code.startswith(_GPU_CODES) or p.source in addresses)
    )


# -- JSON ----------------------------------------------------------------------------------------


def gpus_json(topo: Topology) -> dict[str, Any]:
    """`{"schema", "nvml", "gpus", "problems"}`. Each GPU is the model's Gpu (sysfs facts, NVML
    facts under `nvml`) plus the two views the table shows: `pcie` (with its source) and
    `nvlink` (active/total)."""
    state = topo.nvml
    nvml: dict[str, Any] = {
        "available": state.available if state else False,
        "reason": state.reason if state else "NVML was not queried",
        "driver_version": state.driver_version if state else None,
        "cuda_driver_version": state.cuda_driver_version if state else None,
        "nvml_version": state.nvml_version if state else None,
    }
    gpus = []
    for gpu in topo.gpus:
        body = jsonable(gpu)
        body["pcie"] = jsonable(pcie(gpu))
        body["nvlink"] = jsonable(nvlinks(gpu.nvml))
        gpus.append(body)
    return {
        "schema": SCHEMA_VERSION,
        "nvml": nvml,
        "gpus": gpus,
        "problems": jsonable(gpu_problems(topo)),
    }


def as_json(topo: Topology) -> str:
    return jsonout.dumps(gpus_json(topo))  # json.dumps(..., indent=2)'s bytes


# -- text ----------------------------------------------------------------------------------------

HEADER = (
    "GPU",
    "NAME",
    "BUS ID",
    "NUMA",
    "PCIE GEN",
    "WIDTH",
    "NVLINK",
    "PERSIST",
    "ECC",
    "ECC UNC",
    "REMAP PEND/FAIL",
    "MIG",
    "FABRIC",
)


def _v(value: object) -> str:
    return "-" if value is None else str(value)


def _on(value: bool | None) -> str:
    return "-" if value is None else ("on" if value else "off")


def _yes(value: bool | None) -> str:
    return "-" if value is None else ("yes" if value else "no")


def _pair(a: str, b: str) -> str:
    """`a/b`, or a lone `-` when neither half is known."""
    return "-" if a == b == "-" else f"{a}/{b}"


def row(gpu: Gpu) -> tuple[str, ...]:
    """The table cells of one GPU, in HEADER order."""
    f = gpu.nvml
    numa = _v(gpu.numa_node)
    if gpu.numa_node is not None and gpu.numa_source != "own":
        numa += f" ({gpu.numa_source})"
    if gpu.memory_numa_node is not None:
        numa += f", memory {gpu.memory_numa_node}"  # its CPU-less memory node (Grace, POWER9)
    link = pcie(gpu)
    mark = "*" if link.source == "sysfs" else ""
    gen = _pair(_v(link.gen_current), _v(link.gen_max))
    width = _pair(_v(link.width_current), _v(link.width_max))
    nv = nvlinks(f)
    if nv.supported is None:
        nvlink = "-"
    elif not nv.supported:
        nvlink = "none"
    else:
        nvlink = f"{nv.active}/{nv.total}" + (f" (+{nv.unreadable}?)" if nv.unreadable else "")
    name = printable(f.name) if f is not None and f.name else None
    if name is None and gpu.device_id is not None:
        name = f"({gpu.vendor_id:04x}:{gpu.device_id:04x})"  # the PCI id, when NVML named none
    fabric = None
    if f is not None and f.fabric_state is not None:
        fabric = printable(f.fabric_state)
        if f.fabric_status not in (None, "Success"):
            fabric += f" ({printable(f.fabric_status)})"
    return (
        str(gpu.index),
        _v(name),
        str(gpu.address),
        numa,
        gen + (mark if gen != "-" else ""),
        width + (mark if width != "-" else ""),
        nvlink,
        _on(f.persistence_mode if f else None),
        _pair(_on(f.ecc_current if f else None), _on(f.ecc_pending if f else None)),
        _v(f.ecc_uncorrected_volatile if f else None),
        _pair(
            _yes(f.remapped_rows_pending if f else None),
            _yes(f.remapped_rows_failure if f else None),
        ),
        _pair(_on(f.mig_current if f else None), _on(f.mig_pending if f else None)),
        _v(fabric),
    )


def _table(rows: list[tuple[str, ...]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]


def nvml_line(topo: Topology) -> str:
    state = topo.nvml
    if state is None:
        return "NVML unavailable: NVML was not queried"
    if not state.available:
        return f"NVML unavailable: {printable(state.reason or '')}"
    parts = [
        f"driver {printable(_v(state.driver_version))}",
        f"CUDA {printable(_v(state.cuda_driver_version))}",
    ]
    if state.nvml_version:
        parts.append(f"NVML {printable(state.nvml_version)}")
    return f"NVML: {', '.join(parts)}"


def as_text(topo: Topology) -> str:
    out = [nvml_line(topo)]
    if not topo.gpus:
        out.append(
            "No NVIDIA GPUs found (no PCI function with vendor 0x10de, class 0x0300/0x0302)."
        )
    else:
        if topo.nvml is None or not topo.nvml.available:
            n = len(topo.gpus)
            out.append(f"{n} GPU{'' if n == 1 else 's'} seen by sysfs; NVML facts are unknown (-).")
        out.append("")
        out.extend(_table([HEADER, *(row(g) for g in topo.gpus)]))
        out.append("")
        out.append(
            "PCIE GEN, WIDTH: current/max; ECC, MIG: current/pending; NVLINK: active/total; "
            "ECC UNC: volatile uncorrected errors."
        )
        if any(pcie(g).source == "sysfs" for g in topo.gpus):
            out.append("* PCIe link from sysfs (NVML gave none): idle GPUs train down their speed.")
    problems = gpu_problems(topo)
    if problems:
        out.append(f"Problems ({len(problems)}):")
        out.extend(f"  [{p.code}] {printable(p.source)}: {printable(p.detail)}" for p in problems)
    return "\n".join(out) + "\n"
