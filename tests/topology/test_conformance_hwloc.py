"""mcpnode against hwloc 2.9 on real machines' sysfs dumps (../shared/hosts, see its README).

For every `NAME.tar.bz2` with a `NAME.groundtruth.json`, mcpnode's topology is compared with
each of hwloc's answer files for that dump (`NAME`, `NAME.disallowed`, `NAME.keepgpunuma`):
NUMA nodes (ids, CPUs, CPU-less, memory, distances), the possible/present/online CPU sets, the
CPUs this process may use, and, for every PCI function hwloc lists and every one mcpnode finds,
presence, class/vendor/device, NUMA node, local CPUs, root complex and upstream bridge chain.
Nothing is skipped: every difference must be explained by one entry of
`tests/support/conformance_known.py`, and every entry must still explain a difference (no stale
entries).

The dumps are not part of this repository: the module skips itself when the folder is missing
(a plain clone). Set MCPNODE_SHARED_HOSTS to use another copy.
"""

from __future__ import annotations

import json
import os
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from mcpnode.host import Host
from mcpnode.topology.discover import discover, effective_local_cpus
from mcpnode.topology.model import CpuSet, PciAddress, PciDevice, Topology
from mcpnode.topology.parse import parse_cpulist, parse_pci_address
from tests.support.conformance_known import KNOWN, Diff


def _hosts_dir() -> Path:
    env = os.environ.get("MCPNODE_SHARED_HOSTS")
    return Path(env) if env else Path(__file__).resolve().parents[3] / "shared" / "hosts"


HOSTS = _hosts_dir()
if not HOSTS.is_dir():
    pytest.skip(
        f"hwloc reference dumps not found at {HOSTS} (they live in ../shared/hosts beside the "
        "project; set MCPNODE_SHARED_HOSTS to point elsewhere)",
        allow_module_level=True,
    )

pytestmark = pytest.mark.conformance

_GT = ".groundtruth.json"


def dump_names() -> list[str]:
    """Dumps that come with hwloc's answers, by tarball name."""
    return sorted(
        p.name.removesuffix(".tar.bz2")
        for p in HOSTS.glob("*.tar.bz2")
        if (HOSTS / (p.name.removesuffix(".tar.bz2") + _GT)).is_file()
    )


def variants(name: str) -> dict[str, dict[str, Any]]:
    """hwloc's answer files for one dump: `NAME` and `NAME.<variant>`, by variant stem."""
    out: dict[str, dict[str, Any]] = {}
    for p in sorted(HOSTS.glob(f"*{_GT}")):
        stem = p.name.removesuffix(_GT)
        rest = stem[len(name) :]
        if stem == name or (stem.startswith(name + ".") and "." not in rest[1:]):
            out[stem] = json.loads(p.read_text())
    return out


# -- rendering: both sides become comparable strings --------------------------------------------

NONE = "(none)"
UNKNOWN = "unknown"


def cpus(value: CpuSet | str | None) -> str:
    """A CPU or node list as a canonical cpulist; None is unknown, the empty set is (none)."""
    if value is None:
        return UNKNOWN
    s = parse_cpulist(value) if isinstance(value, str) else value
    return s.cpulist() or NONE


def hex16(value: int | None) -> str:
    return UNKNOWN if value is None else f"{value:04x}"


def chain(busids: list[str] | tuple[object, ...]) -> str:
    return " > ".join(str(b) for b in busids) or NONE


# -- comparison ---------------------------------------------------------------------------------


@dataclass
class Compared:
    diffs: list[Diff]
    devices: dict[str, int]  # answer file -> PCI functions compared (hwloc's and mcpnode's)


def compare_machine(variant: str, topo: Topology, gt: dict[str, Any]) -> Iterator[Diff]:
    c = topo.cpus
    # Old dumps (128ia64) have no possible/present/online files: hwloc then uses what it found.
    complete = gt["hwloc_machine_complete_cpus"]
    for field, ours, key in (
        ("cpu.possible", c.possible, "cpu_possible"),
        ("cpu.present", c.present, "cpu_present"),
        ("cpu.online", c.online, "cpu_online"),
    ):
        theirs = gt.get(key)
        if theirs is None:
            yield from _diff(variant, field, "", cpus(ours), f"(no file; hwloc uses {complete})")
        else:
            yield from _diff(variant, field, "", cpus(ours), cpus(theirs))
    yield from _diff(variant, "cpu.complete", "", cpus(c.present), cpus(complete))
    yield from _diff(
        variant, "process.cpus", "", cpus(topo.process.cpus), cpus(gt["hwloc_allowed_cpus"])
    )


