"""Host: in-root path resolution, typed read errors, and safe unpacking of snapshot tarballs.

Everything runs on real files: temporary roots with real symlinks, real tarballs (malicious
ones included), real permission bits checked from a child that dropped root, and read-only
reads of this machine's /sys for the errnos only a kernel produces. Nothing is patched except
`tempfile.tempdir` (the documented knob), so that unpacked copies land in a directory the test
can inspect for anything written where it should not be.
"""

from __future__ import annotations

import bz2
import errno
import glob
import gzip
import io
import json
import os
import random
import shutil
import stat
import sys
import tarfile
import tempfile
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mcpnode.errors import (
    AccessDenied,
    HostError,
    NotSupported,
    PathNotFound,
    ReadError,
    RootError,
    SymlinkLoop,
)
from mcpnode.host import Entry, Host

IS_ROOT = os.geteuid() == 0
NOBODY = 65534

# -- helpers --------------------------------------------------------------------------------


def put(root: Path, rel: str, text: str) -> Path:
    p = root / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)
    return p


def link(root: Path, rel: str, target: str) -> Path:
    p = root / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(target, p)
    return p


def outcome(fn: Callable[[], object]) -> str:
    """What a Host call did, as a comparable string: `None`, `value`, or `Type:ERRNO`."""
    try:
        value = fn()
    except HostError as err:
        code = errno.errorcode.get(err.errno, str(err.errno)) if err.errno is not None else "-"
        return f"{type(err).__name__}:{code}"
    return "None" if value is None else "value"


def tree(path: Path) -> dict[str, str]:
    """Everything under `path`, without following links: a snapshot to compare before/after."""
    out: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(path):
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            rel = os.path.relpath(p, path)
            st_ = os.lstat(p)
            if stat.S_ISLNK(st_.st_mode):
                out[rel] = "link:" + os.readlink(p)
            elif stat.S_ISDIR(st_.st_mode):
                out[rel] = "dir"
            else:
                out[rel] = "file:" + Path(p).read_bytes().hex()
    return out


def run_in_child(fn: Callable[[], object], *, drop_to_nobody: bool = False) -> object:
    """Run `fn` in a forked child (optionally as nobody with no groups) and return its result.

    The exit status says whether the child ran to the end; the result comes back as JSON
    through a pipe so a failed assertion shows what the child actually saw.
    """
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        code = 1
        try:
            os.close(rfd)
            if drop_to_nobody:
                os.setgroups([])
                os.setresgid(NOBODY, NOBODY, NOBODY)
                os.setresuid(NOBODY, NOBODY, NOBODY)
            payload = json.dumps(fn()).encode()
            with os.fdopen(wfd, "wb") as w:
                w.write(payload)
            code = 0
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(code)
    os.close(wfd)
    with os.fdopen(rfd, "rb") as r:
        data = r.read()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, "the child failed; see its stderr"
    return json.loads(data)


# -- roots ----------------------------------------------------------------------------------


def test_missing_root_is_root_error(tmp_path: Path) -> None:
    with pytest.raises(RootError):
        Host("/nonexistent")
    with pytest.raises(RootError):
        Host(tmp_path / "nope.tar.gz")


@pytest.mark.parametrize("name", ["notes.txt", "snapshot.json", "sys"])
def test_regular_file_root_is_root_error(tmp_path: Path, name: str) -> None:
    (tmp_path / name).write_text("not a root\n")
    with pytest.raises(RootError):
        Host(tmp_path / name)


def test_directory_root_is_resolved_and_not_live(tmp_path: Path) -> None:
    put(tmp_path, "real/sys/x", "1\n")
    link(tmp_path, "alias", "real")
    host = Host(tmp_path / "alias")
    assert host.root == str((tmp_path / "real").resolve())
    assert not host.is_live
    assert host.read_text("/sys/x") == "1\n"
    assert Host("/").is_live


# -- a sysfs-style fixture root -------------------------------------------------------------

GPU = "0000:00:01.0"
GPU_REAL = f"/sys/devices/pci0000:00/{GPU}"


