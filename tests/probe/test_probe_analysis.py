"""The probe's judgement (probe/analysis.py) on the recorded runs of the HGX and L40S fixtures,
and on variants of them that take each branch: noise, unmeasured nodes, pages off their node,
one node, no placed node, the WARN band, NVLink pairs refused, missing or of unknown speed."""

from __future__ import annotations

from collections.abc import Callable
from functools import cache

import pytest

from mcpnode.audit.model import Finding, Status
from mcpnode.codec.record import replace
from mcpnode.host import Host
from mcpnode.placement.plan import plan_placement
from mcpnode.probe.analysis import (
    NOISE_FLOOR,
    PCIE_FAIL,
    PCIE_WARN,
    ProbeReport,
    analyse,
    figure,
)
from mcpnode.probe.model import HostCase, PeerCase, ProbeRun, parse_run
from mcpnode.topology.discover import discover_host
from mcpnode.topology.model import Topology
from tests.support.proberoot import HOSTS, RUNS

HGX = "hgx-h100-8gpu-8nic"
L40S = "pcie-4x-l40s-2socket"


@cache
def topo(name: str) -> Topology:
    return discover_host(Host(HOSTS / name))


@cache
def recorded(name: str) -> ProbeRun:
    return parse_run((RUNS / f"{name}.json").read_text(), name)


def judge(name: str, run: ProbeRun | None = None, t: Topology | None = None) -> ProbeReport:
    t = t or topo(name)
    return analyse(t, plan_placement(t), run or recorded(name))


def by(report: ProbeReport, fid: str) -> dict[str | None, Finding]:
    return {f.subject: f for f in report.findings if f.id == fid}


def statuses(report: ProbeReport, fid: str) -> dict[str | None, Status]:
    return {s: f.status for s, f in by(report, fid).items()}


def edit_cases(run: ProbeRun, change: Callable[[HostCase], HostCase | None]) -> ProbeRun:
    cases = [change(c) for c in run.host_cases]
    return replace(run, host_cases=tuple(c for c in cases if c is not None))


# -- the recorded runs -------------------------------------------------------------------------


def test_hgx_downtrained_gpu_fails_pcie_and_only_it() -> None:
    report = judge(HGX)
    gpu5 = str(topo(HGX).gpus[5].address)
    pcie = statuses(report, "probe.pcie")
    assert pcie == {str(g.address): Status.PASS for g in topo(HGX).gpus} | {gpu5: Status.FAIL}
    f = by(report, "probe.pcie")[gpu5]
    assert "h2d 27.1, d2h 27.4 of 57.2 GB/s promised by Gen5 x16" in f.summary
    assert "link under load Gen5 x8" in f.summary
    assert f.remedy is not None and "trained x8 of x16" in f.remedy
    assert any("GT/s x16 /8 x 128b/130b" in e.value for e in f.evidence)
    # The narrow link is no placement fault: node 1 is still GPU 5's fastest.
    assert set(statuses(report, "probe.placement").values()) == {Status.PASS}
    assert report.gpus[5].fastest_node == 1


def test_hgx_nvlink_pairs_pass_over_the_fabric() -> None:
    report = judge(HGX)
    nv = by(report, "probe.nvlink")
    assert len(nv) == 56 and {f.status for f in nv.values()} == {Status.PASS}
    f = nv["GPU0->GPU1"]
    assert "of 450.0 GB/s over NV18 (NVLink 4.0)" in f.summary
    assert not [f for f in report.findings if f.id == "probe.p2p"]
    assert report.problems == ()


def test_l40s_remote_node_faster_fails_placement_with_both_figures() -> None:
    report = judge(L40S)
    placement = statuses(report, "probe.placement")
    gpu2 = str(topo(L40S).gpus[2].address)
    assert placement[gpu2] is Status.FAIL
    assert [s for a, s in placement.items() if a != gpu2] == [Status.PASS] * 3
    f = by(report, "probe.placement")[gpu2]
    assert "node 0 is faster than placement node 1: 26.4 vs 22.1 GB/s" in f.summary
    assert f.remedy is not None and "--membind=0" in f.remedy
    assert [e.source for e in f.evidence] == ["mcpnode probe: node 0", "mcpnode probe: node 1"]
    assert report.gpus[2].placed_node == 1 and report.gpus[2].fastest_node == 0


def test_l40s_pcie_peers_are_info_and_no_nvlink_is_skip() -> None:
    report = judge(L40S)
    assert statuses(report, "probe.nvlink") == {None: Status.SKIP}
    p2p = by(report, "probe.p2p")
    assert {f.status for f in p2p.values()} == {Status.INFO}
    assert "21.3 GB/s over PCIe, 0.74 of the smaller link's 28.6 GB/s" in p2p["GPU0->GPU1"].summary
    assert "no peer access" in p2p["GPU0->GPU2"].summary


# -- reduction ---------------------------------------------------------------------------------


