"""GPU memory NUMA nodes (topology/gpumem.py): each CPU-less node the NVIDIA driver onlined is
tied to its GPU, as hwloc's HWLOC_KEEP_NVIDIA_GPU_NUMA_NODES view ties them on the POWER9 dump
(../shared/hosts/nvidiagpunumanodes, when present); and a bad numa_status is one problem naming
the file, the GPU left untied, never a guess."""

from __future__ import annotations

import json
import os
import xml.etree.ElementTree as ET
from datetime import datetime, timezone
from pathlib import Path

import pytest

from mcpnode.host import Host
from mcpnode.placement.build import make_manifest
from mcpnode.topology.discover import discover
from mcpnode.topology.gpumem import parse_numa_status
from mcpnode.topology.model import Topology
from mcpnode.topology.parse import ParseError
from tests.support import minihost

SHARED = Path(
    os.environ.get("MCPNODE_SHARED_HOSTS")
    or Path(__file__).resolve().parents[3] / "shared" / "hosts"
)
DUMP = "nvidiagpunumanodes"
STATUS = f"proc/driver/nvidia/gpus/{minihost.GPU}/numa_status"


def hwloc_gpu_memory(xml: Path) -> dict[int, str]:
    """hwloc's GPUMemory NUMA nodes: os index -> the GPU's PCI bus id."""
    out = {}
    for el in ET.parse(xml).getroot().iter("object"):
        if el.get("type") == "NUMANode" and el.get("subtype") == "GPUMemory":
            bus = next(i.get("value") for i in el.iter("info") if i.get("name") == "PCIBusID")
            out[int(el.get("os_index", "-1"))] = str(bus).lower()
    return out


def test_matches_hwlocs_keep_gpu_numa_nodes_view() -> None:
    if not (SHARED / f"{DUMP}.tar.bz2").is_file():
        pytest.skip(f"hwloc reference dumps not found at {SHARED} (set MCPNODE_SHARED_HOSTS)")
    with Host(SHARED / f"{DUMP}.tar.bz2") as host:
        topo = discover(host)
    theirs = hwloc_gpu_memory(SHARED / f"{DUMP}.keepgpunuma.lstopo.xml")
    assert len(theirs) == 6
    ours = {g.memory_numa_node: str(g.address) for g in topo.gpus if g.memory_numa_node}
    assert ours == theirs
    for node_id, bus in theirs.items():
        gpu = topo.gpu_of_memory_node(node_id)
        assert gpu is not None and str(gpu.address) == bus
    # hwloc's default view hides them: the plain answer file has no GPUMemory node
    assert hwloc_gpu_memory(SHARED / f"{DUMP}.lstopo.xml") == {}
    assert not [p for p in topo.problems if "memory" in p.code]


def mini(tmp_path: Path, status: str | None, node1_cpus: str = "") -> Topology:
    root = minihost.build(tmp_path)
    minihost.put(root, "sys/devices/system/node/online", "0-1\n")
    minihost.put(root, "sys/devices/system/node/node0/distance", "10 80\n")
    minihost.put(root, "sys/devices/system/node/node1/cpulist", node1_cpus + "\n")
    minihost.put(root, "sys/devices/system/node/node1/distance", "80 10\n")
    minihost.put(root, "sys/devices/system/node/node1/meminfo", "Node 1 MemTotal: 99614720 kB\n")
    if status is not None:
        minihost.put(root, STATUS, status)
    with Host(root) as host:
        return discover(host)


GOOD = "Node:      1\nStatus:    online\nAddress:   40000000000\nSize:      3f0000000\n"


def test_tied_everywhere(tmp_path: Path) -> None:
    topo = mini(tmp_path, GOOD)
    (gpu,) = topo.gpus
    assert gpu.memory_numa_node == 1 and topo.gpu_of_memory_node(1) == gpu
    assert topo.gpu_of_memory_node(0) is None
    doc = json.loads(json.dumps(make_manifest(Host(tmp_path), now=datetime.now(timezone.utc))))
    nodes = {n["id"]: n for n in doc["numa_nodes"]}
    assert nodes[1]["gpu_memory_node"] == {"gpu": 0, "address": minihost.GPU}
    assert nodes[0]["gpu_memory_node"] is None
    assert doc["gpus"][0]["memory_numa_node"] == 1
    # never a binding target
    assert doc["placement"]["gpus"][0]["memory_nodes"] == "0"


@pytest.mark.parametrize(
    ("status", "code", "node1_cpus"),
    [
        ("Node: 1\n", "read.garbage", ""),  # no Status
        ("Node: one\nStatus: online\n", "read.garbage", ""),
        ("Node: 99999\nStatus: online\n", "read.garbage", ""),
        ("Node: 1\nNode: 1\nStatus: online\n", "read.garbage", ""),
        ("\x00" * 8192, "read.error", ""),  # past the bound: refused while reading
        ("Node: 1\nStatus: offline\n", "gpu.memory-node.not-online", ""),
        ("Node: 7\nStatus: online\n", "gpu.memory-node.missing", ""),
        ("Node: 1\nStatus: online\n", "gpu.memory-node-has-cpus", "1"),
    ],
)
def test_bad_numa_status(tmp_path: Path, status: str, code: str, node1_cpus: str) -> None:
    topo = mini(tmp_path, status, node1_cpus)
    assert topo.gpus[0].memory_numa_node is None
    assert code in {p.code for p in topo.problems}, topo.problems


def test_not_a_node(tmp_path: Path) -> None:
    topo = mini(tmp_path, "Node:      -1\nStatus:    offline\n")
    assert topo.gpus[0].memory_numa_node is None
    assert not [p for p in topo.problems if "memory" in p.code or "numa_status" in p.source]


def test_discrete_gpu_has_none(tmp_path: Path) -> None:
    topo = mini(tmp_path, None)
    assert topo.gpus[0].memory_numa_node is None and topo.gpu_of_memory_node(1) is None


def test_parser() -> None:
    assert parse_numa_status(GOOD) == (1, "online")
    assert parse_numa_status("Node: -1\nStatus: offline") == (None, "offline")
    for bad in ("", "Node: -2\nStatus: online", "Node: 1024\nStatus: online", "Status: online"):
        with pytest.raises(ParseError):
            parse_numa_status(bad)