@pytest.fixture
def sysroot(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    put(root, f"{GPU_REAL[1:]}/vendor", "0x10de\n")
    put(root, f"{GPU_REAL[1:]}/class", "0x030200\n")
    put(root, f"{GPU_REAL[1:]}/power/control", "on\n")
    link(root, f"{GPU_REAL[1:]}/driver", "../../../bus/pci/drivers/nvidia")
    link(root, f"{GPU_REAL[1:]}/subsystem", "../../../bus/pci")
    put(root, "sys/bus/pci/drivers/nvidia/new_id", "")
    link(root, f"sys/bus/pci/devices/{GPU}", f"../../../devices/pci0000:00/{GPU}")
    put(root, "sys/devices/virtual/net/eth0/mtu", "9000\n")
    link(root, "sys/class/net/eth0", "../../devices/virtual/net/eth0")
    put(root, "etc/hostname", "fixture\n")
    link(root, "rel_link", "etc/hostname")
    link(root, "abs_link", "/etc/hostname")
    link(root, "sys/up_too_far", "../../../../../../etc/hostname")
    link(root, "abs_dir", "/etc")
    link(root, "loop_a", "loop_b")
    link(root, "loop_b", "loop_a")
    link(root, "self_loop", "self_loop")
    link(root, "dangling", "/nowhere/at/all")
    link(root, "dir_link", "sys/bus")
    return root


def test_read_text_and_read_optional_on_a_file(sysroot: Path) -> None:
    host = Host(sysroot)
    assert host.read_text(f"{GPU_REAL}/vendor") == "0x10de\n"
    assert host.read_optional(f"{GPU_REAL}/vendor") == "0x10de\n"
    assert host.read_bytes("/etc/hostname") == b"fixture\n"
    # Redundant slashes and `.` are the same path.
    assert host.read_text("//etc/./hostname") == "fixture\n"


def test_undecodable_bytes_stay_visible(tmp_path: Path) -> None:
    (tmp_path / "sys").mkdir()
    (tmp_path / "sys/bin").write_bytes(b"ok\xff\n")
    assert Host(tmp_path).read_text("/sys/bin") == "ok\ufffd\n"


def test_missing_file_is_none_or_path_not_found(sysroot: Path) -> None:
    host = Host(sysroot)
    assert host.read_optional("/sys/no/such/file") is None
    assert host.read_optional(f"{GPU_REAL}/numa_node") is None
    with pytest.raises(PathNotFound) as info:
        host.read_text(f"{GPU_REAL}/numa_node")
    assert info.value.errno == errno.ENOENT
    assert info.value.path == f"{GPU_REAL}/numa_node"


def test_a_file_used_as_a_directory_is_not_absence(sysroot: Path) -> None:
    """ENOTDIR is PathNotFound, but read_optional's None is only for ENOENT/ENODEV/EINVAL."""
    host = Host(sysroot)
    with pytest.raises(PathNotFound) as info:
        host.read_optional("/etc/hostname/child")
    assert info.value.errno == errno.ENOTDIR


@pytest.mark.parametrize("path", ["/sys", "/sys/bus/pci/drivers/nvidia", "/dir_link", "/"])
def test_reading_a_directory_is_read_error_not_none(sysroot: Path, path: str) -> None:
    host = Host(sysroot)
    with pytest.raises(ReadError) as info:
        host.read_text(path)
    assert info.value.errno == errno.EISDIR
    with pytest.raises(ReadError):
        host.read_optional(path)


@pytest.mark.parametrize(
    "path",
    [
        "/rel_link",  # relative target at the top
        "/abs_link",  # absolute target: from the root, not from the machine's /
        "/abs_dir/hostname",  # an absolute link in the middle of the path
        "/sys/up_too_far",  # more `..` than there are levels: stops at the root
        "/../../../etc/hostname",  # `..` above the root in the path itself
        "/sys/../../../etc/../etc/hostname",
        "/abs_dir/../abs_dir/../etc/hostname",
    ],
)
def test_symlinks_and_dotdot_stay_inside_the_root(sysroot: Path, path: str) -> None:
    host = Host(sysroot)
    assert host.read_text(path) == "fixture\n"
    assert host.read_optional(path) == "fixture\n"
    assert host.realpath(path) == "/etc/hostname"


def test_symlinked_directory_in_the_middle(sysroot: Path) -> None:
    host = Host(sysroot)
    assert host.read_text("/sys/class/net/eth0/mtu") == "9000\n"
    assert host.read_text(f"/sys/bus/pci/devices/{GPU}/power/control") == "on\n"
    # `..` after a symlinked directory climbs from the link's target, as the kernel does.
    assert host.read_text(f"/sys/bus/pci/devices/{GPU}/../{GPU}/class") == "0x030200\n"
    assert host.realpath("/sys/class/net/eth0/..") == "/sys/devices/virtual/net"


@pytest.mark.parametrize(
    "path", ["/loop_a", "/loop_b", "/self_loop", "/self_loop/x", "/loop_a/b/c"]
)
def test_symlink_cycles_are_symlink_loop_never_none(sysroot: Path, path: str) -> None:
    host = Host(sysroot)
    for call in (host.read_text, host.read_optional, host.realpath, host.scandir):
        with pytest.raises(SymlinkLoop) as info:
            call(path)
        assert info.value.errno == errno.ELOOP
    with pytest.raises(SymlinkLoop):
        host.listdir_optional(path)


def test_dangling_symlink_is_absence(sysroot: Path) -> None:
    host = Host(sysroot)
    assert host.read_optional("/dangling") is None
    with pytest.raises(PathNotFound):
        host.read_text("/dangling")
    with pytest.raises(PathNotFound):
        host.realpath("/dangling")
    assert host.readlink("/dangling") == "/nowhere/at/all"
    assert not host.is_dir("/dangling")


def test_sysfs_nested_links_realpath(sysroot: Path) -> None:
    host = Host(sysroot)
    dev = f"/sys/bus/pci/devices/{GPU}"
    assert host.realpath(dev) == GPU_REAL
    assert host.realpath(f"{dev}/driver") == "/sys/bus/pci/drivers/nvidia"
    assert host.realpath(f"{dev}/subsystem/devices/{GPU}/vendor") == f"{GPU_REAL}/vendor"
    assert host.realpath("/sys/class/net/eth0") == "/sys/devices/virtual/net/eth0"
    assert host.realpath("/") == "/"
    assert host.realpath("/..") == "/"
    with pytest.raises(PathNotFound):
        host.realpath(f"{dev}/nope")


def test_link_name_and_readlink(sysroot: Path) -> None:
    host = Host(sysroot)
    dev = f"/sys/bus/pci/devices/{GPU}"
    assert host.link_name(f"{dev}/driver") == "nvidia"
    assert host.readlink(f"{dev}/driver") == "../../../bus/pci/drivers/nvidia"
    assert host.link_name(f"{dev}/subsystem") == "pci"
    assert host.link_name(dev) == GPU  # the last component may itself be the link
    assert host.link_name(f"{dev}/vendor") is None  # a regular file
    assert host.link_name(f"{dev}/power") is None  # a directory
    assert host.link_name(f"{dev}/missing") is None
    assert host.link_name("/sys/nope/driver") is None


def test_scandir_sorted_links_not_followed(sysroot: Path) -> None:
    host = Host(sysroot)
    entries = host.scandir(f"/sys/bus/pci/devices/{GPU}")
    assert entries == [
        Entry("class", is_dir=False, is_symlink=False),
        Entry("driver", is_dir=False, is_symlink=True),
        Entry("power", is_dir=True, is_symlink=False),
        Entry("subsystem", is_dir=False, is_symlink=True),  # a link to a dir is not a dir
        Entry("vendor", is_dir=False, is_symlink=False),
    ]
    assert host.scandir(GPU_REAL) == entries
    names = host.listdir("/")
    assert names == sorted(names)
    assert "dangling" in names and "loop_a" in names  # listed, never followed
    assert host.listdir("/dir_link/pci/devices") == [GPU]


def test_listdir_optional(sysroot: Path) -> None:
    host = Host(sysroot)
    assert host.listdir_optional("/sys/class/infiniband") is None
    assert host.listdir_optional("/dangling") is None
    assert host.listdir_optional("/sys/class/net") == ["eth0"]
    with pytest.raises(PathNotFound):
        host.listdir("/sys/class/infiniband")


def test_is_dir_and_exists(sysroot: Path) -> None:
    host = Host(sysroot)
    assert host.is_dir("/sys/class/net/eth0")  # through a link
    assert not host.is_dir("/etc/hostname")
    assert not host.is_dir("/loop_a")
    assert host.exists(f"/sys/bus/pci/devices/{GPU}/driver")
    assert not host.exists("/sys/nope")


# -- oneshot --------------------------------------------------------------------------------


def answers(host: Host) -> list[object]:
    dev = f"/sys/bus/pci/devices/{GPU}"
    calls: list[Callable[[], object]] = [
        lambda: host.realpath(dev),
        lambda: host.realpath(f"{dev}/driver"),
        lambda: host.read_text(f"{dev}/vendor"),
        lambda: host.read_optional(f"{dev}/numa_node"),
        lambda: host.read_text("/sys/up_too_far"),
        lambda: host.scandir(dev),
        lambda: host.listdir_optional("/sys/class/infiniband"),
        lambda: host.link_name(f"{dev}/driver"),
        lambda: host.is_dir("/sys/class/net/eth0"),
        lambda: outcome(lambda: host.read_optional("/loop_a")),
        lambda: host.read_optional("/dangling"),
    ]
    # Twice, so the second round is served from whatever the first one cached.
    return [call() for call in calls] + [call() for call in calls]


def test_oneshot_gives_the_same_answers(sysroot: Path) -> None:
    host = Host(sysroot)
    plain = answers(host)
    with host.oneshot():
        cached = answers(host)
        with host.oneshot():
            nested = answers(host)
    assert cached == plain
    assert nested == plain
    assert answers(host) == plain


def test_oneshot_caches_inside_and_sees_changes_outside(sysroot: Path) -> None:
    host = Host(sysroot)
    put(sysroot, "sys/bus/pci/drivers/vfio-pci/new_id", "")
    dev = f"/sys/bus/pci/devices/{GPU}"
    driver = sysroot / GPU_REAL[1:] / "driver"

    def rebind(to: str) -> None:
        tmp = driver.with_name("driver.new")
        os.symlink(f"../../../bus/pci/drivers/{to}", tmp)
        os.replace(tmp, driver)

    with host.oneshot():
        assert host.realpath(f"{dev}/driver") == "/sys/bus/pci/drivers/nvidia"
        rebind("vfio-pci")
        with host.oneshot():
            pass  # leaving a nested block keeps the outer cache
        # Still the resolution cached by this pass: one discovery sees one consistent tree.
        assert host.realpath(f"{dev}/driver") == "/sys/bus/pci/drivers/nvidia"
    assert host.realpath(f"{dev}/driver") == "/sys/bus/pci/drivers/vfio-pci"
    assert host.link_name(f"{dev}/driver") == "vfio-pci"

    # The cache is dropped even when the pass fails.
    with pytest.raises(RuntimeError), host.oneshot():
        assert host.realpath(f"{dev}/driver") == "/sys/bus/pci/drivers/vfio-pci"
        raise RuntimeError("discovery failed")
    rebind("nvidia")
    assert host.realpath(f"{dev}/driver") == "/sys/bus/pci/drivers/nvidia"


# -- EACCES, for real -----------------------------------------------------------------------


@pytest.fixture
def world_root() -> Iterator[Path]:
    """A root nobody can reach: pytest's own tmp_path sits under a 0700 directory."""
    base = Path(tempfile.mkdtemp(prefix="mcpnode-eacces-"))
    base.chmod(0o755)
    root = base / "root"
    put(root, "open", "fine\n")
    put(root, "secret", "s3cret\n").chmod(0o000)
    link(root, "to_secret", "/secret")
    put(root, "sealed/inner/file", "hidden\n")
    link(root, "sealed/inner/link", "../../open")
    (root / "sealed").chmod(0o000)
    try:
        yield root
    finally:
        (root / "sealed").chmod(0o755)
        shutil.rmtree(base)


def permission_checks(root: str) -> dict[str, str]:
    host = Host(root)
    return {
        "control": outcome(lambda: host.read_optional("/open")),
        "read_optional": outcome(lambda: host.read_optional("/secret")),
        "read_text": outcome(lambda: host.read_text("/secret")),
        "through_link": outcome(lambda: host.read_optional("/to_secret")),
        "scandir": outcome(lambda: host.scandir("/sealed")),
        "listdir_optional": outcome(lambda: host.listdir_optional("/sealed")),
        "below_sealed": outcome(lambda: host.read_optional("/sealed/inner/file")),
        "readlink_below_sealed": outcome(lambda: host.readlink("/sealed/inner/link")),
    }


def test_eacces_is_access_denied_never_none(world_root: Path) -> None:
    if IS_ROOT:
        # DAC does not apply to root: ask a child that dropped to nobody, with no groups.
        seen = run_in_child(lambda: permission_checks(str(world_root)), drop_to_nobody=True)
    else:
        if os.access(world_root / "secret", os.R_OK):
            pytest.skip("mode 000 is readable to this user (CAP_DAC_OVERRIDE?)")
        seen = permission_checks(str(world_root))
    denied = f"{AccessDenied.__name__}:EACCES"
    assert seen == {
        "control": "value",
        "read_optional": denied,
        "read_text": denied,
        "through_link": denied,
        "scandir": denied,
        "listdir_optional": denied,
        "below_sealed": denied,
        "readlink_below_sealed": denied,
    }


# -- the live kernel (read-only) ------------------------------------------------------------

# Files whose read fails with a kernel errno on common machines: a virtual or down netdev's
# `speed`/`duplex` (EINVAL), `phys_port_name` on drivers without it (EOPNOTSUPP), `xps_cpus`
# on a single-queue device (ENOENT on read, though the file exists), `autosuspend_delay_ms`
# when runtime PM is off (EIO). ENODEV shows up on some NICs' and PCIe ports' attributes.
LIVE_CANDIDATES = (
    "/sys/class/net/*/speed",
    "/sys/class/net/*/duplex",
    "/sys/class/net/*/carrier",
    "/sys/class/net/*/phys_port_name",
    "/sys/class/net/*/phys_port_id",
    "/sys/class/net/*/phys_switch_id",
    "/sys/class/net/*/queues/tx-*/xps_cpus",
    "/sys/class/net/*/queues/tx-*/traffic_class",
    "/sys/bus/pci/devices/*/current_link_speed",
    "/sys/bus/pci/devices/*/current_link_width",
    "/sys/bus/pci/devices/*/max_link_speed",
    "/sys/class/hwmon/*/temp*_input",
    "/sys/devices/*/power/autosuspend_delay_ms",
    "/sys/bus/pci/devices/*/power/autosuspend_delay_ms",
)


@pytest.fixture(scope="module")
def live_errno_files() -> dict[int, str]:
    """The first file (sorted) per errno that this machine's kernel returns on read."""
    if not sys.platform.startswith("linux"):
        return {}
    found: dict[int, str] = {}
    for pattern in LIVE_CANDIDATES:
        for path in sorted(glob.glob(pattern))[:200]:
            try:
                fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
                try:
                    os.read(fd, 4096)
                finally:
                    os.close(fd)
            except OSError as err:
                if err.errno is not None:
                    found.setdefault(err.errno, path)
    return found


@pytest.mark.live
@pytest.mark.parametrize(
    ("code", "read_text_raises", "read_optional_raises"),
    [
        (errno.ENOENT, PathNotFound, None),
        (errno.ENODEV, NotSupported, None),
        (errno.EINVAL, NotSupported, None),
        # Not one of read_optional's three: the kernel answered, "no such operation".
        (errno.EOPNOTSUPP, NotSupported, NotSupported),
        (errno.EIO, ReadError, ReadError),
    ],
    ids=["ENOENT", "ENODEV", "EINVAL", "EOPNOTSUPP", "EIO"],
)
def test_live_kernel_errnos(
    live_errno_files: dict[int, str],
    code: int,
    read_text_raises: type[HostError],
    read_optional_raises: type[HostError] | None,
) -> None:
    path = live_errno_files.get(code)
    if path is None:
        pytest.skip(f"no readable attribute here fails with {errno.errorcode[code]}")
    host = Host("/")
    name = errno.errorcode[code]
    assert outcome(lambda: host.read_text(path)) == f"{read_text_raises.__name__}:{name}", path
    optional = outcome(lambda: host.read_optional(path))
    if read_optional_raises is None:
        assert optional == "None", path
    else:
        assert optional == f"{read_optional_raises.__name__}:{name}", path


@pytest.mark.live
def test_live_root_basics() -> None:
    host = Host("/")
    assert host.is_live
    assert host.read_optional("/proc/no-such-file") is None
    assert host.realpath("/proc/self") == f"/proc/{os.getpid()}"
    assert host.read_text("/proc/self/comm").strip()
    assert "self" in host.listdir("/proc")
    with pytest.raises(ReadError):
        host.read_text("/proc")


# -- tarballs -------------------------------------------------------------------------------

Member = tuple[tarfile.TarInfo, bytes | None]


def tfile(name: str, data: bytes = b"x\n", mode: int = 0o644) -> Member:
    ti = tarfile.TarInfo(name)
    ti.size, ti.mode = len(data), mode
    return ti, data


def tdir(name: str, mode: int = 0o755) -> Member:
    ti = tarfile.TarInfo(name)
    ti.type, ti.mode = tarfile.DIRTYPE, mode
    return ti, None


def tsym(name: str, target: str) -> Member:
    ti = tarfile.TarInfo(name)
    ti.type, ti.linkname = tarfile.SYMTYPE, target
    return ti, None


def thard(name: str, target: str) -> Member:
    ti = tarfile.TarInfo(name)
    ti.type, ti.linkname = tarfile.LNKTYPE, target
    return ti, None


def tspecial(name: str, kind: bytes) -> Member:
    ti = tarfile.TarInfo(name)
    ti.type, ti.devmajor, ti.devminor = kind, 1, 3
    return ti, None


def make_tar(path: Path, members: list[Member], mode: str = "w:gz") -> Path:
    with tarfile.open(path, mode) as tf:  # type: ignore[call-overload]
        for ti, data in members:
            tf.addfile(ti, io.BytesIO(data) if data is not None else None)
    return path


@pytest.fixture
def unpack_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Where Host unpacks tarballs during this test (its parent is the test's tmp_path)."""
    d = tmp_path / "tmp"
    d.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(d))
    return d


def only_copy(unpack_dir: Path) -> Path:
    """The one unpacked copy: nothing else may appear next to it."""
    entries = list(unpack_dir.iterdir())
    assert len(entries) == 1 and entries[0].name.startswith("mcpnode-root-"), entries
    return entries[0]


@pytest.mark.parametrize(
    ("suffix", "mode"),
    [(".tar.gz", "w:gz"), (".tgz", "w:gz"), (".tar.bz2", "w:bz2"), (".tar.xz", "w:xz")],
)
def test_tarball_top_folder_is_detected(
    tmp_path: Path, unpack_dir: Path, suffix: str, mode: str
) -> None:
    if mode == "w:xz":
        pytest.importorskip("lzma")
    # hwloc's dumps unpack to a folder named after the machine, not after the tarball.
    members = [
        tdir("hwloc-dump-xyz"),
        tdir("hwloc-dump-xyz/sys", mode=0o700),
        tfile("hwloc-dump-xyz/sys/devices/system/node/online", b"0-1\n"),
        tsym("hwloc-dump-xyz/sys/node", "devices/system/node"),
        tfile("hwloc-dump-xyz/README", b"not a root marker\n"),
    ]
    tarball = make_tar(tmp_path / f"snapshot{suffix}", members, mode)
    with Host(tarball) as host:
        assert Path(host.root).name == "hwloc-dump-xyz"
        assert Path(host.root).parent == only_copy(unpack_dir)
        assert host.unpack_notes == []
        assert host.read_text("/sys/node/online") == "0-1\n"
        assert not host.is_live
        assert host.source == str(tarball)
        # A 0700 directory in the dump is made readable to whoever runs the agent.
        assert stat.S_IMODE(os.stat(Path(host.root) / "sys").st_mode) == 0o755


def test_tarball_nested_top_and_dot_prefixed_names(tmp_path: Path, unpack_dir: Path) -> None:
    members = [tdir("./"), tfile("./outer/inner/proc/cpuinfo", b"processor: 0\n")]
    with Host(make_tar(tmp_path / "a.tar", members, "w")) as host:
        assert host.root.endswith("/outer/inner")
        assert host.read_text("/proc/cpuinfo") == "processor: 0\n"


def test_tarball_without_sys_or_proc_is_root_error(tmp_path: Path, unpack_dir: Path) -> None:
    members = [tfile("dump/etc/hostname"), tfile("dump/var/log/x")]
    with pytest.raises(RootError, match="no sys/, proc/"):
        Host(make_tar(tmp_path / "dump.tar.gz", members))
    assert list(unpack_dir.iterdir()) == [], "a failed Host leaves no unpacked copy behind"


@pytest.mark.parametrize("target", ["/", "OUTSIDE"])
def test_tarball_top_symlink_is_never_descended(
    tmp_path: Path, unpack_dir: Path, target: str
) -> None:
    """An archive holding only `snap -> /` must not make the live machine the root."""
    outside = tmp_path / "outside"
    put(outside, "sys/x", "outside\n")
    members = [tsym("snap", str(outside) if target == "OUTSIDE" else target)]
    with pytest.raises(RootError):
        Host(make_tar(tmp_path / "snap.tar.gz", members))
    assert list(unpack_dir.iterdir()) == []


def good_archive_bytes(mode: str) -> bytes:
    rnd = random.Random(7)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode=mode) as tf:  # type: ignore[call-overload]
        for i in range(40):
            data = rnd.randbytes(3000) + b"sysfs " * 500
            ti = tarfile.TarInfo(f"sys/f{i}")
            ti.size = len(data)
            tf.addfile(ti, io.BytesIO(data))
    return buf.getvalue()


