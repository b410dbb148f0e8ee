"""The sysfs/procfs fixture generator and the committed host trees it produced.

- regenerating every fixture gives a byte-identical tree (hand edits to committed trees fail);
- every symlink is relative and resolves inside the tree; bus numbering is consistent;
- each tree, read with the documented bucket rules (same switch -> PIX, several bridges below
  a common bridge -> PXB, same host bridge -> PHB, same NUMA node -> NODE, else SYS), yields
  the relationships of the nvidia-smi matrix it was modelled on. This checks the fixtures
  themselves, independently of mcpnode's discovery code.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.nvsmi import parse_topo_matrix
from tools.fixturegen import fixturegen
from tools.fixturegen.fixturegen import (
    DeviceSpec,
    HostBridgeSpec,
    HostSpec,
    NumaSpec,
    PortSpec,
    SpecError,
    format_bitmap,
    format_cpulist,
    kernfs_relpath,
    parse_cpulist,
)

TESTS = Path(__file__).resolve().parents[1]
HOSTS = TESTS / "fixtures" / "hosts"
NVSMI = TESTS / "fixtures" / "nvidia-smi"
NAMES = sorted(fixturegen.fixture_hosts())
WITH_REFERENCE = [n for n in NAMES if (NVSMI / f"{n}.txt").exists()]

Snapshot = dict[str, tuple[str, bytes]]


def snapshot(root: Path) -> Snapshot:
    """Every entry below `root`: files with contents, symlinks with targets, directories."""
    out: Snapshot = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            full = os.path.join(dirpath, name)
            rel = os.path.relpath(full, root)
            if os.path.islink(full):
                out[rel] = ("link", os.readlink(full).encode())
            elif os.path.isdir(full):
                out[rel] = ("dir", b"")
            else:
                with open(full, "rb") as fh:
                    out[rel] = ("file", fh.read())
    return out


def describe_diff(want: Snapshot, got: Snapshot) -> str:
    missing = sorted(set(want) - set(got))
    extra = sorted(set(got) - set(want))
    changed = sorted(k for k in set(want) & set(got) if want[k] != got[k])
    parts = []
    for title, keys in (("only in generated", missing), ("only committed", extra)):
        if keys:
            parts.append(f"{title} ({len(keys)}): {keys[:10]}")
    if changed:
        k = changed[0]
        parts.append(f"differ ({len(changed)}): {changed[:10]}; first: {got[k]!r} != {want[k]!r}")
    return "; ".join(parts)


@pytest.fixture(scope="module")
def regenerated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """All committed fixtures regenerated through the CLI into a temporary directory."""
    out = tmp_path_factory.mktemp("hosts")
    assert fixturegen.main(["--out", str(out)]) == 0
    return out


# -- committed trees == generator output ---------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_committed_fixture_matches_generator(name: str, regenerated: Path) -> None:
    committed = HOSTS / name
    assert committed.is_dir(), f"run: python3 tools/fixturegen/fixturegen.py --out {HOSTS}"
    want, got = snapshot(regenerated / name), snapshot(committed)
    assert want == got, (
        f"{committed} differs from the generator; regenerate with "
        f"`python3 tools/fixturegen/fixturegen.py --out tests/fixtures/hosts` (do not hand-edit): "
        + describe_diff(want, got)
    )


def test_every_fixture_is_committed() -> None:
    # `captured-*` trees are real hosts' snapshots, not generated: tests/fixtures/hosts/CAPTURED.md
    on_disk = sorted(
        p.name for p in HOSTS.iterdir() if p.is_dir() and not p.name.startswith("captured-")
    )
    assert on_disk == NAMES


@pytest.mark.parametrize("name", NAMES)
def test_no_empty_directories(name: str, regenerated: Path) -> None:
    """git does not keep empty directories: a clone would silently lose them."""
    empty = [d for d, dirs, files in os.walk(regenerated / name) if not dirs and not files]
    assert empty == []


def test_generation_is_deterministic() -> None:
    for spec in fixturegen.fixture_hosts().values():
        assert fixturegen.build_tree(spec) == fixturegen.build_tree(spec)


# -- symlinks -------------------------------------------------------------------------------


def symlinks(root: Path) -> Iterator[tuple[str, str]]:
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            full = os.path.join(dirpath, name)
            if os.path.islink(full):
                yield full, os.readlink(full)


@pytest.mark.parametrize("name", NAMES)
def test_symlinks_are_relative_and_resolve_inside(name: str) -> None:
    root = os.path.realpath(HOSTS / name)
    count = 0
    for link, target in symlinks(Path(root)):
        count += 1
        assert not target.startswith("/"), f"{link} -> {target} is absolute"
        real = os.path.realpath(link)
        assert real.startswith(root + os.sep), f"{link} -> {target} leaves the tree"
        assert os.path.exists(real), f"{link} -> {target} dangles"
    assert count > 100


@pytest.mark.parametrize("name", NAMES)
def test_bus_pci_devices_point_at_device_dirs(name: str) -> None:
    root = HOSTS / name
    devices = root / "sys/bus/pci/devices"
    entries = sorted(os.listdir(devices))
    assert entries
    for addr in entries:
        link = devices / addr
        assert link.is_symlink()
        real = Path(os.path.realpath(link))
        assert real.is_dir() and real.name == addr
        assert (real / "class").is_file()
        rel = os.path.relpath(real, root / "sys/devices")
        assert re.fullmatch(r"pci[0-9a-f]{4}:[0-9a-f]{2}(/[0-9a-f]{4}:[0-9a-f:.]+)+", rel), rel


def test_symlink_targets_look_like_the_kernels() -> None:
    root = HOSTS / "hgx-h100-8gpu-8nic"
    gpu = root / "sys/devices/pci0000:15/0000:15:01.0/0000:16:00.0/0000:17:00.0/0000:18:00.0"
    nic = root / "sys/devices/pci0000:15/0000:15:01.0/0000:16:00.0/0000:17:01.0/0000:19:00.0"
    assert os.readlink(gpu / "driver") == "../../../../../../bus/pci/drivers/nvidia"
    assert os.readlink(gpu / "subsystem") == "../../../../../../bus/pci"
    assert os.readlink(root / "sys/bus/pci/devices/0000:18:00.0") == (
        "../../../devices/pci0000:15/0000:15:01.0/0000:16:00.0/0000:17:00.0/0000:18:00.0"
    )
    assert os.readlink(nic / "net/ibp25s0/device") == "../../../0000:19:00.0"
    assert os.readlink(nic / "infiniband/mlx5_0/device") == "../../../0000:19:00.0"
    assert os.readlink(root / "sys/class/infiniband/mlx5_0") == (
        "../../devices/pci0000:15/0000:15:01.0/0000:16:00.0/0000:17:01.0/0000:19:00.0"
        "/infiniband/mlx5_0"
    )
    assert os.readlink(root / "sys/class/net/lo") == "../../devices/virtual/net/lo"
    assert os.readlink(root / "sys/devices/system/cpu/cpu5/node0") == "../../node/node0"
    assert os.readlink(root / "sys/devices/system/node/node1/cpu50") == "../../cpu/cpu50"
    rp = root / "sys/devices/pci0000:15/0000:15:01.0"
    assert os.readlink(rp / "driver") == "../../../bus/pci/drivers/pcieport"


def test_kernfs_relpath() -> None:
    rp_driver = "sys/devices/pci0000:00/0000:00:01.0/driver"
    assert kernfs_relpath(rp_driver, "sys/bus/pci/drivers/x") == "../../../bus/pci/drivers/x"
    assert kernfs_relpath("sys/a/b/net/eth0/device", "sys/a/b") == "../../../b"
    assert kernfs_relpath("sys/a/p/vf/physfn", "sys/a/p/pf") == "../pf"
    assert kernfs_relpath("sys/class/net/lo", "sys/devices/virtual/net/lo") == (
        "../../devices/virtual/net/lo"
    )


# -- PCI structure --------------------------------------------------------------------------


def read(path: Path) -> str:
    text = path.read_text()
    assert text.endswith("\n"), f"{path} lacks the trailing newline"
    return text[:-1]


def pci_dirs(root: Path) -> list[Path]:
    return sorted(
        Path(os.path.realpath(root / "sys/bus/pci/devices" / a))
        for a in os.listdir(root / "sys/bus/pci/devices")
    )


def bus_of(addr: str) -> int:
    return int(addr.split(":")[1], 16)


@pytest.mark.parametrize("name", NAMES)
def test_bus_numbering_is_consistent(name: str) -> None:
    root = HOSTS / name
    for d in pci_dirs(root):
        parent = d.parent
        if parent.name.startswith("pci"):
            assert bus_of(d.name) == int(parent.name.split(":")[1], 16)
            continue
        sec = int(read(parent / "secondary_bus_number"))
        sub = int(read(parent / "subordinate_bus_number"))
        assert read(parent / "class") == "0x060400"
        if (d / "physfn").is_symlink():
            assert sec <= bus_of(d.name) <= sub, d  # VFs may spill onto following buses
        else:
            assert bus_of(d.name) == sec, d
        if (d / "secondary_bus_number").exists():
            assert sec < int(read(d / "secondary_bus_number")) <= sub
            assert int(read(d / "subordinate_bus_number")) <= sub


REQUIRED_PCI_ATTRS = (
    "class",
    "vendor",
    "device",
    "subsystem_vendor",
    "subsystem_device",
    "numa_node",
    "local_cpulist",
    "local_cpus",
)
SPEEDS = {"2.5 GT/s PCIe", "5.0 GT/s PCIe", "8.0 GT/s PCIe", "16.0 GT/s PCIe", "32.0 GT/s PCIe"}


@pytest.mark.parametrize("name", NAMES)
def test_pci_attribute_formats(name: str) -> None:
    root = HOSTS / name
    n_cpus = len(parse_cpulist(read(root / "sys/devices/system/cpu/possible")))
    for d in pci_dirs(root):
        for attr in REQUIRED_PCI_ATTRS:
            assert (d / attr).is_file(), d / attr
        assert os.readlink(d / "subsystem").endswith("/bus/pci")
        assert re.fullmatch(r"0x[0-9a-f]{6}", read(d / "class"))
        for attr in ("vendor", "device", "subsystem_vendor", "subsystem_device"):
            assert re.fullmatch(r"0x[0-9a-f]{4}", read(d / attr)), d / attr
        assert re.fullmatch(r"-1|\d+", read(d / "numa_node"))
        cpus = parse_cpulist(read(d / "local_cpulist"))
        assert read(d / "local_cpus") == format_bitmap(cpus, n_cpus)
        assert format_cpulist(cpus) == read(d / "local_cpulist")
        if (d / "current_link_speed").exists():
            is_vf = read(d / "device") in ("0x101e",)
            allowed = SPEEDS | ({"Unknown"} if is_vf else set())
            for attr in ("current_link_speed", "max_link_speed"):
                assert read(d / attr) in allowed, d / attr
            for attr in ("current_link_width", "max_link_width"):
                assert re.fullmatch(r"\d+", read(d / attr))


def test_local_cpus_mask_format() -> None:
    assert format_bitmap(range(48), 192) == (
        "00000000,00000000,00000000,00000000,0000ffff,ffffffff"
    )
    # nr_cpu_ids not a multiple of 32: the leading group is shortened (7 digits for 28 bits)
    assert format_bitmap(range(252), 252) == "fffffff," + ",".join(["ffffffff"] * 7)
    assert format_bitmap([0, 1], 1024).endswith(",00000003")


# -- CPUs, nodes, procfs --------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_cpu_and_node_trees(name: str) -> None:
    root = HOSTS / name
    cpu_dir = root / "sys/devices/system/cpu"
    node_dir = root / "sys/devices/system/node"
    cpus = parse_cpulist(read(cpu_dir / "possible"))
    assert cpus == list(range(len(cpus)))
    assert read(cpu_dir / "online") == read(cpu_dir / "present") == read(cpu_dir / "possible")
    assert not (cpu_dir / "cpu0/online").exists()
    owner: dict[int, int] = {}
    for node in parse_cpulist(read(node_dir / "online")):
        nd = node_dir / f"node{node}"
        listed = parse_cpulist(read(nd / "cpulist"))
        assert read(nd / "cpumap") == format_bitmap(listed, len(cpus))
        assert sorted(int(p.name[3:]) for p in nd.glob("cpu[0-9]*")) == listed
        meminfo = (nd / "meminfo").read_text().splitlines()
        assert re.fullmatch(rf"Node {node} MemTotal: +\d+ kB", meminfo[0])
        assert meminfo[1].startswith(f"Node {node} MemFree:")
        assert meminfo[2].startswith(f"Node {node} MemUsed:")
        for c in listed:
            owner[c] = node
    assert sorted(owner) == cpus
    for c in cpus:
        links = [p.name for p in (cpu_dir / f"cpu{c}").glob("node*")]
        assert links == [f"node{owner[c]}"]
        sib = parse_cpulist(read(cpu_dir / f"cpu{c}/topology/thread_siblings_list"))
        assert c in sib
        for s in sib:
            assert read(cpu_dir / f"cpu{s}/topology/thread_siblings_list") == format_cpulist(sib)
    status = (root / "proc/self/status").read_text()
    assert f"Cpus_allowed_list:\t{format_cpulist(cpus)}\n" in status
    assert f"Mems_allowed_list:\t{read(node_dir / 'online')}\n" in status
    assert f"Cpus_allowed:\t{format_bitmap(cpus, len(cpus))}\n" in status
    assert read(root / "proc/self/cgroup") == "0::/"
    mounts = (root / "proc/self/mountinfo").read_text().splitlines()
    assert any(" /sys/fs/cgroup " in m and " - cgroup2 " in m for m in mounts)


def test_vm_has_no_pci_numa_and_no_smt() -> None:
    root = HOSTS / "single-gpu-kvm-vm-h100-pcie"
    for d in pci_dirs(root):
        assert read(d / "numa_node") == "-1"
        assert read(d / "local_cpulist") == "0-251"
    assert read(root / "sys/devices/system/cpu/cpu7/topology/thread_siblings_list") == "7"
    net = Path(os.path.realpath(root / "sys/class/net/enp1s0"))
    assert net.parent.parent.name == "virtio0"  # virtio_net hangs netdevs below virtioN


def test_dgx_a100_nps4_distances() -> None:
    node_dir = HOSTS / "dgx-a100/sys/devices/system/node"
    assert read(node_dir / "node3/cpulist") == "48-63,176-191"
    assert read(node_dir / "node0/distance") == "10 12 12 12 32 32 32 32"
    assert read(node_dir / "node5/distance") == "32 32 32 32 12 10 12 12"


# -- relationships vs the nvidia-smi references ---------------------------------------------


def natural(name: str) -> tuple[object, ...]:
    return tuple(int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name))


class Tree:
    """Just enough sysfs reading to apply the bucket rules to a fixture."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.devices = root / "sys/devices"

    def path(self, addr: str) -> list[str]:
        real = os.path.realpath(self.root / "sys/bus/pci/devices" / addr)
        return os.path.relpath(real, self.devices).split("/")

    def attr(self, addr: str, name: str) -> str:
        return read(self.root / "sys/bus/pci/devices" / addr / name)

    def gpus(self) -> list[str]:
        out = []
        for addr in sorted(os.listdir(self.root / "sys/bus/pci/devices")):
            cls = int(self.attr(addr, "class"), 16)
            if cls >> 16 == 0x03 and self.attr(addr, "vendor") == "0x10de":
                out.append(addr)
        return out

    def nics(self) -> dict[str, str]:
        """RDMA device name -> PCI address, in natural name order."""
        ib = self.root / "sys/class/infiniband"
        names = sorted(os.listdir(ib), key=natural) if ib.exists() else []
        return {n: os.path.basename(os.path.realpath(ib / n / "device")) for n in names}

    def node_of(self, addr: str) -> int:
        return int(self.attr(addr, "numa_node"))

    def bucket(self, a: str, b: str) -> str:
        if a == b:
            return "X"
        pa, pb = self.path(a), self.path(b)
        if pa[0] != pb[0]:
            return "NODE" if self.node_of(a) == self.node_of(b) else "SYS"
        ba, bb = pa[1:-1], pb[1:-1]  # bridges between host bridge and device
        k = 0
        while k < min(len(ba), len(bb)) and ba[k] == bb[k]:
            k += 1
        if k == 0:
            return "PHB"
        return "PIX" if len(ba) - k <= 1 and len(bb) - k <= 1 else "PXB"

    def numa_affinity(self, addr: str) -> str:
        node = self.node_of(addr)
        if node >= 0:
            return str(node)
        cpus = set(parse_cpulist(self.attr(addr, "local_cpulist")))
        node_dir = self.root / "sys/devices/system/node"
        hits = [
            n
            for n in parse_cpulist(read(node_dir / "online"))
            if cpus & set(parse_cpulist(read(node_dir / f"node{n}/cpulist")))
        ]
        return format_cpulist(hits)


