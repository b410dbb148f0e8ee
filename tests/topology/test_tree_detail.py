"""The detail `topo --tree` and `topo --format json` carry beyond the PCI ids: lspci's class
names, and the state, rate and link layer of every RDMA port (topology/rdmaports.py), with
garbage in a port file becoming one problem naming it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mcpnode.cli.render_topo import as_tree
from mcpnode.host import Host
from mcpnode.topology.discover import discover
from mcpnode.topology.jsonify import topology_json
from mcpnode.topology.model import Topology
from mcpnode.topology.pciclass import class_name
from tests.support import minihost

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "hosts"
PORT = "sys/class/infiniband/mlx5_0/ports/1"


@pytest.mark.parametrize(
    ("code", "name"),
    [
        (0x0302, "3D controller"),
        (0x0300, "VGA compatible controller"),
        (0x0207, "Infiniband controller"),
        (0x0200, "Ethernet controller"),
        (0x0108, "Non-Volatile memory controller"),
        (0x0604, "PCI bridge"),
        (0x0680, "Bridge"),  # NVSwitch
        (0x06FF, "Bridge"),  # a subclass not listed: its base class
        (0x7700, None),
        (None, None),
    ],
)
def test_class_names(code: int | None, name: str | None) -> None:
    assert class_name(code) == name


def test_hgx_tree_and_json() -> None:
    with Host(FIXTURES / "hgx-h100-8gpu-8nic") as host:
        topo = discover(host)
    tree = as_tree(topo)
    assert "[0302 3D controller] 10de:2330 nvidia GPU0" in tree
    assert "    port mlx5_0/1: ACTIVE, 400 Gb/sec (4X NDR), InfiniBand\n" in tree
    doc = json.loads(json.dumps(topology_json(topo)))
    gpu = next(d for d in doc["pci_devices"] if d["class_code"] == "0x0302")
    assert gpu["class_name"] == "3D controller"
    ib = next(n for n in doc["nics"] if n["rdma_devices"] == ["mlx5_0"])
    assert ib["rdma_ports"] == [
        {
            "device": "mlx5_0",
            "port": 1,
            "state": "ACTIVE",
            "rate": "400 Gb/sec (4X NDR)",
            "link_layer": "InfiniBand",
        }
    ]


def mini(tmp_path: Path, files: dict[str, str]) -> Topology:
    root = minihost.build(tmp_path)
    minihost.link(
        root, "sys/class/infiniband/mlx5_0", f"../../{minihost.NIC_DIR[4:]}/infiniband/mlx5_0"
    )
    good = {"state": "4: ACTIVE\n", "rate": "200 Gb/sec (4X HDR)\n", "link_layer": "Ethernet\n"}
    for name, text in {**good, **files}.items():
        minihost.put(root, f"{minihost.NIC_DIR}/infiniband/mlx5_0/ports/1/{name}", text)
    with Host(root) as host:
        return discover(host)


def test_mini_port(tmp_path: Path) -> None:
    (nic,) = mini(tmp_path, {}).nics
    assert [(p.state, p.rate, p.link_layer) for p in nic.rdma_ports] == [
        ("ACTIVE", "200 Gb/sec (4X HDR)", "Ethernet")
    ]


@pytest.mark.parametrize(
    ("file", "text"),
    [
        ("state", "ACTIVE\n"),
        ("state", "4: ACTIVE\x1b[31m\n"),
        ("state", "99999: ACTIVE\n"),
        ("rate", "fast\n"),
        ("rate", "400 Gb/sec (4X NDR)\nforged line\n"),
        ("link_layer", "Token Ring\n"),
    ],
)
def test_garbage_port_file(tmp_path: Path, file: str, text: str) -> None:
    topo = mini(tmp_path, {file: text})
    (port,) = topo.nics[0].rdma_ports
    assert getattr(port, "link_layer" if file == "link_layer" else file) is None
    assert ("read.garbage", f"/{PORT}/{file}") in {(p.code, p.source) for p in topo.problems}
    assert "\x1b" not in as_tree(topo) and "forged" not in as_tree(topo).split("Problems")[0]


def test_oversized_port_file(tmp_path: Path) -> None:
    topo = mini(tmp_path, {"rate": "4" * 100_000})
    assert topo.nics[0].rdma_ports[0].rate is None
    assert ("read.error", f"/{PORT}/rate") in {(p.code, p.source) for p in topo.problems}


def test_too_many_ports(tmp_path: Path) -> None:
    root = minihost.build(tmp_path)
    minihost.link(
        root, "sys/class/infiniband/mlx5_0", f"../../{minihost.NIC_DIR[4:]}/infiniband/mlx5_0"
    )
    for n in range(1, 300):
        minihost.put(root, f"{minihost.NIC_DIR}/infiniband/mlx5_0/ports/{n}/state", "4: ACTIVE\n")
    with Host(root) as host:
        topo = discover(host)
    assert len(topo.nics[0].rdma_ports) == 256
    assert "rdma.port.too-many" in {p.code for p in topo.problems}


# -- NVMe block devices ------------------------------------------------------------------------

NVME = "sys/devices/pci0000:00/0000:00:03.0/0000:03:00.0"


def nvme_root(tmp_path: Path, entries: dict[str, str]) -> Topology:
    """minihost plus an NVMe controller nvme0 with the given files below it."""
    root = minihost.build(tmp_path)
    minihost.put(root, f"{NVME}/class", "0x010802\n")
    minihost.put(root, f"{NVME}/vendor", "0x144d\n")
    minihost.put(root, f"{NVME}/device", "0xa80a\n")
    minihost.put(root, f"{NVME}/numa_node", "0\n")
    minihost.put(root, f"{NVME}/nvme/nvme0/model", "PM9A3\n")
    for rel, text in entries.items():
        minihost.put(root, f"{NVME}/nvme/nvme0/{rel}", text)
    with Host(root) as host:
        return discover(host)


def test_hgx_nvme_namespace_in_tree_and_json() -> None:
    with Host(FIXTURES / "hgx-h100-8gpu-8nic") as host:
        topo = discover(host)
    assert "\n            nvme0n1: 3.5 TiB (3840755982336 bytes)\n" in as_tree(topo)
    (nv,) = json.loads(json.dumps(topology_json(topo)))["nvmes"]
    assert nv["namespaces"] == [{"name": "nvme0n1", "size_bytes": 3840755982336}]


def test_namespaces_sorted_and_multipath_named_as_dev(tmp_path: Path) -> None:
    topo = nvme_root(
        tmp_path,
        {"nvme0n10/size": "8\n", "nvme0n2/size": "16\n", "nvme0c0n1/size": "2048\n", "ng0n1/x": ""},
    )
    (nv,) = topo.nvmes
    assert [(n.name, n.size_bytes) for n in nv.namespaces] == [
        ("nvme0n1", 2048 * 512),
        ("nvme0n2", 16 * 512),
        ("nvme0n10", 8 * 512),
    ]


@pytest.mark.parametrize("text", ["lots\n", "-5\n", "9" * 40 + "\n", "1" * 100_000])
def test_bad_size_is_unknown_with_a_problem(tmp_path: Path, text: str) -> None:
    topo = nvme_root(tmp_path, {"nvme0n1/size": text})
    assert topo.nvmes[0].namespaces[0].size_bytes is None
    source = f"/{NVME}/nvme/nvme0/nvme0n1/size"
    assert any(p.source == source for p in topo.problems), topo.problems
    assert "nvme0n1: size unknown" in as_tree(topo)
