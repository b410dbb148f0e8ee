"""Host on a tarball root (host/tarball.py): read in place from an in-memory index, never
unpacked, and answering every call as Host does on the directory the archive was made from.

Real archives throughout: made by tarfile and GNU tar from real directories (real symlinks,
loops, hard links, FIFOs and device nodes), malicious ones written member by member, damaged
ones cut and flipped byte by byte. `tempfile.tempdir` and TMPDIR point at a directory of the
test, which must stay empty: nothing is written while an archive is read or after.
"""

from __future__ import annotations

import bz2
import errno
import functools
import gzip
import hashlib
import io
import os
import random
import shutil
import stat
import subprocess
import sys
import tarfile
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mcpnode.errors import (
    AccessDenied,
    HostError,
    NotRegularFile,
    PathNotFound,
    RootError,
    Untrusted,
)
from mcpnode.host import FileStat, Host
from tests.host.test_host import MAZE_NAMES, build_maze, put, tree

pytestmark = pytest.mark.usefixtures("tmpdir_watch")

REPO = Path(__file__).resolve().parents[2]
NOBODY = 65534

Member = tuple[tarfile.TarInfo, bytes | None]


def tfile(name: str, data: bytes = b"x\n", mode: int = 0o644, uid: int = 0) -> Member:
    ti = tarfile.TarInfo(name)
    ti.size, ti.mode, ti.uid = len(data), mode, uid
    return ti, data


def tdir(name: str, mode: int = 0o755, uid: int = 0) -> Member:
    ti = tarfile.TarInfo(name)
    ti.type, ti.mode, ti.uid = tarfile.DIRTYPE, mode, uid
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


def make_tar(
    path: Path, members: list[Member], mode: str = "w:gz", fmt: int = tarfile.DEFAULT_FORMAT
) -> Path:
    with tarfile.open(path, mode, format=fmt) as tf:  # type: ignore[call-overload]
        for ti, data in members:
            tf.addfile(ti, io.BytesIO(data) if data is not None else None)
    return path


def pack(directory: Path, out: Path, mode: str = "w:gz") -> Path:
    """`directory` as a tarball whose top folder is its name (how a snapshot is laid out)."""
    with tarfile.open(out, mode) as tf:  # type: ignore[call-overload]
        tf.add(directory, arcname=directory.name)
    return out


def nothing_written(tmp: Path) -> None:
    assert list(tmp.iterdir()) == []


# -- the top, the compressions ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("suffix", "mode"),
    [
        (".tar.gz", "w:gz"),
        (".tgz", "w:gz"),
        (".tar.bz2", "w:bz2"),
        (".tbz2", "w:bz2"),
        (".tar.xz", "w:xz"),
        (".tar", "w"),
    ],
)
def test_tarball_top_folder_is_detected(
    tmp_path: Path, tmpdir_watch: Path, suffix: str, mode: str
) -> None:
    if mode == "w:xz":
        pytest.importorskip("lzma")
    # hwloc's dumps hold a folder named after the machine, not after the tarball.
    members = [
        tdir("hwloc-dump-xyz"),
        tdir("hwloc-dump-xyz/sys", mode=0o700),
        tfile("hwloc-dump-xyz/sys/devices/system/node/online", b"0-1\n"),
        tsym("hwloc-dump-xyz/sys/node", "devices/system/node"),
        tfile("hwloc-dump-xyz/README", b"not a root marker\n"),
    ]
    tarball = make_tar(tmp_path / f"snapshot{suffix}", members, mode)
    with Host(tarball) as host:
        assert host.root == f"{os.path.realpath(tarball)}/hwloc-dump-xyz"
        assert host.unpack_notes == []
        assert host.read_text("/sys/node/online") == "0-1\n"
        assert host.realpath("/sys/node") == "/sys/devices/system/node"
        assert not host.is_live
        assert host.source == str(tarball)
        # The member's own mode, as the directory it came from had it.
        st_ = host.lstat("/sys")
        assert st_ is not None and stat.S_ISDIR(st_.mode) and stat.S_IMODE(st_.mode) == 0o700
        # An implied directory (no member of its own) is what tar(1) would create.
        implied = host.lstat("/sys/devices")
        assert implied is not None and stat.S_IMODE(implied.mode) == 0o755
        nothing_written(tmpdir_watch)


