"""What a link should carry, from the topology alone. Pure: model in, GB/s out.

**PCIe** (per direction; GB/s = 10^9 bytes/s):

    expected = GT/s x lanes / 8  x  encoding efficiency  x  TLP efficiency

* Encoding (PCI Express Base Specification): Gen1 2.5 GT/s and Gen2 5 GT/s use 8b/10b (0.8);
  Gen3 8, Gen4 16, Gen5 32 GT/s use 128b/130b (0.985); Gen6 64 and Gen7 128 GT/s send 256-byte
  FLITs of which 236 bytes carry TLPs (the rest: 6 bytes DLLP, 8 CRC, 6 FEC), 0.922.
* TLP efficiency: a copy moves data in TLPs of at most the Max Payload Size, taken as 256
  bytes (the usual server setting; `lspci -vv` DevCtl MaxPayload shows a host's), each with a
  4-DW header (16 bytes, 64-bit addresses) and per-TLP link overhead: Gen1-2 STP+END framing
  (2) + sequence number (2) + LCRC (4); Gen3-5 a 4-byte STP token + sequence (2) + LCRC (4);
  FLIT mode none per TLP (sequence and CRC are per FLIT). 256/(256+24) = 0.914 for Gen1-2,
  256/(256+26) = 0.908 for Gen3-5, 256/(256+16) = 0.941 for Gen6-7.
  Not modelled, and left to the fractions in analysis.py: flow-control and ACK DLLPs and SKP
  ordered sets (a few per cent), and root complexes that split a device's read completions at
  the 64-byte Read Completion Boundary (host->device copies are device reads).
  Gen5 x16: 32 x 16 / 8 x 128/130 x 256/282 = 57.2 GB/s; Gen4 x16: 28.6 GB/s.

* Which link: the GPU's own, at its capability: `max_link_speed` and `max_link_width` of the
  GPU function, lowered to NVML's "max possible with this device and system" generation and
  width when NVML answered (a Gen5 card in a Gen4 slot is promised Gen4). The *current* width
  is not the promise: a GPU trained x8 of x16 is the fault the probe is there to show. Links
  above the GPU (switch, root port) are left out: on servers they are at least as fast as the
  GPU's, and a VM's root ports are emulated and report made-up figures (QEMU's pcie-root-port
  says 16 GT/s x32 whatever the hardware).

**NVLink** (per direction): active links x per-link rate by NVLink version. 1.0: 20 GB/s;
2.0 to 4.0: 25 GB/s (hwloc `topology-nvml.c` builds its NVLinkBandwidth matrix the same way;
NVIDIA's figures: V100 6 links 300 GB/s, A100 12 links 600 GB/s, H100 18 links 900 GB/s, all
both directions together); 5.0: 50 GB/s (Blackwell: 18 links, 1.8 TB/s both directions). Other
versions (6.0) have no rate here: the expectation is unknown, never guessed. Between two GPUs
the links are those of nvidia-smi's `NV#` (topology/matrix.py): direct links to the peer, or
on an NVSwitch fabric all of a GPU's switch links (the smaller count of the two).

Peer copies between GPUs without NVLink cross both GPUs' PCIe links: the smaller promise.
"""

from __future__ import annotations

from dataclasses import dataclass

from mcpnode.topology.matrix import nvlink_counts
from mcpnode.topology.model import Gpu, PciAddress, Topology

MAX_PAYLOAD_BYTES = 256

# Generation by transfer rate in GT/s (PCI Express Base Specification 1.0 to 7.0).
GEN_BY_GTS = {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5, 64.0: 6, 128.0: 7}
GTS_BY_GEN = {gen: gts for gts, gen in GEN_BY_GTS.items()}

# (encoding name, encoding efficiency, per-TLP overhead bytes besides the payload)
_ENCODING: dict[int, tuple[str, float, int]] = {
    1: ("8b/10b", 8 / 10, 16 + 2 + 2 + 4),
    2: ("8b/10b", 8 / 10, 16 + 2 + 2 + 4),
    3: ("128b/130b", 128 / 130, 16 + 4 + 2 + 4),
    4: ("128b/130b", 128 / 130, 16 + 4 + 2 + 4),
    5: ("128b/130b", 128 / 130, 16 + 4 + 2 + 4),
    6: ("FLIT 236/256", 236 / 256, 16),
    7: ("FLIT 236/256", 236 / 256, 16),
}

