"""Table tests for the sysfs/procfs parsers: kernel formats in, values out."""

from __future__ import annotations

import pytest

from mcpnode.topology import parse
from mcpnode.topology.model import CpuSet, PciAddress


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0-3\n", {0, 1, 2, 3}),
        ("0-3,8,10-11\n", {0, 1, 2, 3, 8, 10, 11}),
        ("\n", set()),
        ("", set()),
        ("5", {5}),
        ("0-47,96-143", set(range(48)) | set(range(96, 144))),
        ("0-15:2/4", {0, 1, 4, 5, 8, 9, 12, 13}),
    ],
)
def test_cpulist(text: str, expected: set[int]) -> None:
    assert parse.parse_cpulist(text) == CpuSet(expected)


@pytest.mark.parametrize(
    "text", ["3-1", "a-b", "0-", "1,,2", "-1", "0-70000", "0-7:0/4", "0-7:2", "0 1"]
)
def test_cpulist_garbage(text: str) -> None:
    with pytest.raises(parse.ParseError):
        parse.parse_cpulist(text)


@pytest.mark.parametrize(
    ("ids", "text"),
    [
        (set(), ""),
        ({0}, "0"),
        ({0, 1, 2, 3, 8}, "0-3,8"),
        ({1, 3, 5}, "1,3,5"),
        (set(range(48)) | set(range(96, 144)), "0-47,96-143"),
    ],
)
def test_cpulist_format_roundtrip(ids: set[int], text: str) -> None:
    assert CpuSet(ids).cpulist() == text
    assert parse.parse_cpulist(text) == CpuSet(ids)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("00000000,0000ffff\n", set(range(16))),
        ("ff", set(range(8))),
        ("00000001,00000000", {32}),
        ("0", set()),
        ("ffffffff,ffffffff,ffffffff", set(range(96))),
    ],
)
def test_cpumask(text: str, expected: set[int]) -> None:
    assert parse.parse_cpumask(text) == CpuSet(expected)


@pytest.mark.parametrize("text", ["", "xyz", "0x ff", "ff,zz"])
def test_cpumask_garbage(text: str) -> None:
    with pytest.raises(parse.ParseError):
        parse.parse_cpumask(text)


@pytest.mark.parametrize(("text", "expected"), [("0\n", 0), ("1", 1), ("-1\n", None), ("255", 255)])
def test_numa_node(text: str, expected: int | None) -> None:
    assert parse.parse_numa_node(text) == expected


@pytest.mark.parametrize("text", ["", "-2", "zero", "1.0", "0x1"])
def test_numa_node_garbage(text: str) -> None:
    with pytest.raises(parse.ParseError):
        parse.parse_numa_node(text)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("8.0 GT/s PCIe\n", 8.0),  # 4.20+: pci_speed_string()
        ("8 GT/s\n", 8.0),  # before 4.17
        ("2.5 GT/s PCIe", 2.5),
        ("32.0 GT/s PCIe", 32.0),
        ("64.0 GT/s PCIe", 64.0),
        ("Unknown\n", None),  # link down / PCI_SPEED_UNKNOWN
        ("Unknown speed", None),
    ],
)
def test_link_speed(text: str, expected: float | None) -> None:
    assert parse.parse_link_speed(text) == expected


@pytest.mark.parametrize("text", ["fast", "8.0 GB/s", "GT/s"])
def test_link_speed_garbage(text: str) -> None:
    with pytest.raises(parse.ParseError):
        parse.parse_link_speed(text)


@pytest.mark.parametrize(
    ("text", "expected"), [("16\n", 16), ("x8", 8), ("0\n", None), ("1", 1), ("32", 32)]
)
def test_link_width(text: str, expected: int | None) -> None:
    assert parse.parse_link_width(text) == expected


@pytest.mark.parametrize("text", ["", "sixteen", "-4", "64"])
def test_link_width_garbage(text: str) -> None:
    with pytest.raises(parse.ParseError):
        parse.parse_link_width(text)


