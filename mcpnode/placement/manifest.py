"""The topology manifest `mcpnode.manifest/v1`: what launchers, exporters and fleet reports read
from `/run/mcpnode/manifest.json` (documented in docs/manifest.md, schema in
docs/manifest-schema.json).

`build_manifest` is pure (facts in, dict out); `publish` goes through Host. Reading it back is
mcpnode/published.py's alone (trust, bounds, schema, hash and every field), re-exported here.
The content hash covers everything but itself and `generated_at`, so two publishes of an
unchanged machine carry the same hash and a consumer can skip work on equal hashes.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from mcpnode.codec import jsonout
from mcpnode.errors import ManifestError
from mcpnode.host import Host
from mcpnode.published import (
    MANIFEST_PATH,
    SCHEMA,
    content_hash,
    parse_manifest,
    read_manifest,
)

if TYPE_CHECKING:
    # Only the builder needs these; a launcher reading the manifest (placement/source.py) does
    # not pay for importing the audit and tuning engines.
    from mcpnode.audit.model import AuditReport
    from mcpnode.placement.plan import GpuPlacement, NicChoice, Placement
    from mcpnode.topology.model import Cache, CpuSet, Gpu, Nic, NumaNode, PciLink, Topology
    from mcpnode.tuning.verify import VerifyReport

MANIFEST_MODE = 0o644  # world-readable: launchers run as the job's user

__all__ = [
    "MANIFEST_PATH",
    "SCHEMA",
    "ManifestError",
    "build_manifest",
    "content_hash",
    "parse_manifest",
    "publish",
    "read_manifest",
]


def build_manifest(
    topo: Topology,
    placement: Placement,
    tuning: VerifyReport | str | None,
    audit: AuditReport | None,
    now: datetime,
    *,
    machine_id: str | None = None,
    driver: str | None = None,
    container_toolkit: str | None = None,
    housekeeping: str = "first-core",
    tuning_source: str | None = None,
    probe: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The manifest as JSON-ready data, `content_hash` filled in.

    `tuning`: the verify report, a string saying why there is none (profile unreadable,
    journal unusable), or None when no profile is active; `tuning_source` where the active
    profile was found (tuning/active.py);
    `audit`: None when it was not run. `machine_id` is /etc/machine-id as read by the caller;
    `driver` overrides NVML's driver version (the audit reads /proc/driver/nvidia/version when
    NVML is absent); `container_toolkit` the lowest NVIDIA Container Toolkit component version
    the audit read (None: not installed or not audited); `probe` the JSON-ready figures of the
    last probe run (mcpnode/probe/section.py), the `probe` field appearing only when one ran."""
    nvml = topo.nvml if topo.nvml is not None and topo.nvml.available else None
    body: dict[str, Any] = {
        "schema": SCHEMA,
        "generated_at": now.isoformat(timespec="seconds"),
        "content_hash": None,
        "host": {
            "hostname": topo.identity.hostname,
            "machine_id": machine_id,
            "kernel": topo.identity.kernel_release,
            "driver": driver or (nvml.driver_version if nvml is not None else None),
            "cuda_driver": nvml.cuda_driver_version if nvml is not None else None,
            "container_toolkit": container_toolkit,
        },
        "numa_nodes": [_node(n, topo) for n in topo.numa_nodes],
        # The L3 domains only: what slices are cut along and `--scope cache` binds to. The L2
        # domains (one per core on every server) are in `topo --format json`.
        "caches": [_cache(c) for c in topo.cache_domains(3)],
        "gpus": [_gpu(g, audit) for g in topo.gpus],
        "nics": [_nic(n) for n in topo.nics],
        "placement": {
            "housekeeping_policy": housekeeping,
            "housekeeping_cpus": _cpulist(placement.housekeeping),
            "gpus": [_placement(p) for p in placement.gpus],
            "problems": list(placement.problems),
        },
        "tuning": _tuning(tuning, tuning_source),
        "audit": _audit(audit),
        "problems": [
            {"code": p.code, "source": p.source, "detail": p.detail} for p in topo.problems
        ],
    }
    if probe is not None:
        body["probe"] = dict(probe)
    body["content_hash"] = content_hash(body)
    return body


