"""A probe run judged against the topology and the placement. Pure: run, Topology and Placement
in, figures and findings out (docs/probe.md, "Findings").

Figures. Each case (GPU x node x direction, or GPU pair) is reduced to the **median** of its
samples (nvbandwidth reports the median of its samples too: `-i/--testSamples`, `--useMean` for
the mean), its **spread** (max - min) / median, and the median latency. A host case whose buffer
had pages off its node (move_pages said so) measured something else and counts as not measured.
A node's combined figure is the mean of its host->device and device->host medians; the fastest
node of a GPU is the one with the highest combined figure.

Findings, per GPU (subject: its PCI address) unless said:

* `probe.placement`: the node the placement binds the GPU's memory to (the manifest's
  `memory_nodes`) against every other node with CPUs. FAIL when another node's combined figure
  beats it by more than the noise margin: max(NOISE_FLOOR, the spread of either case), so a
  difference inside the samples' own scatter is never a verdict. FAIL too when it cannot be
  told (the placed node or another node not measured, or no placed node); SKIP with one node.
* `probe.pcie`: the best node's median per direction over the GPU's PCIe promise
  (expected.py). Below PCIE_FAIL -> FAIL, below PCIE_WARN -> WARN; no promise or no measurement
  -> FAIL (not verified).
* `probe.nvlink` (subject `GPUa->GPUb`): peer copies between NVLink-joined GPUs over the links'
  promise; NVLINK_FAIL / NVLINK_WARN likewise; a joined pair that cannot P2P or was not measured
  FAILs. One SKIP when no pair is joined by NVLink.
* `probe.p2p` (INFO, subject `GPUa->GPUb`): peer copies over PCIe against the smaller PCIe
  promise. Never a fault: P2P through a root complex (or redirected by ACS) is a platform's
  property, reported so that it can be compared.

The fractions. Azure's HPC health checks take a host out of service below 48 GB/s host<->device
and 335 GB/s device<->device on H100 and H200 (azurehpc-health-checks conf/nd96isr_h100_v5.conf
and nd96isr_h200_v5.conf: `check_gpu_bw 48 335`) and below 24 GB/s host<->device on A100
(conf/nd96asr_v4.conf: `check_cuda_bw 24`). Against the promises here those floors are 0.84 of a
Gen5 x16 link (48 of 57.2 GB/s), 0.84 of Gen4 x16 (24 of 28.6) and 0.74 of 18 NVLink 4.0 links
(335 of 450). mcpnode WARNs below those floors rounded down (PCIe 0.80, NVLink 0.70), since it
runs on platforms Azure did not tune, and FAILs below 0.60, where no platform explains the gap:
a link trained x8 of x16, or at half its generation, delivers about 0.5.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from mcpnode.audit.model import Evidence, Finding, Status
from mcpnode.placement.plan import Placement
from mcpnode.probe.expected import (
    NvlinkExpectation,
    PcieExpectation,
    gpu_pcie,
    pair_nvlink,
    pair_pcie,
)
from mcpnode.probe.model import HostCase, HostDirection, LinkState, PeerCase, ProbeRun
from mcpnode.topology.model import Gpu, PciAddress, Topology

NOISE_FLOOR = 0.05  # smallest margin between two nodes' figures that counts as a difference
PCIE_WARN = 0.80
PCIE_FAIL = 0.60
NVLINK_WARN = 0.70
NVLINK_FAIL = 0.60
ABOVE_MODEL = 1.10  # measured this far above the promise: the link figures are not the wire's

SOURCE = "mcpnode probe"


@dataclass(frozen=True)
class Figure:
    """One case reduced: median GB/s, spread, median latency; `error` when not measured."""

    median_gbps: float | None
    spread: float | None  # (max - min) / median; None with fewer than two samples
    latency_us: float | None
    samples: int
    error: str | None

    @property
    def measured(self) -> bool:
        return self.median_gbps is not None


@dataclass(frozen=True)
class NodeFigures:
    node: int
    cpus: str
    h2d: Figure
    d2h: Figure

    def direction(self, d: HostDirection) -> Figure:
        return self.h2d if d == "h2d" else self.d2h

    @property
    def combined_gbps(self) -> float | None:
        if self.h2d.median_gbps is None or self.d2h.median_gbps is None:
            return None
        return (self.h2d.median_gbps + self.d2h.median_gbps) / 2

    @property
    def spread(self) -> float:
        return max(self.h2d.spread or 0.0, self.d2h.spread or 0.0)


@dataclass(frozen=True)
class GpuFigures:
    index: int
    address: PciAddress
    name: str | None
    placed_node: int | None  # the placement's memory node; None when it has none
    nodes: tuple[NodeFigures, ...]  # by node id
    expected: PcieExpectation | None
    link_under_load: LinkState | None
    error: str | None  # the GPU was not measured at all

    def node(self, node_id: int | None) -> NodeFigures | None:
        return next((n for n in self.nodes if n.node == node_id), None)

    @property
    def fastest_node(self) -> int | None:
        scored = [(n.combined_gbps, -n.node) for n in self.nodes if n.combined_gbps is not None]
        return -max(scored)[1] if scored else None

    def best(self, d: HostDirection) -> Figure | None:
        """The highest median of direction `d` over the nodes (what the link itself can do)."""
        figs = [n.direction(d) for n in self.nodes if n.direction(d).measured]
        return max(figs, key=lambda f: f.median_gbps or 0.0) if figs else None

    def ratio(self, d: HostDirection) -> float | None:
        best = self.best(d)
        if best is None or best.median_gbps is None or self.expected is None:
            return None
        return best.median_gbps / self.expected.gbps


@dataclass(frozen=True)
class PeerFigures:
    src_index: int
    dst_index: int
    src: PciAddress
    dst: PciAddress
    can_access: bool
    nvlink: NvlinkExpectation | None  # the pair is NVLink-joined
    pcie: PcieExpectation | None
    figure: Figure

    @property
    def link(self) -> str:
        return "NVLink" if self.nvlink is not None else "PCIe"

    @property
    def expected_gbps(self) -> float | None:
        if self.nvlink is not None:
            return self.nvlink.gbps
        return self.pcie.gbps if self.pcie is not None else None

    @property
    def ratio(self) -> float | None:
        exp = self.expected_gbps
        if exp is None or self.figure.median_gbps is None:
            return None
        return self.figure.median_gbps / exp

    @property
    def subject(self) -> str:
        return f"GPU{self.src_index}->GPU{self.dst_index}"


@dataclass(frozen=True)
class ProbeReport:
    run: ProbeRun
    gpus: tuple[GpuFigures, ...]
    peers: tuple[PeerFigures, ...]
    findings: tuple[Finding, ...]
    problems: tuple[str, ...]


# -- reduction ---------------------------------------------------------------------------------


def figure(samples: Sequence[float], latency: Sequence[float], error: str | None) -> Figure:
    """Median, spread and median latency of one case's samples."""
    if error is not None or not samples:
        return Figure(None, None, None, len(samples), error or "no samples")
    # Here, not at import: the agent imports this module for the manifest's probe section and
    # would otherwise hold statistics, fractions, decimal and random for its whole life.
    import statistics

    med = statistics.median(samples)
    spread = (max(samples) - min(samples)) / med if len(samples) > 1 else None
    lat = statistics.median(latency) if latency else None
    return Figure(med, spread, lat, len(samples), None)