@pytest.mark.parametrize("name", WITH_REFERENCE)
def test_fixture_yields_reference_relationships(name: str) -> None:
    ref = parse_topo_matrix((NVSMI / f"{name}.txt").read_text())
    tree = Tree(HOSTS / name)
    gpus, nics = tree.gpus(), tree.nics()
    addr: dict[str, str] = {f"GPU{i}": a for i, a in enumerate(gpus)}
    addr.update(nics)
    assert sorted(ref.gpus) == sorted(f"GPU{i}" for i in range(len(gpus)))
    assert sorted(ref.device_name(n) for n in ref.nics) == sorted(nics)
    checked = 0
    for (row, col), want in ref.cells.items():
        a, b = addr[ref.device_name(row)], addr[ref.device_name(col)]
        got = tree.bucket(a, b)
        if want.startswith("NV"):
            assert got in ("PIX", "PXB", "PHB", "NODE", "SYS")
        else:
            assert got == want, f"{row}/{col}: fixture gives {got}, nvidia-smi {want}"
            checked += 1
    assert checked >= len(ref.rows)
    for g in ref.gpus:
        assert tree.attr(addr[g], "local_cpulist") == ref.cpu_affinity[g]
        assert tree.numa_affinity(addr[g]) == ref.numa_affinity[g]