def dumps(manifest: dict[str, Any]) -> str:
    """The file's text: indented, key order as built, newline-terminated. json.dumps(indent=2,
    ensure_ascii=False)'s text, written by codec/jsonout.py: with an indent json.dumps takes
    its pure-Python encoder, which was a tenth of what a republish cost."""
    return jsonout.dumps(manifest, ensure_ascii=False) + "\n"


def publish(
    host: Host, manifest: dict[str, Any], publication: Mapping[str, Any] | None = None
) -> str:
    """Write `manifest` to /run/mcpnode/manifest.json atomically (temp, fsync, rename), mode
    0644, with its `publication` stamp (placement/source.py) when given: what launchers check
    its freshness against. Returns the logical path. Raises AccessDenied / WriteError."""
    doc = manifest if publication is None else {**manifest, "publication": dict(publication)}
    host.write_file_atomic(MANIFEST_PATH, dumps(doc).encode(), MANIFEST_MODE)
    return MANIFEST_PATH


# -- sections ----------------------------------------------------------------------------------


@functools.lru_cache(maxsize=512)
def _cpulist(cpus: CpuSet) -> str:
    """`cpus.cpulist()`, each distinct set formatted once: a placement repeats its nodes' and
    sockets' sets per GPU, and the agent republishes from the same sets (a frozenset keeps
    its hash, so a hit costs a lookup)."""
    return cpus.cpulist()


def _link(link: PciLink) -> dict[str, Any]:
    return {
        "speed_gts": link.current_speed_gts,
        "width": link.current_width,
        "max_speed_gts": link.max_speed_gts,
        "max_width": link.max_width,
    }


def _node(n: NumaNode, topo: Topology) -> dict[str, Any]:
    gpu = topo.gpu_of_memory_node(n.id) if n.cpuless else None
    return {
        "id": n.id,
        "cpus": _cpulist(n.cpus),
        "memory_mib": n.memory_mib,
        "cpuless": n.cpuless,
        "distances": {str(other): dist for other, dist in n.distances},
        # the GPU whose memory this CPU-less node is (Grace, POWER9): never a binding target
        "gpu_memory_node": None if gpu is None else {"gpu": gpu.index, "address": str(gpu.address)},
    }


def _cache(c: Cache) -> dict[str, Any]:
    return {"level": c.level, "cpus": _cpulist(c.cpus), "size_kib": c.size_kib, "id": c.id}


def gpu_health(address: str, audit: AuditReport | None) -> dict[str, Any]:
    """A GPU's health as the audit saw it: `unhealthy` when a finding about it FAILed (an XID,
    a throttling GPU, a fatal AER, ...), `ok` otherwise, `unknown` when no audit ran. The ids
    that FAILed and WARNed are listed, so a scheduler can tell an XID from a capped clock."""
    if audit is None:
        return {"status": "unknown", "failed": [], "warned": []}
    from mcpnode.audit.model import Status  # the audit's types only once there is a report

    mine = [f for f in audit.findings if f.subject == address]
    failed = sorted({f.id for f in mine if f.status is Status.FAIL})
    warned = sorted({f.id for f in mine if f.status is Status.WARN})
    return {"status": "unhealthy" if failed else "ok", "failed": failed, "warned": warned}


def _gpu(g: Gpu, audit: AuditReport | None = None) -> dict[str, Any]:
    f = g.nvml
    return {
        "index": g.index,
        "address": str(g.address),
        "uuid": f.uuid if f is not None else None,
        "name": f.name if f is not None else None,
        "minor": f.minor if f is not None else None,
        "numa_node": g.numa_node,
        "numa_source": g.numa_source,
        "memory_numa_node": g.memory_numa_node,
        "local_cpus": _cpulist(g.local_cpus) if g.local_cpus is not None else None,
        "pcie": _link(g.link),
        "nvlinks_active": f.active_links if f is not None else None,
        "fabric_state": f.fabric_state if f is not None else None,
        "health": gpu_health(str(g.address), audit),
    }