def _host_figure(case: HostCase | None) -> Figure:
    if case is None:
        return Figure(None, None, None, 0, "not measured")
    error = case.error
    on_node = case.pages_on_node
    if error is None and case.pages and on_node is not None and on_node < case.pages:
        error = (
            f"buffer not on node {case.node}: {on_node} of {case.pages} pages there (move_pages)"
        )
    return figure(case.samples_gbps, case.latency_us, error)


def placed_node(placement: Placement, address: PciAddress) -> int | None:
    """The one memory node the placement binds `address`'s work to, or None."""
    p = next((g for g in placement.gpus if g.address == address), None)
    if p is None or len(p.memory_nodes) != 1:
        return None
    return next(iter(p.memory_nodes))


def analyse(topo: Topology, placement: Placement, run: ProbeRun) -> ProbeReport:
    """Figures and findings for `run` on the machine `topo` describes (module docstring)."""
    problems = list(run.problems)
    known = {g.address for g in topo.gpus}
    for g in run.gpus:
        if g.address not in known:
            problems.append(f"GPU {g.address} of the probe run is not in this topology")
    cpu_nodes = sorted(n.id for n in topo.numa_nodes if n.has_cpus)
    gpus = tuple(_gpu_figures(gpu, topo, placement, run, cpu_nodes) for gpu in topo.gpus)
    index = {g.address: g.index for g in topo.gpus}
    peers = []
    for case in sorted(run.peer_cases, key=lambda c: (index.get(c.src, -1), index.get(c.dst, -1))):
        if case.src not in index or case.dst not in index:
            problems.append(f"peer case {case.src}->{case.dst} names a GPU not in this topology")
            continue
        peers.append(_peer(topo, case, index))
    findings = [
        *placement_findings(gpus, cpu_nodes),
        *pcie_findings(gpus),
        *nvlink_findings(topo, peers, index),
        *p2p_findings(peers),
    ]
    return ProbeReport(run, gpus, tuple(peers), tuple(findings), tuple(problems))


