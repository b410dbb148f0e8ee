"""Where a process's memory is, and moving it to its GPU's node: `pin --migrate`, `mcpnode ps`.

`/proc/PID/numa_maps` (proc(5), numa(7)) has one line per mapping: its start address, its
memory policy, then `N<node>=<pages>` counts of the pages present on each node and
`kernelpagesize_kB=<size>` (4 for base pages, 2048 for huge pages). The bytes on each node are
the sum of pages x page size over the mappings. Reading it walks the page tables of the process
(mmap lock held for reading); it is bounded by the Host's procfs cap like /proc/interrupts.

Moving: `migrate_pages(2)` moves every page of another process from the nodes named to the
nodes named (`migratepages(8)` is its command), Linux 2.6.16+. Pages the kernel cannot move
(pinned for DMA, e.g. cudaHostAlloc'd buffers registered with the GPU; shared pages without
CAP_SYS_NICE) stay and are counted. A running process's memory *policy* cannot be changed
from outside (set_mempolicy(2) and mbind(2) act on the caller's own thread and address space),
so future allocations follow the default policy: first touch, on the node of the CPU that
touches the page, which after `pin` is the GPU's node.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from mcpnode.host import Host
from mcpnode.placement.apply import Target, live_memory_nodes
from mcpnode.topology.model import CpuSet

_NODE_COUNT = re.compile(r"N([0-9]{1,5})=([0-9]{1,20})\Z")
_PAGE_KB = re.compile(r"kernelpagesize_kB=([0-9]{1,10})\Z")


def parse_numa_maps(text: str) -> dict[int, int]:
    """Bytes present per NUMA node, from /proc/PID/numa_maps text (pure). A mapping without a
    `kernelpagesize_kB` field counts as 4 KiB pages (kernels before 2.6.38 did not print it)."""
    out: dict[int, int] = {}
    for line in text.splitlines():
        counts: list[tuple[int, int]] = []
        page_kb = 4
        for field in line.split()[2:]:
            m = _NODE_COUNT.match(field)
            if m is not None:
                counts.append((int(m.group(1)), int(m.group(2))))
                continue
            m = _PAGE_KB.match(field)
            if m is not None:
                page_kb = int(m.group(1))
        for node, pages in counts:
            out[node] = out.get(node, 0) + pages * page_kb * 1024
    return dict(sorted(out.items()))


def memory_of(live: Host, pid: int) -> dict[int, int]:
    """Bytes of live process `pid` present on each node. Raises ProcessGone, AccessDenied
    (another user's process without CAP_SYS_PTRACE), NotSupported on a recorded root."""
    return parse_numa_maps(live.read_proc(pid, "numa_maps"))


def local_share(memory: Mapping[int, int], nodes: CpuSet) -> float | None:
    """The fraction of the bytes on `nodes`; None when the process has no pages at all."""
    total = sum(memory.values())
    if total == 0:
        return None
    return sum(b for n, b in memory.items() if n in nodes) / total


@dataclass(frozen=True)
class MemoryMove:
    """What `pin --migrate` did: bytes per node before and after, the nodes pages were moved
    from and to, and how many pages the kernel could not move."""

    pid: int
    before: dict[int, int]
    after: dict[int, int]
    from_nodes: CpuSet
    to_nodes: CpuSet
    not_moved_pages: int

    @property
    def moved_bytes(self) -> int:
        """Bytes that arrived on the target nodes (never negative: pages also come and go)."""
        gain = sum(self.after.get(n, 0) - self.before.get(n, 0) for n in self.to_nodes)
        return max(0, gain)


def migrate_memory(live: Host, pid: int, target: Target) -> MemoryMove:
    """Move the pages of live process `pid` onto `target.memory_nodes` (migrate_pages(2)), with
    numa_maps read before and after. Pages are taken from every other node with memory; on a
    one-node machine the call still runs, from the target node to itself (a no-op the kernel
    checks like any other: the process exists, the caller may move its pages).

    Raises ProcessGone, AccessDenied, PlacementUnavailable, NotSupported (Host.migrate_pages)."""
    to_nodes = target.memory_nodes
    with_memory = live_memory_nodes(live)
    others = (with_memory - to_nodes) if with_memory is not None else CpuSet()
    from_nodes = others if others else to_nodes
    before = memory_of(live, pid)
    not_moved = live.migrate_pages(pid, from_nodes, to_nodes)
    after = memory_of(live, pid)
    return MemoryMove(pid, before, after, CpuSet(from_nodes), CpuSet(to_nodes), not_moved)
