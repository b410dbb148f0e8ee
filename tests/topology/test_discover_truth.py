"""Where two sources in a root disagree, discovery says so and picks one for a stated reason:

- one PCI address under several parents in /sys/devices (a hand-edited dump: a live kernel has
  one directory per function) -> the directory /sys/bus/pci/devices/ADDR links to is the
  device, every other copy is a `pci.duplicate-address` Problem, and no device, NIC or RDMA
  device comes from a copy (before: three NICs all named `qib0`; a SAS controller reported as
  a NIC with a ConnectX's netdev and `mlx4_0`);
- `local_cpus` (mask) and `local_cpulist` disagreeing -> a `pci.local-cpus.disagree` Problem
  naming the device and both values; the list is used.

The dumps are the generator's hand_edited_base() host, edited the way people edit dumps
(tools/fixturegen/fixturegen.py graft_copy).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mcpnode.host import Host
from mcpnode.topology.discover import discover
from mcpnode.topology.model import Topology
from tests.support.minihost import GPU, GPU_DIR, put
from tools.fixturegen import fixturegen

QIB = "0000:01:00.0"
SAS = "0000:02:00.0"
CX3 = "0000:81:00.0"
RP1, RP2, RP3 = (f"sys/devices/pci0000:00/0000:00:0{n}.0" for n in (1, 2, 3))
QIB_DIR = f"{RP1}/{QIB}"
SAS_DIR = f"{RP2}/{SAS}"
CX3_DIR = f"sys/devices/pci0000:80/0000:80:01.0/{CX3}"


def base(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    fixturegen.write_host(fixturegen.hand_edited_base(), root)
    return root


def run(root: Path) -> Topology:
    with Host(root) as host:
        return discover(host)


def problems(topo: Topology, code: str) -> list[tuple[str, str]]:
    return [(p.source, p.detail) for p in topo.problems if p.code == code]


def nics(topo: Topology) -> list[tuple[str, tuple[str, ...], tuple[str, ...]]]:
    return [(str(n.address), tuple(d.name for d in n.netdevs), n.rdma_devices) for n in topo.nics]


def assert_one_device_per_address(topo: Topology) -> None:
    addrs = [str(d.address) for d in topo.pci_devices]
    assert len(addrs) == len(set(addrs)), addrs


def test_unedited_base_is_clean(tmp_path: Path) -> None:
    topo = run(base(tmp_path))
    assert topo.problems == ()
    assert nics(topo) == [(QIB, ("ib0",), ("qib0",)), (CX3, ("ib1",), ("mlx4_0",))]
    sas = next(d for d in topo.pci_devices if str(d.address) == SAS)
    assert (sas.class_code, sas.vendor_id, sas.driver) == (0x0107, 0x1000, "mpt2sas")


def test_hca_copied_under_three_parents_is_one_nic(tmp_path: Path) -> None:
    root = base(tmp_path)
    copies = [fixturegen.graft_copy(root, QIB_DIR, rp) for rp in (RP2, RP3)]
    topo = run(root)
    assert_one_device_per_address(topo)
    assert nics(topo) == [(QIB, ("ib0",), ("qib0",)), (CX3, ("ib1",), ("mlx4_0",))]
    qib = next(d for d in topo.pci_devices if str(d.address) == QIB)
    assert qib.sysfs_path == "/" + QIB_DIR
    found = problems(topo, "pci.duplicate-address")
    assert [src for src, _ in found] == [QIB, QIB]
    for (_, detail), copy in zip(found, copies, strict=True):
        assert f"also a directory at /{copy}: ignored" in detail
        assert f"using /{QIB_DIR} (the directory /sys/bus/pci/devices/{QIB} links to)" in detail


def test_nic_grafted_at_a_sas_controllers_address_is_not_a_nic(tmp_path: Path) -> None:
    root = base(tmp_path)
    copy = fixturegen.graft_copy(root, CX3_DIR, RP3, SAS)
    topo = run(root)
    assert_one_device_per_address(topo)
    assert nics(topo) == [(QIB, ("ib0",), ("qib0",)), (CX3, ("ib1",), ("mlx4_0",))]
    sas = next(d for d in topo.pci_devices if str(d.address) == SAS)
    assert (sas.class_code, sas.vendor_id, sas.sysfs_path) == (0x0107, 0x1000, "/" + SAS_DIR)
    assert problems(topo, "pci.duplicate-address") == [
        (
            SAS,
            f"also a directory at /{copy}: ignored with everything below it; using /{SAS_DIR} "
            f"(the directory /sys/bus/pci/devices/{SAS} links to)",
        )
    ]


def test_the_bus_link_decides_which_copy_is_the_device(tmp_path: Path) -> None:
    root = base(tmp_path)
    copy = fixturegen.graft_copy(root, QIB_DIR, RP3)
    bus = root / "sys/bus/pci/devices" / QIB
    bus.unlink()
    os.symlink(f"../../../{copy.removeprefix('sys/')}", bus)
    topo = run(root)
    qib = next(d for d in topo.pci_devices if str(d.address) == QIB)
    assert qib.sysfs_path == "/" + copy
    assert qib.ancestors == (
        next(d.address for d in topo.pci_devices if d.sysfs_path == "/" + RP3),
    )
    ((_, detail),) = problems(topo, "pci.duplicate-address")
    assert detail.startswith(f"also a directory at /{QIB_DIR}: ignored")


@pytest.mark.parametrize("bus_link", ["absent", "elsewhere"])
def test_without_a_bus_link_to_a_copy_the_first_found_is_kept(
    tmp_path: Path, bus_link: str
) -> None:
    root = base(tmp_path)
    fixturegen.graft_copy(root, QIB_DIR, RP3)
    bus = root / "sys/bus/pci/devices" / QIB
    bus.unlink()
    if bus_link == "elsewhere":
        os.symlink(f"../../../{SAS_DIR.removeprefix('sys/')}", bus)
    topo = run(root)
    assert_one_device_per_address(topo)
    qib = next(d for d in topo.pci_devices if str(d.address) == QIB)
    assert qib.sysfs_path == "/" + QIB_DIR  # RP1 is walked before RP3
    ((_, detail),) = problems(topo, "pci.duplicate-address")
    link = f"/sys/bus/pci/devices/{QIB}"
    why = "is absent" if bus_link == "absent" else f"links to /{SAS_DIR}, none of them"
    assert detail.endswith(f"(first found; {link} {why})")


def test_a_grafted_bridge_is_dropped_with_its_subtree(tmp_path: Path) -> None:
    """A copied root port brings copies of everything below it: one Problem, for the bridge."""
    root = base(tmp_path)
    fixturegen.graft_copy(root, RP1, "sys/devices/pci0000:80")
    topo = run(root)
    assert_one_device_per_address(topo)
    assert nics(topo) == [(QIB, ("ib0",), ("qib0",)), (CX3, ("ib1",), ("mlx4_0",))]
    assert [src for src, _ in problems(topo, "pci.duplicate-address")] == ["0000:00:01.0"]
    assert {d.host_bridge for d in topo.pci_devices if str(d.address) in (QIB, "0000:00:01.0")} == {
        "pci0000:00"
    }


def test_rdma_class_link_into_a_dropped_copy_attaches_nothing(tmp_path: Path) -> None:
    """/sys/class/infiniband/qib0 leading into a copy that was not kept names no device."""
    root = base(tmp_path)
    copy = fixturegen.graft_copy(root, QIB_DIR, RP3)
    for p in sorted((root / QIB_DIR / "infiniband").rglob("*"), reverse=True):
        p.unlink() if p.is_file() or p.is_symlink() else p.rmdir()
    (root / QIB_DIR / "infiniband").rmdir()
    cls = root / "sys/class/infiniband/qib0"
    cls.unlink()
    os.symlink(f"../../{copy.removeprefix('sys/')}/infiniband/qib0", cls)
    topo = run(root)
    # Without its RDMA device the QLogic HCA (class 0x0c06, not a network class) is no NIC.
    assert nics(topo) == [(CX3, ("ib1",), ("mlx4_0",))]
    assert problems(topo, "rdma.device-elsewhere") == [
        (
            "/sys/class/infiniband/qib0",
            f"its device link leads to /{copy}, not to /{QIB_DIR} where {QIB} was read: "
            "not attached to it",
        )
    ]


# -- local_cpus vs local_cpulist ------------------------------------------------------------


def gpu_local_cpus(topo: Topology) -> str | None:
    (gpu,) = topo.gpus
    return None if gpu.local_cpus is None else gpu.local_cpus.cpulist()


def test_mask_and_list_agreeing_is_no_problem(mini_root: Path) -> None:
    topo = run(mini_root)  # local_cpulist 0-1, local_cpus 00000003
    assert problems(topo, "pci.local-cpus.disagree") == []
    assert gpu_local_cpus(topo) == "0-1"


def test_mask_and_list_disagreeing_is_a_problem_naming_both(mini_root: Path) -> None:
    root = mini_root
    put(root, f"{GPU_DIR}/local_cpus", "00000002\n")
    topo = run(root)
    assert problems(topo, "pci.local-cpus.disagree") == [
        (GPU, "local_cpulist says 0-1 but local_cpus 00000002 means 1; using local_cpulist")
    ]
    assert gpu_local_cpus(topo) == "0-1"


def test_empty_mask_against_a_list(mini_root: Path) -> None:
    root = mini_root
    put(root, f"{GPU_DIR}/local_cpus", "00000000\n")
    topo = run(root)
    assert problems(topo, "pci.local-cpus.disagree") == [
        (GPU, "local_cpulist says 0-1 but local_cpus 00000000 means (none); using local_cpulist")
    ]


def test_garbage_mask_is_a_problem_and_the_list_is_used(mini_root: Path) -> None:
    root = mini_root
    put(root, f"{GPU_DIR}/local_cpus", "zz\n")
    topo = run(root)
    assert [src for src, _ in problems(topo, "read.garbage")] == [f"/{GPU_DIR}/local_cpus"]
    assert problems(topo, "pci.local-cpus.disagree") == []
    assert gpu_local_cpus(topo) == "0-1"


def test_mask_stands_in_for_a_missing_or_garbage_list(mini_root: Path) -> None:
    root = mini_root
    (root / GPU_DIR / "local_cpulist").unlink()
    topo = run(root)
    assert topo.problems == ()
    assert gpu_local_cpus(topo) == "0-1"  # from the mask 00000003
    (root / GPU_DIR / "local_cpus").unlink()
    assert gpu_local_cpus(run(root)) is None
    put(root, f"{GPU_DIR}/local_cpus", "00000003\n")
    put(root, f"{GPU_DIR}/local_cpulist", "0-\n")
    topo = run(root)
    assert [p.code for p in topo.problems] == ["read.garbage"]
    assert gpu_local_cpus(topo) == "0-1"
