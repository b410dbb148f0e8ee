"""Prometheus node_exporter textfile: `mcpnode.prom` for the textfile collector.

node_exporter reads every `*.prom` file in `--collector.textfile.directory` in the text
exposition format, without timestamps (prometheus/node_exporter README, "Textfile Collector");
the file must be replaced by a rename so a scrape never reads half of it, which is what
`Host.write_file_atomic` does (temp file in the same directory, fsync, rename).

The text is produced by prometheus_client's own exposition writer (`generate_latest` over a
private `CollectorRegistry`), never formatted by hand, so escaping of label values and the
HELP/TYPE lines follow the client library. prometheus_client is imported inside `render`:
`mcpnode --help` must not pay for it.

A fact that is unknown has no series (a missing GPU UUID is an empty label, which Prometheus
treats as an absent one); nothing is reported as 0 for "don't know".
"""

from __future__ import annotations

from mcpnode.placement.exporters.inputs import AuditSummary, gpu_link, gpu_name
from mcpnode.placement.plan import Placement
from mcpnode.topology.model import Topology

DIR = "/var/lib/node_exporter/textfile_collector"
FILE_NAME = "mcpnode.prom"


def render(topo: Topology, placement: Placement, audit: AuditSummary | None) -> str:
    """The textfile's content (UTF-8 text in the Prometheus text format 0.0.4)."""
    from prometheus_client import CollectorRegistry, Gauge, Info
    from prometheus_client.exposition import generate_latest

    reg = CollectorRegistry(auto_describe=True)
    gpu_info = Info(
        "mcpnode_gpu", "GPU identity and NUMA node, from sysfs and NVML", ["gpu"], registry=reg
    )
    width = Gauge(
        "mcpnode_gpu_pcie_link_width",
        "PCIe link width of the GPU in lanes (kind=current|max)",
        ["gpu", "kind"],
        registry=reg,
    )
    gen = Gauge(
        "mcpnode_gpu_pcie_link_gen",
        "PCIe generation of the GPU link (kind=current|max); current below max is normal at "
        "idle (ASPM)",
        ["gpu", "kind"],
        registry=reg,
    )
    nvlink_up = Gauge(
        "mcpnode_gpu_nvlink_up", "Active NVLinks of the GPU, as NVML reports", ["gpu"], registry=reg
    )
    nic_info = Info(
        "mcpnode_nic",
        "Network PCI function with its RDMA devices and netdevs",
        ["nic"],
        registry=reg,
    )
    slice_cpus = Gauge(
        "mcpnode_placement_slice_cpus",
        "CPUs in the GPU's exclusive slice (0: no slice could be given)",
        ["gpu"],
        registry=reg,
    )
    local_cpus = Gauge(
        "mcpnode_placement_local_cpus", "NUMA-local CPUs of the GPU", ["gpu"], registry=reg
    )
    gpu_nic = Info(
        "mcpnode_placement_nic",
        "NIC chosen for the GPU by placement, with its nvidia-smi distance bucket",
        ["gpu", "nic"],
        registry=reg,
    )

    for g in topo.gpus:
        gid = str(g.index)
        gpu_info.labels(gpu=gid).info(
            {
                "uuid": (g.nvml.uuid if g.nvml is not None else None) or "",
                "name": gpu_name(g) or "",
                "bus_id": str(g.address),
                "numa_node": "" if g.numa_node is None else str(g.numa_node),
            }
        )
        link = gpu_link(g)
        for kind, w, n in (
            ("current", link.width_current, link.gen_current),
            ("max", link.width_max, link.gen_max),
        ):
            if w is not None:
                width.labels(gpu=gid, kind=kind).set(w)
            if n is not None:
                gen.labels(gpu=gid, kind=kind).set(n)
        if g.nvml is not None and not g.nvml.lost:
            nvlink_up.labels(gpu=gid).set(g.nvml.active_links)
    for nic in topo.nics:
        nic_info.labels(nic=str(nic.address)).info(
            {
                "rdma": ",".join(nic.rdma_devices),
                "netdevs": ",".join(d.name for d in nic.netdevs),
                "numa_node": "" if nic.numa_node is None else str(nic.numa_node),
                "driver": nic.driver or "",
                "virtual_function": "true" if nic.is_virtual_function else "false",
            }
        )
    for p in placement.gpus:
        gid = str(p.index)
        slice_cpus.labels(gpu=gid).set(len(p.slice_cpus))
        local_cpus.labels(gpu=gid).set(len(p.local_cpus))
        for choice in p.nics:
            gpu_nic.labels(gpu=gid, nic=str(choice.address)).info(
                {"rdma": choice.rdma or "", "bucket": choice.bucket}
            )

    if audit is not None:
        findings = Gauge(
            "mcpnode_audit_findings",
            "Findings of the last audit by status",
            ["status"],
            registry=reg,
        )
        for status, n in audit.counts:
            findings.labels(status=status).set(n)
        known = Gauge(
            "mcpnode_tuning_compliance_known",
            "1 when tuning compliance could be told (mcpnode_tuning_compliant is then present), "
            "0 when it is unknown: no active profile, or a key that could not be read",
            registry=reg,
        )
        known.set(0 if audit.tuning_compliant is None else 1)
        if audit.tuning_compliant is not None:
            # Only when compliance was told: 0 drifted keys of an unread profile is no answer.
            drift = Gauge(
                "mcpnode_tuning_drift_keys",
                "Keys of the tuning profile whose live value drifted",
                registry=reg,
            )
            drift.set(len(audit.drift_keys))
            compliant = Gauge(
                "mcpnode_tuning_compliant",
                "1 when every key of the tuning profile was read and matches, else 0",
                ["profile"],
                registry=reg,
            )
            compliant.labels(profile=audit.profile or "").set(1 if audit.tuning_compliant else 0)
    return generate_latest(reg).decode()
