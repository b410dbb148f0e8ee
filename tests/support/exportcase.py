"""Shared inputs of the exporter tests: a recorded host's topology and placement (cached, they
are frozen), and a fixed audit summary so the goldens do not move when an audit check does."""

from __future__ import annotations

from functools import cache
from pathlib import Path

from mcpnode.host import Host
from mcpnode.placement.exporters.inputs import AuditSummary
from mcpnode.placement.plan import Placement, plan_placement
from mcpnode.topology.discover import discover_host
from mcpnode.topology.model import Topology

HOSTS = Path(__file__).resolve().parents[1] / "fixtures" / "hosts"
GOLDEN = Path(__file__).resolve().parents[1] / "fixtures" / "export"

FIXTURES = (
    "dgx-a100",
    "grace-hopper-gh200",
    "h100-nvl-pair",
    "hgx-h100-8gpu-8nic",
    "no-gpu-host",
    "pcie-4x-l40s-2socket",
    "single-gpu-kvm-vm-h100-pcie",
)

AUDIT = AuditSummary(
    counts=(("PASS", 40), ("WARN", 1), ("FAIL", 2), ("SKIP", 5), ("INFO", 1)),
    drift_keys=("net.core.somaxconn", "vm.swappiness"),
    profile="throughput",
    tuning_compliant=False,
)


@cache
def topology(name: str) -> Topology:
    with Host(HOSTS / name) as host:
        return discover_host(host)


@cache
def placement(name: str) -> Placement:
    return plan_placement(topology(name))