def test_nested_top_and_dot_prefixed_names(tmp_path: Path) -> None:
    members = [tdir("./"), tfile("./outer/inner/proc/cpuinfo", b"processor: 0\n")]
    with Host(make_tar(tmp_path / "a.tar", members, "w")) as host:
        assert host.root.endswith("a.tar/outer/inner")
        assert host.read_text("/proc/cpuinfo") == "processor: 0\n"
        assert host.listdir("/") == ["proc"]


def test_without_sys_or_proc_is_root_error(tmp_path: Path) -> None:
    members = [tfile("dump/etc/hostname"), tfile("dump/var/log/x")]
    with pytest.raises(RootError, match=r"dump\.tar\.gz: no sys/, proc/"):
        Host(make_tar(tmp_path / "dump.tar.gz", members))


@pytest.mark.parametrize("target", ["/", "OUTSIDE"])
def test_top_symlink_is_never_descended(tmp_path: Path, target: str) -> None:
    """An archive holding only `snap -> /` must not make the live machine the root."""
    outside = tmp_path / "outside"
    put(outside, "sys/x", "outside\n")
    members = [tsym("snap", str(outside) if target == "OUTSIDE" else target)]
    with pytest.raises(RootError):
        Host(make_tar(tmp_path / "snap.tar.gz", members))


def test_a_file_that_is_not_a_tarball_by_name_is_root_error(tmp_path: Path) -> None:
    f = tmp_path / "snap.zip"
    f.write_bytes(b"PK\3\4")
    with pytest.raises(RootError, match=r"not a directory, \.tar\.gz or \.tar\.bz2"):
        Host(f)


# -- damaged archives ---------------------------------------------------------------------------


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


def second_size_garbled(data: bytes) -> bytes:
    """A header whose checksum matches but whose size field is not a number."""
    b = bytearray(data)
    first = tarfile.TarInfo.frombuf(bytes(b[:512]), "utf-8", "surrogateescape")
    second = 512 + (first.size + 511) // 512 * 512
    b[second + 124 : second + 136] = b"zzzzzzzzzzz\0"
    b[second + 148 : second + 156] = b"        "
    chk = sum(b[second : second + 512])
    b[second + 148 : second + 156] = b"%06o\0 " % chk
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
    "gz-crc-wrong": (".tar.gz", "w:gz", lambda d: d[:-8] + bytes(b ^ 1 for b in d[-8:-4]) + d[-4:]),
    "bz2-cut": (".tar.bz2", "w:bz2", gz_cut(lambda n: n - 20)),
    "bz2-flipped": (".tar.bz2", "w:bz2", lambda d: flip(d, 0.5)),
    "tar-bad-second-header": (".tar", "w", second_header_corrupted),
    "tar-garbled-size": (".tar", "w", second_size_garbled),
    "tar-cut-at-member-boundary": (".tar", "w", cut_after_first_member),
    "tar-cut-in-data": (".tar", "w", lambda d: d[:700]),
    "tar-concatenated": (".tar", "w", lambda d: d + d),
    "tar-trailing-garbage": (".tar", "w", lambda d: d + b"\1" * 512),
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
def test_corrupt_or_truncated_tarball_is_root_error(tmp_path: Path, case: str) -> None:
    """Never a silently smaller or altered tree, never a raw zlib/EOF error: one RootError
    naming the archive."""
    suffix, mode, damage = CORRUPTIONS[case]
    good = good_archive_bytes(mode)
    (tmp_path / f"good{suffix}").write_bytes(good)
    with Host(tmp_path / f"good{suffix}") as host:  # the control
        assert len(host.listdir("/sys")) == 40
    bad = damage(good)
    assert bad != good
    (tmp_path / f"bad{suffix}").write_bytes(bad)
    with pytest.raises(RootError, match=rf"^{tmp_path}/bad{suffix}: "):
        Host(tmp_path / f"bad{suffix}")


