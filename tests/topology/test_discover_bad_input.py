"""Bad input: each broken file becomes a Problem, nothing crashes, nothing escapes the root,
and the rest of the topology is intact."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

import pytest

from mcpnode.host import Host
from mcpnode.topology.discover import discover
from mcpnode.topology.model import Topology
from tests.support.minihost import (
    GPU,
    GPU_DIR,
    NIC,
    NIC_DIR,
    build,
    link,
    put,
    split_into_two_nodes,
)


def run(root: Path) -> Topology:
    with Host(root) as host:
        return discover(host)


def codes(topo: Topology) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for p in topo.problems:
        out.setdefault(p.code, []).append(p.source)
    return out


def assert_intact(topo: Topology) -> None:
    """What every broken variant must still report."""
    assert [str(g.address) for g in topo.gpus] == [GPU]
    assert [str(n.address) for n in topo.nics] == [NIC]
    assert [n.id for n in topo.numa_nodes] == [0]
    assert topo.cpus.online.cpulist() == "0-1"


def test_clean_minihost_has_no_problems(mini_root: Path) -> None:
    topo = run(mini_root)
    assert topo.problems == ()
    assert_intact(topo)
    gpu = topo.gpus[0]
    assert (gpu.numa_node, gpu.numa_source, gpu.driver) == (0, "own", "nvidia")
    assert topo.nics[0].rdma_devices == ("mlx5_0",)
    assert topo.nics[0].netdevs[0].speed_mbps is None  # -1 = SPEED_UNKNOWN


@pytest.mark.parametrize(
    ("rel", "content", "code"),
    [
        (f"{GPU_DIR}/numa_node", "banana\n", "read.garbage"),
        (f"{GPU_DIR}/numa_node", "", "read.garbage"),
        (f"{GPU_DIR}/numa_node", "-7\n", "read.garbage"),
        (f"{GPU_DIR}/local_cpulist", "0-zz\n", "read.garbage"),
        (f"{GPU_DIR}/current_link_speed", "warp 9\n", "read.garbage"),
        (f"{GPU_DIR}/current_link_width", "\x00\x01\x02", "read.garbage"),
        (f"{GPU_DIR}/class", "0xGPU\n", "read.garbage"),
        ("sys/devices/system/node/node0/cpulist", "0-\n", "read.garbage"),
        ("sys/devices/system/node/node0/distance", "ten\n", "read.garbage"),
        ("sys/devices/system/cpu/online", "\n\n", None),  # empty list: no CPUs online
        ("sys/devices/system/cpu/cpu1/topology/core_id", "one\n", "read.garbage"),
        ("proc/self/status", "Cpus_allowed_list:\tall of them\n", "process.cpus.garbage"),
    ],
)
def test_garbage_file_is_a_problem(
    mini_root: Path, rel: str, content: str, code: str | None
) -> None:
    root = mini_root
    put(root, rel, content)
    topo = run(root)
    if code is not None:
        assert "/" + rel in codes(topo).get(code, []), topo.problems
    if rel.endswith("class"):
        assert topo.gpus == ()  # a GPU is only a GPU when its class says so
        return
    if rel.endswith("online"):
        assert topo.cpus.online.cpulist() == ""
        return
    assert_intact(topo)


@pytest.mark.parametrize(
    "rel",
    [
        f"{GPU_DIR}/numa_node",
        f"{GPU_DIR}/local_cpulist",
        f"{GPU_DIR}/vendor",
        "sys/devices/system/node/node0/meminfo",
        "sys/devices/system/cpu/cpu0/topology/thread_siblings_list",
        "proc/sys/kernel/hostname",
    ],
)
def test_missing_file_is_absence_not_a_crash(mini_root: Path, rel: str) -> None:
    root = mini_root
    (root / rel).unlink()
    topo = run(root)
    if rel.endswith("vendor"):
        assert topo.gpus == ()  # no vendor file and no driver claim: not known to be NVIDIA
    else:
        assert_intact(topo)
    if rel.endswith("numa_node"):
        # The root port above still says node 0.
        assert (topo.gpus[0].numa_node, topo.gpus[0].numa_source) == (0, "ancestor")


def test_numa_unknown_is_never_zero(mini_root: Path) -> None:
    """-1 everywhere and local CPUs spanning two nodes: unknown, recorded."""
    root = mini_root
    split_into_two_nodes(root)
    for rel in (
        "sys/devices/pci0000:00/0000:00:01.0",
        "sys/devices/pci0000:00/0000:00:02.0",
        GPU_DIR,
        NIC_DIR,
    ):
        put(root, f"{rel}/numa_node", "-1\n")
    topo = run(root)
    gpu = topo.gpus[0]
    assert gpu.numa_node is None and gpu.numa_source == "unknown"
    assert GPU in codes(topo)["pci.numa.unknown"]


def test_disagreeing_sources_are_recorded(mini_root: Path) -> None:
    root = mini_root
    split_into_two_nodes(root)
    put(root, f"{GPU_DIR}/numa_node", "1\n")  # own 1, root port 0, local CPUs 0-1
    topo = run(root)
    assert topo.gpus[0].numa_node == 1  # own file wins...
    found = codes(topo)
    assert GPU in found["pci.numa.ancestor-disagrees"]  # ...and both disagreements are kept
    assert GPU in found["pci.numa.local-cpus-disagree"]


def test_symlink_cycle_and_dangling_links(mini_root: Path) -> None:
    root = mini_root
    (root / GPU_DIR / "local_cpulist").unlink()
    link(root, f"{GPU_DIR}/local_cpulist", "local_cpulist2")
    link(root, f"{GPU_DIR}/local_cpulist2", "local_cpulist")
    (root / GPU_DIR / "driver").unlink()
    link(root, f"{GPU_DIR}/driver", "../../../../bus/pci/drivers/gone")  # dangling: fine
    link(root, "sys/bus/pci/devices/0000:09:00.0", "../../../devices/pci0000:00/0000:09:00.0")
    topo = run(root)
    found = codes(topo)
    assert f"/{GPU_DIR}/local_cpulist" in found["read.error"]
    assert "/sys/bus/pci/devices/0000:09:00.0" in found["pci.vanished"]
    assert topo.gpus[0].driver == "gone"  # the link's name is all that is read
    assert_intact(topo)


def test_absolute_symlink_stays_inside_root(mini_root: Path) -> None:
    """A link to /etc/hostname resolves to ROOT/etc/hostname, never the host's file."""
    root = mini_root
    (root / GPU_DIR / "numa_node").unlink()
    link(root, f"{GPU_DIR}/numa_node", "/etc/hostname")
    link(root, f"{NIC_DIR}/numa_node", "../../../../../../../../../../../etc/hostname")
    put(root, "etc/hostname", "0\n")  # the in-root file, which does parse as a node
    topo = run(root)
    assert topo.gpus[0].numa_source == "own"
    assert topo.nics[0].numa_node == 0
    assert_intact(topo)