def _gpu_figures(
    gpu: Gpu, topo: Topology, placement: Placement, run: ProbeRun, cpu_nodes: list[int]
) -> GpuFigures:
    g = run.gpu(gpu.address)
    cases = {(c.node, c.direction): c for c in run.host_cases if c.gpu == gpu.address}
    nodes = sorted({n for n, _ in cases} | set(cpu_nodes)) if g is not None else []
    figs = []
    for node in nodes:
        h2d, d2h = cases.get((node, "h2d")), cases.get((node, "d2h"))
        cpus = next((c.cpus for c in (h2d, d2h) if c is not None), "")
        figs.append(NodeFigures(node, cpus, _host_figure(h2d), _host_figure(d2h)))
    return GpuFigures(
        index=gpu.index,
        address=gpu.address,
        name=g.name if g is not None else None,
        placed_node=placed_node(placement, gpu.address),
        nodes=tuple(figs),
        expected=gpu_pcie(gpu),
        link_under_load=g.link_under_load if g is not None else None,
        error=("not in the probe run" if g is None else g.error),
    )


def _peer(topo: Topology, case: PeerCase, index: dict[PciAddress, int]) -> PeerFigures:
    err = case.error if case.can_access else (case.error or "cuDeviceCanAccessPeer: no")
    return PeerFigures(
        src_index=index[case.src],
        dst_index=index[case.dst],
        src=case.src,
        dst=case.dst,
        can_access=case.can_access,
        nvlink=pair_nvlink(topo, case.src, case.dst),
        pcie=pair_pcie(topo, case.src, case.dst),
        figure=figure(case.samples_gbps, case.latency_us, err),
    )


# -- findings ----------------------------------------------------------------------------------


def _gbps(v: float | None) -> str:
    return "?" if v is None else f"{v:.1f}"


def _node_line(n: NodeFigures) -> str:
    def one(f: Figure) -> str:
        if not f.measured:
            return f"not measured ({f.error})"
        lat = "" if f.latency_us is None else f", {f.latency_us:.1f} us"
        return f"{_gbps(f.median_gbps)} GB/s (median of {f.samples}{lat})"

    return f"h2d {one(n.h2d)}; d2h {one(n.d2h)}; CPUs {n.cpus or '?'}"


def _node_evidence(g: GpuFigures) -> tuple[Evidence, ...]:
    return tuple(Evidence(f"{SOURCE}: node {n.node}", _node_line(n)) for n in g.nodes)