def test_no_gpu_host_has_display_but_no_gpu() -> None:
    tree = Tree(HOSTS / "no-gpu-host")
    assert tree.gpus() == [] and tree.nics() == {}
    classes = {tree.attr(a, "class") for a in os.listdir(tree.root / "sys/bus/pci/devices")}
    assert "0x030000" in classes  # the ASPEED BMC VGA


def test_hgx_nvswitches_match_real_nvlink_remote_addresses() -> None:
    tree = Tree(HOSTS / "hgx-h100-8gpu-8nic")
    switches = [
        a
        for a in sorted(os.listdir(tree.root / "sys/bus/pci/devices"))
        if tree.attr(a, "class") == "0x068001"
    ]
    assert switches == ["0000:05:00.0", "0000:06:00.0", "0000:07:00.0", "0000:08:00.0"]


# -- synthetic SR-IOV host and the spec API -------------------------------------------------


def test_synthetic_host_spec_4096_vfs() -> None:
    fns = fixturegen.pci_functions(fixturegen.synthetic_host(4096))
    vfs = [f for f in fns if f.physfn is not None]
    assert len(vfs) == 4096
    per_pf: dict[str, int] = {}
    for f in vfs:
        per_pf[f.physfn or ""] = per_pf.get(f.physfn or "", 0) + 1
        assert len(f.netdevs) == 1
    assert sorted(per_pf.values()) == [512] * 8
    assert sum(1 for f in fns if f.class_code >> 8 == 0x0302) == 8
    assert len({n.name for f in fns for n in f.netdevs}) == 4096 + 8