def _nic(n: Nic) -> dict[str, Any]:
    return {
        "address": str(n.address),
        "driver": n.driver,
        "rdma_devices": list(n.rdma_devices),
        "netdevs": [
            {"name": d.name, "operstate": d.operstate, "speed_mbps": d.speed_mbps, "mtu": d.mtu}
            for d in n.netdevs
        ],
        "numa_node": n.numa_node,
        "pcie": _link(n.link),
        "virtual_function": n.is_virtual_function,
    }


def nic_choice_json(c: NicChoice) -> dict[str, Any]:
    """A NIC placement chose for a GPU, as the manifest and the Ansible facts both show it."""
    return {
        "address": str(c.address),
        "rdma": c.rdma,
        "netdevs": list(c.netdevs),
        "bucket": c.bucket,
        "link_speed_gts": c.link_speed_gts,
        "link_width": c.link_width,
    }


def placement_json(p: GpuPlacement) -> dict[str, Any]:
    """Where a GPU's work goes (CPUs, memory nodes, NICs, NVLink peers, environment), as the
    manifest and the Ansible facts both show it."""
    return {
        "local_cpus": _cpulist(p.local_cpus),
        "slice_cpus": _cpulist(p.slice_cpus),
        "cache_cpus": _cpulist(p.cache_cpus),
        "socket_cpus": _cpulist(p.socket_cpus),
        "memory_nodes": _cpulist(p.memory_nodes),
        "nics": [nic_choice_json(c) for c in p.nics],
        "nvlink_peers": list(p.nvlink_peers),
        "env": dict(p.env),
    }


def _placement(p: GpuPlacement) -> dict[str, Any]:
    out: dict[str, Any] = {
        "index": p.index,
        "uuid": p.uuid,
        "address": str(p.address),
        "numa_node": p.numa_node,
        "numa_source": p.numa_source,
        **placement_json(p),
    }
    if p.mig:  # only in MIG mode: manifests of other GPUs stay as they were
        out["mig_devices"] = [
            {
                "uuid": m.uuid,
                "gpu_instance_id": m.gpu_instance_id,
                "compute_instance_id": m.compute_instance_id,
                "memory_mib": m.memory_mib,
                "profile": m.profile,
                "env": dict(m.env),
            }
            for m in p.mig
        ]
    return out


def _tuning(tuning: VerifyReport | str | None, source: str | None) -> dict[str, Any]:
    """Three-valued: `compliant` is null with `unknown_reason` whenever it could not be told."""
    if tuning is None or isinstance(tuning, str):
        return {
            "profile": None,
            "source": source,
            "compliant": None,
            "unknown_reason": tuning or "no active profile: not tuned by mcpnode",
            "drift": [],
            "error": tuning,
        }
    return {
        "profile": tuning.profile,
        "source": source,
        "compliant": tuning.compliant,
        "unknown_reason": tuning.unknown_reason,
        "drift": [
            {"key": d.key, "expected": d.expected, "wanted": d.wanted, "actual": d.actual}
            for d in tuning.drift
        ],
        "error": None,
    }


def _audit(audit: AuditReport | None) -> dict[str, Any] | None:
    from mcpnode.audit.model import Status

    if audit is None:
        return None
    ids = sorted({f.id for f in audit.findings if f.status is Status.FAIL})
    warned = sorted({f.id for f in audit.findings if f.status is Status.WARN})
    return {
        "profile": audit.profile,
        "counts": {s.value: audit.count(s) for s in Status},
        "failed": ids,
        "warned": warned,
        "problems": list(audit.problems),
    }