# -- malicious members ------------------------------------------------------------------------


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    """Files outside the archive that malicious members aim at."""
    v = tmp_path / "victim"
    put(v, "target", "original\n")
    put(v, "target2", "original2\n")
    put(v, "secret/passwd", "root:SECRET\n")
    return v


def test_malicious_tarball(tmp_path: Path, tmpdir_watch: Path, victim: Path) -> None:
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
        # A link to a directory outside, then members below it: placing them would follow it.
        tsym("evil", str(victim)),
        tfile("evil/passwd", b"pwned\n"),
        tfile("evil/sub/deeper", b"pwned\n"),
        tdir("evil/newdir"),
        tsym("up", "../../../.."),
        tfile("up/x", b"pwned\n"),
        # Hard links: to a host file by absolute or `..` name, and through a planted symlink.
        thard("hl_etc", "/etc/passwd"),
        thard("hl_up", "../victim/target"),
        tsym("sec", str(victim / "secret")),
        thard("stolen", "sec/passwd"),
        thard("hl_dir", "sys"),
        thard("hl_missing", "sys/nothing"),
        # A symlink planted at a name a later member replaces.
        tsym("x", str(victim / "target")),
        thard("x", "sys/ok"),
        tsym("y", str(victim / "target2")),
        tfile("y", b"replaced\n"),
        thard("sys/ok_copy", "sys/ok"),
        # A directory is not replaced by a file, nor a file by a directory.
        tfile("sys", b"not a dir\n"),
        tdir("sys/ok"),
        tfile("sys/ok/below", b"under a file\n"),
        # Device nodes and FIFOs: entries of their type, never opened.
        tspecial("dev/null0", tarfile.CHRTYPE),
        tspecial("dev/sda0", tarfile.BLKTYPE),
        tspecial("run/fifo0", tarfile.FIFOTYPE),
    ]
    tarball = make_tar(tmp_path / "evil.tar.gz", members)
    before = tree(tmp_path)

    host = Host(tarball)
    nothing_written(tmpdir_watch)
    assert tree(tmp_path) == before  # nothing written anywhere

    refused = {name: why for name, why in host.unpack_notes}
    assert set(refused) == {
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
        "hl_dir",
        "hl_missing",
        "sys",
        "sys/ok",
        "sys/ok/below",
    }
    assert refused["evil/passwd"] == "parent directory is reached through a symlink"
    assert refused["hl_up"] == "hard link to a file outside the archive"
    assert refused["sys/ok/below"] == "cannot create parent directory: Not a directory"

    # The rest is there and readable, and the kept links resolve inside the root.
    assert host.read_text("/sys/ok") == "fine\n"
    assert host.read_text("/sys/private/x") == "x\n"
    assert host.read_text("/sys/ok_copy") == "fine\n"
    assert host.read_text("/x") == "fine\n"
    assert host.read_text("/y") == "replaced\n"
    assert host.readlink("/x") is None and host.readlink("/y") is None  # replaced by files
    assert host.realpath("/up") == "/"
    assert host.read_text("/up/sys/ok") == "fine\n"
    assert host.readlink("/evil") == str(victim)
    assert host.read_optional("/evil/passwd") is None  # the victim's path, inside the root
    assert host.read_optional("/sec/passwd") is None
    assert host.read_optional("/stolen") is None
    # A hard link is the same entry: same identity, same content.
    a, b = host.lstat("/sys/ok"), host.lstat("/sys/ok_copy")
    assert a is not None and b is not None and (a.ino, a.dev) == (b.ino, b.dev)
    # Special files: listed and stat()ed as what they are, never read.
    for path, kind in (("/dev/null0", "a device node"), ("/run/fifo0", "a FIFO")):
        with pytest.raises(NotRegularFile, match=kind):
            host.read_text(path)
    node = host.lstat("/dev/null0")
    assert node is not None and stat.S_ISCHR(node.mode)
    assert host.listdir("/dev") == ["null0", "sda0"]
    host.close()
    nothing_written(tmpdir_watch)