def test_figure_is_median_spread_and_latency() -> None:
    f = figure((10.0, 12.0, 11.0, 30.0, 11.5), (2.0, 9.0, 2.2), None)
    assert (f.median_gbps, f.latency_us, f.samples) == (11.5, 2.2, 5)
    assert f.spread == pytest.approx(20.0 / 11.5)
    one = figure((10.0,), (), None)
    assert one.spread is None and one.latency_us is None
    assert figure((), (), None).error == "no samples"
    assert figure((1.0,), (), "cuMemHostRegister: CUDA_ERROR_OUT_OF_MEMORY").median_gbps is None


# -- placement ---------------------------------------------------------------------------------


def _scale(gpu: int, node: int, factor: float, name: str = L40S) -> Callable[[HostCase], HostCase]:
    address = topo(name).gpus[gpu].address

    def change(c: HostCase) -> HostCase:
        if c.gpu == address and c.node == node:
            return replace(c, samples_gbps=tuple(s * factor for s in c.samples_gbps))
        return c

    return change


def test_faster_within_noise_is_pass() -> None:
    """GPU 0's remote node made 3 % faster than its own: inside the 5 % floor, no verdict."""
    run = edit_cases(recorded(L40S), _scale(0, 1, 26.2 / 22.6 * 1.03))
    report = judge(L40S, run)
    f = by(report, "probe.placement")[str(topo(L40S).gpus[0].address)]
    assert report.gpus[0].fastest_node == 1
    assert f.status is Status.PASS and "within noise" in f.summary


def test_scattered_samples_widen_the_margin() -> None:
    """10 % faster is a verdict with steady samples, not when the samples scatter by 20 %."""
    address = topo(L40S).gpus[0].address
    faster = _scale(0, 1, 26.2 / 22.6 * 1.10)
    steady = judge(L40S, edit_cases(recorded(L40S), faster))
    assert statuses(steady, "probe.placement")[str(address)] is Status.FAIL

    def scatter(c: HostCase) -> HostCase:
        c = faster(c)
        if c.gpu == address and c.node == 1:
            s = list(c.samples_gbps)
            s[0] *= 0.8
            return replace(c, samples_gbps=tuple(s))
        return c

    noisy = judge(L40S, edit_cases(recorded(L40S), scatter))
    f = by(noisy, "probe.placement")[str(address)]
    assert f.status is Status.PASS and "noise margin 2" in f.summary
    assert NOISE_FLOOR == 0.05


def test_placed_node_not_measured_fails() -> None:
    address = topo(L40S).gpus[0].address

    def drop(c: HostCase) -> HostCase:
        if c.gpu == address and c.node == 0:
            return replace(c, samples_gbps=(), latency_us=(), error="could not pin to node 0")
        return c

    f = by(judge(L40S, edit_cases(recorded(L40S), drop)), "probe.placement")[str(address)]
    assert f.status is Status.FAIL
    assert "placement node 0 could not be measured" in f.summary
    assert "could not pin to node 0" in f.summary


def test_other_node_not_measured_is_not_verified() -> None:
    address = topo(L40S).gpus[0].address
    run = edit_cases(recorded(L40S), lambda c: None if c.gpu == address and c.node == 1 else c)
    f = by(judge(L40S, run), "probe.placement")[str(address)]
    assert f.status is Status.FAIL and "not verified: node(s) 1" in f.summary


def test_pages_off_their_node_are_not_a_measurement() -> None:
    address = topo(L40S).gpus[0].address

    def spill(c: HostCase) -> HostCase:
        if c.gpu == address and c.node == 1 and c.direction == "h2d":
            return replace(c, pages_on_node=60000)
        return c

    report = judge(L40S, edit_cases(recorded(L40S), spill))
    node1 = report.gpus[0].node(1)
    assert node1 is not None and node1.h2d.error is not None
    assert "60000 of 65536 pages" in node1.h2d.error
    assert statuses(report, "probe.placement")[str(address)] is Status.FAIL


def test_one_node_is_skip() -> None:
    t = topo(L40S)
    one = replace(t, numa_nodes=t.numa_nodes[:1])
    report = judge(L40S, None, one)
    assert set(statuses(report, "probe.placement").values()) == {Status.SKIP}


def test_no_placed_node_fails_and_names_the_fastest() -> None:
    t = topo(L40S)
    g = t.gpus[2]
    lost = replace(g, numa_node=None, numa_source="unknown", local_cpus=None)
    t2 = replace(t, gpus=(*t.gpus[:2], lost, *t.gpus[3:]))
    f = by(judge(L40S, None, t2), "probe.placement")[str(g.address)]
    assert f.status is Status.FAIL
    assert "names no NUMA node for it; node 0 measured fastest" in f.summary


def test_gpu_missing_from_run_and_run_gpu_missing_from_topology() -> None:
    run = recorded(L40S)
    gone = run.gpus[3].address
    other = replace(run.gpus[0], address=replace(gone, bus=0xEE))
    report = judge(L40S, replace(run, gpus=(*run.gpus[:3], other)))
    assert statuses(report, "probe.placement")[str(gone)] is Status.FAIL
    assert "not probed (not in the probe run)" in by(report, "probe.pcie")[str(gone)].summary
    assert report.problems == ("GPU 0000:ee:00.0 of the probe run is not in this topology",)


