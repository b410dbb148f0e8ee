"""topology_json() gives exactly what the generic jsonable() gives for the same topology: on every
committed fixture, on a generated SR-IOV host (CpuSets and links shared between thousands of
functions) and on values jsonable() treats by type or by key (bools and int subclasses under
hex keys, tuples of tuples, NamedTuples)."""

from __future__ import annotations

import enum
import json
import sys
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from mcpnode.cli import render_topo
from mcpnode.codec import jsonout
from mcpnode.codec.record import replace
from mcpnode.host import Host
from mcpnode.topology.discover import discover, discover_host
from mcpnode.topology.jsonify import jsonable, topology_json
from mcpnode.topology.model import SCHEMA_VERSION, CpuSet, PciAddress, Topology
from tests.support.childrss import child_peak_rss_mib, peak_rss_mib
from tools.fixturegen import fixturegen

HOSTS = Path(__file__).resolve().parents[1] / "fixtures" / "hosts"
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


def test_topo_json_in_pieces_is_json_dumps(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The pieces `topo --format json` writes join to json.dumps(indent=2)'s text, whatever the
    piece size."""
    fixturegen.write_host(fixturegen.synthetic_host(40), tmp_path)
    with Host(tmp_path) as host:
        topo = discover(host)
    want = json.dumps(topology_json(topo), indent=2)
    assert render_topo.as_json(topo) == want
    monkeypatch.setattr(jsonout, "_FLUSH", 1)
    pieces: list[str] = []
    render_topo.write_json(topo, pieces.append)
    assert len(pieces) > 100 and "".join(pieces) == want


def test_topo_json_peak_memory_is_not_the_fragment_list(tmp_path: Path) -> None:
    """`mcpnode topo --format json` on a 2,048-VF host peaks near what discovery and the JSON
    tree hold, not at json.dumps's list of every fragment (that was 110 MiB at 8,192 VFs, where
    lstopo needs 44: the list alone ~70)."""
    fixturegen.write_host(fixturegen.synthetic_host(2048), tmp_path)
    build = (
        "from mcpnode.host import Host\n"
        "from mcpnode.topology.discover import discover_host\n"
        "from mcpnode.topology.jsonify import topology_json\n"
        f"h = Host({str(tmp_path)!r}); body = topology_json(discover_host(h))\n"
    )
    code, tree_rss, err = peak_rss_mib([sys.executable, "-c", build])
    assert code == 0, err
    code, topo_rss, err = child_peak_rss_mib(["topo", "--format", "json", "--root", str(tmp_path)])
    assert code == 0, err
    assert topo_rss < tree_rss + 8, (topo_rss, tree_rss)