def test_close_forgets_the_index(tmp_path: Path) -> None:
    tarball = make_tar(tmp_path / "s.tar.gz", [tfile("sys/a", b"1\n")])
    host = Host(tarball)
    assert host.read_text("/sys/a") == "1\n"
    host.close()
    host.close()  # twice is fine
    with pytest.raises(PathNotFound):
        host.read_text("/sys/a")
    with Host(tarball) as again:
        assert again.read_text("/sys/a") == "1\n"


NAME_PARTS = ["sys", "a", "b", "..", ".", ""]
LINK_TARGETS = ["/", "..", "../..", "a", "sys/a", "/sys", "VICTIM", "VICTIM/target", "/etc"]


@st.composite
def member_lists(draw: st.DrawFn) -> list[tuple[str, str, str]]:
    """(kind, name, target) triples; VICTIM in a target is replaced by the victim's path."""
    name = st.lists(st.sampled_from(NAME_PARTS), min_size=1, max_size=4).map("/".join)
    absname = st.one_of(name, name.map(lambda n: "VICTIM/" + n))
    kind = st.sampled_from(["file", "dir", "sym", "hard", "fifo"])
    target = st.one_of(st.sampled_from(LINK_TARGETS), name)
    return draw(st.lists(st.tuples(kind, absname, target), max_size=12))


@settings(
    max_examples=80,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(spec=member_lists())
def test_no_member_sequence_reaches_outside(
    tmp_path_factory: pytest.TempPathFactory, spec: list[tuple[str, str, str]]
) -> None:
    """Whatever the members: nothing is written, every answer comes from inside the archive
    (each file of it holds its marker), and every failure is a typed HostError."""
    base = tmp_path_factory.mktemp("fuzz")
    victim = base / "victim"
    put(victim, "target", "VICTIM\n")
    (victim / "a").mkdir()
    members: list[Member] = [tfile("sys/marker", b"m\n")]
    paths = ["/", "/sys/marker"]
    for kind, raw_name, raw_target in spec:
        name = raw_name.replace("VICTIM", str(victim))
        target = raw_target.replace("VICTIM", str(victim))
        paths += ["/" + name, "/" + target, f"/{name}/a", f"/{name}/target"]
        if kind == "file":
            members.append(tfile(name, b"w\n"))
        elif kind == "dir":
            members.append(tdir(name))
        elif kind == "sym":
            members.append(tsym(name, target))
        elif kind == "hard":
            members.append(thard(name, target))
        else:
            members.append(tspecial(name, tarfile.FIFOTYPE))
    tarball = make_tar(base / "f.tar.gz", members)
    before = tree(base)
    try:
        try:
            host = Host(tarball)
        except RootError:
            return  # e.g. `sys` replaced by a link: refusing the root is fine
        with host:
            for p in paths:
                for call in (host.read_optional, host.realpath, host.listdir, host.lstat):
                    try:
                        got = call(p)
                    except HostError:
                        continue
                    if call is host.read_optional:
                        assert got in (None, "w\n", "m\n"), (p, got)
        assert tree(base) == before
    finally:
        shutil.rmtree(base)


# -- the same answers as the directory it was made from -----------------------------------------


def special_files(root: Path) -> None:
    """What a maze lacks: a FIFO, a device node, a hard link, odd modes and owners."""
    os.mkfifo(root / "fifo")
    os.mknod(root / "null", 0o600 | stat.S_IFCHR, os.makedev(1, 3))
    os.link(root / "f", root / "d" / "hard")
    (root / "private").mkdir(mode=0o700)
    put(root, "private/secret", "s\n").chmod(0o600)
    put(root, "shared", "x\n").chmod(0o666)
    os.chown(put(root, "foreign", "y\n"), NOBODY, NOBODY)
    put(root, "etc/mcpnode/mcpnode.toml", "# trusted\n")
    put(root, "big", "z" * 70_000)
    (root / "sys").mkdir()


@pytest.fixture(scope="module")
def maze_pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Host, Host]]:
    """The maze of tests/host/test_host.py with special_files, as a directory and as its tarball."""
    base = tmp_path_factory.mktemp("mazepair")
    root = base / "maze"
    build_maze(root)
    special_files(root)
    with Host(root) as d, Host(pack(root, base / "maze.tar.gz")) as t:
        yield d, t


