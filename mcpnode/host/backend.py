"""The file operations Host's resolution and reads are written against, and the one that does
them with the operating system.

root.py and read.py never call `os.lstat`, `os.open`, `os.read`... directly: they call the same
operations on `Host._io`, an object with this small interface (`Backend`). For the live machine
and for a directory root it is `OS`, whose methods *are* the `os` functions (class attributes,
not wrappers), so the live path pays one attribute lookup and no extra call. A tarball root
gets tarball.py's `ArchiveBackend`, which answers the same calls from the archive's in-memory
index, with the same errnos the kernel gives (ENOENT, ENOTDIR, EINVAL from readlink, ELOOP for
O_NOFOLLOW on a link), so the read code, its checks and its error translation are one.

The contract, as the `os` functions it mirrors (paths are filesystem paths, `Host.fs_path`):
    lstat(path)             stat of the entry itself (never follows the last component)
    readlink(path)          a symlink's target as stored; EINVAL when not a link
    open(path, flags)       an fd for fstat/read/pread/close (never creates anything)
    fstat(fd), read(fd, n), pread(fd, n, offset), close(fd)
    listdir(path)           names, unsorted
    scandir(path)           Entry list (is_dir: a real directory; symlinks never followed),
                            unsorted; an entry that vanishes while listed is skipped
    isdir(path)             a directory (the OS follows symlinks: callers pass resolved paths)
    untrusted_dirs(dir)     why `dir` or a directory above it may not be trusted, or None
                            (trust.py's rule)
"""

from __future__ import annotations

import os

from mcpnode.codec.typenames import Protocol
from mcpnode.host.trust import _untrusted_dirs
from mcpnode.host.types import Entry


class Backend(Protocol):
    """What Host's resolution and reads need from the files behind a root (module docstring)."""

    def lstat(self, path: str, /) -> os.stat_result: ...
    def readlink(self, path: str, /) -> str: ...
    def open(self, path: str, flags: int, /) -> int: ...
    def fstat(self, fd: int, /) -> os.stat_result: ...
    def read(self, fd: int, n: int, /) -> bytes: ...
    def pread(self, fd: int, n: int, offset: int, /) -> bytes: ...
    def close(self, fd: int, /) -> None: ...
    def listdir(self, path: str, /) -> list[str]: ...
    def scandir(self, path: str, /) -> list[Entry]: ...
    def isdir(self, path: str, /) -> bool: ...
    def untrusted_dirs(self, directory: str, /) -> str | None: ...


def _os_scandir(path: str) -> list[Entry]:
    """Entries of a directory through getdents: d_type answers both tests without a stat on
    sysfs, procfs, ext4 and tmpfs. Where d_type is unknown a stat is needed, and an entry may
    vanish between readdir and that stat (a device going away): skip just that entry."""
    try:
        with os.scandir(path) as it:
            return [Entry(de.name, de.is_dir(follow_symlinks=False), de.is_symlink()) for de in it]
    except FileNotFoundError:
        out = []
        with os.scandir(path) as it:
            for de in it:
                try:
                    out.append(Entry(de.name, de.is_dir(follow_symlinks=False), de.is_symlink()))
                except FileNotFoundError:
                    continue
        return out


class _OsBackend:
    """The operating system's files: each method is the `os` function itself."""

    lstat = staticmethod(os.lstat)
    readlink = staticmethod(os.readlink)
    open = staticmethod(os.open)
    fstat = staticmethod(os.fstat)
    read = staticmethod(os.read)
    pread = staticmethod(os.pread)
    close = staticmethod(os.close)
    listdir = staticmethod(os.listdir)
    scandir = staticmethod(_os_scandir)
    isdir = staticmethod(os.path.isdir)
    untrusted_dirs = staticmethod(_untrusted_dirs)


OS: Backend = _OsBackend()