def compare_numa(variant: str, topo: Topology, gt: dict[str, Any]) -> Iterator[Diff]:
    ours = {n.id: n for n in topo.numa_nodes}
    theirs: dict[int, dict[str, Any]] = {int(k): v for k, v in gt["numa_nodes"].items()}
    # An entry with only `sysfs_cpulist` is a node sysfs lists and hwloc did not show.
    shown = {i for i, v in theirs.items() if "hwloc_cpus" in v}
    for i in sorted(set(ours) | set(theirs)):
        yield from _diff(
            variant,
            "numa.node",
            str(i),
            "listed" if i in ours else "absent",
            "listed" if i in shown else ("hidden" if i in theirs else "absent"),
        )
        if i not in ours or i not in shown:
            continue
        node, h = ours[i], theirs[i]
        yield from _diff(variant, "numa.cpus", str(i), cpus(node.cpus), cpus(h["hwloc_cpus"]))
        yield from _diff(
            variant,
            "numa.cpuless",
            str(i),
            "cpuless" if node.cpuless else "has CPUs",
            "cpuless" if not h["hwloc_cpus"] else "has CPUs",
        )
        mem = h.get("local_memory_bytes")
        mib = node.memory_mib
        # mcpnode floors MemTotal kB to MiB; hwloc keeps bytes: equal when within one MiB.
        if mem is None or mib is None or abs(mib * 2**20 - mem) >= 2**20:
            yield Diff(
                variant,
                "numa.memory_mib",
                str(i),
                UNKNOWN if mib is None else str(mib),
                UNKNOWN if mem is None else f"{mem / 2**20:.1f}",
            )
        yield from _diff(
            variant,
            "numa.has_memory",
            str(i),
            str(node.has_memory),
            str(bool(mem)),
        )
    rows: dict[int, list[int]] = {int(k): v for k, v in gt["numa_distances_sysfs"].items()}
    for i in sorted(set(ours) | set(rows)):
        mine = " ".join(str(d) for _, d in ours[i].distances) if i in ours else "absent"
        yield from _diff(
            variant,
            "numa.distances",
            str(i),
            mine or NONE,
            " ".join(map(str, rows[i])) if i in rows else "absent",
        )
    # hwloc's own matrix, by OS index: checks the node id each sysfs column was given.
    matrix = hwloc_numa_latency(HOSTS / gt["lstopo_xml"])
    if matrix is not None:
        idx, values = matrix
        for r, i in enumerate(idx):
            n = ours.get(i)
            mine = " ".join(str(n.distance_to(j)) for j in idx) if n else "absent"
            row = values[r * len(idx) : (r + 1) * len(idx)]
            yield from _diff(variant, "numa.distances_hwloc", str(i), mine, " ".join(map(str, row)))


def hwloc_numa_latency(xml: Path) -> tuple[list[int], list[int]] | None:
    """hwloc's NUMALatency matrix (OS indexes, row-major values) from its XML export.

    Read from the XML rather than the groundtruth's `numa_distances_hwloc`, which kept only the
    first line of each list: 10 of 128ia64's 17 nodes.
    """
    for el in ET.parse(xml).getroot().iter("distances2"):
        if el.get("type") == "NUMANode" and el.get("name") == "NUMALatency":
            assert el.get("indexing") == "os", xml
            idx = [int(x) for e in el.iter("indexes") for x in (e.text or "").split()]
            values = [int(x) for e in el.iter("u64values") for x in (e.text or "").split()]
            assert len(idx) == int(el.get("nbobjs", "-1")) and len(values) == len(idx) ** 2, xml
            return idx, values
    return None


def compare_pci(
    variant: str, topo: Topology, gt: dict[str, Any], host: Host
) -> tuple[list[Diff], int]:
    out: list[Diff] = []
    listed: set[PciAddress] = set()
    for h in gt["pci_devices"]:
        busid: str = h["busid"]
        addr = parse_pci_address(busid)
        listed.add(addr)
        dev = topo.pci(addr)
        out.extend(_diff(variant, "pci.found", busid, "found" if dev else "missing", "found"))
        if dev is not None:
            out.extend(_compare_device(variant, topo, dev, h, host))
    for dev in topo.pci_devices:
        if dev.address not in listed:
            out.append(Diff(variant, "pci.found", str(dev.address), "found", "missing"))
    return out, len(listed | {d.address for d in topo.pci_devices})