def test_synthetic_cli_writes_vfs(tmp_path: Path) -> None:
    out = tmp_path / "synthetic"
    assert fixturegen.main(["--synthetic-vfs", "20", "--out", str(out)]) == 0
    pfs = [d for d in pci_dirs(out) if (d / "sriov_numvfs").exists()]
    assert len(pfs) == 8
    total = 0
    for pf in pfs:
        n = int(read(pf / "sriov_numvfs"))
        total += n
        vfs = sorted(pf.glob("virtfn*"), key=lambda p: int(p.name[6:]))
        assert len(vfs) == n
        for i, v in enumerate(vfs):
            vf = Path(os.path.realpath(v))
            assert vf.parent == pf.parent  # sibling of the PF below the same bridge
            assert Path(os.path.realpath(vf / "physfn")) == pf
            assert read(vf / "current_link_speed") == "Unknown"
            assert len(list((vf / "net").iterdir())) == 1
            if i == 0:
                assert int(read(pf / "sriov_offset")) >= 1
    assert total == 20
    # rerunning over a previous synthetic tree replaces it
    assert fixturegen.main(["--synthetic-vfs", "8", "--out", str(out)]) == 0
    assert len(os.listdir(out / "sys/class/net")) == 1 + 8 + 8


def test_synthetic_host_carries_cpu_topology_masks(tmp_path: Path) -> None:
    """thread_siblings/core_siblings masks beside the lists, from the same CPUs: what lstopo
    needs to accept the root. The committed fixtures keep their trees (no masks)."""
    out = tmp_path / "synthetic"
    assert fixturegen.main(["--synthetic-vfs", "2", "--out", str(out)]) == 0
    cpus = sorted((out / "sys/devices/system/cpu").glob("cpu[0-9]*"))
    assert len(cpus) == 192
    for cpu in cpus:
        topo = cpu / "topology"
        for kind in ("thread_siblings", "core_siblings"):
            listed = parse_cpulist(read(topo / f"{kind}_list"))
            assert read(topo / kind) == format_bitmap(listed, 192), topo / kind
    assert read(out / "sys/devices/system/cpu/cpu0/topology/thread_siblings") == (
        "00000000,00000000,00000001,00000000,00000000,00000001"  # CPUs 0 and 96
    )
    for name in NAMES:
        assert not (HOSTS / name / "sys/devices/system/cpu/cpu0/topology/core_siblings").exists()


