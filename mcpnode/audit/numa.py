"""NUMA sanity for GPU hosts: devices whose firmware gives no NUMA node on a multi-socket
machine (numa_node = -1: pinning must fall back to NVML's memory affinity or guess), and
automatic NUMA balancing, which NVIDIA advises disabling (CUDA C++ Best Practices Guide,
"NUMA Best Practices": applications computing on GPUs should pick a policy that disables it)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from mcpnode.audit import paths
from mcpnode.audit.context import AuditContext
from mcpnode.audit.facts import FileRead, file_evidence, read_file, unreadable_finding
from mcpnode.audit.model import Evidence, Finding, Status, skipped
from mcpnode.host import HostReader
from mcpnode.topology.model import PciAddress

if TYPE_CHECKING:
    from mcpnode.topology.model import NumaSource


@dataclass(frozen=True)
class Located:
    kind: str  # "GPU" or "NIC"
    address: PciAddress
    numa_node_raw: int | None  # the device's own numa_node file
    numa_node: int | None  # what mcpnode resolved
    source: NumaSource


@dataclass(frozen=True)
class NumaFacts:
    sockets: int  # distinct physical packages among present CPUs (1 when unknown)
    nodes_with_cpus: int
    devices: tuple[Located, ...]  # GPUs and physical NICs
    balancing: FileRead


def collect(host: HostReader, ctx: AuditContext) -> NumaFacts:
    return collect_from(ctx, read_file(host, paths.NUMA_BALANCING))


def collect_from(ctx: AuditContext, balancing: FileRead) -> NumaFacts:
    """The facts from the topology already discovered plus the one file read (pure)."""
    topo = ctx.topology
    packages = {c.package_id for c in topo.cpus.cpus if c.package_id is not None}
    located = []
    for kind, addrs in (
        ("GPU", [g.address for g in topo.gpus]),
        ("NIC", [n.address for n in topo.nics if not n.is_virtual_function]),
    ):
        for addr in addrs:
            dev = topo.pci(addr)
            if dev is not None:
                located.append(
                    Located(kind, addr, dev.numa_node_raw, dev.numa_node, dev.numa_source)
                )
    return NumaFacts(
        sockets=max(1, len(packages)),
        nodes_with_cpus=sum(1 for n in topo.numa_nodes if n.has_cpus),
        devices=tuple(located),
        balancing=balancing,
    )


def check(facts: NumaFacts, ctx: AuditContext) -> list[Finding]:
    return [*_locality(facts), _balancing(facts, ctx)]


def _locality(facts: NumaFacts) -> list[Finding]:
    fid = "numa.locality"
    multi = facts.sockets > 1 or facts.nodes_with_cpus > 1
    shape = f"{facts.sockets} socket(s), {facts.nodes_with_cpus} NUMA node(s) with CPUs"
    shape_ev = Evidence(paths.CPU_NODE_TOPOLOGY, shape)
    if not facts.devices:
        return [
            Finding(fid, Status.SKIP, "device locality not checked: no GPU or NIC", (shape_ev,))
        ]
    if not multi:
        return skipped(
            fid,
            f"device locality not checked: single socket ({shape}), every device is local",
            shape_ev,
        )
    unknown = [d for d in facts.devices if d.numa_node_raw is not None and d.numa_node_raw < 0]
    if not unknown:
        return [
            Finding(
                fid,
                Status.PASS,
                f"every GPU and NIC reports its NUMA node ({shape})",
                (shape_ev,),
            )
        ]
    out = []
    for d in unknown:
        resolved = (
            f"mcpnode uses node {d.numa_node} (from {d.source})"
            if d.numa_node is not None
            else "mcpnode cannot place it"
        )
        out.append(
            Finding(
                fid,
                Status.WARN,
                f"{d.kind} {d.address} has numa_node=-1 on a {shape} host: {resolved}; "
                "pinning tools that read sysfs (PyTorch, NCCL) will guess",
                (
                    Evidence(f"{paths.PCI_DEVICES}/{d.address}/numa_node", str(d.numa_node_raw)),
                    shape_ev,
                ),
                "Enable NUMA/ACPI SRAT reporting in the BIOS (and disable node interleaving); in "
                "a VM, give the guest a vNUMA topology and attach the device to a "
                "pcie-expander-bus with the right <node> (libvirt); meanwhile pin with "
                "`mcpnode exec --gpu N` (NVML memory affinity)",
                str(d.address),
            )
        )
    return out


def _balancing(facts: NumaFacts, ctx: AuditContext) -> Finding:
    fid = "numa.balancing"
    read = facts.balancing
    if not ctx.has_gpus:
        return Finding(
            fid,
            Status.SKIP,
            "NUMA balancing not checked: no NVIDIA GPU on the PCI bus",
            (file_evidence(read),),
        )
    if read.text is None:
        if read.missing:
            return Finding(
                fid,
                Status.SKIP,
                "NUMA balancing not checked: kernel.numa_balancing absent (a kernel without "
                "CONFIG_NUMA_BALANCING, or a root that does not hold it)",
                (file_evidence(read),),
            )
        return unreadable_finding(fid, read, ctx.is_root, "NUMA balancing")
    value = read.text.strip()
    ev = (Evidence(read.path, value),)
    if value == "0":
        return Finding(fid, Status.PASS, "automatic NUMA balancing disabled", ev)
    return Finding(
        fid,
        Status.WARN,
        f"automatic NUMA balancing on (kernel.numa_balancing={value}) on a GPU host: it "
        "migrates pinned inference memory and adds page faults; NVIDIA advises disabling it",
        ev,
        "sysctl -w kernel.numa_balancing=0 and persist it: `mcpnode apply --profile base "
        "--persist` (or numa_balancing=disable on the kernel command line)",
    )