def placement_findings(gpus: Sequence[GpuFigures], cpu_nodes: Sequence[int]) -> list[Finding]:
    fid = "probe.placement"
    out = []
    for g in gpus:
        subject = str(g.address)
        name = f"GPU {g.index} ({g.address})"
        ev = _node_evidence(g)
        if g.error is not None:
            out.append(
                Finding(fid, Status.FAIL, f"{name}: not probed ({g.error})", ev, None, subject)
            )
            continue
        if len(cpu_nodes) < 2:
            out.append(
                Finding(
                    fid,
                    Status.SKIP,
                    f"{name}: one NUMA node with CPUs, no other node to compare with",
                    ev,
                    None,
                    subject,
                )
            )
            continue
        fastest = g.fastest_node
        best = g.node(fastest)
        if g.placed_node is None:
            where = (
                f"node {fastest} measured fastest" if fastest is not None else "no node measured"
            )
            out.append(
                Finding(
                    fid,
                    Status.FAIL,
                    f"{name}: the placement names no NUMA node for it; {where}",
                    ev,
                    "Fix the GPU's NUMA locality (firmware SRAT, or a VM's vNUMA) so placement can"
                    " bind it; meanwhile bind by hand to the fastest node (`numactl --membind`)",
                    subject,
                )
            )
            continue
        placed = g.node(g.placed_node)
        unmeasured = [n for n in g.nodes if n.combined_gbps is None]
        if placed is None or placed.combined_gbps is None:
            why = "not measured" if placed is None else _node_line(placed)
            out.append(
                Finding(
                    fid,
                    Status.FAIL,
                    f"{name}: placement node {g.placed_node} could not be measured ({why})",
                    ev,
                    "Run `mcpnode probe` as root on the host itself, outside a cpuset that"
                    f" excludes node {g.placed_node}",
                    subject,
                )
            )
            continue
        assert best is not None and best.combined_gbps is not None  # placed is measured
        margin = max(NOISE_FLOOR, placed.spread, best.spread)
        if fastest != g.placed_node and best.combined_gbps > placed.combined_gbps * (1 + margin):
            gain = best.combined_gbps / placed.combined_gbps - 1
            out.append(
                Finding(
                    fid,
                    Status.FAIL,
                    f"{name}: node {fastest} is faster than placement node {g.placed_node}:"
                    f" {_gbps(best.combined_gbps)} vs {_gbps(placed.combined_gbps)} GB/s"
                    f" (h2d+d2h mean, +{gain:.0%}, noise margin {margin:.0%})",
                    ev,
                    f"The GPU's reported NUMA node ({g.placed_node}) is not where its traffic is"
                    " fastest: check the firmware's PCIe-to-node map (SRAT/_PXM, NPS/SNC"
                    f" settings); until it is fixed, bind to node {fastest} by hand"
                    f" (`numactl --cpunodebind={fastest} --membind={fastest}`)",
                    subject,
                )
            )
            continue
        if unmeasured:
            out.append(
                Finding(
                    fid,
                    Status.FAIL,
                    f"{name}: not verified: node(s) {','.join(str(n.node) for n in unmeasured)}"
                    " could not be measured, so placement node"
                    f" {g.placed_node} cannot be shown the fastest",
                    ev,
                    "Run `mcpnode probe` as root on the host itself, outside a restricting cpuset",
                    subject,
                )
            )
            continue
        others = [n for n in g.nodes if n.node != g.placed_node]
        runner = max(others, key=lambda n: n.combined_gbps or 0.0)
        verdict = "the fastest" if fastest == g.placed_node else "as fast as any, within noise"
        out.append(
            Finding(
                fid,
                Status.PASS,
                f"{name}: placement node {g.placed_node} is {verdict}:"
                f" {_gbps(placed.combined_gbps)} GB/s vs node {runner.node}"
                f" {_gbps(runner.combined_gbps)} (noise margin {margin:.0%})",
                ev,
                None,
                subject,
            )
        )
    return out


def _link_words(g: GpuFigures) -> str:
    exp = g.expected
    load = g.link_under_load
    promised = f"promised {exp.label}" if exp is not None else "promise unknown"
    if load is None or (load.gen is None and load.width is None):
        return f"{promised}; link under load not read"
    now = f"Gen{load.gen or '?'} x{load.width or '?'}"
    return f"{promised}; link under load {now}"


