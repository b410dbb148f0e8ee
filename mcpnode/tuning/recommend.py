"""`mcpnode profiles recommend`: the shipped profile that fits a host, with the reasons, as
`tuned-adm recommend` does from its recommend.conf rules. Pure: the facts are gathered above
(cli/commands.py, from discovery and topology/virt.py), so tuning stays below topology.

The rules, in order (the first that decides wins; every fact seen is a reason):
1. no NVIDIA GPU: `base` (nothing here is GPU-specific, and base is safe everywhere);
2. an NVSwitch fabric, RDMA NICs, or 4 GPUs or more: `inference-throughput`: such hosts serve
   models sharded over many GPUs and nodes (tensor/pipeline parallel, disaggregated prefill
   and decode moving KV caches), where socket buffers, NIC queues and bulk readahead pay;
3. otherwise (1-3 PCIe GPUs, no fabric): `inference-latency`: interactive serving of models
   that fit on one or two GPUs, where wakeup latency and idle states dominate.
A virtual machine changes no choice: every CPU power, C-state and huge page key checks its
capability and is "not applicable here" in a guest (no cpufreq, no cpuidle states), so the same
profile is safe; the reasons say which keys will not apply. The operator's workload is the final
judge: the reasons say what was assumed.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class HostFacts:
    """What the recommendation looks at. None: unknown."""

    virtual: bool | None
    hypervisor: str | None
    virt_evidence: str
    gpus: tuple[str, ...]  # one name per NVIDIA GPU ("NVIDIA H100 80GB HBM3"; "" unknown)
    nvswitch: bool | None  # NVLink to an NVSwitch seen (None: NVML did not answer)
    rdma_nics: tuple[str, ...]  # RDMA device names (mlx5_0)
    numa_nodes: int
    gpu_nodes: tuple[int, ...]  # NUMA nodes holding GPUs
    smt: bool | None  # SMT siblings present


@dataclass(frozen=True)
class Recommendation:
    profile: str
    reasons: tuple[str, ...]
    facts: HostFacts


def recommend(facts: HostFacts) -> Recommendation:
    """The profile for a host with `facts`, and why (module docstring)."""
    reasons: list[str] = []
    if facts.virtual is True:
        who = f" ({facts.hypervisor})" if facts.hypervisor else ""
        reasons.append(
            f"a virtual machine{who} by {facts.virt_evidence}: cpufreq, EPP/EPB and C-state "
            "keys are not applicable in a guest and are reported so, never written"
        )
    elif facts.virtual is False:
        reasons.append(f"bare metal ({facts.virt_evidence})")
    else:
        reasons.append(f"bare metal or VM unknown ({facts.virt_evidence})")
    if facts.smt is True:
        reasons.append("SMT on: GPU slices keep sibling threads together")
    elif facts.smt is False:
        reasons.append("SMT off")
    if facts.numa_nodes > 1:
        nodes = ",".join(str(n) for n in facts.gpu_nodes) or "none"
        reasons.append(f"{facts.numa_nodes} NUMA nodes, GPUs on node(s) {nodes}")
    if not facts.gpus:
        reasons.append("no NVIDIA GPU found: nothing GPU-specific to tune")
        return Recommendation("base", tuple(reasons), facts)
    names = sorted({n for n in facts.gpus if n})
    shown = ", ".join(names) if names else "model unknown"
    reasons.append(f"{len(facts.gpus)} GPU(s): {shown}")
    fabric = []
    if facts.nvswitch:
        fabric.append("an NVSwitch fabric")
    if facts.rdma_nics:
        fabric.append(f"{len(facts.rdma_nics)} RDMA NIC(s) ({', '.join(facts.rdma_nics[:4])})")
    if len(facts.gpus) >= 4:
        fabric.append(f"{len(facts.gpus)} GPUs")
    if fabric:
        reasons.append(
            f"{' and '.join(fabric)}: a host for models sharded over GPUs and nodes, where "
            "bandwidth (socket buffers, NIC queues, readahead of large weights) pays most"
        )
        return Recommendation("inference-throughput", tuple(reasons), facts)
    if facts.nvswitch is None:
        reasons.append("NVLink fabric unknown (NVML did not answer): judged from PCIe alone")
    reasons.append(
        "few GPUs and no fabric: interactive serving of models that fit one or two GPUs, where "
        "wakeups and idle-state exits dominate latency"
    )
    return Recommendation("inference-latency", tuple(reasons), facts)
