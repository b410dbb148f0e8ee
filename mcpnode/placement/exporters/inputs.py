"""What every exporter takes, and the few facts more than one of them derives.

An exporter is a pure function `render(topology, placement, audit) -> str`: the topology from
discovery (NVML merged), the placement from `plan_placement`, and an `AuditSummary` (or None
when the audit was not run: the exporter then leaves the audit lines out, never writes zeros).
"""

from __future__ import annotations

from dataclasses import dataclass

from mcpnode.audit.model import AuditReport, Status
from mcpnode.topology.matrix import nvlink_counts
from mcpnode.topology.model import Gpu, PciLink, Topology

# The tuning check's finding ids (audit/tuning.py): one FAIL `tuning.drift` per drifted key.
_DRIFT_ID = "tuning.drift"

# PCIe generation from the link rate sysfs reports (`current_link_speed`, GT/s): PCIe base spec
# rates per generation. 2.5 GT/s at idle is normal for GPUs (ASPM), not a fault.
_GEN_OF_GTS = {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5, 64.0: 6}


@dataclass(frozen=True)
class AuditSummary:
    """The audit and tuning state the exporters publish: counts per status (every status, in
    `Status` order, zeros included), the keys in drift, and the profile checked against.

    `tuning_compliant` is three-valued: True only when the audit's `tuning.drift` PASSed, False
    when it FAILed, None — unknown — otherwise (no active profile, no key readable, a key that
    could not be read, the profile did not load, the tuning area was skipped). Unknown is never
    published as compliant."""

    counts: tuple[tuple[str, int], ...]
    drift_keys: tuple[str, ...]
    profile: str | None
    tuning_compliant: bool | None
    # PCI addresses of the GPUs a finding about FAILed (manifest `gpus[].health`: unhealthy)
    unhealthy_gpus: tuple[str, ...] = ()

    def count(self, status: str) -> int:
        return dict(self.counts).get(status, 0)


def summarize(report: AuditReport) -> AuditSummary:
    """Reduce an audit report to what the exporters publish (pure)."""
    drift = sorted(
        {
            f.subject or f.summary
            for f in report.findings
            if f.id == _DRIFT_ID and f.status is Status.FAIL
        }
    )
    passed = any(f.id == _DRIFT_ID and f.status is Status.PASS for f in report.findings)
    compliant = False if drift else (True if passed else None)
    subjects = {f.subject for f in report.findings if f.status is Status.FAIL and f.subject}
    gpus = sorted(
        s
        for s in subjects
        if any(f.subject == s and f.id.startswith("gpu.") for f in report.findings)
    )
    return AuditSummary(
        counts=tuple((s.value, report.count(s)) for s in Status),
        drift_keys=tuple(drift),
        profile=report.profile,
        tuning_compliant=compliant,
        unhealthy_gpus=tuple(gpus),
    )


def gpu_name(gpu: Gpu) -> str | None:
    """NVML's product name (`NVIDIA H100 80GB HBM3`); None without NVML."""
    return gpu.nvml.name if gpu.nvml is not None else None


def short_model(name: str | None) -> str | None:
    """The model token of an NVML product name, lowercase: `NVIDIA H100 80GB HBM3` -> `h100`,
    `NVIDIA A100-SXM4-80GB` -> `a100`, `NVIDIA L40S` -> `l40s`, `Tesla V100-SXM2-16GB` -> `v100`.
    The vendor and brand words are skipped; None when nothing is left."""
    if not name:
        return None
    brands = {"nvidia", "tesla", "geforce", "quadro", "rtx"}
    for word in name.split():
        token = word.split("-", 1)[0].lower()
        if token and token not in brands:
            return token
    return None


def nvlink_by_index(topo: Topology) -> dict[tuple[int, int], int]:
    """NV# for each ordered pair of GPU indices (topology/matrix.py's nvlink_counts, keyed by
    index instead of PCI address). Both directions are present; self pairs are not."""
    index_of = {g.address: g.index for g in topo.gpus}
    return {
        (index_of[a], index_of[b]): n
        for (a, b), n in nvlink_counts(topo).items()
        if a in index_of and b in index_of
    }


def nvswitch_attached(topo: Topology) -> bool:
    """Any active NVLink lands on an NVSwitch (HGX/DGX baseboards)."""
    return any(
        link.active and link.remote_type == "SWITCH"
        for g in topo.gpus
        if g.nvml is not None
        for link in g.nvml.nvlinks
    )


def pcie_gen(speed_gts: float | None) -> int | None:
    """PCIe generation of a link rate in GT/s; None for an unknown or unlisted rate."""
    if speed_gts is None:
        return None
    return _GEN_OF_GTS.get(float(speed_gts))


@dataclass(frozen=True)
class GpuLink:
    """A GPU's PCIe link: sysfs first (what the kernel trained), NVML where sysfs is silent."""

    gen_current: int | None
    gen_max: int | None
    width_current: int | None
    width_max: int | None


def gpu_link(gpu: Gpu) -> GpuLink:
    link: PciLink = gpu.link
    n = gpu.nvml
    if n is None:
        return GpuLink(
            pcie_gen(link.current_speed_gts),
            pcie_gen(link.max_speed_gts),
            link.current_width,
            link.max_width,
        )
    return GpuLink(
        gen_current=_first(pcie_gen(link.current_speed_gts), n.pcie_gen_current),
        gen_max=_first(pcie_gen(link.max_speed_gts), n.pcie_gen_max),
        width_current=_first(link.current_width, n.pcie_width_current),
        width_max=_first(link.max_width, n.pcie_width_max),
    )


def _first(*values: int | None) -> int | None:
    for v in values:
        if v is not None:
            return v
    return None
