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

import errno as errno_mod
import os
import stat

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
from mcpnode.host.backend import OS
from mcpnode.host.root import HostRoot
from mcpnode.host.translate import _translate
from mcpnode.host.trust import _mode_problem
from mcpnode.host.types import Entry, FileStat

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (codec/typenames.py)
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from mcpnode.host.tarball import ArchiveBackend

_READ_CHUNK = 65536
# The first read of a file asks for one x86 page and a byte: a sysfs attribute or a sysctl is at
# most a page (fs/sysfs/file.c), most files mcpnode reads are smaller, and asking read() for
# 64 KiB makes Python allocate 64 KiB and shrink it for every one of an SR-IOV host's tens of
# thousands of attributes. A read that fills it goes on in _READ_CHUNK steps.
_FIRST_READ = 4096 + 1
# Read caps, by what is read (read_limit). A sysfs attribute's show() fills at most one page
# (fs/sysfs/file.c: sysfs_kf_seq_show, PAGE_SIZE), and the largest page Linux uses is 64 KiB
# (arm64/ppc64 64K pages). procfs tables grow with the machine: /proc/interrupts is one line per
# IRQ with a column per CPU (several MB on a 400-CPU host), numa_maps one line per mapping.
# Everything else mcpnode reads (etc files, a snapshot's recorded answers) stays far below 16 MiB.
SYSFS_READ_LIMIT = 64 << 10
PROCFS_READ_LIMIT = 64 << 20
FILE_READ_LIMIT = 16 << 20
_ABSENT_ERRNOS = frozenset({errno_mod.ENOENT, errno_mod.ENODEV, errno_mod.EINVAL})


class _Uncommon(Exception):
    """A file read_files() leaves to the per-file primitive (a symlink, a special file, one of
    more than one read)."""


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
    _require_regular_mode(st.st_mode, logical)


def _require_regular_mode(mode: int, logical: str) -> None:
    """_require_regular() of a file's mode (or its S_IFMT bits alone)."""
    if stat.S_ISREG(mode):
        return
    if stat.S_ISDIR(mode):
        raise NotRegularFile(logical, errno_mod.EISDIR, "is a directory, not a regular file")
    kind = (
        "a FIFO"
        if stat.S_ISFIFO(mode)
        else "a socket"
        if stat.S_ISSOCK(mode)
        else "a device node"
        if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
        else "not a regular file"
    )
    raise NotRegularFile(logical, None, f"is {kind}, not a regular file")