@pytest.mark.parametrize(
    ("text", "expected"),
    [("0x030200\n", (0x0302, 0x00)), ("0x060400", (0x0604, 0)), ("0x068001", (0x0680, 1))],
)
def test_pci_class(text: str, expected: tuple[int, int]) -> None:
    assert parse.parse_pci_class(text) == expected


@pytest.mark.parametrize("text", ["030200", "0x1000000", "", "0xzz"])
def test_pci_class_garbage(text: str) -> None:
    with pytest.raises(parse.ParseError):
        parse.parse_pci_class(text)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0000:1b:00.0", PciAddress(0, 0x1B, 0, 0)),
        ("00000000:1B:00.0", PciAddress(0, 0x1B, 0, 0)),  # NVML's form
        ("0035:05:00.1", PciAddress(0x35, 5, 0, 1)),
        ("10000:01:00.0", PciAddress(0x10000, 1, 0, 0)),  # Intel VMD domain
    ],
)
def test_pci_address(text: str, expected: PciAddress) -> None:
    assert parse.parse_pci_address(text) == expected
    assert str(expected) == (text.lower() if len(text) == 12 else str(expected))


@pytest.mark.parametrize("text", ["0000:1b:00", "1b:00.0", "0000:1g:00.0", "0000:1b:00.8"])
def test_pci_address_garbage(text: str) -> None:
    with pytest.raises(parse.ParseError):
        parse.parse_pci_address(text)


def test_pci_address_orders_numerically() -> None:
    addrs = [parse.parse_pci_address(a) for a in ("0000:b1:00.0", "0000:1b:00.0", "0000:0a:00.1")]
    assert [str(a) for a in sorted(addrs)] == ["0000:0a:00.1", "0000:1b:00.0", "0000:b1:00.0"]


def test_distances_and_meminfo() -> None:
    assert parse.parse_distances("10 21 21\n") == (10, 21, 21)
    with pytest.raises(parse.ParseError):
        parse.parse_distances("10 x")
    with pytest.raises(parse.ParseError):
        parse.parse_distances("")
    meminfo = "Node 1 MemTotal:       16777216 kB\nNode 1 MemFree:        1 kB\n"
    assert parse.parse_node_meminfo_total_kib(meminfo) == 16777216
    with pytest.raises(parse.ParseError):
        parse.parse_node_meminfo_total_kib("MemTotal: 5 kB")


def test_status_and_cgroup() -> None:
    status = "Name:\tpython\nCpus_allowed:\t3\nCpus_allowed_list:\t0-1\nMems_allowed_list:\t0\n"
    assert parse.parse_status_field(status, "Cpus_allowed_list") == "0-1"
    assert parse.parse_status_field(status, "Cpus_allowed") == "3"
    assert parse.parse_status_field(status, "Nope") is None
    assert parse.parse_cgroup_v2_path("0::/user.slice/job\n") == "/user.slice/job"
    assert parse.parse_cgroup_v2_path("3:cpuset:/slurm\n") is None
    assert parse.parse_cgroup_v1_cpuset_path("4:memory:/x\n3:cpu,cpuset:/slurm/j1\n") == "/slurm/j1"


def test_mounts_and_mountinfo() -> None:
    mounts = "none /cgroup/unified cgroup2 rw 0 0\nnone /mnt/with\\040space tmpfs rw 0 0\n"
    assert parse.parse_mounts(mounts) == [
        ("none", "/cgroup/unified", "cgroup2", ("rw",)),
        ("none", "/mnt/with space", "tmpfs", ("rw",)),
    ]
    info = "30 23 0:26 / /sys/fs/cgroup rw,nosuid shared:4 - cgroup2 cgroup2 rw,nsdelegate\n"
    assert parse.parse_mountinfo(info) == [("/", "/sys/fs/cgroup", "cgroup2", ("rw", "nsdelegate"))]
