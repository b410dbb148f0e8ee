"""Reads, bounded while reading, of regular files only; and the trusted read.

Two read primitives:
- `read_text` raises a typed `HostError` subclass;
- `read_optional` returns None only for ENOENT, ENODEV and EINVAL, the errnos sysfs uses for
  "not here / not supported"; EACCES and everything else still raise.
Every read is bounded *while reading* (`read_limit`: one page for a sysfs attribute, more for
procfs tables and files): past the cap it raises TooLarge without reading further, so a 2 GiB
sparse "attribute" in a fake root costs 64 KiB, not 4 GB of memory. Only regular files are
read: under a recorded root a FIFO, socket or device node is refused *before* it is opened
(opening a device runs its driver's open: a planted `/dev/watchdog` would arm the watchdog).

`read_trusted` is for files that decide what mcpnode does as root (profiles, the agent config,
the journal, the agent state): opened `O_NOFOLLOW`, `fstat`ed, and refused (Untrusted) unless
the file and every directory above it up to `/` is owned by root (or the running euid) and not
group/world-writable (trust.py). Under a tarball root the owners and modes are the members'
own, then the archive file's and those of the directories holding it (tarball.py).

Every file operation goes through `self._io` (host/backend.py), so these methods serve a
directory and a tarball root alike.
"""

from __future__ import annotations

import contextlib
import errno as errno_mod
import os
import stat
from collections.abc import Callable

from mcpnode.errors import (
    HostError,
    NotRegularFile,
    NotSupported,
    PathNotFound,
    ReadError,
    SymlinkLoop,
    TooLarge,
    Untrusted,
)
from mcpnode.host.root import HostRoot
from mcpnode.host.translate import _translate
from mcpnode.host.trust import _mode_problem
from mcpnode.host.types import Entry, FileStat

_READ_CHUNK = 65536
# Read caps, by what is read (read_limit). A sysfs attribute's show() fills at most one page
# (fs/sysfs/file.c: sysfs_kf_seq_show, PAGE_SIZE), and the largest page Linux uses is 64 KiB
# (arm64/ppc64 64K pages). procfs tables grow with the machine: /proc/interrupts is one line per
# IRQ with a column per CPU (several MB on a 400-CPU host), numa_maps one line per mapping.
# Everything else mcpnode reads (etc files, a snapshot's recorded answers) stays far below 16 MiB.
SYSFS_READ_LIMIT = 64 << 10
PROCFS_READ_LIMIT = 64 << 20
FILE_READ_LIMIT = 16 << 20
_ABSENT_ERRNOS = frozenset({errno_mod.ENOENT, errno_mod.ENODEV, errno_mod.EINVAL})


def read_limit(logical: str) -> int:
    """The most bytes a read of `logical` may return (module docstring)."""
    # A sysctl is read through a handler that formats at most a page, like a sysfs attribute.
    if logical.startswith(("/sys/", "/proc/sys/")):
        return SYSFS_READ_LIMIT
    if logical.startswith("/proc/"):
        return PROCFS_READ_LIMIT
    return FILE_READ_LIMIT


def _require_regular(st: os.stat_result, logical: str) -> None:
    """Raise NotRegularFile unless `st` is a regular file: a directory (errno EISDIR, as read(2)
    would say), a FIFO, socket or device node (never read: it has no content of its own)."""
    if stat.S_ISREG(st.st_mode):
        return
    if stat.S_ISDIR(st.st_mode):
        raise NotRegularFile(logical, errno_mod.EISDIR, "is a directory, not a regular file")
    kind = (
        "a FIFO"
        if stat.S_ISFIFO(st.st_mode)
        else "a socket"
        if stat.S_ISSOCK(st.st_mode)
        else "a device node"
        if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode)
        else "not a regular file"
    )
    raise NotRegularFile(logical, None, f"is {kind}, not a regular file")


def _read_capped(read: Callable[[int, int], bytes], fd: int, cap: int, logical: str) -> bytes:
    """Read `fd` to EOF, refusing more than `cap` bytes while reading (never read to EOF first).

    A short read is EOF for sysfs attributes (one page, returned whole), for procfs seq_files
    (seq_read fills the buffer until EOF) and for regular files, so the common case is one
    read() instead of read() + an empty read()."""
    want = min(_READ_CHUNK, cap + 1)
    try:
        data = read(fd, want)
        if len(data) == want:
            chunks = [data]
            total = len(data)
            while total <= cap:
                chunk = read(fd, min(_READ_CHUNK, cap + 1 - total))
                if not chunk:
                    break
                chunks.append(chunk)
                total += len(chunk)
            data = b"".join(chunks)
    except OSError as err:
        raise _translate(err, logical) from err
    if len(data) > cap:
        raise TooLarge(logical, errno_mod.EFBIG, f"larger than {cap} bytes (refused while reading)")
    return data


