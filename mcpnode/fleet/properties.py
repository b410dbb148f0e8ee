"""The properties a fleet report compares, each derived from one manifest (`mcpnode.manifest/v1`,
docs/manifest.md) as a canonical string: two hosts agree on a property when the strings are
equal. Pure: manifest data in, values out.

Per-GPU properties keep each GPU's value too, so a difference can name the GPU; their string is
the run-length list `0-3:0,4-7:1` (GPU indices, PCI order, then the value), so a whole host's
value stays one comparable string.

Not compared, because the manifest does not carry it: the nvidia-container-toolkit version (the
audit section holds finding ids and counts, not the findings' evidence).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from mcpnode.topology.parse import parse_cpulist

UNKNOWN = "unknown"  # one GPU's value is unknown (null in the manifest)

# PCIe generation by transfer rate in GT/s (PCI Express Base Specification: 2.5, 5, 8, 16, 32, 64).
_GEN_BY_GTS = {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5, 64.0: 6}


@dataclass(frozen=True)
class Value:
    """One host's value of one property. `text` is what is compared and shown; `per_gpu` holds
    (GPU index, that GPU's value) for per-GPU properties, empty otherwise."""

    text: str
    per_gpu: tuple[tuple[int, str], ...] = ()


Manifest = Mapping[str, Any]


@dataclass(frozen=True)
class Property:
    """A compared property: `extract` returns None when the manifest does not know the value
    (a null driver, no audit run, no GPU to describe)."""

    name: str
    title: str
    per_gpu: bool
    extract: Callable[[Manifest], Value | None]


def runs(per_gpu: Sequence[tuple[int, str]]) -> str:
    """`0-3:x16,4:x8,5-7:x16`: consecutive GPU indices with equal values as one run."""
    out: list[str] = []
    i = 0
    while i < len(per_gpu):
        j = i
        while (
            j + 1 < len(per_gpu)
            and per_gpu[j + 1][0] == per_gpu[j][0] + 1
            and per_gpu[j + 1][1] == per_gpu[i][1]
        ):
            j += 1
        first, last = per_gpu[i][0], per_gpu[j][0]
        span = str(first) if first == last else f"{first}-{last}"
        out.append(f"{span}:{per_gpu[i][1]}")
        i = j + 1
    return ",".join(out)


def _per_gpu(values: Sequence[tuple[int, str | None]]) -> Value | None:
    """A per-GPU Value, or None when no GPU's value is known (no GPUs, or NVML absent for an
    NVML-only fact): the host does not report the property at all."""
    if all(v is None for _, v in values):
        return None
    pairs = tuple((i, UNKNOWN if v is None else v) for i, v in values)
    return Value(runs(pairs), pairs)


def _gpus(doc: Manifest) -> list[Mapping[str, Any]]:
    return sorted(doc["gpus"], key=lambda g: g["index"])


# -- host-wide ---------------------------------------------------------------------------------


def gpu_models(doc: Manifest) -> Value:
    """`8x NVIDIA H100 80GB HBM3`; mixed models joined with ` + `, by name; `no GPUs`."""
    counts = Counter(g["name"] or "unknown model" for g in doc["gpus"])
    if not counts:
        return Value("no GPUs")
    return Value(" + ".join(f"{n}x {name}" for name, n in sorted(counts.items())))


def driver(doc: Manifest) -> Value | None:
    version = doc["host"]["driver"]
    return Value(version) if version else None


def container_toolkit(doc: Manifest) -> Value | None:
    """The lowest NVIDIA Container Toolkit component version; `not installed` when the audit
    found none; None for a manifest from before the field existed (no answer, not an outlier)."""
    host = doc["host"]
    if "container_toolkit" not in host:
        return None
    version = host["container_toolkit"]
    return Value(version) if version else Value("not installed")


def kernel(doc: Manifest) -> Value | None:
    release = doc["host"]["kernel"]
    return Value(release) if release else None


def numa_layout(doc: Manifest) -> Value | None:
    """`2 nodes x 96 CPUs`; uneven nodes `2 nodes: 96+64 CPUs` (by node id); memory-only nodes
    (Grace GPU memory, CXL) counted apart: `1 node x 72 CPUs + 4 CPU-less`."""
    nodes = sorted(doc["numa_nodes"], key=lambda n: n["id"])
    if not nodes:
        return None
    sizes = [len(parse_cpulist(n["cpus"])) for n in nodes if not n["cpuless"] and n["cpus"]]
    cpuless = len(nodes) - len(sizes)
    plural = "node" if len(sizes) == 1 else "nodes"
    if not sizes:
        text = "no node with CPUs"
    elif len(set(sizes)) == 1:
        text = f"{len(sizes)} {plural} x {sizes[0]} CPUs"
    else:
        text = f"{len(sizes)} {plural}: {'+'.join(str(s) for s in sizes)} CPUs"
    if cpuless:
        text += f" + {cpuless} CPU-less"
    return Value(text)


def tuning(doc: Manifest) -> Value | None:
    """`base: compliant`, `base: 1 drift (kernel.numa_balancing)`, `base: unknown`, `not
    tuned`. Three-valued: a host whose compliance could not be told is `unknown`, never
    counted with the compliant ones."""
    section = doc["tuning"]
    profile = section["profile"]
    if profile is None:
        return Value("unknown") if section["error"] else Value("not tuned")
    if section["compliant"] is None:
        return Value(f"{profile}: unknown")
    if section["compliant"]:
        return Value(f"{profile}: compliant")
    keys = sorted(d["key"] for d in section["drift"])
    return Value(f"{profile}: {len(keys)} drift ({', '.join(keys)})")


def audit_failed(doc: Manifest) -> Value | None:
    """The FAILed finding ids, sorted; `none`. None when the manifest carries no audit."""
    section = doc["audit"]
    if section is None:
        return None
    return Value(",".join(sorted(section["failed"])) or "none")


# -- per GPU -----------------------------------------------------------------------------------


def gpu_numa(doc: Manifest) -> Value | None:
    """GPU -> NUMA node, `0-3:0,4-7:1`."""
    return _per_gpu(
        [(g["index"], None if g["numa_node"] is None else str(g["numa_node"])) for g in _gpus(doc)]
    )


def pcie_width(doc: Manifest) -> Value | None:
    """Current (negotiated) link width per GPU, `x16`."""
    return _per_gpu(
        [
            (g["index"], None if g["pcie"]["width"] is None else f"x{g['pcie']['width']}")
            for g in _gpus(doc)
        ]
    )


def _gen(speed_gts: float | None) -> str | None:
    if speed_gts is None:
        return None
    gen = _GEN_BY_GTS.get(float(speed_gts))
    return f"Gen{gen}" if gen is not None else f"{speed_gts:g}GT/s"


def pcie_gen(doc: Manifest) -> Value | None:
    """The generation each GPU's link can train to (`max_speed_gts`), `Gen5`.

    Maximum, not current: the link slows with the P-state at idle (P8 runs at Gen1;
    open-gpu-kernel-modules#731, the reason the audit's gpu.pcie.gen is only INFO), so the
    current speed of a host that published while idle says nothing about its hardware. A GPU
    whose link trained below its maximum under load is the audit's business (gpu.pcie.gen with
    NVML's max = min(GPU, slot), gpu.pcie.width's FAIL, which `audit_failed` carries); here a GPU
    of a lower generation than its neighbours' (another board, a Gen4 part) is the outlier."""
    return _per_gpu([(g["index"], _gen(g["pcie"]["max_speed_gts"])) for g in _gpus(doc)])


def _nic_choice(choices: Sequence[Mapping[str, Any]]) -> str:
    """`mlx5_3(PIX)`; several NICs in the best bucket `mlx5_0+mlx5_1(NODE)`; `none`."""
    if not choices:
        return "none"
    names = [c["rdma"] or "+".join(c["netdevs"]) or c["address"] for c in choices]
    return f"{'+'.join(names)}({choices[0]['bucket']})"


def nics(doc: Manifest) -> Value | None:
    """The nearest NIC(s) placement chose per GPU (RDMA device, else netdev, and the bucket)."""
    place = sorted(doc["placement"]["gpus"], key=lambda p: p["index"])
    return _per_gpu([(p["index"], _nic_choice(p["nics"])) for p in place])


def nvlinks(doc: Manifest) -> Value | None:
    """Active NVLink links per GPU (NVML), `0-7:18`; `0` on GPUs without NVLink."""
    return _per_gpu(
        [
            (g["index"], None if g["nvlinks_active"] is None else str(g["nvlinks_active"]))
            for g in _gpus(doc)
        ]
    )


# -- probe (the manifest's optional `probe` section, docs/probe.md) ----------------------------

_WORST = {"FAIL": 3, "WARN": 2, "PASS": 1}


def _probe_gpus(doc: Manifest) -> list[Mapping[str, Any]] | None:
    """The probe section's GPUs, None when no probe ran (or its kept run was unreadable)."""
    section = doc.get("probe")
    if section is None or section["error"] is not None:
        return None
    return sorted(section["gpus"], key=lambda g: g["index"])


def probe_node(doc: Manifest) -> Value | None:
    """The fastest measured NUMA node per GPU, `0-3:0,4-7:1`: equal to gpu_numa on a host whose
    firmware tells the truth."""
    gpus = _probe_gpus(doc)
    if gpus is None:
        return None
    return _per_gpu(
        [(g["index"], None if g["fastest_node"] is None else str(g["fastest_node"])) for g in gpus]
    )


def probe_pcie(doc: Manifest) -> Value | None:
    """The probe.pcie verdict per GPU, `0-4:PASS,5:FAIL,6-7:PASS`: bandwidth against the link's
    promise, a verdict rather than GB/s, which differ from run to run."""
    gpus = _probe_gpus(doc)
    if gpus is None:
        return None
    return _per_gpu([(g["index"], g["pcie"]) for g in gpus])


def probe_nvlink(doc: Manifest) -> Value | None:
    """Per GPU the worst probe.nvlink verdict of its peer copies to NVLink-joined GPUs."""
    gpus = _probe_gpus(doc)
    if gpus is None:
        return None
    worst: dict[int, str] = {}
    for p in doc["probe"]["peers"]:
        status = p["status"]
        if status in _WORST and _WORST[status] > _WORST.get(worst.get(p["src"], ""), 0):
            worst[p["src"]] = status
    return _per_gpu([(g["index"], worst.get(g["index"])) for g in gpus])


PROPERTIES: tuple[Property, ...] = (
    Property("gpus", "GPU model and count", False, gpu_models),
    Property("driver", "NVIDIA driver version", False, driver),
    Property("kernel", "kernel release", False, kernel),
    Property(
        "toolkit", "NVIDIA Container Toolkit version (lowest component)", False, container_toolkit
    ),
    Property("numa", "NUMA nodes with CPUs x CPUs per node", False, numa_layout),
    Property("gpu_numa", "NUMA node per GPU", True, gpu_numa),
    Property("pcie_width", "current PCIe link width per GPU", True, pcie_width),
    Property("pcie_gen", "maximum PCIe generation per GPU", True, pcie_gen),
    Property("nic", "nearest NIC(s) per GPU (bucket)", True, nics),
    Property("nvlink", "active NVLink links per GPU", True, nvlinks),
    Property("probe_node", "fastest measured NUMA node per GPU (probe)", True, probe_node),
    Property(
        "probe_pcie", "host<->GPU bandwidth against the PCIe promise (probe)", True, probe_pcie
    ),
    Property(
        "probe_nvlink", "GPU<->GPU bandwidth against the NVLink promise (probe)", True, probe_nvlink
    ),
    Property("tuning", "tuning profile and compliance", False, tuning),
    Property("audit_failed", "audit findings that FAILed", False, audit_failed),
)
