"""The CPU partition of a GPU host, as the tuning engine needs it for `[irq]`: the housekeeping
CPUs (left to the OS, interrupts and the agent) and the GPU slices (kept for inference), with
each NUMA node's CPUs. It comes from the published manifest or from discovery and placement,
both above this layer (mcpnode/placement/partition.py builds it); tuning only reads it. Pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from mcpnode.tuning.cpulist import format_list, parse
from mcpnode.tuning.paths import (
    BOOTLOADER_KEY,
    CONFINE_KEY,
    IRQ_POLICY_KEY,
    IRQ_RPS_KEY,
    IRQBALANCE_KEY,
)


@dataclass(frozen=True)
class CpuPartition:
    """`housekeeping`: every housekeeping CPU; `slices`: the union of the GPUs' exclusive
    slices; `node_cpus`: NUMA node id -> its CPUs; `source`: where it came from, for people
    (`manifest /run/mcpnode/manifest.json`, `discovery`)."""

    housekeeping: frozenset[int]
    slices: frozenset[int]
    node_cpus: Mapping[int, frozenset[int]]
    source: str

    def housekeeping_of(self, node: int | None) -> frozenset[int]:
        """Where a device on `node` should take its interrupts: the housekeeping CPUs of that
        node; all housekeeping CPUs when the node is unknown (-1), has none, or is CPU-less."""
        if node is not None:
            local = self.housekeeping & self.node_cpus.get(node, frozenset())
            if local:
                return local
        return self.housekeeping

    def describe(self) -> str:
        return (
            f"housekeeping {format_list(self.housekeeping) or 'none'}, GPU slices "
            f"{format_list(self.slices) or 'none'} ({self.source})"
        )


def from_manifest(doc: Mapping[str, object], source: str) -> CpuPartition:
    """The partition a manifest publishes (`placement.housekeeping_cpus`, the GPUs'
    `slice_cpus`, `numa_nodes[].cpus`), for readers below the placement layer (the audit).
    Raises ValueError naming the field that is not usable."""
    placement = doc.get("placement")
    nodes = doc.get("numa_nodes")
    if not isinstance(placement, dict) or not isinstance(nodes, list):
        raise ValueError("no placement or numa_nodes section")
    gpus = placement.get("gpus")
    if not isinstance(gpus, list):
        raise ValueError("placement.gpus is not a list")
    slices: set[int] = set()
    for gpu in gpus:
        slices |= parse(_text(gpu, "slice_cpus"))
    node_cpus = {}
    for node in nodes:
        if not isinstance(node, dict) or not isinstance(node.get("id"), int):
            raise ValueError("numa_nodes[].id is not a number")
        node_cpus[int(node["id"])] = parse(_text(node, "cpus"))
    hk = parse(_text(placement, "housekeeping_cpus"))
    return CpuPartition(hk, frozenset(slices), node_cpus, source)


def _text(obj: object, key: str) -> str:
    value = obj.get(key) if isinstance(obj, dict) else None
    if not isinstance(value, str):
        raise ValueError(f"{key} is not a cpulist")
    return value


def needs_partition(settings_keys: Iterable[str]) -> bool:
    """Whether a profile with these setting keys places anything against the partition."""
    keys = (IRQ_POLICY_KEY, IRQBALANCE_KEY, IRQ_RPS_KEY, CONFINE_KEY, BOOTLOADER_KEY)
    return any(k in keys for k in settings_keys)
