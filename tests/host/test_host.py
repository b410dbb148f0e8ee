"""Host on a directory root: in-root path resolution and typed read errors (tarball roots:
tests/host/test_host_tar.py).

Everything runs on real files: temporary roots with real symlinks, real permission bits checked
from a child that dropped root, and read-only reads of this machine's /sys for the errnos only
a kernel produces. Nothing is patched.
"""

from __future__ import annotations

import errno
import glob
import json
import os
import random
import shutil
import stat
import sys
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


# -- closing ----------------------------------------------------------------------------


def test_close_of_a_directory_root_touches_nothing(sysroot: Path) -> None:
    before = tree(sysroot)
    with Host(sysroot) as host:
        host.read_text("/etc/hostname")
    assert tree(sysroot) == before


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