def _pcie_remedy(g: GpuFigures) -> str:
    exp, load = g.expected, g.link_under_load
    if exp is not None and load is not None:
        if load.width is not None and load.width < exp.width:
            return (
                f"The link trained x{load.width} of x{exp.width}: reseat the GPU, check the riser,"
                " cable or retimer and the slot's lane bifurcation in the BIOS; `lspci -vv` LnkSta"
                " shows the trained width"
            )
        if load.gen is not None and load.gen < exp.gen:
            return (
                f"The link ran Gen{load.gen} of Gen{exp.gen} under load: check the BIOS PCIe speed"
                " setting, the riser or retimer, and the AER counters for a link that retrains"
            )
    return (
        "The link trained as promised but carries less: look for other DMA traffic during the"
        " probe, an IOMMU in translated mode (iommu=pt), and compare with nvbandwidth's"
        " host_to_device_memcpy_ce"
    )


def _status(ratio: float, warn: float, fail: float) -> Status:
    if ratio < fail:
        return Status.FAIL
    if ratio < warn:
        return Status.WARN
    return Status.PASS


def pcie_findings(gpus: Sequence[GpuFigures]) -> list[Finding]:
    fid = "probe.pcie"
    out = []
    for g in gpus:
        subject = str(g.address)
        name = f"GPU {g.index} ({g.address})"
        ev = (
            *_node_evidence(g),
            Evidence(f"{SOURCE}: link", _link_words(g)),
            *(
                (
                    Evidence(
                        "expected (docs/probe.md)",
                        f"{g.expected.label} {g.expected.gts:g} GT/s x{g.expected.width} /8 x"
                        f" {g.expected.encoding} {g.expected.encoding_efficiency:.3f} x TLP"
                        f" {g.expected.tlp_efficiency:.3f} = {g.expected.gbps:.1f} GB/s"
                        f" ({g.expected.source})",
                    ),
                )
                if g.expected is not None
                else ()
            ),
        )
        if g.error is not None:
            out.append(
                Finding(fid, Status.FAIL, f"{name}: not probed ({g.error})", ev, None, subject)
            )
            continue
        directions: tuple[HostDirection, ...] = ("h2d", "d2h")
        ratios = {d: g.ratio(d) for d in directions}
        best: dict[str, str] = {}
        for d in directions:
            top = g.best(d)
            best[d] = _gbps(top.median_gbps if top is not None else None)
        if g.expected is None:
            out.append(
                Finding(
                    fid,
                    Status.FAIL,
                    f"{name}: not verified: its PCIe link's generation or width is unknown"
                    " (neither sysfs max_link_* nor NVML says)",
                    ev,
                    None,
                    subject,
                )
            )
            continue
        missing = [d for d in directions if ratios[d] is None]
        if missing:
            out.append(
                Finding(
                    fid,
                    Status.FAIL,
                    f"{name}: not verified: {'/'.join(missing)} not measured from any node",
                    ev,
                    None,
                    subject,
                )
            )
            continue
        worst_dir = min(directions, key=lambda d: ratios[d] or 0.0)
        worst = ratios[worst_dir]
        assert worst is not None
        status = _status(worst, PCIE_WARN, PCIE_FAIL)
        figures = ", ".join(f"{d} {best[d]}" for d in directions)
        summary = (
            f"{name}: {figures} of {g.expected.gbps:.1f} GB/s promised by {g.expected.label}"
            f" ({worst_dir} {worst:.2f} of expected"
        )
        if status is Status.PASS:
            above = min(r for r in ratios.values() if r is not None) > ABOVE_MODEL
            note = "; above the model: the link figures are not the wire's" if above else ""
            summary += f"{note})"
        else:
            limit = PCIE_FAIL if status is Status.FAIL else PCIE_WARN
            summary += f", below {limit:.2f}; {_link_words(g)})"
        out.append(
            Finding(
                fid,
                status,
                summary,
                ev,
                None if status is Status.PASS else _pcie_remedy(g),
                subject,
            )
        )
    return out