def answer(call: Callable[[], object]) -> object:
    """A Host call's result, or its error's type and errno (the path in a message differs)."""
    try:
        value = call()
    except HostError as err:
        return (type(err).__name__, err.errno)
    if isinstance(value, list):
        return [tuple(v) if isinstance(v, tuple) else v for v in value]
    return value


def stat_view(st_: FileStat | None) -> object:
    """lstat's answer without identity and times (a copy has its own) and a directory's size
    (the filesystem's own bookkeeping: 4096 on ext4, entries on tmpfs; 0 in an archive)."""
    if st_ is None:
        return None
    return (st_.mode, st_.uid, st_.gid, None if stat.S_ISDIR(st_.mode) else st_.size)


def all_answers(host: Host, p: str) -> list[object]:
    return [
        answer(lambda: host.realpath(p)),
        answer(lambda: host.read_text(p)),
        answer(lambda: host.read_bytes(p, 100)),
        answer(lambda: host.read_optional(p)),
        answer(lambda: host.readlink(p)),
        answer(lambda: host.link_name(p)),
        answer(lambda: host.exists(p)),
        answer(lambda: host.is_dir(p)),
        answer(lambda: host.is_real_dir(p)),
        answer(lambda: host.listdir(p)),
        answer(lambda: host.listdir_optional(p)),
        answer(lambda: host.scandir(p)),
        answer(lambda: stat_view(host.lstat(p))),
        answer(lambda: host.read_trusted(p, 1000)),
        answer(lambda: host.check_trusted_dir(p)),
    ]


SPECIAL_NAMES = ["fifo", "null", "hard", "private", "secret", "shared", "foreign", "big", "etc"]


def test_every_read_answers_as_on_the_directory(maze_pair: tuple[Host, Host]) -> None:
    """A seeded sweep of paths through symlinks, `..`, loops, dangling links, FIFOs, device
    nodes and odd owners: each Host call answers the same on the tarball as on the directory,
    outside and inside a oneshot() block."""
    directory, tarball = maze_pair
    rnd = random.Random(20240602)
    names = MAZE_NAMES + SPECIAL_NAMES + ["mcpnode", "mcpnode.toml", "sys"]
    paths = ["/", "/fifo", "/null", "/d/hard", "/private/secret", "/etc/mcpnode/mcpnode.toml"]
    paths += [
        "/" + "/".join(rnd.choice(names) for _ in range(rnd.randrange(0, 7))) for _ in range(700)
    ]
    for p in paths:
        assert all_answers(tarball, p) == all_answers(directory, p), p
    with directory.oneshot(), tarball.oneshot():
        for p in paths[:300]:
            assert all_answers(tarball, p) == all_answers(directory, p), p


def test_hard_links_share_identity_as_on_the_directory(maze_pair: tuple[Host, Host]) -> None:
    for host in maze_pair:
        a, b, c = host.lstat("/f"), host.lstat("/d/hard"), host.lstat("/d/f")
        assert a is not None and b is not None and c is not None
        assert (a.ino, a.dev) == (b.ino, b.dev) != (c.ino, c.dev)


