"""`mcpnode ps` and `pin --migrate` against real child processes on this machine.

The GPU is the recorded one of tests/support/placeroot.py's root (shaped like this machine: CPUs
0-1, node 0, GPU 0's slice CPU 1); its recorded NVML answers name the children's real pids as GPU
0's compute processes, the way the driver would. The children's affinity, status and numa_maps are
this kernel's. One NUMA node here: the memory verdicts and migrate_pages(2) run their real path
(local memory, a node-to-itself move); remote memory is the device run's to see."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from mcpnode.errors import NotSupported, ProcessGone
from mcpnode.host import Host
from mcpnode.placement.memory import parse_numa_maps
from mcpnode.placement.plan import plan_placement
from mcpnode.placement.ps import classify_cpus, classify_memory, verdict_of
from mcpnode.topology.discover import discover_host
from mcpnode.topology.model import CpuSet
from tests.support import placeroot
from tests.support.tuningcli import run_cli, run_process
from tools.fixturegen import nvmlgen
from tools.fixturegen.fixturegen import write_host

needs_machine = placeroot.needs_machine

# A child that takes the CPUs it is given, touches 16 MiB (so numa_maps has pages to count),
# says so, and waits for its stdin to close.
CHILD = """
import os, sys
os.sched_setaffinity(0, {int(c) for c in sys.argv[1].split(",")})
buf = bytearray(16 << 20)
for i in range(0, len(buf), 4096):
    buf[i] = 1
print("ready", flush=True)
sys.stdin.read()
"""


def start(cpus: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, cpus],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
    return proc


def stop(proc: subprocess.Popen[str]) -> None:
    assert proc.stdin is not None
    proc.stdin.close()
    proc.wait(timeout=30)


def root_with_processes(dest: Path, pids: list[int]) -> Path:
    """placeroot's machine whose recorded NVML lists `pids` on GPU 0."""
    host = placeroot.spec()
    write_host(host, dest)
    gpus = nvmlgen.base_gpus(host, nvmlgen.H100_PCIE)
    gpus = (replace(gpus[0], processes=tuple((p, 512 << 20) for p in pids)), *gpus[1:])
    meta = nvmlgen.snapshot_meta_json(host, nvmlgen.record(dest, nvmlgen.NvmlSpec(gpus))["nvml"])
    (dest / nvmlgen.SNAPSHOT_NAME).write_text(meta)
    return dest


@pytest.fixture
def children() -> Iterator[dict[str, subprocess.Popen[str]]]:
    procs = {"on-slice": start("1"), "on-housekeeping": start("0")}
    try:
        yield procs
    finally:
        for p in procs.values():
            stop(p)


@needs_machine
def test_ps_tells_placed_from_misplaced(
    tmp_path: Path, children: dict[str, subprocess.Popen[str]]
) -> None:
    pids = {name: p.pid for name, p in children.items()}
    root = root_with_processes(tmp_path / "root", sorted(pids.values()))
    proc = run_process("ps", "--root", str(root), "--fresh", "--format", "json")
    assert proc.returncode == 1, proc.stderr  # one is misplaced
    doc = json.loads(proc.stdout)
    assert doc["schema"] == "mcpnode.ps/v1"
    rows = {r["pid"]: r for r in doc["processes"]}
    placed, off = rows[pids["on-slice"]], rows[pids["on-housekeeping"]]
    assert (placed["cpus"], placed["cpu_placement"], placed["verdict"]) == ("1", "slice", "placed")
    assert placed["memory_placement"] == "local"
    assert int(placed["memory_bytes"]["0"]) >= 16 << 20
    assert placed["source"] == "nvml" and placed["gpu"] == 0
    assert (off["cpus"], off["cpu_placement"], off["verdict"]) == ("0", "node", "misplaced")
    assert "outside GPU 0's slice 1" in off["reason"]

    text = run_process("ps", "--root", str(root), "--fresh")
    assert text.returncode == 1
    lines = {line.split()[0]: line for line in text.stdout.splitlines()[1:]}
    assert " placed (slice, memory local)" in lines[str(pids["on-slice"])]
    assert " misplaced (node, memory local)" in lines[str(pids["on-housekeeping"])]