# Per link, per direction, GB/s, by the NVLink version string the model holds ("3.1" on A100).
NVLINK_GBPS: dict[str, float] = {
    "1.0": 20.0,
    "2.0": 25.0,
    "2.2": 25.0,
    "3.0": 25.0,
    "3.1": 25.0,
    "4.0": 25.0,
    "5.0": 50.0,
}


@dataclass(frozen=True)
class PcieExpectation:
    gen: int
    width: int
    encoding: str
    encoding_efficiency: float
    tlp_efficiency: float
    source: str  # where speed and width came from ("sysfs max_link_*, NVML max")

    @property
    def gts(self) -> float:
        return GTS_BY_GEN[self.gen]

    @property
    def raw_gbps(self) -> float:
        """Line rate before encoding: GT/s x lanes / 8."""
        return self.gts * self.width / 8

    @property
    def gbps(self) -> float:
        """What copies can reach: after encoding and TLP overhead."""
        return self.raw_gbps * self.encoding_efficiency * self.tlp_efficiency

    @property
    def label(self) -> str:
        return f"Gen{self.gen} x{self.width}"


@dataclass(frozen=True)
class NvlinkExpectation:
    links: int
    version: str | None
    per_link_gbps: float | None  # None: no rate known for this version

    @property
    def gbps(self) -> float | None:
        return None if self.per_link_gbps is None else self.links * self.per_link_gbps

    @property
    def label(self) -> str:
        return f"NV{self.links}" + (f" (NVLink {self.version})" if self.version else "")


def pcie_rate(gen: int, width: int, source: str = "") -> PcieExpectation | None:
    """The expectation for a link of generation `gen` and `width` lanes; None for a generation
    outside 1..7 or a width below 1."""
    if gen not in _ENCODING or width < 1:
        return None
    name, eff, overhead = _ENCODING[gen]
    return PcieExpectation(
        gen=gen,
        width=width,
        encoding=name,
        encoding_efficiency=eff,
        tlp_efficiency=MAX_PAYLOAD_BYTES / (MAX_PAYLOAD_BYTES + overhead),
        source=source,
    )


def gpu_pcie(gpu: Gpu) -> PcieExpectation | None:
    """The promise of `gpu`'s own link (module docstring); None when neither sysfs nor NVML
    gives both a generation and a width."""
    link = gpu.link
    gen = GEN_BY_GTS.get(link.max_speed_gts) if link.max_speed_gts is not None else None
    width = link.max_width if link.max_width else None
    sources = ["sysfs max_link_speed/width"] if gen is not None or width is not None else []
    f = gpu.nvml
    if f is not None and (f.pcie_gen_max or f.pcie_width_max):
        if f.pcie_gen_max:
            gen = min(gen, f.pcie_gen_max) if gen is not None else f.pcie_gen_max
        if f.pcie_width_max:
            width = min(width, f.pcie_width_max) if width is not None else f.pcie_width_max
        sources.append("NVML max generation/width")
    if gen is None or width is None:
        return None
    return pcie_rate(gen, width, ", ".join(sources))


def pair_nvlink(topo: Topology, a: PciAddress, b: PciAddress) -> NvlinkExpectation | None:
    """The NVLinks joining GPUs `a` and `b` (nvidia-smi's NV#), None when they are not joined."""
    n = nvlink_counts(topo).get((a, b))
    if n is None:
        return None
    gpu = next((g for g in topo.gpus if g.address == a), None)
    versions = sorted(
        {
            link.version
            for link in (gpu.nvml.nvlinks if gpu is not None and gpu.nvml is not None else ())
            if link.active and link.version is not None
        }
    )
    # Mixed versions on one GPU do not happen on real parts; the lowest rate is the safe promise.
    rates = [NVLINK_GBPS[v] for v in versions if v in NVLINK_GBPS]
    version = versions[0] if len(versions) == 1 else ("/".join(versions) or None)
    per_link = min(rates) if rates and len(rates) == len(versions) else None
    return NvlinkExpectation(n, version, per_link)


def pair_pcie(topo: Topology, a: PciAddress, b: PciAddress) -> PcieExpectation | None:
    """Peer copies over PCIe cross both GPUs' links: the smaller promise of the two."""
    ga = next((g for g in topo.gpus if g.address == a), None)
    gb = next((g for g in topo.gpus if g.address == b), None)
    ea = gpu_pcie(ga) if ga is not None else None
    eb = gpu_pcie(gb) if gb is not None else None
    if ea is None or eb is None:
        return None
    return ea if ea.gbps <= eb.gbps else eb
