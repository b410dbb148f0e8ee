"""The cache reader (topology/caches.py) on small real sysfs trees: the domains it finds, and
garbage in every file it reads becoming one Problem naming the file, never a guess."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mcpnode.host import Host
from mcpnode.topology.caches import parse_cache_id, parse_cache_level, parse_cache_size_kib
from mcpnode.topology.discover import discover
from mcpnode.topology.model import CpuSet, Topology
from mcpnode.topology.parse import ParseError

CPU = "sys/devices/system/cpu"


def put(root: Path, rel: str, text: str) -> None:
    p = root / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)


def machine(root: Path, n: int = 8, online: str | None = None, l3_size: int = 4) -> Path:
    """`n` CPUs present of 2n possible, SMT pairs (2k, 2k+1) sharing L1/L2, L3 shared by runs
    of `l3_size` CPUs."""
    every = f"0-{n - 1}\n"
    put(root, f"{CPU}/possible", f"0-{2 * n - 1}\n")  # hot-pluggable CPUs, not present
    put(root, f"{CPU}/present", every)
    put(root, f"{CPU}/online", online or every)
    for c in range(n):
        core = c // 2
        put(root, f"{CPU}/cpu{c}/topology/thread_siblings_list", f"{2 * core}-{2 * core + 1}\n")
        first = c - c % l3_size
        for i, (level, kind, shared, size) in enumerate(
            (
                (1, "Data", f"{2 * core}-{2 * core + 1}", "48K"),
                (1, "Instruction", f"{2 * core}-{2 * core + 1}", "32K"),
                (2, "Unified", f"{2 * core}-{2 * core + 1}", "2048K"),
                (3, "Unified", f"{first}-{first + l3_size - 1}", "32768K"),
            )
        ):
            d = f"{CPU}/cpu{c}/cache/index{i}"
            put(root, f"{d}/level", f"{level}\n")
            put(root, f"{d}/type", f"{kind}\n")
            put(root, f"{d}/shared_cpu_list", f"{shared}\n")
            put(root, f"{d}/size", f"{size}\n")
            put(root, f"{d}/id", f"{first // l3_size if level == 3 else core}\n")
    return root


def found(root: Path) -> Topology:
    with Host(root) as host:
        return discover(host)


def problems(topo: Topology) -> list[tuple[str, str]]:
    return [(p.code, p.source) for p in topo.problems if "cache" in p.source or "cache" in p.code]


def test_domains(tmp_path: Path) -> None:
    topo = found(machine(tmp_path))
    l3 = topo.cache_domains(3)
    assert [(c.cpus.cpulist(), c.size_kib, c.id) for c in l3] == [
        ("0-3", 32768, 0),
        ("4-7", 32768, 1),
    ]
    assert [c.cpus.cpulist() for c in topo.cache_domains(2)] == ["0-1", "2-3", "4-5", "6-7"]
    assert {c.level for c in topo.caches} == {2, 3}  # no L1, no instruction cache
    assert problems(topo) == []


def test_no_cache_directories(tmp_path: Path) -> None:
    root = machine(tmp_path)
    for c in range(8):
        for i in range(4):
            for f in (root / f"{CPU}/cpu{c}/cache/index{i}").iterdir():
                f.unlink()
            (root / f"{CPU}/cpu{c}/cache/index{i}").rmdir()
        (root / f"{CPU}/cpu{c}/cache").rmdir()
    topo = found(root)
    assert topo.caches == () and problems(topo) == []


def test_offline_cpus_are_dropped_silently(tmp_path: Path) -> None:
    # Older kernels keep offline CPUs in shared_cpu_list (hwloc's offline-cpu0-node0 dump).
    topo = found(machine(tmp_path, online="1-7\n"))
    assert [c.cpus.cpulist() for c in topo.cache_domains(3)] == ["1-3", "4-7"]
    assert problems(topo) == []


@pytest.mark.parametrize(
    ("file", "text", "code", "check"),
    [
        ("size", "lots\n", "read.garbage", lambda t: t.cache_domains(3)[0].size_kib is None),
        (
            "size",
            "99999999999K\n",
            "read.garbage",
            lambda t: t.cache_domains(3)[0].size_kib is None,
        ),
        ("size", "4294967296M\n", "read.garbage", lambda t: t.cache_domains(3)[0].size_kib is None),
        (
            "id",
            "99999999999999999999999\n",
            "read.garbage",
            lambda t: t.cache_domains(3)[0].id is None,
        ),
        ("id", "-1\n", "read.garbage", lambda t: t.cache_domains(3)[0].id is None),
        (
            "level",
            "three\n",
            "read.garbage",
            lambda t: t.cache_domains(3)[0].cpus == CpuSet({0, 1, 2, 3}),
        ),
        # CPUs that do not exist: ignored, the rest of the domain kept
        ("shared_cpu_list", "0-3,12\n", "cache.cpus.beyond-present", None),
        # a list past the possible CPUs: garbage, and no domain from this file
        ("shared_cpu_list", "0-70000\n", "read.garbage", None),
        ("shared_cpu_list", "2-3\n", "cache.cpus.without-self", None),
    ],
)
def test_garbage_is_one_problem_naming_the_file(
    tmp_path: Path, file: str, text: str, code: str, check: object
) -> None:
    root = machine(tmp_path)
    put(root, f"{CPU}/cpu0/cache/index3/{file}", text)
    topo = found(root)
    assert (code, f"/{CPU}/cpu0/cache/index3/{file}") in problems(topo), topo.problems
    if callable(check):
        assert check(topo)
    # every other domain is intact, and no domain names a CPU that is not online
    assert CpuSet({4, 5, 6, 7}) in {c.cpus for c in topo.cache_domains(3)}
    assert all(c.cpus <= topo.cpus.online for c in topo.caches)


def test_overlapping_domains_are_refused(tmp_path: Path) -> None:
    root = machine(tmp_path)
    put(root, f"{CPU}/cpu4/cache/index3/shared_cpu_list", "2-7\n")
    topo = found(root)
    assert ("cache.overlap", f"/{CPU}/cpu4/cache/index3") in problems(topo)
    # the CPUs the refused list named are read again from their own files
    assert [c.cpus.cpulist() for c in topo.cache_domains(3)] == ["0-3", "4-7"]


def test_overlap_names_the_first_domain_found(tmp_path: Path) -> None:
    # 3-6 overlaps the L2 domains 2-3 and 4-5: the problem names the one found first
    root = machine(tmp_path)
    put(root, f"{CPU}/cpu6/cache/index2/shared_cpu_list", "3-6\n")
    topo = found(root)
    (overlap,) = [p for p in topo.problems if p.code == "cache.overlap"]
    assert overlap.source == f"/{CPU}/cpu6/cache/index2"
    assert "L2 CPUs 3-6 overlap another L2 domain 2-3 without" in overlap.detail


@pytest.mark.parametrize(
    ("file", "text"),
    [
        ("size", "lots\n"),
        ("id", "-1\n"),
        ("type", "\xff\n"),
        ("shared_cpu_list", "2-3\n"),  # without the CPU it was read from
        ("shared_cpu_list", "0-70000\n"),
    ],
)
def test_l1_is_read_for_its_level_only(tmp_path: Path, file: str, text: str) -> None:
    # An L1 directory's other files are not read: garbage there is no problem, changes nothing.
    root = machine(tmp_path)
    put(root, f"{CPU}/cpu0/cache/index0/{file}", text)
    put(root, f"{CPU}/cpu0/cache/index1/{file}", text)
    topo = found(root)
    assert problems(topo) == []
    assert topo.caches == found(machine(tmp_path / "clean")).caches


@pytest.mark.parametrize("kind", ["garbage", "fifo", "directory", "empty"])
def test_l1_level_that_cannot_be_used(tmp_path: Path, kind: str) -> None:
    # The level is all an L1 directory is read for: when it cannot be used, the directory is
    # read whole and reported as any other (one problem naming the file, nothing guessed).
    root = machine(tmp_path)
    level = root / f"{CPU}/cpu2/cache/index0/level"
    level.unlink()
    if kind == "garbage":
        level.write_text("one\n")
    elif kind == "fifo":
        os.mkfifo(level)
    elif kind == "directory":
        level.mkdir()
    else:
        level.write_text("")
    topo = found(root)
    assert [s for _, s in problems(topo)] == [f"/{CPU}/cpu2/cache/index0/level"]
    assert topo.caches == found(machine(tmp_path / "clean")).caches


def test_each_cpu_reads_its_own_l1_and_l2(tmp_path: Path) -> None:
    # CPU 0's index2 hand-edited to say L1: it covers nothing, so CPU 1's own index2 (L2,
    # CPUs 0-1) still gives the domain; an L4 at CPU 0's index3 likewise leaves L3 to CPU 1.
    root = machine(tmp_path)
    put(root, f"{CPU}/cpu0/cache/index2/level", "1\n")
    put(root, f"{CPU}/cpu0/cache/index3/level", "4\n")
    topo = found(root)
    assert [c.cpus.cpulist() for c in topo.cache_domains(2)] == ["0-1", "2-3", "4-5", "6-7"]
    assert [c.cpus.cpulist() for c in topo.cache_domains(3)] == ["0-3", "4-7"]
    assert problems(topo) == []


def test_map_when_the_list_is_garbage(tmp_path: Path) -> None:
    root = machine(tmp_path)
    put(root, f"{CPU}/cpu0/cache/index3/shared_cpu_list", "zero to three\n")
    put(root, f"{CPU}/cpu0/cache/index3/shared_cpu_map", "0f\n")
    topo = found(root)
    assert problems(topo) == [("read.garbage", f"/{CPU}/cpu0/cache/index3/shared_cpu_list")]
    assert [c.cpus.cpulist() for c in topo.cache_domains(3)] == ["0-3", "4-7"]


def test_map_when_no_list(tmp_path: Path) -> None:
    # POWER9 (hwloc's nvidiagpunumanodes dump) has shared_cpu_map only.
    root = machine(tmp_path)
    for c in range(8):
        (root / f"{CPU}/cpu{c}/cache/index3/shared_cpu_list").unlink()
        put(root, f"{CPU}/cpu{c}/cache/index3/shared_cpu_map", "0f\n" if c < 4 else "f0\n")
    topo = found(root)
    assert [c.cpus.cpulist() for c in topo.cache_domains(3)] == ["0-3", "4-7"]


def test_too_many_indexes_are_bounded(tmp_path: Path) -> None:
    root = machine(tmp_path)
    for i in range(4, 40):
        put(root, f"{CPU}/cpu0/cache/index{i}/level", "4\n")
    topo = found(root)
    assert ("cache.too-many", f"/{CPU}/cpu0/cache") in problems(topo)


def test_huge_file_is_bounded(tmp_path: Path) -> None:
    root = machine(tmp_path)
    put(root, f"{CPU}/cpu0/cache/index3/size", "1" * (1 << 20))
    topo = found(root)
    assert any(s == f"/{CPU}/cpu0/cache/index3/size" for _, s in problems(topo))


@pytest.mark.parametrize(
    ("text", "kib"), [("5118K", 5118), ("32M", 32768), ("1G", 1 << 20), ("512", 512)]
)
def test_size_parser(text: str, kib: int) -> None:
    assert parse_cache_size_kib(text + "\n") == kib


@pytest.mark.parametrize("text", ["", "K", "12KB", "-5K", "0x10K", "1T", "1" * 11 + "K"])
def test_size_parser_refuses(text: str) -> None:
    with pytest.raises(ParseError):
        parse_cache_size_kib(text)


def test_level_and_id_parsers() -> None:
    assert parse_cache_level("3\n") == 3 and parse_cache_id("4294967295") == 4294967295
    for bad in ("0", "10", "x"):
        with pytest.raises(ParseError):
            parse_cache_level(bad)
    for bad in ("4294967296", "-1", "1e3"):
        with pytest.raises(ParseError):
            parse_cache_id(bad)