@needs_machine
def test_ps_with_only_placed_processes_exits_zero(tmp_path: Path) -> None:
    child = start("1")
    try:
        root = root_with_processes(tmp_path / "root", [child.pid])
        code, out, err = run_cli("ps", "--root", str(root), "--fresh")
    finally:
        stop(child)
    assert code == 0, err
    assert " placed (slice, memory local)" in out


@needs_machine
def test_pin_migrate_reports_numa_maps_before_and_after(placed_root: Path) -> None:
    child = start("0,1")
    try:
        root = placed_root
        code, out, err = run_cli(
            "pin", str(child.pid), "--gpu", "0", "--migrate", "--fresh", "--root", str(root)
        )
        affinity = sorted(Host("/").get_affinity(child.pid))
    finally:
        stop(child)
    assert code == 0, err
    assert affinity == sorted(placeroot.SLICE)
    lines = [line for line in out.splitlines() if line.startswith(("memory ", "migrate_pages"))]
    assert lines[0].startswith("memory before: node 0 ") and "MiB" in lines[0]
    assert lines[1].startswith("migrate_pages: nodes 0 -> 0, ")  # one node: to itself
    assert lines[1].endswith("0 page(s) could not be moved")
    assert lines[2].startswith("memory after: node 0 ")


def test_migrate_pages_errors() -> None:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    with pytest.raises(ProcessGone):
        Host("/").migrate_pages(gone.pid, {0}, {0})
    with pytest.raises(NotSupported):
        Host(Path(__file__).parents[1] / "fixtures" / "hosts" / "no-gpu-host").migrate_pages(
            1, {0}, {0}
        )


# -- pure parts ------------------------------------------------------------------------------


def test_parse_numa_maps_counts_bytes_per_node_with_page_sizes() -> None:
    text = (
        "55d0c0a00000 default file=/usr/bin/python3.11 mapped=300 N0=200 N1=100 "
        "kernelpagesize_kB=4\n"
        "7f0000000000 bind:1 anon=512 dirty=512 N1=512 kernelpagesize_kB=2048\n"
        "7f1000000000 prefer:0 anon=3 N0=3\n"  # before 2.6.38: no page size printed
        "7fff00000000 default stack anon=2 dirty=2 N0=2 kernelpagesize_kB=4\n"
    )
    assert parse_numa_maps(text) == {0: (200 + 3 + 2) * 4096, 1: 100 * 4096 + (512 << 21)}
    assert parse_numa_maps("") == {}


def test_verdicts_table() -> None:
    topo = discover_host(
        Host(Path(__file__).parents[1] / "fixtures" / "hosts" / "hgx-h100-8gpu-8nic")
    )
    gpu0 = plan_placement(topo).gpus[0]  # slice 1-12,97-108 on node 0 (0-47,96-143)
    rows = [
        (CpuSet({1, 2}), {0: 100}, ("slice", "local", "placed")),
        (CpuSet({0, 1}), {0: 100}, ("node", "local", "misplaced")),
        (CpuSet({50}), {0: 100}, ("off-node", "local", "misplaced")),
        (CpuSet({1}), {0: 80, 1: 20}, ("slice", "remote", "misplaced")),
        (CpuSet({1}), {0: 95, 1: 5}, ("slice", "local", "placed")),
        (CpuSet({1}), {}, ("slice", "none", "placed")),
        (None, {0: 1}, ("unknown", "local", "unknown")),
        (CpuSet({1}), None, ("slice", "unknown", "unknown")),
    ]
    for cpus, memory, expected in rows:
        cpu, mem = classify_cpus(cpus, gpu0), classify_memory(memory, gpu0)
        assert (cpu, mem, verdict_of(cpu, mem, gpu0)[0]) == expected, (cpus, memory)
