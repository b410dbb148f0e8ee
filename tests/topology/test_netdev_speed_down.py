"""A netdev whose link is down: its `speed` reads -1 on most drivers, or fails with EINVAL while
the interface is not running (net/core/net-sysfs.c speed_show), which a copy of sysfs holds as
an empty file. Both are unknown speed, never a read.garbage problem; a word that is no number
still is one."""

from __future__ import annotations

from pathlib import Path

import pytest

from mcpnode.host import Host
from mcpnode.topology.discover import discover_host
from tests.support.minihost import NIC_DIR, build, put


def discover_with_speed(tmp_path: Path, speed: str) -> tuple[int | None, list[str]]:
    root = build(tmp_path / "root")
    put(root, f"{NIC_DIR}/net/eth0/operstate", "down\n")
    put(root, f"{NIC_DIR}/net/eth0/speed", speed)
    with Host(root) as host:
        topo = discover_host(host)
    [nic] = topo.nics
    [dev] = nic.netdevs
    # (the mini host has no recorded NVML: that problem is not this test's)
    found = [f"{p.code} {p.source}: {p.detail}" for p in topo.problems if "/net/" in p.source]
    return dev.speed_mbps, found


@pytest.mark.parametrize("speed", ["", "\n", "-1\n"])
def test_a_down_link_has_no_speed_and_no_problem(tmp_path: Path, speed: str) -> None:
    assert discover_with_speed(tmp_path, speed) == (None, [])


def test_a_speed_that_is_no_number_is_still_garbage(tmp_path: Path) -> None:
    speed, problems = discover_with_speed(tmp_path, "fast\n")
    assert speed is None
    assert len(problems) == 1 and problems[0].startswith("read.garbage ")
    assert "/net/eth0/speed" in problems[0]


def test_an_up_link_keeps_its_speed(tmp_path: Path) -> None:
    assert discover_with_speed(tmp_path, "400000\n") == (400000, [])