def test_trusted_reads_judge_the_members(tmp_path: Path) -> None:
    """read_trusted and check_trusted_dir under a tarball root: the member's owner and mode, its
    directories', then the archive file's and its directories'."""
    members = [
        tdir("snap"),
        tdir("snap/sys"),
        tdir("snap/etc"),
        tfile("snap/etc/ok.toml", b"ok\n"),
        tfile("snap/etc/foreign.toml", uid=1000),
        tfile("snap/etc/shared.toml", mode=0o664),
        tdir("snap/open", mode=0o777),
        tfile("snap/open/in.toml"),
        tdir("snap/sticky", mode=0o1777),
        tfile("snap/sticky/in.toml"),
        tdir("snap/theirs", uid=1000),
        tfile("snap/theirs/in.toml"),
    ]
    tarball = make_tar(tmp_path / "t.tar.gz", members)
    with Host(tarball) as host:
        assert host.read_trusted("/etc/ok.toml", 100) == b"ok\n"
        assert host.read_trusted("/sticky/in.toml", 100) == b"x\n"
        host.check_trusted_dir("/etc")
        host.check_trusted_dir("/missing")  # absent: nothing to load
        for path, reason in (
            ("/etc/foreign.toml", "owned by uid 1000"),
            ("/etc/shared.toml", "group-writable"),
            ("/open/in.toml", "world-writable"),
            ("/theirs/in.toml", "owned by uid 1000"),
        ):
            with pytest.raises(Untrusted, match=reason):
                host.read_trusted(path, 100)
        with pytest.raises(Untrusted, match="world-writable"):
            host.check_trusted_dir("/open")
    tarball.chmod(0o646)  # anyone may rewrite the archive: nothing in it is trusted
    with Host(tarball) as host, pytest.raises(Untrusted, match=r"archive .*t\.tar\.gz is world"):
        host.read_trusted("/etc/ok.toml", 100)


# -- writes ---------------------------------------------------------------------------------------


def test_writes_are_refused_as_read_only(tmp_path: Path, tmpdir_watch: Path) -> None:
    members = [tfile("snap/proc/sys/vm/swappiness", b"60\n"), tfile("snap/etc/x", b"x\n")]
    tarball = make_tar(tmp_path / "t.tar.gz", members)
    digest = hashlib.sha256(tarball.read_bytes()).hexdigest()
    before = tree(tmp_path)
    with Host(tarball) as host:
        writes: list[Callable[[], object]] = [
            lambda: host.write_text("/proc/sys/vm/swappiness", "10"),
            lambda: host.write_file_atomic("/etc/sysctl.d/90-mcpnode.conf", b"x\n"),
            lambda: host.makedirs("/run/mcpnode"),
            lambda: host.remove("/etc/x"),
        ]
        for write in writes:
            with pytest.raises(AccessDenied, match="read-only: the root is a tarball") as info:
                write()
            assert info.value.errno == errno.EROFS
        with pytest.raises(AccessDenied), host.lock("/var/lib/mcpnode/lock", wait_s=0, holder={}):
            pass
        assert host.read_text("/proc/sys/vm/swappiness") == "60\n"
        # Messages name the entry inside the archive.
        assert host.fs_path("/etc/x") == f"{tarball}/snap/etc/x"
    assert hashlib.sha256(tarball.read_bytes()).hexdigest() == digest
    assert tree(tmp_path) == before


def test_apply_on_a_tarball_root_fails_cleanly(tmp_path: Path) -> None:
    src = tmp_path / "root"
    put(src, "proc/sys/vm/swappiness", "60\n")
    put(src, "proc/sys/net/core/somaxconn", "4096\n")
    tarball = pack(src, tmp_path / "root.tar.gz")
    digest = hashlib.sha256(tarball.read_bytes()).hexdigest()
    proc = subprocess.run(
        [sys.executable, "-m", "mcpnode", "apply", "--profile", "base", "--root", str(tarball)],
        capture_output=True,
        text=True,
        cwd=REPO,
        check=False,
    )
    assert proc.returncode == 2, proc.stderr
    assert "read-only: the root is a tarball" in proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert hashlib.sha256(tarball.read_bytes()).hexdigest() == digest


# -- the kernel log, recordings, snapshots ----------------------------------------------------


KMSG = b"6,1,100,-;NVRM: Xid (PCI:0000:01:00): 79, GPU has fallen off the bus.\n SUBSYSTEM=pci\n"


