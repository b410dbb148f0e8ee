"""Prometheus node_exporter textfile: `mcpnode.prom` for the textfile collector.

node_exporter reads every `*.prom` file in `--collector.textfile.directory` in the text
exposition format, without timestamps (prometheus/node_exporter README, "Textfile Collector");
the file must be replaced by a rename so a scrape never reads half of it, which is what
`Host.write_file_atomic` does (temp file in the same directory, fsync, rename).

The text is written by codec/promtext.py, the agent's own exposition, which writes what
prometheus_client's `generate_latest` writes for the same families, byte for byte (an info
family as a gauge `<name>_info` with value 1, label values escaped, HELP escaped, labels
sorted): tests/codec/test_promtext.py compares the two over this file's families on every
recorded host. prometheus_client itself is not imported: its package imports its HTTP
servers and `ssl`, which the agent, that writes this file, need not hold.

A fact that is unknown has no series (a missing GPU UUID is an empty label, which Prometheus
treats as an absent one); nothing is reported as 0 for "don't know".
"""

from __future__ import annotations

from mcpnode.codec.promtext import Family, Sample, text
from mcpnode.placement.exporters.inputs import AuditSummary, gpu_link, gpu_name
from mcpnode.placement.plan import Placement
from mcpnode.topology.model import Topology

DIR = "/var/lib/node_exporter/textfile_collector"
FILE_NAME = "mcpnode.prom"


Series = dict[tuple[str, ...], float]
Infos = dict[tuple[str, ...], dict[str, str]]


def _gauge(name: str, doc: str, labelnames: tuple[str, ...], series: Series) -> Family:
    return Family(
        name,
        doc,
        "gauge",
        [Sample(name, tuple(zip(labelnames, k, strict=True)), v) for k, v in series.items()],
    )


def _info(name: str, doc: str, labelnames: tuple[str, ...], infos: Infos) -> Family:
    """An info family: per series, its labels and the info's own, value 1."""
    return Family(
        name,
        doc,
        "info",
        [
            Sample(name + "_info", (*zip(labelnames, k, strict=True), *info.items()), 1.0)
            for k, info in infos.items()
        ],
    )


def families(topo: Topology, placement: Placement, audit: AuditSummary | None) -> list[Family]:
    """The textfile's families, in the order they are written. A series set twice keeps its
    first place (dicts keep insertion order), as a client library's labelled metric does."""
    gpu_info: Infos = {}
    width: Series = {}
    gen: Series = {}
    nvlink_up: Series = {}
    for g in topo.gpus:
        gid = str(g.index)
        gpu_info[(gid,)] = {
            "uuid": (g.nvml.uuid if g.nvml is not None else None) or "",
            "name": gpu_name(g) or "",
            "bus_id": str(g.address),
            "numa_node": "" if g.numa_node is None else str(g.numa_node),
        }
        link = gpu_link(g)
        for kind, w, n in (
            ("current", link.width_current, link.gen_current),
            ("max", link.width_max, link.gen_max),
        ):
            if w is not None:
                width[(gid, kind)] = float(w)
            if n is not None:
                gen[(gid, kind)] = float(n)
        if g.nvml is not None and not g.nvml.lost:
            nvlink_up[(gid,)] = float(g.nvml.active_links)
    nic_info: Infos = {}
    for nic in topo.nics:
        nic_info[(str(nic.address),)] = {
            "rdma": ",".join(nic.rdma_devices),
            "netdevs": ",".join(d.name for d in nic.netdevs),
            "numa_node": "" if nic.numa_node is None else str(nic.numa_node),
            "driver": nic.driver or "",
            "virtual_function": "true" if nic.is_virtual_function else "false",
        }
    slice_cpus: Series = {}
    local_cpus: Series = {}
    gpu_nic: Infos = {}
    for p in placement.gpus:
        gid = str(p.index)
        slice_cpus[(gid,)] = float(len(p.slice_cpus))
        local_cpus[(gid,)] = float(len(p.local_cpus))
        for choice in p.nics:
            gpu_nic[(gid, str(choice.address))] = {
                "rdma": choice.rdma or "",
                "bucket": choice.bucket,
            }

    out = [
        _info("mcpnode_gpu", "GPU identity and NUMA node, from sysfs and NVML", ("gpu",), gpu_info),
        _gauge(
            "mcpnode_gpu_pcie_link_width",
            "PCIe link width of the GPU in lanes (kind=current|max)",
            ("gpu", "kind"),
            width,
        ),
        _gauge(
            "mcpnode_gpu_pcie_link_gen",
            "PCIe generation of the GPU link (kind=current|max); current below max is normal "
            "at idle (ASPM)",
            ("gpu", "kind"),
            gen,
        ),
        _gauge(
            "mcpnode_gpu_nvlink_up",
            "Active NVLinks of the GPU, as NVML reports",
            ("gpu",),
            nvlink_up,
        ),
        _info(
            "mcpnode_nic",
            "Network PCI function with its RDMA devices and netdevs",
            ("nic",),
            nic_info,
        ),
        _gauge(
            "mcpnode_placement_slice_cpus",
            "CPUs in the GPU's exclusive slice (0: no slice could be given)",
            ("gpu",),
            slice_cpus,
        ),
        _gauge("mcpnode_placement_local_cpus", "NUMA-local CPUs of the GPU", ("gpu",), local_cpus),
        _info(
            "mcpnode_placement_nic",
            "NIC chosen for the GPU by placement, with its nvidia-smi distance bucket",
            ("gpu", "nic"),
            gpu_nic,
        ),
    ]
    if audit is None:
        return out
    out.append(
        _gauge(
            "mcpnode_audit_findings",
            "Findings of the last audit by status",
            ("status",),
            {(status,): float(n) for status, n in audit.counts},
        )
    )
    out.append(
        _gauge(
            "mcpnode_tuning_compliance_known",
            "1 when tuning compliance could be told (mcpnode_tuning_compliant is then present), "
            "0 when it is unknown: no active profile, or a key that could not be read",
            (),
            {(): 0.0 if audit.tuning_compliant is None else 1.0},
        )
    )
    if audit.tuning_compliant is not None:
        # Only when compliance was told: 0 drifted keys of an unread profile is no answer.
        out.append(
            _gauge(
                "mcpnode_tuning_drift_keys",
                "Keys of the tuning profile whose live value drifted",
                (),
                {(): float(len(audit.drift_keys))},
            )
        )
        out.append(
            _gauge(
                "mcpnode_tuning_compliant",
                "1 when every key of the tuning profile was read and matches, else 0",
                ("profile",),
                {(audit.profile or "",): 1.0 if audit.tuning_compliant else 0.0},
            )
        )
    return out


def render(topo: Topology, placement: Placement, audit: AuditSummary | None) -> str:
    """The textfile's content (UTF-8 text in the Prometheus text format 0.0.4)."""
    return text(families(topo, placement, audit)).decode()
