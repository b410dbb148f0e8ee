"""The CPU partition of a GPU host, as the tuning engine needs it for `[irq]`: the housekeeping
CPUs (left to the OS, interrupts and the agent) and the GPU slices (kept for inference), with
each NUMA node's CPUs. It comes from the published manifest (read by mcpnode/published.py alone)
or from discovery and placement, both built above this layer (placement/source.py); tuning only
reads it. Pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from mcpnode.codec.cpus import format_list
from mcpnode.tuning.paths import (
    BOOTLOADER_KEY,
    CONFINE_KEY,
    CPUS_KEY,
    HUGEPAGES_NODES_KEY,
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


def needs_partition(settings_keys: Iterable[str]) -> bool:
    """Whether a profile with these setting keys places anything against the partition."""
    keys: tuple[str, ...] = (IRQ_POLICY_KEY, IRQBALANCE_KEY, IRQ_RPS_KEY, CONFINE_KEY)
    keys += (BOOTLOADER_KEY, CPUS_KEY, HUGEPAGES_NODES_KEY)
    return any(k in keys for k in settings_keys)
