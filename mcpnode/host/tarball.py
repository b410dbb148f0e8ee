"""Tarball roots: a snapshot or sysfs dump as `.tar.gz`/`.tar.bz2`, unpacked once into a
private temporary directory without letting any member escape it.

Part of the Host boundary (it writes only into Host's private temporary directory), imported
only for tarball roots, so reading the live machine does not import tarfile and the
compressors. A copy left by a killed process (`mcpnode-root-PID-*`, PID no longer running) is
removed by the next Host opened on a tarball.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import stat
import tarfile
import tempfile
import zlib
from pathlib import Path
from typing import IO

from mcpnode.errors import RootError
from mcpnode.host.trust import _pid_running

# Markers of a usable root: what a snapshot or a sysfs dump holds at its top.
_ROOT_MARKERS = ("sys", "proc", "mcpnode-snapshot.json")
_READ_CHUNK = 65536

# Bounds on what an archive may unpack to. A snapshot of the largest hosts seen (hwloc's dumps
# of 4-socket machines: ~40k entries, tens of MB) is far below each; a 40 KB .tar.gz holding a
# 1 TiB sparse member, or millions of empty entries, is not.
MAX_MEMBERS = 500_000
MAX_TOTAL_BYTES = 2 << 30
# No file mcpnode reads is larger than its biggest read cap (procfs tables, host/read.py).
MAX_MEMBER_BYTES = 64 << 20
# PATH_MAX is 4096 bytes; the deepest sysfs paths of real dumps are ~25 components.
MAX_NAME_BYTES = 4096
MAX_DEPTH = 128

# What a damaged archive raises while it is read: tarfile's own errors, OSError (gzip's
# BadGzipFile on a CRC mismatch, bz2's "Invalid data stream"), EOFError (a stream cut short) and
# zlib.error, which tarfile lets through when it seeks over bad deflate data between headers.
_ARCHIVE_ERRORS: tuple[type[Exception], ...] = (tarfile.TarError, OSError, EOFError, zlib.error)
with contextlib.suppress(ImportError):  # a Python built without liblzma cannot open .tar.xz
    import lzma

    _ARCHIVE_ERRORS += (lzma.LZMAError,)


def is_tarball(path: Path) -> bool:
    name = path.name
    return name.endswith((".tar.gz", ".tgz", ".tar.bz2", ".tbz2", ".tar.xz", ".tar"))


def _member_ok(name: str) -> str | None:
    """Why a tar member name is refused, or None when it is safe to place under the root."""
    if name.startswith("/"):
        return "absolute member name"
    parts = name.split("/")
    if any(p == ".." for p in parts):
        return "member name contains '..'"
    if len(name.encode("utf-8", "surrogateescape")) > MAX_NAME_BYTES:
        return f"member name longer than {MAX_NAME_BYTES} bytes"
    if len(parts) > MAX_DEPTH:
        return f"member path deeper than {MAX_DEPTH} directories"
    return None


def _size_problem(m: tarfile.TarInfo) -> str | None:
    """Why a member's content is refused, or None."""
    if m.issparse():
        # Sparse members (GNU/PAX sparse maps) expand to their full size when written; nothing
        # mcpnode records is sparse, so they are refused rather than filled in.
        return "sparse member skipped"
    if m.isfile() and m.size > MAX_MEMBER_BYTES:
        return f"member larger than {MAX_MEMBER_BYTES} bytes skipped"
    return None


def safe_extract(tarball: Path, dest: Path) -> list[tuple[str, str]]:
    """Unpack a snapshot tarball without letting any member land outside `dest`.

    Refused members are returned as notes rather than aborting: a snapshot with one bad entry
    is still worth reading. Symlinks are recreated as they are (even absolute or `..` ones):
    mcpnode never follows them natively, and Host resolves them inside the root. A member whose
    parent directory would be reached through a symlink is refused, since writing it would
    follow that link. A corrupt or truncated archive raises RootError.
    """
    notes: list[tuple[str, str]] = []
    dest_real = os.path.realpath(dest)
    try:
        tf = tarfile.open(tarball, "r:*")  # noqa: SIM115 - closed by the `with tf` below
    except _ARCHIVE_ERRORS as err:
        raise RootError(f"{tarball}: not a readable tar archive ({err})") from err
    with tf:
        members = _members(tf, tarball)
        total = 0
        for m in members:
            name = m.name
            while name.startswith("./"):
                name = name[2:]
            if name in ("", "."):
                continue
            why = _member_ok(name) or _size_problem(m)
            if why is not None:
                notes.append((m.name, why))
                continue
            if m.isfile():
                total += m.size
                if total > MAX_TOTAL_BYTES:
                    raise RootError(
                        f"{tarball}: unpacks to more than {MAX_TOTAL_BYTES} bytes; refused"
                    )
            target = os.path.join(dest_real, name)
            parent = os.path.dirname(target)
            # Check before creating anything: makedirs below a symlinked component would create
            # directories wherever the link points.
            if os.path.realpath(parent) != os.path.normpath(parent):
                notes.append((m.name, "parent directory is reached through a symlink"))
                continue
            try:
                os.makedirs(parent, mode=0o755, exist_ok=True)
            except OSError as err:
                notes.append((m.name, f"cannot create parent directory: {err.strerror}"))
                continue
            try:
                _extract_one(tf, m, target, dest_real, notes)
            except _ARCHIVE_ERRORS as err:
                notes.append((m.name, f"not extracted: {err}"))
        _check_archive_end(tf, tarball)
    return notes


