"""L2 and L3 cache domains against hwloc 2.9 on real machines' sysfs dumps (../shared/hosts).

For every dump whose hwloc answers list caches, mcpnode's domains of each level must be hwloc's
L2Cache / L3Cache objects: the same CPU sets (hwloc's `complete_cpuset`) and sizes. One rule
explains the only difference, checked mechanically: without `--disallowed`, hwloc removes a
cache whose CPUs and memory the reading process may not use at all (32amd64's cgroup), and
mcpnode, which describes the machine, keeps it.

The dumps are not part of this repository: the module skips itself when the folder is missing.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from mcpnode.host import Host
from mcpnode.topology.discover import discover
from mcpnode.topology.model import CpuSet, Topology

# The dumps' folder; importing it skips this module with a message when the folder is absent.
from tests.topology.test_conformance_hwloc import HOSTS

pytestmark = pytest.mark.conformance


def hwloc_bitmap(text: str) -> CpuSet:
    """hwloc's bitmap string: 32-bit hex words, most significant first, an empty word between
    commas standing for zero (`0xff000000,,0x0` is CPUs 88-95)."""
    value = 0
    for word in text.split(","):
        value = (value << 32) | (int(word, 16) if word else 0)
    return CpuSet(i for i in range(value.bit_length()) if value >> i & 1)


def hwloc_caches(xml: Path, level: int) -> dict[CpuSet, int]:
    """hwloc's unified/data caches of one level: complete CPU set -> size in bytes."""
    out: dict[CpuSet, int] = {}
    for el in ET.parse(xml).getroot().iter("object"):
        if el.get("type") == f"L{level}Cache" and el.get("cache_type") in ("0", "1"):
            out[hwloc_bitmap(el.get("complete_cpuset", "0x0"))] = int(el.get("cache_size", "0"))
    return out


def answer_files() -> list[tuple[str, str]]:
    """(dump, answer file stem) for every lstopo XML beside a dump."""
    out = []
    for tar in sorted(HOSTS.glob("*.tar.bz2")):
        dump = tar.name.removesuffix(".tar.bz2")
        for xml in sorted(HOSTS.glob(f"{dump}*.lstopo.xml")):
            stem = xml.name.removesuffix(".lstopo.xml")
            rest = stem[len(dump) :]
            if stem == dump or (rest.startswith(".") and "." not in rest[1:]):
                out.append((dump, stem))
    return out


_TOPOLOGIES: dict[str, Topology] = {}


def topology(dump: str) -> Topology:
    if dump not in _TOPOLOGIES:
        with Host(HOSTS / f"{dump}.tar.bz2") as host:
            _TOPOLOGIES[dump] = discover(host)
    return _TOPOLOGIES[dump]


@pytest.mark.parametrize(("dump", "stem"), answer_files())
@pytest.mark.parametrize("level", [2, 3])
def test_cache_domains_are_hwlocs(dump: str, stem: str, level: int) -> None:
    topo = topology(dump)
    theirs = hwloc_caches(HOSTS / f"{stem}.lstopo.xml", level)
    ours = {c.cpus: c for c in topo.cache_domains(level)}
    allowed = topo.process.cpus
    for cpus in sorted(set(ours) - set(theirs), key=min):
        # The one explained difference: hwloc hides what the process cannot use at all.
        hidden = not stem.endswith(".disallowed") and allowed is not None and not cpus & allowed
        assert hidden, f"{stem}: mcpnode L{level} {cpus.cpulist()} is not one of hwloc's"
    missing = sorted((s.cpulist() for s in set(theirs) - set(ours)), key=str)
    assert not missing, f"{stem}: hwloc's L{level} domains {missing} missing from mcpnode"
    for cpus, size in theirs.items():
        kib = ours[cpus].size_kib
        assert kib is not None and kib * 1024 == size, (
            f"{stem}: L{level} {cpus.cpulist()} size {kib} KiB, hwloc {size} B"
        )
    assert not [p for p in topo.problems if p.code.startswith("cache.")], topo.problems


def test_l3_compared_on_every_dump_that_has_them() -> None:
    """Not vacuous: the dumps with caches give L3 domains to compare, several per node on AMD."""
    with_l3 = {d for d, s in answer_files() if hwloc_caches(HOSTS / f"{s}.lstopo.xml", 3)}
    assert len(with_l3) >= 6, with_l3
    amd = topology("48amd64-4pa2n6c-sparse")
    assert len(amd.cache_domains(3)) == 8 and len(amd.numa_nodes) == 8
    assert len(topology("32amd64-4s2n4c-cgroup2").cache_domains(3)) == 8
