"""topology_json() gives exactly what the generic jsonable() gives for the same topology: on every
committed fixture, on a generated SR-IOV host (CpuSets and links shared between thousands of
functions) and on values jsonable() treats by type or by key (bools and int subclasses under
hex keys, tuples of tuples, NamedTuples)."""

from __future__ import annotations

import enum
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from mcpnode.host import Host
from mcpnode.topology.discover import discover, discover_host
from mcpnode.topology.jsonify import jsonable, topology_json
from mcpnode.topology.model import SCHEMA_VERSION, CpuSet, PciAddress, Topology, replace
from tests import fixturegen

HOSTS = Path(__file__).resolve().parent / "fixtures" / "hosts"
FIXTURES = sorted(p.name for p in HOSTS.iterdir() if (p / "sys").is_dir())


def generic(topo: Topology) -> dict[str, Any]:
    return {"schema": SCHEMA_VERSION, **jsonable(topo)}


@pytest.mark.parametrize("name", FIXTURES)
def test_fixture(name: str) -> None:
    """With the fixture's recorded NVML answers where it has them: the NVML records
    (NvmlGpu's mig_devices left out while unknown) are in the comparison too."""
    with Host(HOSTS / name) as host:
        topo = discover_host(host)
    assert topology_json(topo) == generic(topo)


def test_synthetic_sriov_host(tmp_path: Path) -> None:
    fixturegen.write_host(fixturegen.synthetic_host(40), tmp_path)
    with Host(tmp_path) as host:
        topo = discover(host)
    got = topology_json(topo)
    assert got == generic(topo)
    vfs = [d for d in got["pci_devices"] if d["physfn"] is not None]
    assert len(vfs) == 40 and {d["local_cpus"] for d in vfs} == {"0-47,96-143", "48-95,144-191"}


class _Id(enum.IntEnum):
    MELLANOX = 0x15B3


class _Pair(NamedTuple):
    a: int
    b: str


def test_values_treated_by_type_or_key(tmp_path: Path) -> None:
    with Host(HOSTS / "no-gpu-host") as host:
        topo = discover(host)
    dev = topo.pci_devices[0]
    odd = replace(
        dev,
        vendor_id=_Id.MELLANOX,  # an int subclass under a hex key: hex
        device_id=True,  # a bool under a hex key: stays a bool
        prog_if=_Id.MELLANOX,
        ancestors=(PciAddress(0, 1, 2, 3), _Pair(1, "x")),
        local_cpus=CpuSet(),
    )
    topo = replace(topo, pci_devices=(odd, *topo.pci_devices[1:]))
    got = topology_json(topo)
    assert got == generic(topo)
    first = got["pci_devices"][0]
    assert (first["vendor_id"], first["device_id"], first["prog_if"]) == ("0x15b3", True, "0x15b3")
    assert first["ancestors"] == ["0000:01:02.3", [1, "x"]] and first["local_cpus"] == ""
