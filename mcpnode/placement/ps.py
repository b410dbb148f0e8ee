"""`mcpnode ps`: every process using a GPU, where it runs and where its memory is, against the
placement the manifest publishes (hwloc-ps's view, for GPUs).

For each (process, GPU) pair found (NVML's compute processes, else `/proc/PID/fd` holding
`/dev/nvidiaN`: agent/autopin.py finds them), the live process is read: `Cpus_allowed_list`
from /proc/PID/status (its affinity within its cpuset) and its bytes per node from numa_maps
(placement/memory.py). The verdicts, in the order tried:

* CPUs: `slice` when every CPU it may use is in the GPU's exclusive slice; `node` when they are
  all on the GPU's NUMA node but not all in its slice (it shares cores with housekeeping or
  another GPU's process); `off-node` otherwise; `unknown` when the status could not be read or
  the GPU has no NUMA node.
* Memory: `local` when at least LOCAL_SHARE of its resident bytes are on the GPU's memory
  nodes; `remote` below that; `none` with no pages present; `unknown` when numa_maps could not
  be read. The threshold is a choice, not a measurement: a process a few pages off its node is
  placed; one with a tenth of its memory across the interconnect is not.
* `placed` when the CPUs are `slice` and the memory `local` or `none`; `unknown` when either is
  unknown; `misplaced` otherwise, with the reason.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from mcpnode.errors import HostError
from mcpnode.host import Host
from mcpnode.placement.apply import parse_stat
from mcpnode.placement.memory import local_share, memory_of
from mcpnode.placement.plan import GpuPlacement, Placement
from mcpnode.topology.model import CpuSet
from mcpnode.topology.parse import ParseError, parse_cpulist

LOCAL_SHARE = 0.9
SCHEMA = "mcpnode.ps/v1"

CpuVerdict = Literal["slice", "node", "off-node", "unknown"]
CPU_VERDICTS: tuple[CpuVerdict, ...] = ("slice", "node", "off-node", "unknown")
MemoryVerdict = Literal["local", "remote", "none", "unknown"]
Verdict = Literal["placed", "misplaced", "unknown"]


@dataclass(frozen=True)
class Found:
    """A process seen using a GPU: host pid, GPU index, how it was seen (`nvml`/`fd`), and its
    pid inside its own PID namespace (None in the host's)."""

    pid: int
    gpu_index: int
    source: str
    ns_pid: int | None


@dataclass(frozen=True)
class PsRow:
    pid: int
    ns_pid: int | None
    comm: str | None
    gpu: int
    uuid: str | None
    source: str
    cpus: CpuSet | None
    memory: Mapping[int, int] | None  # node -> bytes present
    cpu: CpuVerdict
    mem: MemoryVerdict
    verdict: Verdict
    reason: str


def classify_cpus(cpus: CpuSet | None, gpu: GpuPlacement | None) -> CpuVerdict:
    if cpus is None or not cpus or gpu is None or not gpu.memory_nodes:
        return "unknown"
    if gpu.slice_cpus and cpus <= gpu.slice_cpus:
        return "slice"
    if cpus <= gpu.local_cpus:
        return "node"
    return "off-node"


def classify_memory(memory: Mapping[int, int] | None, gpu: GpuPlacement | None) -> MemoryVerdict:
    if memory is None or gpu is None or not gpu.memory_nodes:
        return "unknown"
    share = local_share(memory, gpu.memory_nodes)
    if share is None:
        return "none"
    return "local" if share >= LOCAL_SHARE else "remote"


def verdict_of(
    cpu: CpuVerdict, mem: MemoryVerdict, gpu: GpuPlacement | None
) -> tuple[Verdict, str]:
    """The row's verdict and its reason (pure; the module docstring's rules)."""
    if gpu is None:
        return "unknown", "the GPU is not in the placement"
    if cpu == "unknown" or mem == "unknown":
        return "unknown", "its CPUs or memory could not be read"
    reasons = []
    if cpu == "node":
        reasons.append(
            f"runs on node CPUs outside GPU {gpu.index}'s slice {gpu.slice_cpus.cpulist()}"
        )
    elif cpu == "off-node":
        reasons.append(f"runs on CPUs off GPU {gpu.index}'s node {gpu.memory_nodes.cpulist()}")
    if mem == "remote":
        reasons.append(
            f"under {LOCAL_SHARE:.0%} of its memory is on node {gpu.memory_nodes.cpulist()}"
        )
    if reasons:
        return "misplaced", "; ".join(reasons)
    return "placed", f"on GPU {gpu.index}'s slice, memory on node {gpu.memory_nodes.cpulist()}"


def _status_cpus(live: Host, pid: int) -> CpuSet | None:
    try:
        text = live.read_proc(pid, "status")
    except HostError:
        return None
    for line in text.splitlines():
        name, _, rest = line.partition(":")
        if name == "Cpus_allowed_list":
            try:
                return parse_cpulist(rest.strip())
            except ParseError:
                return None
    return None


def _comm(live: Host, pid: int) -> str | None:
    try:
        stat = live.read_proc(pid, "stat")
        parse_stat(stat)
    except (HostError, ParseError):
        return None
    return stat.split("(", 1)[1].rpartition(")")[0]


def cpu_verdict_counts(
    live: Host, pairs: Iterable[tuple[int, int]], placement: Placement
) -> dict[str, dict[CpuVerdict, int]]:
    """For each GPU of `placement` (by PCI address), how many of the (pid, GPU index) `pairs`
    on it get each CPU verdict (every verdict present, zeros included). The CPU verdict alone:
    numa_maps is not read, because the kernel walks the process's page tables to write it,
    which on an inference process mapping hundreds of GB is slow and holds its mmap lock; the
    agent counts this on every auto-pin scan (`mcpnode ps` reads both)."""
    by_index = {g.index: g for g in placement.gpus}
    counts: dict[str, dict[CpuVerdict, int]] = {
        str(g.address): dict.fromkeys(CPU_VERDICTS, 0) for g in placement.gpus
    }
    for pid, index in pairs:
        gpu = by_index.get(index)
        if gpu is None:
            continue
        counts[str(gpu.address)][classify_cpus(_status_cpus(live, pid), gpu)] += 1
    return counts


def ps_rows(live: Host, found: Iterable[Found], placement: Placement) -> tuple[PsRow, ...]:
    """One row per (process, GPU), by pid then GPU. A process that exits mid-scan keeps its
    row with unknown facts (it was seen using the GPU)."""
    by_index = {g.index: g for g in placement.gpus}
    rows = []
    for f in sorted(found, key=lambda f: (f.pid, f.gpu_index)):
        gpu = by_index.get(f.gpu_index)
        cpus = _status_cpus(live, f.pid)
        try:
            memory: Mapping[int, int] | None = memory_of(live, f.pid)
        except HostError:
            memory = None
        cpu, mem = classify_cpus(cpus, gpu), classify_memory(memory, gpu)
        verdict, reason = verdict_of(cpu, mem, gpu)
        rows.append(
            PsRow(
                f.pid,
                f.ns_pid,
                _comm(live, f.pid),
                f.gpu_index,
                gpu.uuid if gpu is not None else None,
                f.source,
                cpus,
                memory,
                cpu,
                mem,
                verdict,
                reason,
            )
        )
    return tuple(rows)