def test_malicious_tarball(tmp_path: Path) -> None:
    tree = build(tmp_path / "tree")
    tarball = tmp_path / "evil.tar.gz"
    outside = tmp_path / "outside"
    outside.mkdir()
    with tarfile.open(tarball, "w:gz") as tf:
        tf.add(tree, arcname="host")
        for name in ("../escaped", "/abs-escaped", "host/../../escaped2"):
            ti = tarfile.TarInfo(name)
            ti.size = 2
            tf.addfile(ti, io.BytesIO(b"x\n"))
        evil = tarfile.TarInfo("host/evil")
        evil.type = tarfile.SYMTYPE
        evil.linkname = str(outside)
        tf.addfile(evil)
        for name in ("host/evil/planted", "host/evil/deeper/planted"):
            through = tarfile.TarInfo(name)
            through.size = 2
            tf.addfile(through, io.BytesIO(b"x\n"))
    topo = run(tarball)
    found = codes(topo)
    skipped = set(found["root.member-skipped"])
    assert {"../escaped", "/abs-escaped", "host/../../escaped2"} <= skipped
    assert {"host/evil/planted", "host/evil/deeper/planted"} <= skipped
    assert os.listdir(outside) == []
    assert not (tmp_path / "escaped").exists() and not Path("/abs-escaped").exists()
    assert_intact(topo)


def test_unusable_roots_are_clear_errors(tmp_path: Path) -> None:
    from mcpnode.errors import RootError

    with pytest.raises(RootError, match="no such file"):
        Host(tmp_path / "missing")
    junk = tmp_path / "junk.tar.gz"
    junk.write_bytes(b"not a tarball at all")
    with pytest.raises(RootError, match="tar"):
        Host(junk)
    empty = tmp_path / "empty.tar.gz"
    with tarfile.open(empty, "w:gz") as tf:
        ti = tarfile.TarInfo("nothing-here/readme")
        ti.size = 0
        tf.addfile(ti, io.BytesIO(b""))
    with pytest.raises(RootError, match="no sys/"):
        Host(empty)


def test_empty_root_gives_empty_topology_with_problems(tmp_path: Path) -> None:
    topo = run(tmp_path)
    assert topo.gpus == () and topo.pci_devices == ()
    assert "numa.none" in codes(topo)


def test_fifo_in_a_directory_root_does_not_hang(mini_root: Path) -> None:
    root = mini_root
    (root / GPU_DIR / "numa_node").unlink()
    os.mkfifo(root / GPU_DIR / "numa_node")
    topo = run(root)  # a blocking open would hang here forever
    # Refused before it is opened (lstat): a FIFO is not an attribute.
    assert f"/{GPU_DIR}/numa_node" in codes(topo)["read.error"]
    (problem,) = [p for p in topo.problems if p.source == f"/{GPU_DIR}/numa_node"]
    assert "is a FIFO, not a regular file" in problem.detail
    assert_intact(topo)