@pytest.mark.parametrize("kind", ["file", "fifo", "link", "missing"])
def test_kmsg_answers_as_on_the_directory(tmp_path: Path, kind: str) -> None:
    src = tmp_path / "root"
    put(src, "proc/x", "1\n")
    (src / "dev").mkdir()
    if kind == "file":
        (src / "dev/kmsg").write_bytes(KMSG)
    elif kind == "fifo":
        os.mkfifo(src / "dev/kmsg")
    elif kind == "link":
        os.symlink("../proc/x", src / "dev/kmsg")
    tarball = pack(src, tmp_path / "root.tar.gz")

    def got(host: Host) -> object:
        try:
            return host.read_kmsg()
        except HostError as err:
            return type(err).__name__

    with Host(src) as d, Host(tarball) as t:
        assert got(t) == got(d)
        if kind == "file":
            assert got(t) != "ReadError"
            stream = t.open_kmsg()
            assert stream.fileno() is None
            assert stream.read_new(final=True).records[0].startswith("6,1,100,-;NVRM: Xid")
            assert stream.read_new(final=True).records == ()
            stream.close()


def test_recording_through_a_tarball_sees_what_the_directory_shows(tmp_path: Path) -> None:
    """What `mcpnode snapshot` captures (every file read, link crossed, directory listed and
    command answered while discovery and the audit run) is the same through the tarball."""
    from mcpnode.snapshot import capture

    fixture = REPO / "tests/fixtures/hosts/dgx-a100"
    tarball = pack(fixture, tmp_path / "dgx.tar.gz")
    with Host(fixture) as d, Host(tarball) as t:
        (_, want, _), (_, got, _) = capture(d), capture(t)
    assert len(want.files) > 100
    assert got.files == want.files
    assert got.links == want.links
    assert got.dirs == want.dirs
    assert got.commands == want.commands


def test_snapshot_of_a_tarball_root_replays_the_same(tmp_path: Path) -> None:
    """Recording through a tarball root (`mcpnode snapshot --root X.tar.gz`): the new snapshot
    gives the topology and the audit of the first, recorded command answers included."""
    from mcpnode.snapshot import write_snapshot
    from mcpnode.topology.discover import discover_host
    from mcpnode.topology.jsonify import topology_json

    fixture = REPO / "tests/fixtures/hosts/hgx-h100-8gpu-8nic"
    first = tmp_path / "first.tar.gz"
    with Host(fixture) as host:
        write_snapshot(host, first)
    second = tmp_path / "second.tar.gz"
    with Host(first) as host:
        result = write_snapshot(host, second)
        argv = ("nvidia-ctk", "--version")
        answered = host.command(argv)
    assert result.files > 100
    with Host(first) as a, Host(second) as b:
        assert topology_json(discover_host(b)) == topology_json(discover_host(a))
        assert b.command(argv) == answered


# -- formats ----------------------------------------------------------------------------------
# (tests/host/test_host_tar_same.py compares whole command outputs on every fixture and dump; the
# caps are tests/host/test_host_tar_bounds.py; stale copies of older versions,
# tests/tuning/test_trust.py.)


def test_a_tarball_root_reads_nothing_from_disk_after_opening(tmp_path: Path) -> None:
    """The index holds everything: the archive file can go once the Host is open."""
    tarball = make_tar(tmp_path / "s.tar.gz", [tfile("sys/a", b"1\n"), tsym("sys/b", "a")])
    host = Host(tarball)
    tarball.unlink()
    assert host.read_text("/sys/b") == "1\n"
    assert host.scandir("/sys")[0].name == "a"
    host.close()


def test_long_names_pax_and_gnu_formats(tmp_path: Path) -> None:
    """Names and link targets past ustar's 100 bytes, in each format tar writes them."""
    deep = "snap/sys/devices/" + "/".join(f"pci0000:{i:02x}" for i in range(20)) + "/vendor"
    target = "../" * 3 + "x" * 150
    for fmt in (tarfile.GNU_FORMAT, tarfile.PAX_FORMAT, tarfile.USTAR_FORMAT):
        name = deep if fmt != tarfile.USTAR_FORMAT else deep[:200]
        short = fmt == tarfile.USTAR_FORMAT  # ustar: a link target fits in 100 bytes
        members = [tfile(name, b"0x10de\n"), tsym("snap/sys/l", target[:99] if short else target)]
        members[0][0].mtime = 1_700_000_000
        tarball = make_tar(tmp_path / f"f{fmt}.tar", members, "w", fmt=fmt)
        with Host(tarball) as host:
            assert host.read_text(name.removeprefix("snap")) == "0x10de\n", fmt
            link_target = host.readlink("/sys/l")
            assert link_target is not None and link_target.endswith("x" * 50), fmt
            st_ = host.lstat(name.removeprefix("snap"))
            assert st_ is not None and st_.mtime_ns == 1_700_000_000 * 10**9


