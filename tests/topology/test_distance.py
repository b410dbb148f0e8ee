"""Table tests for the nvidia-smi distance buckets (rules in mcpnode/topology/distance.py)."""

from __future__ import annotations

import pytest

from mcpnode.topology.distance import classify
from mcpnode.topology.model import PciAddress, PciDevice, PciLink


def A(bus: int, dev: int = 0, fn: int = 0) -> PciAddress:
    return PciAddress(0, bus, dev, fn)


def dev(
    addr: PciAddress, bridge: str, ancestors: tuple[PciAddress, ...], numa: int | None
) -> PciDevice:
    return PciDevice(
        address=addr,
        sysfs_path=f"/sys/devices/{bridge}/{addr}",
        host_bridge=bridge,
        ancestors=ancestors,
        class_code=0x0302,
        prog_if=0,
        vendor_id=0x10DE,
        device_id=0x2330,
        subsystem_vendor_id=None,
        subsystem_device_id=None,
        driver=None,
        numa_node=numa,
        numa_source="own" if numa is not None else "unknown",
        numa_node_raw=numa,
        local_cpus=None,
        link=PciLink(None, None, None, None),
        physfn=None,
        sriov_numvfs=None,
    )


RP, USP, DSP1, DSP2 = A(0x10, 1), A(0x11), A(0x12, 1), A(0x12, 2)
USP2, DSP2A, DSP2B = A(0x14), A(0x15, 1), A(0x15, 2)

CASES = [
    # (rule, a, b, expected)
    ("self", dev(A(1), "pci0000:00", (RP,), 0), dev(A(1), "pci0000:00", (RP,), 0), "X"),
    (
        "two functions under one root port",
        dev(A(1, 0, 0), "pci0000:00", (RP,), 0),
        dev(A(1, 0, 1), "pci0000:00", (RP,), 0),
        "PIX",
    ),
    (
        "GPU and NIC on two downstream ports of one switch (HGX)",
        dev(A(0x13), "pci0000:10", (RP, USP, DSP1), 0),
        dev(A(0x14), "pci0000:10", (RP, USP, DSP2), 0),
        "PIX",
    ),
    (
        "dual-port NIC: two functions under one downstream port",
        dev(A(0x13, 0, 0), "pci0000:10", (RP, USP, DSP1), 0),
        dev(A(0x13, 0, 1), "pci0000:10", (RP, USP, DSP1), 0),
        "PIX",
    ),
    (
        "under two level-2 switches of one level-1 switch (DGX A100)",
        dev(A(0x20), "pci0000:10", (RP, USP, DSP1, USP2, DSP2A), 3),
        dev(A(0x21), "pci0000:10", (RP, USP, DSP2, A(0x16), A(0x17, 1)), 3),
        "PXB",
    ),
    (
        "level-2 switch device vs level-1 downstream device",
        dev(A(0x20), "pci0000:10", (RP, USP, DSP1, USP2, DSP2A), 3),
        dev(A(0x21), "pci0000:10", (RP, USP, DSP2), 3),
        "PXB",
    ),
    (
        "two downstream ports of a level-2 switch",
        dev(A(0x20), "pci0000:10", (RP, USP, DSP1, USP2, DSP2A), 3),
        dev(A(0x21), "pci0000:10", (RP, USP, DSP1, USP2, DSP2B), 3),
        "PIX",
    ),
    (
        "two root ports of one host bridge (q35 VM)",
        dev(A(1), "pci0000:00", (A(0, 2, 0),), None),
        dev(A(2), "pci0000:00", (A(0, 2, 1),), None),
        "PHB",
    ),
    (
        "endpoint on the host bridge itself vs one behind a root port",
        dev(A(0, 2), "pci0000:00", (), 0),
        dev(A(1), "pci0000:00", (A(0, 1),), 0),
        "PHB",
    ),
    (
        "different host bridges, same NUMA node",
        dev(A(0x1B), "pci0000:15", (A(0x15, 1),), 0),
        dev(A(0x3B), "pci0000:37", (A(0x37, 1),), 0),
        "NODE",
    ),
    (
        "different host bridges, different NUMA nodes",
        dev(A(0x1B), "pci0000:15", (A(0x15, 1),), 0),
        dev(A(0x9B), "pci0000:97", (A(0x97, 1),), 1),
        "SYS",
    ),
    (
        "different host bridges, NUMA unknown: conservative SYS",
        dev(A(0x1B), "pci0000:15", (A(0x15, 1),), None),
        dev(A(0x3B), "pci0000:37", (A(0x37, 1),), None),
        "SYS",
    ),
]


@pytest.mark.parametrize(("rule", "a", "b", "expected"), CASES, ids=[c[0] for c in CASES])
def test_classify(rule: str, a: PciDevice, b: PciDevice, expected: str) -> None:
    assert classify(a, b) == expected
    assert classify(b, a) == expected, "the relation is symmetric"