def _compare_device(
    variant: str, topo: Topology, dev: PciDevice, h: dict[str, Any], host: Host
) -> Iterator[Diff]:
    busid = h["busid"]
    path = "/" + h["sysfs_path"]
    for field, mine in (
        ("class", dev.class_code),
        ("vendor", dev.vendor_id),
        ("device", dev.device_id),
    ):
        # hwloc prints 0000 where the dump has no such file: compare with the file's absence.
        theirs = h[field] if host.exists(f"{path}/{field}") else UNKNOWN
        yield from _diff(variant, f"pci.{field}", busid, hex16(mine), theirs)
    loc = h["hwloc_locality"]
    numa = UNKNOWN if dev.numa_node is None else str(dev.numa_node)
    yield from _diff(variant, "pci.numa", busid, numa, cpus(loc["numa_nodes"]))
    local = effective_local_cpus(dev, topo.numa_nodes)
    yield from _diff(variant, "pci.cpus", busid, cpus(local), cpus(loc["cpus"]))
    yield from _diff(
        variant, "pci.root_complex", busid, dev.host_bridge, h["sysfs_root_complex"] or NONE
    )
    yield from _diff(
        variant, "pci.chain", busid, chain(dev.ancestors), chain(h["sysfs_upstream_chain"])
    )


def _diff(variant: str, field: str, key: str, ours: str, theirs: str) -> Iterator[Diff]:
    if ours != theirs:
        yield Diff(variant, field, key, ours, theirs)


def compare_dump(name: str) -> tuple[Topology, Compared]:
    with Host(HOSTS / f"{name}.tar.bz2") as host:
        topo = discover(host)
        diffs: list[Diff] = []
        devices: dict[str, int] = {}
        for variant, gt in variants(name).items():
            diffs.extend(compare_machine(variant, topo, gt))
            diffs.extend(compare_numa(variant, topo, gt))
            pci, devices[variant] = compare_pci(variant, topo, gt, host)
            diffs.extend(pci)
    return topo, Compared(diffs, devices)


# -- the known-differences table, held to account ----------------------------------------------


def explain(name: str, topo: Topology, compared: Compared) -> list[str]:
    """Failures: unexplained differences, doubly explained ones, missing Problems, stale
    entries. Empty when mcpnode and hwloc differ exactly as the table says."""
    entries = [k for k in KNOWN if k.dump == name]
    names = set(variants(name))
    # (answer file, key) pairs each entry explained; "*" stands for any key of a dump-wide rule
    matched: list[set[tuple[str, str]]] = [set() for _ in entries]
    problems = {(p.code, p.source) for p in topo.problems}
    failures: list[str] = []
    for d in compared.diffs:
        hits = [i for i, k in enumerate(entries) if k.matches(d, topo)]
        # An entry naming the key is more specific than a dump-wide rule, and wins.
        named = [i for i in hits if entries[i].keys != ("*",)]
        hits = named or hits
        if not hits:
            failures.append(f"unexplained: {d}")
        elif len(hits) > 1:
            failures.append(f"explained twice: {d} by {[entries[i].reason for i in hits]}")
        for i in hits:
            k = entries[i]
            matched[i].add((d.variant, "*" if k.keys == ("*",) else d.key))
            if k.problem is not None:
                code, source = k.problem[0], k.problem[1].format(key=d.key)
                if (code, source) not in problems:
                    failures.append(f"no Problem {code} at {source} for {d}")
    for i, k in enumerate(entries):
        files = names if k.variants is None else {k.variant_name(v) for v in k.variants}
        if not files <= names:
            failures.append(f"entry names an answer file that does not exist: {k}")
        missing = {(f, key) for f in files & names for key in k.keys} - matched[i]
        if missing:
            failures.append(f"stale entry (no such difference at {sorted(missing)}): {k}")
    return failures


@pytest.mark.parametrize("name", dump_names())
def test_conforms_to_hwloc(name: str) -> None:
    topo, compared = compare_dump(name)
    failures = explain(name, topo, compared)
    assert not failures, f"{name}: {len(failures)} failures\n" + "\n".join(failures)


def test_known_table_names_present_dumps() -> None:
    names = set(dump_names())
    assert names, f"no dumps with hwloc answers in {HOSTS}"
    stale = sorted({k.dump for k in KNOWN} - names)
    assert not stale, f"known differences for dumps that are gone: {stale}"


def test_known_entries_are_precise() -> None:
    """Each entry says why, and pins both answers or checks its reason: no catch-all excuses."""
    for k in KNOWN:
        assert k.reason.strip() and k.category.strip(), k
        assert k.keys, k
        assert k.holds is not None or (k.ours is not None and k.theirs is not None), k
        assert k.keys == ("*",) or "*" not in k.keys, k
