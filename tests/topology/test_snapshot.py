"""`mcpnode snapshot`: capture what discovery reads, replay it as a root, get the same answer."""

from __future__ import annotations

import json
import os
import tarfile
from pathlib import Path

import pytest

from mcpnode.host import Host
from mcpnode.snapshot import SNAPSHOT_FORMAT, SNAPSHOT_META, TOP, write_snapshot
from mcpnode.topology.discover import discover_host
from mcpnode.topology.jsonify import topology_json
from tests.support.minihost import build

SHARED_HOSTS = Path(
    os.environ.get("MCPNODE_SHARED_HOSTS", Path(__file__).resolve().parents[3] / "shared/hosts")
)


def topo_json(root: str | Path) -> dict[str, object]:
    with Host(root) as host:
        return topology_json(discover_host(host))


@pytest.mark.live
def test_live_host_snapshot_replays_identically(tmp_path: Path) -> None:
    """Snapshot this machine, replay the tarball, compare the whole JSON model."""
    live = topo_json("/")
    out = tmp_path / "live.tar.gz"
    with Host("/") as host:
        result = write_snapshot(host, out)
    assert result.files > 10
    assert topology_json(result.topology) == live, "recording must not change what is read"
    assert topo_json(out) == live


def test_snapshot_keeps_symlinks_and_metadata(tmp_path: Path) -> None:
    root = build(tmp_path / "tree")
    out = tmp_path / "snap.tar.gz"
    with Host(root) as host:
        write_snapshot(host, out)
    with tarfile.open(out) as tf:
        members = {m.name: m for m in tf.getmembers()}
        meta_file = tf.extractfile(f"{TOP}/{SNAPSHOT_META}")
        assert meta_file is not None
        meta = json.load(meta_file)
    dev_link = members[f"{TOP}/sys/bus/pci/devices/0000:01:00.0"]
    assert dev_link.issym()
    assert dev_link.linkname == "../../../devices/pci0000:00/0000:00:01.0/0000:01:00.0"
    driver = members[f"{TOP}/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/driver"]
    assert driver.issym()
    # Only what discovery reads: the GPU's uevent-like files that nobody reads are absent.
    assert all("/power/" not in name for name in members)
    assert meta["format"] == SNAPSHOT_FORMAT
    assert meta["hostname"] == "mini"
    assert meta["kernel_release"] == "6.8.0-mini"
    assert {"captured_at", "topology_sha256", "nvml", "commands"} <= set(meta)
    assert topo_json(out) == topo_json(root)


def test_snapshot_of_a_snapshot_is_stable(tmp_path: Path) -> None:
    root = build(tmp_path / "tree")
    first, second = tmp_path / "a.tar.gz", tmp_path / "b.tar.gz"
    with Host(root) as host:
        write_snapshot(host, first)
    with Host(first) as host:
        write_snapshot(host, second)
    assert topo_json(second) == topo_json(first) == topo_json(root)


@pytest.mark.skipif(not SHARED_HOSTS.is_dir(), reason="../shared/hosts not present (plain clone)")
@pytest.mark.parametrize(
    "dump",
    ["32em64t-2n8c+dax+nvme+mic+dimms", "nvidiagpunumanodes", "40intel64-2g2n4c+pcilocality"],
)
def test_snapshot_of_real_dump_replays(tmp_path: Path, dump: str) -> None:
    src = SHARED_HOSTS / f"{dump}.tar.bz2"
    out = tmp_path / "replay.tar.bz2"
    with Host(src) as host:
        write_snapshot(host, out)
    assert topo_json(out) == topo_json(src)


def test_snapshot_write_is_atomic_on_failure(tmp_path: Path) -> None:
    root = build(tmp_path / "tree")
    target_dir = tmp_path / "ro"
    target_dir.mkdir()
    with Host(root) as host, pytest.raises(OSError):
        write_snapshot(host, target_dir / "missing-dir" / "x.tar.gz")
    assert list(target_dir.iterdir()) == []
