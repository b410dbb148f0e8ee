"""What the links promise (probe/expected.py): the PCIe formula per generation, the GPU's own
link at its capability on the fixture hosts, NVLink per version and per pair."""

from __future__ import annotations

from functools import cache

import pytest

from mcpnode.codec.record import replace
from mcpnode.host import Host
from mcpnode.probe.expected import gpu_pcie, pair_nvlink, pair_pcie, pcie_rate
from mcpnode.topology.discover import discover_host
from mcpnode.topology.model import PciLink, Topology
from tests.support.proberoot import HOSTS


@cache
def topo(name: str) -> Topology:
    return discover_host(Host(HOSTS / name))


@pytest.mark.parametrize(
    ("gen", "width", "encoding", "raw", "gbps"),
    [
        # GT/s x lanes / 8, x encoding, x 256/(256 + per-TLP overhead)
        (1, 16, "8b/10b", 5.0, 5.0 * 0.8 * 256 / 280),
        (2, 16, "8b/10b", 10.0, 10.0 * 0.8 * 256 / 280),
        (3, 16, "128b/130b", 16.0, 16.0 * 128 / 130 * 256 / 282),
        (4, 16, "128b/130b", 32.0, 32.0 * 128 / 130 * 256 / 282),
        (4, 8, "128b/130b", 16.0, 16.0 * 128 / 130 * 256 / 282),
        (5, 16, "128b/130b", 64.0, 64.0 * 128 / 130 * 256 / 282),
        (6, 16, "FLIT 236/256", 128.0, 128.0 * 236 / 256 * 256 / 272),
        (7, 16, "FLIT 236/256", 256.0, 256.0 * 236 / 256 * 256 / 272),
    ],
)
def test_pcie_formula(gen: int, width: int, encoding: str, raw: float, gbps: float) -> None:
    e = pcie_rate(gen, width)
    assert e is not None
    assert (e.encoding, e.raw_gbps) == (encoding, raw)
    assert e.gbps == pytest.approx(gbps)


def test_headline_figures() -> None:
    """The numbers docs/probe.md and the findings quote."""
    g5, g4 = pcie_rate(5, 16), pcie_rate(4, 16)
    assert g5 is not None and g4 is not None
    assert round(g5.gbps, 1) == 57.2
    assert round(g4.gbps, 1) == 28.6


@pytest.mark.parametrize(("gen", "width"), [(0, 16), (8, 16), (5, 0)])
def test_pcie_outside_the_spec_is_unknown(gen: int, width: int) -> None:
    assert pcie_rate(gen, width) is None


def test_gpu_link_at_capability_not_idle_speed() -> None:
    """The L40S fixture's GPUs idle at 2.5 GT/s; the promise is their Gen4 x16 capability."""
    (g, *_) = topo("pcie-4x-l40s-2socket").gpus
    assert g.link.current_speed_gts == 2.5
    e = gpu_pcie(g)
    assert e is not None and e.label == "Gen4 x16"
    assert "NVML" in e.source and "sysfs" in e.source


def test_vm_emulated_root_port_is_not_the_promise() -> None:
    """The KVM guest's QEMU root port reads 16 GT/s x32; the H100 behind it is Gen5 x16."""
    t = topo("single-gpu-kvm-vm-h100-pcie")
    (g,) = t.gpus
    port = t.pci(t.pci(g.address).ancestors[-1])  # type: ignore[union-attr]
    assert port is not None and port.link.max_speed_gts == 16.0
    e = gpu_pcie(g)
    assert e is not None and e.label == "Gen5 x16"


def test_nvml_max_lowers_the_promise() -> None:
    """A Gen5 card in a Gen4 slot: NVML's max (device and system) wins over the GPU's own."""
    (g, *_) = topo("hgx-h100-8gpu-8nic").gpus
    assert g.nvml is not None
    slot = replace(g, nvml=replace(g.nvml, pcie_gen_max=4, pcie_width_max=8))
    e = gpu_pcie(slot)
    assert e is not None and e.label == "Gen4 x8"


def test_unknown_link_gives_no_promise() -> None:
    (g, *_) = topo("hgx-h100-8gpu-8nic").gpus
    bare = replace(g, link=PciLink(None, None, None, None), nvml=None)
    assert gpu_pcie(bare) is None
    only_nvml = replace(g, link=PciLink(None, None, None, None))
    e = gpu_pcie(only_nvml)
    assert e is not None and e.label == "Gen5 x16" and e.source == "NVML max generation/width"


@pytest.mark.parametrize(
    ("fixture", "links", "version", "gbps"),
    [
        ("hgx-h100-8gpu-8nic", 18, "4.0", 450.0),  # NVSwitch fabric, NV18
        ("dgx-a100", 12, "3.1", 300.0),  # NVML enum 5: NVLink 3.1
        ("h100-nvl-pair", 12, "4.0", 300.0),  # direct bridges
    ],
)
def test_nvlink_pairs(fixture: str, links: int, version: str, gbps: float) -> None:
    t = topo(fixture)
    a, b = t.gpus[0].address, t.gpus[1].address
    e = pair_nvlink(t, a, b)
    assert e is not None
    assert (e.links, e.version, e.gbps) == (links, version, gbps)


def test_inactive_bridge_is_no_nvlink() -> None:
    t = topo("h100-nvl-pair-inactive")
    a, b = t.gpus[0].address, t.gpus[1].address
    assert pair_nvlink(t, a, b) is None
    e = pair_pcie(t, a, b)
    assert e is not None and e.label == "Gen5 x16"


def test_unknown_nvlink_version_has_no_rate() -> None:
    t = topo("h100-nvl-pair")
    a, b = t.gpus
    assert a.nvml is not None
    newer = replace(a.nvml, nvlinks=tuple(replace(x, version="6.0") for x in a.nvml.nvlinks))
    t2 = replace(t, gpus=(replace(a, nvml=newer), b))
    e = pair_nvlink(t2, a.address, b.address)
    assert e is not None and e.links == 12 and e.per_link_gbps is None and e.gbps is None


def test_pcie_pair_is_the_smaller_promise() -> None:
    t = topo("pcie-4x-l40s-2socket")
    a, b = t.gpus[0], t.gpus[1]
    narrow = replace(b, link=replace(b.link, max_width=8), nvml=None)
    t2 = replace(t, gpus=(a, narrow, *t.gpus[2:]))
    e = pair_pcie(t2, a.address, b.address)
    assert e is not None and e.label == "Gen4 x8"
    assert pair_nvlink(t2, a.address, b.address) is None
