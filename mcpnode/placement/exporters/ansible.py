"""Ansible local facts: `/etc/ansible/facts.d/mcpnode.fact`, JSON.

`setup` reads every `*.fact` file in `fact_path` (default `/etc/ansible/facts.d`) into
`ansible_local.<name>`: a file with the executable bit is *run* and its output parsed, any other
is parsed as JSON (or INI). The file is written 0644, never executable, so Ansible parses it and
runs nothing of ours. Keys are sorted and the JSON indented so two hosts' facts diff cleanly;
the schema string changes when a key changes meaning.
"""

from __future__ import annotations

import json

from mcpnode.placement.exporters.inputs import AuditSummary, gpu_link, gpu_name
from mcpnode.placement.manifest import placement_json
from mcpnode.placement.plan import GpuPlacement, Placement
from mcpnode.topology.model import Gpu, Nic, Topology

PATH = "/etc/ansible/facts.d/mcpnode.fact"
SCHEMA = "mcpnode.ansible-facts/v1"

Json = dict[str, object]


def facts(topo: Topology, placement: Placement, audit: AuditSummary | None) -> Json:
    """The facts as a JSON-ready dict. Unknown values are null, never 0 or ""."""
    nvml = topo.nvml if topo.nvml is not None and topo.nvml.available else None
    by_index = {p.index: p for p in placement.gpus}
    return {
        "schema": SCHEMA,
        "hostname": topo.identity.hostname,
        "kernel": topo.identity.kernel_release,
        "driver_version": nvml.driver_version if nvml else None,
        "cuda_driver_version": nvml.cuda_driver_version if nvml else None,
        "numa_nodes": [
            {
                "id": n.id,
                "cpus": n.cpus.cpulist(),
                "memory_mib": n.memory_mib,
                "has_cpus": n.has_cpus,
            }
            for n in topo.numa_nodes
        ],
        "gpu_count": len(topo.gpus),
        "gpus": [_gpu(g, by_index.get(g.index)) for g in topo.gpus],
        "nics": [_nic(n) for n in topo.nics],
        "housekeeping_cpus": placement.housekeeping.cpulist(),
        "placement_problems": list(placement.problems),
        "audit": None if audit is None else _audit(audit),
    }


def render(topo: Topology, placement: Placement, audit: AuditSummary | None) -> str:
    return json.dumps(facts(topo, placement, audit), indent=2, sort_keys=True) + "\n"


def _gpu(g: Gpu, p: GpuPlacement | None) -> Json:
    link = gpu_link(g)
    n = g.nvml
    return {
        "index": g.index,
        "address": str(g.address),
        "uuid": n.uuid if n is not None else None,
        "name": gpu_name(g),
        "minor": n.minor if n is not None else None,
        "numa_node": g.numa_node,
        "numa_source": g.numa_source,
        "pcie": {
            "gen_current": link.gen_current,
            "gen_max": link.gen_max,
            "width_current": link.width_current,
            "width_max": link.width_max,
        },
        "nvlinks_active": n.active_links if n is not None else None,
        "placement": None if p is None else placement_json(p),
    }


def _nic(n: Nic) -> Json:
    return {
        "address": str(n.address),
        "driver": n.driver,
        "rdma_devices": list(n.rdma_devices),
        "netdevs": [d.name for d in n.netdevs],
        "numa_node": n.numa_node,
        "virtual_function": n.is_virtual_function,
    }


def _audit(a: AuditSummary) -> Json:
    return {
        "counts": dict(a.counts),
        "profile": a.profile,
        "tuning_compliant": a.tuning_compliant,
        "drift_keys": list(a.drift_keys),
    }