def _members(tf: tarfile.TarFile, tarball: Path) -> list[tarfile.TarInfo]:
    """The member list, refusing an archive with more than MAX_MEMBERS entries while reading
    its headers (getmembers() would read them all first)."""
    members: list[tarfile.TarInfo] = []
    try:
        while True:
            m = tf.next()
            if m is None:
                return members
            members.append(m)
            if len(members) > MAX_MEMBERS:
                raise RootError(f"{tarball}: more than {MAX_MEMBERS} members; refused")
    except _ARCHIVE_ERRORS as err:
        raise RootError(f"{tarball}: corrupt tar archive ({err})") from err


def _check_archive_end(tf: tarfile.TarFile, tarball: Path) -> None:
    """Raise RootError unless the archive really ends where tarfile stopped reading headers.

    tarfile ends the member list quietly at the first unreadable header after the first one,
    and never reads a compressed stream to its end, so never checks gzip's CRC: a damaged
    snapshot would unpack as a silently smaller or altered tree. What follows the last header
    must be the end-of-archive zero blocks, and reading them to EOF checks the compression
    trailer. Called once the members are unpacked, so this seek goes forward.
    """
    fileobj = tf.fileobj
    assert fileobj is not None  # open for reading
    zeros = 0
    try:
        fileobj.seek(tf.offset)
        while chunk := fileobj.read(_READ_CHUNK):
            if chunk.count(0) != len(chunk):
                raise RootError(f"{tarball}: corrupt tar archive (bad header at byte {tf.offset})")
            zeros += len(chunk)
    except _ARCHIVE_ERRORS as err:
        raise RootError(f"{tarball}: corrupt or truncated tar archive ({err})") from err
    if zeros < tarfile.BLOCKSIZE:
        raise RootError(f"{tarball}: truncated tar archive (no end-of-archive marker)")


def _write_new(target: str, src: IO[bytes]) -> None:
    """Create `target` afresh from `src`. Whatever was there is unlinked first and the open
    refuses links, so a symlink planted by an earlier member is replaced, never written through.
    """
    with contextlib.suppress(FileNotFoundError):
        os.unlink(target)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    with os.fdopen(os.open(target, flags, 0o644), "wb") as out:
        shutil.copyfileobj(src, out)


def _extract_one(
    tf: tarfile.TarFile,
    m: tarfile.TarInfo,
    target: str,
    dest_real: str,
    notes: list[tuple[str, str]],
) -> None:
    if m.isdir():
        if not os.path.isdir(target) or os.path.islink(target):
            os.mkdir(target, 0o755)
        # Dumps store directories as 0700 owned by their maker's uid: make them readable by us
        # without keeping any setuid/sticky bits.
        os.chmod(target, 0o755)  # noqa: S103 - a directory every reader must traverse
    elif m.issym():
        with contextlib.suppress(FileNotFoundError):
            os.unlink(target)
        os.symlink(m.linkname, target)
    elif m.islnk():
        src = os.path.join(dest_real, m.linkname)
        # The source must be a regular file unpacked earlier, reached through no symlink:
        # `realpath` differs from the plain path when any component is a link (`evil -> /etc`,
        # then a hard link to `evil/passwd`, would copy the host's file into the root).
        if (
            _member_ok(m.linkname) is not None
            or not os.path.isfile(src)
            or os.path.realpath(src) != os.path.normpath(src)
        ):
            notes.append((m.name, "hard link to a file outside the archive"))
            return
        # Not shutil.copyfile: it opens the target with open(), which writes through a symlink
        # left there by an earlier member (`x -> /etc/shadow`, then a hard link named `x`).
        with open(src, "rb") as data:
            _write_new(target, data)
    elif m.isfile():
        extracted = tf.extractfile(m)
        if extracted is None:
            notes.append((m.name, "unreadable member"))
            return
        with extracted:
            _write_new(target, extracted)
    else:
        notes.append((m.name, "device, fifo or other special file skipped"))


def find_top(dest: Path) -> Path:
    """The folder inside an unpacked tarball that holds `sys/`, `proc/` or a snapshot manifest.

    hwloc's dumps unpack to one folder whose name need not match the tarball's.
    """
    here = dest
    for _ in range(4):
        names = os.listdir(here)
        if any(m in names for m in _ROOT_MARKERS):
            return here
        # Never descend a symlink: an archive holding only `snap -> /` would make the live
        # machine the root of what the caller believes is a recorded one.
        dirs = [n for n in names if _is_real_dir(os.path.join(here, n))]
        if len(dirs) != 1:
            break
        here = here / dirs[0]
    raise RootError(
        f"no sys/, proc/ or mcpnode-snapshot.json found in the archive (looked in {here})"
    )


def _is_real_dir(path: str) -> bool:
    """A directory that is not a symlink to one."""
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


# Our unpacked copies in the temporary directory: `mcpnode-root-PID-*`.
_UNPACK_PREFIX = "mcpnode-root-"
_UNPACK_NAME = re.compile(r"mcpnode-root-(?P<pid>[0-9]{1,10})-")


def _remove_stale_unpacks() -> None:
    """Remove tarball copies (`mcpnode-root-PID-*` in the temporary directory) whose process no
    longer runs: a SIGKILL skips the finalizer that would have removed them."""
    base = tempfile.gettempdir()
    try:
        entries = os.listdir(base)
    except OSError:
        return
    for entry in entries:
        m = _UNPACK_NAME.match(entry)
        if m is None or _pid_running(int(m.group("pid"))):
            continue
        path = os.path.join(base, entry)
        try:
            st = os.lstat(path)
        except OSError:
            continue
        # Only our own: a directory (not a link to one) owned by this uid.
        if stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid():
            shutil.rmtree(path, ignore_errors=True)


def make_unpack_dir() -> str:
    """A new private directory for one tarball's copy, named for this process; copies whose
    process is gone are removed first."""
    _remove_stale_unpacks()
    return tempfile.mkdtemp(prefix=f"{_UNPACK_PREFIX}{os.getpid()}-")