def flip(data: bytes, at: float) -> bytes:
    b = bytearray(data)
    pos = int(len(b) * at)
    for i in range(pos, pos + 16):
        b[i] ^= 0xFF
    return bytes(b)


def second_header_corrupted(data: bytes) -> bytes:
    b = bytearray(data)
    first = tarfile.TarInfo.frombuf(bytes(b[:512]), "utf-8", "surrogateescape")
    second = 512 + (first.size + 511) // 512 * 512
    b[second + 148 : second + 156] = b"9999999\0"  # a checksum that cannot match
    return bytes(b)


def cut_after_first_member(data: bytes) -> bytes:
    first = tarfile.TarInfo.frombuf(data[:512], "utf-8", "surrogateescape")
    return data[: 512 + (first.size + 511) // 512 * 512]


def gz_cut(keep: Callable[[int], int]) -> Callable[[bytes], bytes]:
    return lambda d: d[: keep(len(d))]


CORRUPTIONS: dict[str, tuple[str, str, Callable[[bytes], bytes]]] = {
    # name: (suffix, tarfile mode, what to do to a good archive)
    "garbage": (".tar.gz", "w:gz", lambda d: random.Random(1).randbytes(4096)),
    "empty": (".tar.gz", "w:gz", lambda d: b""),
    "gz-cut-in-header": (".tar.gz", "w:gz", gz_cut(lambda n: 10)),
    "gz-cut-in-half": (".tar.gz", "w:gz", gz_cut(lambda n: n // 2)),
    "gz-cut-near-end": (".tar.gz", "w:gz", gz_cut(lambda n: n - 30)),
    "gz-no-crc-trailer": (".tar.gz", "w:gz", gz_cut(lambda n: n - 8)),
    "gz-flipped-early": (".tar.gz", "w:gz", lambda d: flip(d, 0.2)),
    "gz-flipped-middle": (".tar.gz", "w:gz", lambda d: flip(d, 0.5)),
    "gz-flipped-late": (".tar.gz", "w:gz", lambda d: flip(d, 0.9)),
    "bz2-cut": (".tar.bz2", "w:bz2", gz_cut(lambda n: n - 20)),
    "bz2-flipped": (".tar.bz2", "w:bz2", lambda d: flip(d, 0.5)),
    "tar-bad-second-header": (".tar", "w", second_header_corrupted),
    "tar-cut-at-member-boundary": (".tar", "w", cut_after_first_member),
    "tar-concatenated": (".tar", "w", lambda d: d + d),
    "gz-of-bad-header": (
        ".tar.gz",
        "w:gz",
        lambda d: gzip.compress(second_header_corrupted(gzip.decompress(d))),
    ),
    "bz2-of-cut-tar": (
        ".tar.bz2",
        "w:bz2",
        lambda d: bz2.compress(cut_after_first_member(bz2.decompress(d))),
    ),
}


@pytest.mark.parametrize("case", sorted(CORRUPTIONS))
def test_corrupt_or_truncated_tarball_is_root_error(
    tmp_path: Path, unpack_dir: Path, case: str
) -> None:
    """Never a silently smaller or altered tree, never a raw zlib/EOF error."""
    suffix, mode, damage = CORRUPTIONS[case]
    good = good_archive_bytes(mode)
    with Host(make_tar_bytes(tmp_path / f"good{suffix}", good)) as host:  # the control
        assert len(host.listdir("/sys")) == 40
    bad = damage(good)
    assert bad != good
    with pytest.raises(RootError):
        Host(make_tar_bytes(tmp_path / f"bad{suffix}", bad))
    assert list(unpack_dir.iterdir()) == []


def make_tar_bytes(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    """Files outside the unpack directory that malicious members aim at."""
    v = tmp_path / "victim"
    put(v, "target", "original\n")
    put(v, "target2", "original2\n")
    put(v, "secret/passwd", "root:SECRET\n")
    return v


def test_malicious_tarball(tmp_path: Path, unpack_dir: Path, victim: Path) -> None:
    # Aimed at a victim directory, not the real /etc: if a regression wrote through a link, a
    # CI machine running as root must not lose /etc/passwd over it.
    members = [
        tdir("sys"),
        tfile("sys/ok", b"fine\n"),
        tdir("sys/private", mode=0o700),
        tfile("sys/private/x", b"x\n"),
        tfile("../escape", b"escaped\n"),
        tfile("../../escape2", b"escaped\n"),
        tfile("sys/../../escape3", b"escaped\n"),
        tfile(str(victim / "abs_file"), b"escaped\n"),
        tfile("/abs/path", b"escaped\n"),
        # A link to a directory outside, then members below it: writing them would follow it.
        tsym("evil", str(victim)),
        tfile("evil/passwd", b"pwned\n"),
        tfile("evil/sub/deeper", b"pwned\n"),  # parents must not be created through it either
        tdir("evil/newdir"),
        tsym("up", "../../../.."),
        tfile("up/x", b"pwned\n"),
        # Hard links: to a host file by absolute or `..` name, and through a planted symlink.
        thard("hl_etc", "/etc/passwd"),
        thard("hl_up", "../victim/target"),
        tsym("sec", str(victim / "secret")),
        thard("stolen", "sec/passwd"),
        # A symlink planted at a name a later member writes to: replace it, never write through.
        tsym("x", str(victim / "target")),
        thard("x", "sys/ok"),
        tsym("y", str(victim / "target2")),
        tfile("y", b"replaced\n"),
        thard("sys/ok_copy", "sys/ok"),
        # Device nodes and fifos are never created.
        tspecial("dev/null0", tarfile.CHRTYPE),
        tspecial("dev/sda0", tarfile.BLKTYPE),
        tspecial("run/fifo0", tarfile.FIFOTYPE),
    ]
    tarball = make_tar(tmp_path / "evil.tar.gz", members)
    before = tree(victim)

    host = Host(tarball)

    # Nothing written outside the unpack directory.
    assert tree(victim) == before
    copy = only_copy(unpack_dir)
    assert Path(host.root) == copy
    outside = {p for p in tree(tmp_path) if not p.startswith(("tmp/", "victim/"))}
    assert outside == {"tmp", "victim", "evil.tar.gz"}

    # Every refused member is listed with a reason.
    refused = {name for name, _ in host.unpack_notes}
    assert refused == {
        "../escape",
        "../../escape2",
        "sys/../../escape3",
        str(victim / "abs_file"),
        "/abs/path",
        "evil/passwd",
        "evil/sub/deeper",
        "evil/newdir",
        "up/x",
        "hl_etc",
        "hl_up",
        "stolen",
        "dev/null0",
        "dev/sda0",
        "run/fifo0",
    }
    assert all(why for _, why in host.unpack_notes)

    # The rest is there and readable, and the kept links resolve inside the root.
    assert host.read_text("/sys/ok") == "fine\n"
    assert host.read_text("/sys/private/x") == "x\n"
    assert host.read_text("/sys/ok_copy") == "fine\n"
    assert host.read_text("/x") == "fine\n"
    assert host.read_text("/y") == "replaced\n"
    assert not os.path.islink(copy / "x") and not os.path.islink(copy / "y")
    assert host.realpath("/up") == "/"
    assert host.read_text("/up/sys/ok") == "fine\n"
    assert host.readlink("/evil") == str(victim)
    assert host.read_optional("/evil/passwd") is None  # the victim path, inside the root
    assert host.read_optional("/sec/passwd") is None
    assert host.read_optional("/stolen") is None
    for special in ("dev/null0", "dev/sda0", "run/fifo0"):
        assert not os.path.lexists(copy / special)
    host.close()


def test_close_removes_the_unpacked_copy(tmp_path: Path, unpack_dir: Path) -> None:
    tarball = make_tar(tmp_path / "s.tar.gz", [tfile("sys/a", b"1\n")])
    host = Host(tarball)
    copy = only_copy(unpack_dir)
    assert host.read_text("/sys/a") == "1\n"
    host.close()
    assert not copy.exists()
    host.close()  # twice is fine
    with pytest.raises(PathNotFound):
        host.read_text("/sys/a")
    with Host(tarball) as again:
        copy = only_copy(unpack_dir)
        assert again.read_text("/sys/a") == "1\n"
    assert list(unpack_dir.iterdir()) == []


def test_close_of_a_directory_root_touches_nothing(sysroot: Path) -> None:
    before = tree(sysroot)
    with Host(sysroot) as host:
        host.read_text("/etc/hostname")
    assert tree(sysroot) == before


NAME_PARTS = ["sys", "a", "b", "..", ".", ""]
LINK_TARGETS = ["/", "..", "../..", "a", "sys/a", "/sys", "VICTIM", "VICTIM/target", "/etc"]


@st.composite
def member_lists(draw: st.DrawFn) -> list[tuple[str, str, str]]:
    """(kind, name, target) triples; VICTIM in a target is replaced by the victim's path."""
    name = st.lists(st.sampled_from(NAME_PARTS), min_size=1, max_size=4).map("/".join)
    absname = st.one_of(name, name.map(lambda n: "VICTIM/" + n))
    kind = st.sampled_from(["file", "dir", "sym", "hard"])
    target = st.one_of(st.sampled_from(LINK_TARGETS), name)
    return draw(st.lists(st.tuples(kind, absname, target), max_size=12))


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(spec=member_lists())
def test_no_member_sequence_writes_outside(
    tmp_path_factory: pytest.TempPathFactory, spec: list[tuple[str, str, str]]
) -> None:
    base = tmp_path_factory.mktemp("fuzz")
    victim = base / "victim"
    put(victim, "target", "original\n")
    (victim / "a").mkdir()
    unpack = base / "tmp"
    unpack.mkdir()
    members: list[Member] = [tfile("sys/marker", b"m\n")]
    for kind, raw_name, raw_target in spec:
        name = raw_name.replace("VICTIM", str(victim))
        target = raw_target.replace("VICTIM", str(victim))
        if kind == "file":
            members.append(tfile(name, b"w\n"))
        elif kind == "dir":
            members.append(tdir(name))
        elif kind == "sym":
            members.append(tsym(name, target))
        else:
            members.append(thard(name, target))
    tarball = make_tar(base / "f.tar.gz", members)
    before = tree(victim)
    saved, tempfile.tempdir = tempfile.tempdir, str(unpack)
    try:
        try:
            host = Host(tarball)
        except RootError:
            host = None  # e.g. `sys` replaced by a link: refusing the root is fine
        assert tree(victim) == before
        assert {p.name[:13] for p in unpack.iterdir()} <= {"mcpnode-root-"}
        assert {p.name for p in base.iterdir()} == {"victim", "tmp", "f.tar.gz"}
        if host is not None:
            host.close()
        assert list(unpack.iterdir()) == []
    finally:
        tempfile.tempdir = saved
        shutil.rmtree(base)


# -- realpath never leaves the root (property) ----------------------------------------------

MAZE_NAMES = [
    "d",
    "f",
    "up",
    "up3",
    "abs",
    "absroot",
    "selfl",
    "loopa",
    "dangling",
    "tof",
    "via",
    "missing",
    "..",
    ".",
]


def build_maze(root: Path, rel: str = "", depth: int = 3) -> None:
    """Every level holds the same names, so random paths get far before they miss."""
    here = root / rel if rel else root
    here.mkdir(parents=True, exist_ok=True)
    (here / "f").write_text(f"/{rel}/f" if rel else "/f")  # each file holds its own path
    for name, target in [
        ("up", ".."),
        ("up3", "../../.."),
        ("abs", "/d"),
        ("absroot", "/"),
        ("selfl", "selfl"),
        ("loopa", "loopb"),
        ("loopb", "loopa"),
        ("dangling", "nowhere"),
        ("tof", "f"),
        ("via", "./d/../up/d"),
    ]:
        os.symlink(target, here / name)
    if depth:
        build_maze(root, f"{rel}/d".lstrip("/"), depth - 1)
    else:
        os.symlink("/d", here / "d")  # endless logical depth, no loop


@pytest.fixture(scope="module")
def maze(tmp_path_factory: pytest.TempPathFactory) -> Host:
    root = tmp_path_factory.mktemp("maze")
    build_maze(root)
    return Host(root)


def kernel_stat_in_chroot(root: str, paths: list[str]) -> list[list[int] | str] | None:
    """What the kernel itself says of each path with `root` as `/`: (dev, ino) or an errno name.

    None when this process cannot chroot (not root, or no CAP_SYS_CHROOT).
    """
    if not IS_ROOT:
        return None

    def work() -> list[list[int] | str]:
        os.chroot(root)
        os.chdir("/")
        out: list[list[int] | str] = []
        for p in paths:
            try:
                s = os.stat(p)
                out.append([s.st_dev, s.st_ino])
            except OSError as err:
                out.append(errno.errorcode.get(err.errno or 0, "?"))
        return out

    try:
        result = run_in_child(work)
    except AssertionError:
        return None
    assert isinstance(result, list)
    return result


def check_paths(host: Host, paths: list[str]) -> None:
    root = host.root
    results: list[str | None] = []
    for p in paths:
        try:
            real = host.realpath(p)
        except (PathNotFound, SymlinkLoop) as err:
            results.append(type(err).__name__)
            # The read primitives agree with the resolver on failures.
            if isinstance(err, SymlinkLoop):
                with pytest.raises(SymlinkLoop):
                    host.read_optional(p)
            continue
        results.append(real)
        assert real.startswith("/") and "//" not in real, (p, real)
        assert not {".", ".."} & set(real.split("/")), (p, real)
        fs = os.path.normpath(host.fs_path(real))  # fs_path('/') ends in '/'
        assert fs == root or fs.startswith(root + "/"), (p, real)
        # No symlink is left in what realpath returns, so nothing natively followed can leave.
        assert os.path.realpath(fs) == fs, (p, real)
        assert os.path.lexists(fs), (p, real)
        if os.path.isfile(fs):
            assert host.read_text(p) == real, (p, real)  # each maze file holds its own path

    kernel = kernel_stat_in_chroot(root, paths)
    if kernel is None:
        return
    for p, ours, theirs in zip(paths, results, kernel, strict=True):
        if isinstance(theirs, list):  # the kernel resolved it: we must reach the same inode
            assert ours is not None and ours.startswith("/"), (p, ours, theirs)
            s = os.stat(host.fs_path(ours))
            assert [s.st_dev, s.st_ino] == theirs, (p, ours)
        elif theirs == "ELOOP":
            assert ours == "SymlinkLoop", (p, ours)
        elif theirs == "ENOENT":
            assert ours == "PathNotFound", (p, ours)
        else:
            # The one known difference: Host applies `.` and `..` lexically, so `f/..` with `f`
            # a file is the parent, where the kernel says ENOTDIR. It never leaves the root.
            assert theirs == "ENOTDIR", (p, ours, theirs)


path_strategy = st.lists(st.sampled_from(MAZE_NAMES), max_size=9).map(lambda c: "/" + "/".join(c))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(paths=st.lists(path_strategy, min_size=1, max_size=25))
def test_realpath_never_leaves_the_root(maze: Host, paths: list[str]) -> None:
    check_paths(maze, paths)


def test_realpath_matches_the_kernel_on_many_paths(maze: Host) -> None:
    """A seeded sweep, larger than hypothesis's, compared with the kernel under chroot."""
    rnd = random.Random(20240601)
    paths = [
        "/" + "/".join(rnd.choice(MAZE_NAMES) for _ in range(rnd.randrange(0, 10)))
        for _ in range(3000)
    ]
    check_paths(maze, paths)


def test_listdir_fast_path_and_is_real_dir(tmp_path: Path) -> None:
    put(tmp_path, "sys/devices/pci0000:00/0000:00:01.0/class", "0x060400\n")
    put(tmp_path, "sys/devices/pci0000:00/attr", "x\n")
    link(tmp_path, "sys/devices/pci0000:00/alias", "0000:00:01.0")
    host = Host(tmp_path)
    base = "/sys/devices/pci0000:00"
    names = ["0000:00:01.0", "alias", "attr"]
    assert host.listdir(base) == names
    with host.recording() as rec:
        assert host.listdir(base) == names  # same answer through scandir while recording
    assert f"{base}/0000:00:01.0" in rec.dirs and rec.links[f"{base}/alias"] == "0000:00:01.0"
    assert host.is_real_dir(f"{base}/0000:00:01.0")
    assert not host.is_real_dir(f"{base}/alias")  # a symlink to a directory is not one
    assert not host.is_real_dir(f"{base}/attr")
    assert not host.is_real_dir(f"{base}/missing")
    with host.oneshot():
        assert host.is_real_dir(f"{base}/0000:00:01.0")
        assert host.read_text(f"{base}/0000:00:01.0/class") == "0x060400\n"