def _read_capped(read: Callable[[int, int], bytes], fd: int, cap: int, logical: str) -> bytes:
    """Read `fd` to EOF, refusing more than `cap` bytes while reading (never read to EOF first).

    A short read is EOF for sysfs attributes (one page, returned whole), for procfs seq_files
    (seq_read fills the buffer until EOF) and for regular files, so the common case is one
    read() instead of read() + an empty read()."""
    want = min(_FIRST_READ, cap + 1)
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
        archive = self._archive
        if archive is not None and self._recording is None:
            return self._read_member(archive, logical, cap)
        return self._read_open(logical, *self._open_regular(logical), cap)

    def _read_member(self, archive: ArchiveBackend, logical: str, cap: int) -> bytes:
        """read_bytes() under a tarball root: the index answers what the lstat() and the read
        would, in one lookup, with the same checks and errors (a symlink resolved inside the
        root, anything but a regular file refused, the cap). The open, fstat() and identity
        check have nothing to guard there: no member is a real device, and the index cannot
        change between two calls. Emulating them cost a tarball root's discovery about as much
        again as reading the unpacked directory (two stat_result built per file)."""
        try:
            fs = self._real_fs(logical)
            fmt, data = archive.content(fs)
            if stat.S_ISLNK(fmt):
                fs = self._prefix + self._resolve(logical, follow_last=True)
                fmt, data = archive.content(fs)
        except HostError:
            raise
        except OSError as err:
            raise _translate(err, logical) from err
        _require_regular_mode(fmt, logical)
        assert data is not None  # a regular member always holds its content
        if len(data) > cap:
            raise TooLarge(
                logical, errno_mod.EFBIG, f"larger than {cap} bytes (refused while reading)"
            )
        return data

    def _read_open(
        self, logical: str, fd: int, fs: str, limit: int, check: Callable[[], None] | None = None
    ) -> bytes:
        """Read an opened regular file (at most `limit` bytes, after `check`, which raises to
        refuse it), close it whatever happens, and keep what was read in a recording."""
        io = self._io
        try:
            if check is not None:
                check()
            data = _read_capped(io.read, fd, limit, logical)
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

        def trusted() -> None:
            problem = _mode_problem(io.fstat(fd), "file", fs) or io.untrusted_dirs(
                os.path.dirname(fs) or "/"
            )
            if problem is not None:
                raise Untrusted(logical, None, f"refusing to trust it: {problem}")

        return self._read_open(logical, fd, fs, limit, trusted)

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
                try:
                    rec.links[f"{base}/{e.name}"] = self._io.readlink(fs)
                except OSError:  # gone since listed: nothing to record (contextlib: root.py)
                    continue

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

    # -----------------------------------------------------------------------------------------
    # One directory's small attributes in one call (discovery's PCI walk).
    #
    # An SR-IOV host has thousands of PCI functions of ~15 attributes each. read_optional() per
    # file pays, for every file, a path resolution, an lstat() (under a recorded root a device
    # node or FIFO must be refused before it is opened), an fstat() and four layers of calls:
    # 90 system calls per virtual function, measured with `strace -c` on a generated SR-IOV
    # root, where hwloc's lstopo makes 31. Here the directory is resolved once and listed once.
    # The listing's d_type is what the lstat() would say (the entry itself, never followed), so
    # only entries listed as regular files are opened here, with O_NOFOLLOW: a device node or a
    # FIFO is still never opened. There is no fstat() after the open: it could only refuse to
    # *read* a node swapped in between the listing and the open (the same race the lstat() then
    # open() of _open_regular leaves), and every read is capped all the same.
    # Everything else takes the per-file primitives, so its checks and errors are exactly
    # theirs: a wanted name that is a symlink (hand-made roots have them), a directory, a FIFO
    # or a device node; every read while recording (a snapshot then holds what scandir() and
    # read_bytes() record); and a root whose directories are not directories on disk.
    # -----------------------------------------------------------------------------------------

    def read_directory(
        self,
        directory: str,
        names: frozenset[str],
        targets: frozenset[str] = frozenset(),
        *,
        limit: int = SYSFS_READ_LIMIT,
    ) -> tuple[dict[str, str | HostError], list[str], dict[str, str | HostError | None]]:
        """List `directory`, read those of `names` it holds (each at most `limit` bytes), and
        the targets of those of `targets` that are symlinks.

        Returns (contents, subdirectories, symlinks). `contents` maps each of `names` present
        to its text (decoded as read_text() decodes) or to the HostError reading it raised, so
        one bad file never costs the others; a name absent, or absent the way read_optional()
        means it (ENOENT, ENODEV, EINVAL), is left out. `subdirectories` are the entries that
        are directories themselves (not symlinks to one), by name. `symlinks` maps every
        symlink listed to its target as stored (readlink()) when its name is in `targets` (or
        to the HostError reading it raised), else to None. Within a oneshot() block the
        subdirectories listed are remembered as resolved, as scandir() remembers them, so that
        a walk reading them next resolves each with one lookup. Raises a HostError subclass only
        when `directory` itself cannot be listed.
        """
        if self._recording is not None or self._io is not OS:
            # Recording keeps each read's bytes; a tarball root's index answers per file as
            # fast as a batch would (no system calls to save).
            return self._read_directory_each(directory, names, targets, limit)
        cache = self._cache
        if self.is_live:
            real = fs = directory
        else:
            # A directory listed before in this oneshot() pass is one lookup: the PCI walk reads
            # each function and netdev directory just after its parent listed it.
            hit = cache.get(directory) if cache is not None else None
            real = hit if hit is not None else self.realpath(directory)
            fs = self._prefix + real
        contents: dict[str, str | HostError] = {}
        dirs: list[str] = []
        links: dict[str, str | HostError | None] = {}
        regular: list[str] = []
        other: list[str] = []
        try:
            # By path, not by a directory descriptor: os.scandir(fd) dup()s it and rewinds it
            # (four more system calls per directory than the listing itself).
            with os.scandir(fs) as it:
                for de in it:
                    # is_symlink() first: for anything else is_dir()/is_file() need not be told
                    # not to follow (keyword arguments cost more than the calls).
                    name = de.name
                    try:
                        if de.is_symlink():
                            links[name] = None
                            if name in names:
                                other.append(name)
                        elif de.is_dir():
                            dirs.append(name)
                            if name in names:
                                other.append(name)
                        elif name in names:
                            (regular if de.is_file() else other).append(name)
                    except FileNotFoundError:
                        continue  # d_type unknown and the entry went away before its lstat
        except OSError as err:
            if err.errno in (errno_mod.ENOENT, errno_mod.ENOTDIR):
                # Gone, or not a directory: the per-file primitives answer, or raise, as
                # they would alone.
                return self._read_directory_each(directory, names, targets, limit)
            raise _translate(err, directory) from err
        base = directory.rstrip("/") + "/"
        fsbase = fs.rstrip("/") + "/"
        # O_NOFOLLOW: the entry was listed as a regular file; a symlink there now was swapped
        # in since, and is refused (ELOOP) rather than followed.
        flags = os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY | os.O_NOFOLLOW
        want = min(_FIRST_READ, limit + 1)
        for name in regular:
            try:
                fd = os.open(fsbase + name, flags)
                try:
                    data = os.read(fd, want)
                finally:
                    os.close(fd)
            except OSError as err:
                failed = _translate(err, base + name)
                if not self._is_absent(failed):
                    contents[name] = failed
                continue
            if len(data) == want:  # more than one chunk, or over the cap: the slow way
                self._read_one_into(contents, base + name, name, limit)
                continue
            contents[name] = data.decode("utf-8", "replace")
        for name in targets:
            if name in links:
                try:
                    links[name] = os.readlink(fsbase + name)
                except OSError as err:
                    links[name] = _translate(err, base + name)
        if cache is not None and not self.is_live and dirs:
            top = real.rstrip("/") + "/"
            for name in dirs:
                p = top + name
                cache[p] = p
        for name in other:
            self._read_one_into(contents, base + name, name, limit)
        dirs.sort()
        return contents, dirs, links

    def read_files(
        self, logicals: Iterable[str], *, limit: int = SYSFS_READ_LIMIT
    ) -> dict[str, str | HostError]:
        """Read each of `logicals` as read_optional() would, at most `limit` bytes each; the
        answers by path: the text, or the HostError reading it raised (one bad file never
        costs the others). A path absent the way read_optional() means it is left out.

        For the many small attributes a tuning pass reads (every CPU's cpufreq policy, EPB and
        idle-state files: over 800 on a 192-CPU host) the per-file protocol is the same as
        read_bytes()' (the entry lstat()ed before it is opened O_NOFOLLOW under a recorded
        root, so a device node or FIFO is never opened; fstat()ed after, and refused unless it
        is the regular file that was lstat()ed), without its layers of calls per file. Anything
        off the common path (a symlink, an error, a file of more than one read) is handed to
        the per-file primitive, whose checks and errors are then exactly its own."""
        out: dict[str, str | HostError] = {}
        if self._recording is not None or self._io is not OS:
            # Recording keeps each read's bytes; a tarball's index has no system calls to save.
            for logical in logicals:
                self._read_one_into(out, logical, logical, limit)
            return out
        native = self._native
        flags = os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY
        if not native:
            flags |= os.O_NOFOLLOW
        want = min(_FIRST_READ, limit + 1)
        real_fs, lstat, fstat, is_reg = self._real_fs, os.lstat, os.fstat, stat.S_ISREG
        open_, read, close = os.open, os.read, os.close
        for logical in logicals:
            try:
                fs = real_fs(logical)
                if not native:
                    before = lstat(fs)
                    if not is_reg(before.st_mode):
                        raise _Uncommon
                fd = open_(fs, flags)
                try:
                    after = fstat(fd)
                    if not is_reg(after.st_mode) or (
                        not native
                        and (after.st_ino, after.st_dev) != (before.st_ino, before.st_dev)
                    ):
                        raise _Uncommon
                    data = read(fd, want)
                finally:
                    close(fd)
                if len(data) == want:
                    raise _Uncommon
            except (_Uncommon, OSError, HostError):
                self._read_one_into(out, logical, logical, limit)
                continue
            out[logical] = data.decode("utf-8", "replace")
        return out

    def _read_directory_each(
        self, directory: str, names: frozenset[str], targets: frozenset[str], limit: int
    ) -> tuple[dict[str, str | HostError], list[str], dict[str, str | HostError | None]]:
        """read_directory() through scandir(), read_bytes() and readlink(), one at a time."""
        contents: dict[str, str | HostError] = {}
        dirs: list[str] = []
        links: dict[str, str | HostError | None] = {}
        base = directory.rstrip("/") + "/"
        for e in self.scandir(directory):
            if e.is_dir:
                dirs.append(e.name)
            elif e.is_symlink:
                links[e.name] = None
                if e.name in targets:
                    try:
                        links[e.name] = self.readlink(base + e.name)
                    except HostError as err:
                        links[e.name] = err
            if e.name in names:
                self._read_one_into(contents, base + e.name, e.name, limit)
        return contents, dirs, links

    @staticmethod
    def _is_absent(err: HostError) -> bool:
        """What read_optional() answers None for: not here / not supported."""
        return isinstance(err, PathNotFound | NotSupported) and err.errno in _ABSENT_ERRNOS

    def _read_one_into(
        self, contents: dict[str, str | HostError], logical: str, name: str, limit: int
    ) -> None:
        try:
            contents[name] = self.read_bytes(logical, limit).decode("utf-8", errors="replace")
        except HostError as err:
            if not self._is_absent(err):
                contents[name] = err