@pytest.mark.skipif(shutil.which("tar") is None, reason="GNU tar writes the reference archive")
def test_an_archive_gnu_tar_wrote(tmp_path: Path) -> None:
    """GNU tar's own output (long names, its directory entries, a hard link) reads as the
    directory it was made from."""
    src = tmp_path / "hwloc-dump"
    deep = "sys/devices/" + "/".join(["0000:00:01.0"] * 12)
    put(src, f"{deep}/vendor", "0x8086\n")
    os.symlink("../../" + deep, src / "sys/devlink")
    os.link(src / deep / "vendor", src / "sys/vendor_link")
    out = tmp_path / "d.tar.gz"
    subprocess.run(["tar", "-czf", str(out), "-C", str(tmp_path), "hwloc-dump"], check=True)
    with Host(src) as d, Host(out) as t:
        for p in ("/sys/devlink/vendor", "/sys/vendor_link", f"/{deep}", "/sys"):
            assert all_answers(t, p) == all_answers(d, p), p


# -- the decompressed stream --------------------------------------------------------------------


def _std_read(data: bytes) -> bytes | str:
    """What the standard library's reader for the format gives: the bytes, or the error's
    kind (the readers tarfile and the previous unpack used)."""
    import lzma

    opener: Callable[[io.BytesIO], io.BufferedIOBase]
    if data.startswith(b"\x1f\x8b"):
        opener = lambda f: gzip.GzipFile(fileobj=f)  # noqa: E731
    elif data.startswith(b"BZh"):
        opener = bz2.BZ2File
    else:
        opener = lzma.LZMAFile
    try:
        with opener(io.BytesIO(data)) as f:
            return f.read()
    except (OSError, EOFError, lzma.LZMAError):
        return "error"


def _ours(data: bytes) -> bytes | str:
    import lzma

    from mcpnode.host import decompress

    source = decompress.open_source(io.BytesIO(data))
    try:
        out = []
        for chunk in source.chunks:
            assert 0 < len(chunk) <= decompress.CHUNK
            out.append(chunk)
        return b"".join(out)
    except (OSError, EOFError, zlib.error, lzma.LZMAError):
        return "error"


@functools.cache
def _streams() -> dict[str, bytes]:
    import lzma

    rnd = random.Random(3)
    a = rnd.randbytes(64 << 10) * 20 + bytes(1 << 20)  # 2.3 MiB: several chunks
    b = b"second stream\n" * 1000
    gz, bz, xz = gzip.compress, bz2.compress, lzma.compress
    return {
        "gz": gz(a),
        "gz-two-members": gz(a) + gz(b),
        "gz-nul-padding": gz(b) + bytes(1000) + gz(b) + bytes(7),
        "gz-trailing-garbage": gz(b) + b"garbage",
        "gz-cut": gz(a)[:-100],
        "gz-crc": gz(b)[:-8] + b"\0\0\0\0" + gz(b)[-4:],
        "gz-empty-member": gz(b"") + gz(b),
        "bz2": bz(a),
        "bz2-two-streams": bz(a) + bz(b),
        "bz2-trailing-garbage": bz(b) + b"garbage",
        "bz2-cut": bz(a)[:-50],
        "xz": xz(a),
        "xz-two-streams": xz(b) + xz(b),
        "xz-cut": xz(a)[:-50],
    }


@pytest.mark.parametrize("case", sorted(_streams()))
def test_decompression_reads_as_the_standard_readers(case: str) -> None:
    """Multi-member gzip and its NUL padding, concatenated bzip2/xz streams, trailing data, a
    cut stream, a CRC mismatch: the same bytes or the same refusal as gzip.GzipFile,
    bz2.BZ2File and lzma.LZMAFile."""
    pytest.importorskip("lzma")
    data = _streams()[case]
    assert _ours(data) == _std_read(data)