class HostReads(HostRoot):
    """Reads of the machine behind the root."""

    def read_bytes(self, logical: str, limit: int | None = None) -> bytes:
        """The whole content of a regular file, at most `limit` bytes (default: read_limit).

        Raises TooLarge past the limit (having read limit + 1 bytes, no more), NotRegularFile for
        a FIFO, socket, device or directory, and the other HostError subclasses on failure."""
        cap = read_limit(logical) if limit is None else limit
        fd, fs = self._open_regular(logical)
        io = self._io
        try:
            data = _read_capped(io.read, fd, cap, logical)
        finally:
            io.close(fd)
        if self._recording is not None:
            self._recording.files[fs[len(self._prefix) :]] = data
        return data

    def _open_regular(self, logical: str, *, follow_last: bool = True) -> tuple[int, str]:
        """Open a regular file for reading; (fd, filesystem path). Under a recorded root the
        entry is lstat()ed first so that a device node or FIFO is never opened at all."""
        # O_NONBLOCK: a FIFO on the live root must not hang a read (it is refused after fstat);
        # regular, sysfs and procfs files ignore the flag. O_NOCTTY: a tty never becomes ours.
        flags = os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY
        io = self._io
        try:
            fs = self._real_fs(logical)
            expect: os.stat_result | None = None
            if not self._native:
                flags |= os.O_NOFOLLOW
                expect = io.lstat(fs)
                if stat.S_ISLNK(expect.st_mode):
                    if not follow_last:
                        raise SymlinkLoop(logical, errno_mod.ELOOP, "is a symbolic link")
                    # The last component is a symlink: resolve it inside the root, then open.
                    fs = self._prefix + self._resolve(logical, follow_last=True)
                    expect = io.lstat(fs)
                _require_regular(expect, logical)
            elif not follow_last:
                flags |= os.O_NOFOLLOW
            fd = io.open(fs, flags)
        except HostError:
            raise
        except OSError as err:
            if err.errno == errno_mod.ELOOP and not follow_last:
                raise SymlinkLoop(logical, err.errno, "is a symbolic link") from err
            raise _translate(err, logical) from err
        try:
            st = io.fstat(fd)
            _require_regular(st, logical)
            if expect is not None and (st.st_ino, st.st_dev) != (expect.st_ino, expect.st_dev):
                raise ReadError(logical, None, "replaced while it was being opened")
        except BaseException:
            io.close(fd)
            raise
        return fd, fs

    def read_trusted(self, logical: str, limit: int) -> bytes:
        """A file that decides what mcpnode does as root (profile, config, journal, state),
        at most `limit` bytes: opened O_NOFOLLOW (the file itself may not be a symlink),
        fstat()ed, and refused unless it is a regular file owned by root (or this euid) that
        nobody else can write, in directories nobody else can write, up to `/`.

        Raises Untrusted (naming the file or directory and why), TooLarge, NotRegularFile,
        PathNotFound, AccessDenied, SymlinkLoop and the other HostError subclasses."""
        fd, fs = self._open_regular(logical, follow_last=False)
        io = self._io
        try:
            problem = _mode_problem(io.fstat(fd), "file", fs) or io.untrusted_dirs(
                os.path.dirname(fs) or "/"
            )
            if problem is not None:
                raise Untrusted(logical, None, f"refusing to trust it: {problem}")
            data = _read_capped(io.read, fd, limit, logical)
        finally:
            io.close(fd)
        if self._recording is not None:
            self._recording.files[fs[len(self._prefix) :]] = data
        return data

    def check_trusted_dir(self, logical: str) -> None:
        """Raise Untrusted unless directory `logical` and every directory above it up to `/` is
        owned by root (or this euid) and not group/world-writable (sticky excepted). For
        directories whose *listing* decides what is loaded (a profiles directory: a file planted
        there shadows a shipped profile). An absent directory passes (nothing to load)."""
        try:
            real = self.realpath(logical)
        except PathNotFound:
            return
        problem = self._io.untrusted_dirs(self.fs_path(real))
        if problem is not None:
            raise Untrusted(logical, None, f"refusing to trust it: {problem}")

    def read_text(self, logical: str, limit: int | None = None) -> str:
        """File content decoded as UTF-8 (undecodable bytes replaced, so garbage stays visible
        to the parser, which then rejects it). Raises a HostError subclass."""
        return self.read_bytes(logical, limit).decode("utf-8", errors="replace")

    def read_optional(self, logical: str, limit: int | None = None) -> str | None:
        """Like read_text, but None for ENOENT/ENODEV/EINVAL ("not here / not supported").

        EACCES, ELOOP, EIO, TooLarge and the rest still raise: they are problems, not absence.
        """
        try:
            return self.read_text(logical, limit)
        except (PathNotFound, NotSupported) as err:
            if err.errno in _ABSENT_ERRNOS:
                return None
            raise

    def readlink(self, logical: str) -> str | None:
        """The target of a symlink as stored, or None when `logical` is not a symlink or absent."""
        try:
            fs = self._real_fs(logical)
            target = self._io.readlink(fs)
            if self._recording is not None:
                self._recording.links[fs[len(self._prefix) :]] = target
            return target
        except PathNotFound:
            # Only absence is None: EACCES or a loop on the way to the link still raise.
            return None
        except OSError as err:
            if err.errno in (errno_mod.ENOENT, errno_mod.EINVAL, errno_mod.ENOTDIR):
                return None
            raise _translate(err, logical) from err

    def link_name(self, logical: str) -> str | None:
        """Basename of a symlink's target (`driver` -> `nvidia`), or None if not a link."""
        target = self.readlink(logical)
        if target is None:
            return None
        name = target.rstrip("/").rsplit("/", 1)[-1]
        return name or None

    def exists(self, logical: str) -> bool:
        try:
            self._io.lstat(self._real_fs(logical))
        except (OSError, HostError):
            return False
        return True

    def is_dir(self, logical: str) -> bool:
        """True for a directory, following symlinks inside the root."""
        try:
            real = self.realpath(logical)
        except HostError:
            return False
        return self._io.isdir(self.fs_path(real))

    def scandir(self, logical: str) -> list[Entry]:
        """Entries of a directory, sorted by name, symlinks reported and never followed.

        The directory itself is resolved inside the root first. Within a oneshot() block the
        real subdirectories listed are remembered as resolved, so later reads below them cost
        one open each.
        """
        real = self.realpath(logical)
        fs = self.fs_path(real)
        try:
            out = self._io.scandir(fs)
        except OSError as err:
            raise _translate(err, logical) from err
        out.sort()  # names are unique, so tuples order by name
        if self._recording is not None:
            self._record_listing(real, out)
        cache = self._cache
        if cache is not None and not self._native:
            base = real.rstrip("/")
            for e in out:
                if e.is_dir:
                    p = base + "/" + e.name
                    cache[p] = p
        return out

    def _record_listing(self, real: str, entries: list[Entry]) -> None:
        """A listing is replayed from the snapshot's directories: keep every subdirectory and
        symlink it showed (files matter only once read, and are recorded then)."""
        rec = self._recording
        assert rec is not None
        base = real.rstrip("/")
        rec.dirs.add(real)
        for e in entries:
            if e.is_dir:
                rec.dirs.add(f"{base}/{e.name}")
            elif e.is_symlink:
                fs = f"{self._prefix}{base}/{e.name}"
                with contextlib.suppress(OSError):
                    rec.links[f"{base}/{e.name}"] = self._io.readlink(fs)

    def listdir(self, logical: str) -> list[str]:
        """Names in a directory, sorted. Raises a HostError subclass.

        Names only (os.listdir), so it costs no Python object per entry: a PCI function's
        directory has ~40 entries of which discovery needs a handful. While recording, the
        listing goes through scandir() so the snapshot learns which entries are directories.
        """
        if self._recording is not None:
            return [e.name for e in self.scandir(logical)]
        real = self.realpath(logical)
        try:
            names = self._io.listdir(self.fs_path(real))
        except OSError as err:
            raise _translate(err, logical) from err
        names.sort()
        return names

    def is_real_dir(self, logical: str) -> bool:
        """True when the last component is a directory itself, not a symlink to one (lstat).

        Inside a oneshot() block the directory is remembered as resolved, like scandir() does.
        """
        try:
            fs = self._real_fs(logical)
            st = self._io.lstat(fs)
        except (OSError, HostError):
            return False
        if not stat.S_ISDIR(st.st_mode):
            return False
        real = fs[len(self._prefix) :] or "/"
        if self._cache is not None and not self._native:
            self._cache[real] = real
        if self._recording is not None:
            self._recording.dirs.add(real)
        return True

    def listdir_optional(self, logical: str) -> list[str] | None:
        """Names in a directory, or None when it does not exist."""
        try:
            return self.listdir(logical)
        except PathNotFound:
            return None

    def lstat(self, logical: str) -> FileStat | None:
        """Type, mode, owner, size and identity of `logical` itself (a symlink is not
        followed), None when it does not exist. Raises a HostError subclass otherwise."""
        try:
            st = self._io.lstat(self._real_fs(logical))
        except PathNotFound:
            return None
        except OSError as err:
            if err.errno in (errno_mod.ENOENT, errno_mod.ENOTDIR):
                return None
            raise _translate(err, logical) from err
        return FileStat(
            st.st_mode, st.st_uid, st.st_gid, st.st_size, st.st_mtime_ns, st.st_ino, st.st_dev
        )