def _peer_evidence(p: PeerFigures) -> Evidence:
    f = p.figure
    got = (
        f"{_gbps(f.median_gbps)} GB/s (median of {f.samples}"
        + ("" if f.latency_us is None else f", {f.latency_us:.1f} us")
        + ")"
        if f.measured
        else f"not measured ({f.error})"
    )
    if p.nvlink is not None:
        exp = p.nvlink.label + (
            f" x {p.nvlink.per_link_gbps:g} GB/s = {p.nvlink.gbps:.0f} GB/s"
            if p.nvlink.gbps is not None
            else ": no per-link rate known for this version"
        )
    else:
        exp = f"PCIe {p.pcie.label} {p.pcie.gbps:.1f} GB/s" if p.pcie is not None else "unknown"
    return Evidence(f"{SOURCE}: {p.subject} ({p.src}->{p.dst})", f"{got}; expected {exp}")


def nvlink_findings(
    topo: Topology, peers: Sequence[PeerFigures], index: dict[PciAddress, int]
) -> list[Finding]:
    fid = "probe.nvlink"
    joined = [p for p in peers if p.nvlink is not None]
    measured_pairs = {(p.src, p.dst) for p in peers}
    # NVLink-joined pairs the run holds no case for at all: not verified.
    missing = [
        (a, b)
        for a in index
        for b in index
        if a != b and pair_nvlink(topo, a, b) is not None and (a, b) not in measured_pairs
    ]
    if not joined and not missing:
        return [Finding(fid, Status.SKIP, "no GPU pair is joined by NVLink", (), None, None)]
    out = []
    for a, b in missing:
        out.append(
            Finding(
                fid,
                Status.FAIL,
                f"GPU{index[a]}->GPU{index[b]}: NVLink-joined but not in the probe run",
                (),
                None,
                f"GPU{index[a]}->GPU{index[b]}",
            )
        )
    for p in joined:
        assert p.nvlink is not None
        ev = (_peer_evidence(p),)
        if not p.can_access:
            out.append(
                Finding(
                    fid,
                    Status.FAIL,
                    f"{p.subject}: joined by {p.nvlink.label} but CUDA refuses peer access",
                    ev,
                    "Check Fabric Manager (`systemctl status nvidia-fabricmanager`) and"
                    " `nvidia-smi topo -p2p n`",
                    p.subject,
                )
            )
            continue
        ratio = p.ratio
        if ratio is None:
            why = (
                f"not measured ({p.figure.error})"
                if not p.figure.measured
                else f"no per-link rate known for NVLink {p.nvlink.version}"
            )
            out.append(
                Finding(fid, Status.FAIL, f"{p.subject}: not verified: {why}", ev, None, p.subject)
            )
            continue
        status = _status(ratio, NVLINK_WARN, NVLINK_FAIL)
        summary = (
            f"{p.subject}: {_gbps(p.figure.median_gbps)} of {_gbps(p.expected_gbps)} GB/s over"
            f" {p.nvlink.label} ({ratio:.2f} of expected"
        )
        if status is not Status.PASS:
            summary += f", below {NVLINK_FAIL if status is Status.FAIL else NVLINK_WARN:.2f}"
        out.append(
            Finding(
                fid,
                status,
                summary + ")",
                ev,
                None
                if status is Status.PASS
                else "Check the NVLink error counters (`nvidia-smi nvlink -e`) and link states"
                " (`nvidia-smi nvlink -s`); on NVSwitch systems the fabric (`nvidia-smi -q |"
                " grep -A3 Fabric`)",
                p.subject,
            )
        )
    return out


def p2p_findings(peers: Sequence[PeerFigures]) -> list[Finding]:
    out = []
    for p in peers:
        if p.nvlink is not None:
            continue
        if not p.can_access:
            summary = f"{p.subject}: no peer access over PCIe (cuDeviceCanAccessPeer)"
        elif p.ratio is None:
            summary = f"{p.subject}: peer copies over PCIe not measured ({p.figure.error})"
        else:
            summary = (
                f"{p.subject}: {_gbps(p.figure.median_gbps)} GB/s over PCIe,"
                f" {p.ratio:.2f} of the smaller link's {_gbps(p.expected_gbps)} GB/s"
            )
        out.append(
            Finding("probe.p2p", Status.INFO, summary, (_peer_evidence(p),), None, p.subject)
        )
    return out
