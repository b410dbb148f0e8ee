"""Recorded probe runs (`mcpnode.probe/v1`) for the fixture hosts, plausible rather than measured.

    python3 tools/fixturegen/probegen.py --out tests/fixtures/probe

writes one `<fixture>.json` per case below; tests/probe/test_probe_model.py checks the committed
files match. A test drops one into a copy of its fixture as `mcpnode-probe.json` (the place
`mcpnode snapshot --probe` puts it), so the fixtures themselves stay as
tools/fixturegen/fixturegen.py makes them.

The figures, per direction and GB/s, with a small deterministic scatter (seeded, +-0.6 %):

* hgx-h100-8gpu-8nic: Gen5 x16 GPUs behind PCIe switches; from the GPU's own node 55.2 h2d and
  55.9 d2h (0.96-0.98 of the 57.2 GB/s promise), from the other socket 48.6 / 51.3 (UPI in the
  path); 2.1 us local and 2.8 us remote small-copy latency. GPU 5 trained **x8** (NVML reads
  Gen5 x8 under load): half of that. Peer copies over the NVSwitch fabric 372 GB/s (0.83 of 18
  NVLink 4.0 links' 450), 3.4 us.
* pcie-4x-l40s-2socket: Gen4 x16 L40S, 25.9 / 26.4 local, 22.0 / 23.1 remote. GPU 2 (node 1 by
  sysfs, so by the placement) is **faster from node 0**: 26.1 / 26.5 against 21.7 / 22.6, as when
  firmware reports a slot on the wrong socket. Peer access is modelled within a socket (PCIe
  through the root complex, 21.3 GB/s) and refused across sockets.
"""

from __future__ import annotations

import argparse
import random
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from mcpnode.host import Host
from mcpnode.probe.model import (
    GpuRun,
    HostCase,
    LinkState,
    PeerCase,
    ProbeRun,
    Settings,
    dumps,
)
from mcpnode.topology.discover import discover_host
from mcpnode.topology.model import Gpu, Topology

HOSTS = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "hosts"
SETTINGS = Settings(
    buffer_bytes=256 << 20,
    copies_per_sample=8,
    samples=5,
    warmup_copies=4,
    latency_bytes=8,
    latency_copies=50,
)
SCATTER = 0.006


@dataclass(frozen=True)
class Figures:
    h2d: float
    d2h: float
    latency_us: float


@dataclass(frozen=True)
class Case:
    fixture: str
    measured_at: str
    cuda: str
    name: str
    # (topology, GPU, node) -> the figures from that node
    host: Callable[[Topology, Gpu, int], Figures]
    link: Callable[[Gpu], LinkState]
    # (topology, src, dst) -> (can access, GB/s, latency us)
    peer: Callable[[Topology, Gpu, Gpu], tuple[bool, float, float]]


def _home(gpu: Gpu) -> int:
    assert gpu.numa_node is not None
    return gpu.numa_node


def _hgx_host(topo: Topology, gpu: Gpu, node: int) -> Figures:
    local = node == _home(gpu)
    f = Figures(55.2, 55.9, 2.1) if local else Figures(48.6, 51.3, 2.8)
    if gpu.index == 5:  # trained x8: half the lanes
        return Figures(f.h2d * 0.49, f.d2h * 0.49, f.latency_us)
    return f


def _l40s_host(topo: Topology, gpu: Gpu, node: int) -> Figures:
    if gpu.index == 2:  # the slot is really on socket 0
        return Figures(26.1, 26.5, 2.3) if node == 0 else Figures(21.7, 22.6, 3.1)
    local = node == _home(gpu)
    return Figures(25.9, 26.4, 2.3) if local else Figures(22.0, 23.1, 3.1)


def _l40s_peer(topo: Topology, a: Gpu, b: Gpu) -> tuple[bool, float, float]:
    same = _home(a) == _home(b)
    return same, 21.3, 5.6


CASES: tuple[Case, ...] = (
    Case(
        fixture="hgx-h100-8gpu-8nic",
        measured_at="2026-11-30T09:14:05+00:00",
        cuda="12.8",
        name="NVIDIA H100 80GB HBM3",
        host=_hgx_host,
        link=lambda g: LinkState(5, 8 if g.index == 5 else 16),
        peer=lambda topo, a, b: (True, 372.0, 3.4),
    ),
    Case(
        fixture="pcie-4x-l40s-2socket",
        measured_at="2026-11-30T09:20:41+00:00",
        cuda="12.4",
        name="NVIDIA L40S",
        host=_l40s_host,
        link=lambda g: LinkState(4, 16),
        peer=_l40s_peer,
    ),
)


def _samples(rng: random.Random, mean: float, n: int) -> tuple[float, ...]:
    return tuple(round(mean * (1 + rng.uniform(-SCATTER, SCATTER)), 3) for _ in range(n))


def build(case: Case, hosts: Path = HOSTS) -> ProbeRun:
    topo = discover_host(Host(hosts / case.fixture))
    rng = random.Random(case.fixture)
    n = SETTINGS.samples
    nodes = sorted(node.id for node in topo.numa_nodes if node.has_cpus)
    host_cases = []
    for gpu in topo.gpus:
        for node in nodes:
            f = case.host(topo, gpu, node)
            cpus = next(x.cpus for x in topo.numa_nodes if x.id == node)
            pages = SETTINGS.buffer_bytes // 4096
            for direction, mean in (("h2d", f.h2d), ("d2h", f.d2h)):
                host_cases.append(
                    HostCase(
                        gpu=gpu.address,
                        node=node,
                        direction=direction,  # type: ignore[arg-type]
                        cpus=cpus.cpulist(),
                        samples_gbps=_samples(rng, mean, n),
                        latency_us=_samples(rng, f.latency_us, n),
                        pages=pages,
                        pages_on_node=pages,
                        error=None,
                    )
                )
    peer_cases = []
    for a in topo.gpus:
        for b in topo.gpus:
            if a is b:
                continue
            can, gbps, lat = case.peer(topo, a, b)
            peer_cases.append(
                PeerCase(
                    a.address,
                    b.address,
                    can,
                    _samples(rng, gbps, n) if can else (),
                    _samples(rng, lat, n) if can else (),
                    None,
                )
            )
    return ProbeRun(
        measured_at=case.measured_at,
        mcpnode_version="0.1.0",
        hostname=topo.identity.hostname,
        cuda_driver_version=case.cuda,
        bindings_version="12.9.0",
        settings=SETTINGS,
        gpus=tuple(GpuRun(g.address, case.name, case.link(g), None) for g in topo.gpus),
        host_cases=tuple(host_cases),
        peer_cases=tuple(peer_cases),
        problems=(),
    )


def text(fixture: str) -> str:
    (case,) = [c for c in CASES if c.fixture == fixture]
    return dumps(build(case))


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    for case in CASES:
        path = args.out / f"{case.fixture}.json"
        path.write_text(dumps(build(case)))
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