@pytest.mark.skipif(shutil.which("lstopo-no-graphics") is None, reason="hwloc not installed")
def test_lstopo_reads_the_synthetic_host(tmp_path: Path) -> None:
    """hwloc reads the generated root (bench/bench_scale.py runs it on these): every GPU, NIC
    and VF is a PCI device there and every netdev a network OS device."""
    out = tmp_path / "synthetic"
    assert fixturegen.main(["--synthetic-vfs", "24", "--out", str(out)]) == 0
    xml = subprocess.run(
        ["lstopo-no-graphics", "--whole-io", "--of", "xml", "--input", str(out)],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    assert len(re.findall(r'type="Package"', xml)) == 2
    assert len(re.findall(r'type="PU"', xml)) == 192
    assert len(re.findall(r'type="PCIDev"', xml)) == 8 + 8 + 24
    assert len(re.findall(r'osdev_type="2"', xml)) == 8 + 24  # network: 8 PF + 24 VF netdevs


def test_vfs_spill_onto_following_buses(tmp_path: Path) -> None:
    spec = fixturegen.synthetic_host(8 * 300)
    fns = fixturegen.pci_functions(spec)
    pf = next(f for f in fns if f.virtfns)
    buses = {f.bus for f in fns if f.physfn == pf.address}
    assert buses == {pf.bus, pf.bus + 1}
    parent = next(f for f in fns if f.path == pf.path.rsplit("/", 1)[0])
    assert parent.subordinate is not None and parent.subordinate >= pf.bus + 1


def test_switch_expands_to_upstream_and_downstream_ports() -> None:
    fns = {f.address: f for f in fixturegen.pci_functions(fixturegen.hgx_h100_8gpu_8nic())}
    gpu = fns["0000:18:00.0"]
    assert gpu.path.split("/")[3:] == [
        "0000:15:01.0",  # root port
        "0000:16:00.0",  # switch upstream port
        "0000:17:00.0",  # downstream port
        "0000:18:00.0",
    ]
    for bridge in gpu.path.split("/")[3:-1]:
        assert fns[bridge].class_code == 0x060400


def _tiny(children: tuple[DeviceSpec | PortSpec, ...]) -> HostSpec:
    return HostSpec(
        name="tiny",
        hostname="tiny",
        osrelease="6.1.0",
        sockets=1,
        cores_per_socket=2,
        threads_per_core=1,
        numa=(NumaSpec(0, "0-1", 1024, (10,)),),
        host_bridges=(HostBridgeSpec(0, 0, children),),
    )


def test_spec_errors() -> None:
    dev = DeviceSpec(0x020000, 0x8086, 0x1533, slot=(1, 0))
    with pytest.raises(SpecError, match="duplicate"):
        fixturegen.pci_functions(_tiny((dev, dev)))
    bad_numa = HostSpec(
        name="x",
        hostname="x",
        osrelease="6.1.0",
        sockets=1,
        cores_per_socket=2,
        threads_per_core=1,
        numa=(NumaSpec(0, "0", 1024, (10,)),),
        host_bridges=(),
    )
    with pytest.raises(SpecError, match="cover"):
        fixturegen.build_tree(bad_numa)


def test_write_host_refuses_non_empty_destination(tmp_path: Path) -> None:
    (tmp_path / "keep").write_text("x")
    with pytest.raises(FileExistsError):
        fixturegen.write_host(_tiny(()), tmp_path)
    with pytest.raises(SystemExit):
        fixturegen.main(["--synthetic-vfs", "1", "--out", str(tmp_path)])
    assert (tmp_path / "keep").exists()
