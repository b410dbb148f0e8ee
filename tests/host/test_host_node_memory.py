"""Host.node_memory and Host.pages_on_node for real on this machine: anonymous memory bound to
a NUMA node with mbind(2), every page reported there by move_pages(2), the kernel's refusal of
a node it does not have, and the refusals of a recorded root. Only this test process's own
memory is touched."""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

import pytest

from mcpnode.errors import NotSupported, PlacementUnavailable
from mcpnode.host import Host
from tests.support.proberoot import HOSTS

pytestmark = pytest.mark.live
LIVE_NODES = sorted(int(p.name[4:]) for p in Path("/sys/devices/system/node").glob("node[0-9]*"))


@pytest.mark.parametrize("node", LIVE_NODES)
def test_pages_land_on_the_node(node: int) -> None:
    host = Host("/")
    with host.node_memory(8 << 20, node) as mem:
        assert mem.node == node and mem.length == 8 << 20
        assert mem.pages == mem.length // os.sysconf("SC_PAGE_SIZE")
        assert mem.pages_on_node == mem.pages > 0
        # The memory is ours to use: written by node_memory, readable here.
        assert ctypes.string_at(mem.address, 4) == b"\x5a" * 4
        assert host.pages_on_node(mem.address, mem.length, node) == (mem.pages, mem.pages)
        if len(LIVE_NODES) == 1:
            other = node + 1
            assert host.pages_on_node(mem.address, mem.length, other) == (mem.pages, 0)


def test_length_rounds_up_to_pages() -> None:
    with Host("/").node_memory(1000, LIVE_NODES[0]) as mem:
        assert mem.length >= 1000 and mem.pages == 1


def test_a_node_the_kernel_lacks_is_refused() -> None:
    missing = max(LIVE_NODES) + 7
    refused = f"mbind node {missing}: the kernel refused"
    with (
        pytest.raises(PlacementUnavailable, match=refused),
        Host("/").node_memory(1 << 20, missing),
    ):
        pass


@pytest.mark.parametrize(("length", "node"), [(0, 0), (4096, -1)])
def test_bad_arguments(length: int, node: int) -> None:
    bad = "node_memory: bad length"
    with pytest.raises(PlacementUnavailable, match=bad), Host("/").node_memory(length, node):
        pass


def test_recorded_root_refuses() -> None:
    host = Host(HOSTS / "hgx-h100-8gpu-8nic")
    with pytest.raises(NotSupported, match="needs the live host"), host.node_memory(1 << 20, 0):
        pass
    with pytest.raises(NotSupported):
        host.pages_on_node(0, 4096, 0)