# -- PCIe --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ratio", "status"),
    [
        (0.95, Status.PASS),
        (PCIE_WARN + 0.01, Status.PASS),
        (0.70, Status.WARN),
        (0.59, Status.FAIL),
    ],
)
def test_pcie_bands(ratio: float, status: Status) -> None:
    """Every node of GPU 1 scaled so its best direction sits at `ratio` of 28.6 GB/s."""
    report = judge(L40S)
    g = report.gpus[1]
    worst = min(g.ratio("h2d") or 0, g.ratio("d2h") or 0)
    run = recorded(L40S)
    for node in (0, 1):
        run = edit_cases(run, _scale(1, node, ratio / worst))
    f = by(judge(L40S, run), "probe.pcie")[str(g.address)]
    assert f.status is status, f.summary
    assert PCIE_FAIL == 0.60


def test_above_the_model_is_said() -> None:
    run = recorded(L40S)
    for node in (0, 1):
        run = edit_cases(run, _scale(3, node, 1.4))
    f = by(judge(L40S, run), "probe.pcie")[str(topo(L40S).gpus[3].address)]
    assert f.status is Status.PASS and "above the model" in f.summary


def test_pcie_without_promise_or_measurement_fails() -> None:
    t = topo(L40S)
    g = t.gpus[0]
    blind = replace(g, link=replace(g.link, max_speed_gts=None, max_width=None), nvml=None)
    t2 = replace(t, gpus=(blind, *t.gpus[1:]))
    f = by(judge(L40S, None, t2), "probe.pcie")[str(g.address)]
    assert f.status is Status.FAIL and "generation or width is unknown" in f.summary
    run = edit_cases(
        recorded(L40S), lambda c: None if c.gpu == g.address and c.direction == "d2h" else c
    )
    f = by(judge(L40S, run), "probe.pcie")[str(g.address)]
    assert f.status is Status.FAIL and "d2h not measured from any node" in f.summary


def test_gpu_with_error_fails_both() -> None:
    run = recorded(L40S)
    broken = replace(run.gpus[0], error="no context: CUDA_ERROR_ECC_UNCORRECTABLE")
    report = judge(L40S, replace(run, gpus=(broken, *run.gpus[1:])))
    address = str(broken.address)
    for fid in ("probe.placement", "probe.pcie"):
        f = by(report, fid)[address]
        assert f.status is Status.FAIL and "CUDA_ERROR_ECC_UNCORRECTABLE" in f.summary


# -- NVLink ------------------------------------------------------------------------------------


def _peer(
    run: ProbeRun, src: int, dst: int, change: Callable[[PeerCase], PeerCase | None]
) -> ProbeRun:
    t = topo(HGX)
    a, b = t.gpus[src].address, t.gpus[dst].address
    out = []
    for c in run.peer_cases:
        if (c.src, c.dst) == (a, b):
            changed = change(c)
            if changed is not None:
                out.append(changed)
        else:
            out.append(c)
    return replace(run, peer_cases=tuple(out))


def test_nvlink_bands_refusal_and_absence() -> None:
    run = recorded(HGX)
    run = _peer(
        run, 0, 1, lambda c: replace(c, samples_gbps=tuple(s * 0.8 for s in c.samples_gbps))
    )
    run = _peer(
        run, 0, 2, lambda c: replace(c, samples_gbps=tuple(s * 0.6 for s in c.samples_gbps))
    )
    run = _peer(run, 0, 3, lambda c: replace(c, can_access=False, samples_gbps=(), latency_us=()))
    run = _peer(run, 0, 4, lambda c: None)
    run = _peer(
        run,
        0,
        5,
        lambda c: replace(
            c, samples_gbps=(), latency_us=(), error="cuMemcpyPeerAsync: CUDA_ERROR_LAUNCH_FAILED"
        ),
    )
    nv = statuses(judge(HGX, run), "probe.nvlink")
    assert nv["GPU0->GPU1"] is Status.WARN  # 0.66
    assert nv["GPU0->GPU2"] is Status.FAIL  # 0.50
    assert nv["GPU0->GPU3"] is Status.FAIL  # joined but no peer access
    assert nv["GPU0->GPU4"] is Status.FAIL  # not in the run
    assert nv["GPU0->GPU5"] is Status.FAIL  # not measured
    assert nv["GPU0->GPU6"] is Status.PASS
    found = by(judge(HGX, run), "probe.nvlink")
    assert "CUDA refuses peer access" in found["GPU0->GPU3"].summary
    assert "NVLink-joined but not in the probe run" in found["GPU0->GPU4"].summary
    assert "CUDA_ERROR_LAUNCH_FAILED" in found["GPU0->GPU5"].summary
