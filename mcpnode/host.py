"""Host: the only code in mcpnode that touches the machine.

Everything above this module names *logical* absolute paths (`/sys/devices/system/node`) and a
`Host` maps them under its root: `/` for the live machine, a directory holding a snapshot or a
sysfs dump, or a `.tar.gz`/`.tar.bz2` of one (unpacked once into a private temporary directory).

Symlinks under a non-`/` root are resolved here, one component at a time, with the root acting as
`/` (an absolute link target or a `..` past the top stays inside the root, as under chroot). The
resolver counts hops instead of recursing, so the symlink cycles found in real dumps
(`device`, `driver`, `subsystem` pointing back up the tree) end in `SymlinkLoop`, never in a hang.

Two read primitives (see STYLE.md, habit 3):
- `read_text` raises a typed `HostError` subclass;
- `read_optional` returns None only for ENOENT, ENODEV and EINVAL, the errnos sysfs uses for
  "not here / not supported"; EACCES and everything else still raise.
"""

from __future__ import annotations

import contextlib
import errno as errno_mod
import os
import shutil
import stat
import tarfile
import tempfile
import weakref
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, NamedTuple

from mcpnode.errors import (
    AccessDenied,
    HostError,
    NotSupported,
    PathNotFound,
    ReadError,
    RootError,
    SymlinkLoop,
)

# Linux's own limit on symlinks followed in one lookup (fs/namei.c MAXSYMLINKS = 40).
_MAX_SYMLINK_HOPS = 40
# sysfs attributes are at most one page; procfs files like mountinfo can be larger, so reads
# loop until EOF in chunks of this size.
_READ_CHUNK = 65536
# Markers of a usable root: what a snapshot or a sysfs dump holds at its top.
_ROOT_MARKERS = ("sys", "proc", "mcpnode-snapshot.json")

_ABSENT_ERRNOS = frozenset({errno_mod.ENOENT, errno_mod.ENODEV, errno_mod.EINVAL})

# What a damaged archive raises while it is read: tarfile's own errors, OSError (gzip's
# BadGzipFile on a CRC mismatch, bz2's "Invalid data stream"), EOFError (a stream cut short) and
# zlib.error, which tarfile lets through when it seeks over bad deflate data between headers.
_ARCHIVE_ERRORS: tuple[type[Exception], ...] = (tarfile.TarError, OSError, EOFError, zlib.error)
with contextlib.suppress(ImportError):  # a Python built without liblzma cannot open .tar.xz
    import lzma

    _ARCHIVE_ERRORS += (lzma.LZMAError,)


@dataclass
class Recording:
    """What a Host was asked for while recording: exactly what a snapshot must hold.

    Paths are logical real paths (symlinks resolved inside the root). `files` keeps the bytes
    as they were read, so a snapshot holds the same content the topology was computed from.
    """

    files: dict[str, bytes]
    links: dict[str, str]  # symlink path -> target as stored
    dirs: set[str]


class Entry(NamedTuple):
    """One directory entry as listed, without following symlinks. A NamedTuple rather than a
    dataclass: discovery lists thousands of these (SR-IOV hosts), and tuples sort by name."""

    name: str
    is_dir: bool  # a real directory (never a symlink to one)
    is_symlink: bool


def _translate(err: OSError, logical: str) -> HostError:
    """The one place an OSError becomes a mcpnode error."""
    code = err.errno
    detail = err.strerror or str(err)
    if code in (errno_mod.ENOENT, errno_mod.ENOTDIR):
        return PathNotFound(logical, code, detail)
    if code in (errno_mod.ENODEV, errno_mod.EINVAL, errno_mod.EOPNOTSUPP, errno_mod.ENXIO):
        return NotSupported(logical, code, detail)
    if code in (errno_mod.EACCES, errno_mod.EPERM):
        return AccessDenied(logical, code, detail)
    if code == errno_mod.ELOOP:
        return SymlinkLoop(logical, code, detail)
    return ReadError(logical, code, detail)


def _split(logical: str) -> list[str]:
    return [p for p in logical.split("/") if p not in ("", ".")]


class Host:
    """A machine, live (`root="/"`) or recorded (a directory or tarball).

    Not thread-safe while a `oneshot()` block is open (the resolution cache is shared).
    """

    def __init__(self, root: str | os.PathLike[str] = "/") -> None:
        given = Path(root)
        self.unpack_notes: list[tuple[str, str]] = []  # (tar member, why it was skipped)
        self._tmpdir: str | None = None
        self._cache: dict[str, str] | None = None
        self._oneshot_depth = 0
        self._recording: Recording | None = None
        if given.is_file() and _is_tarball(given):
            self._tmpdir = tempfile.mkdtemp(prefix="mcpnode-root-")
            # Remove the unpacked copy when this Host is collected or the process exits.
            self._finalizer = weakref.finalize(self, shutil.rmtree, self._tmpdir, True)
            try:
                self.unpack_notes = _safe_extract(given, Path(self._tmpdir))
                top = _find_top(Path(self._tmpdir))
            except BaseException:
                # No Host will own the copy: remove it now, not whenever the traceback is freed.
                self._finalizer()
                raise
            self.root = str(top)
        elif given.is_dir():
            self.root = str(given.resolve())
        elif given.exists():
            raise RootError(f"{given}: not a directory, .tar.gz or .tar.bz2")
        else:
            raise RootError(f"{given}: no such file or directory")
        self.source = str(given)
        self.is_live = self.root == "/"
        # Prefix joined to a logical path to get the filesystem path.
        self._prefix = "" if self.is_live else self.root

    @property
    def _native(self) -> bool:
        """Let the kernel resolve paths: only for the live root, and not while recording (the
        in-root resolver is what sees each symlink hop a snapshot must keep)."""
        return self.is_live and self._recording is None

    # -- lifecycle ---------------------------------------------------------------------------

    def close(self) -> None:
        """Remove a tarball's unpacked copy now rather than at exit."""
        if self._tmpdir is not None:
            self._finalizer()
            self._tmpdir = None

    def __enter__(self) -> Host:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Host({self.source!r})"

    @contextlib.contextmanager
    def oneshot(self) -> Iterator[None]:
        """Cache symlink resolution for the duration of one discovery pass.

        Outside this block nothing is cached, so a long-running agent sees devices come and go.
        """
        if self._oneshot_depth == 0:
            self._cache = {}
        self._oneshot_depth += 1
        try:
            yield
        finally:
            self._oneshot_depth -= 1
            if self._oneshot_depth == 0:
                self._cache = None

    @contextlib.contextmanager
    def recording(self) -> Iterator[Recording]:
        """Record every file read, symlink crossed and directory listed inside the block."""
        rec = Recording(files={}, links={}, dirs=set())
        previous, self._recording = self._recording, rec
        try:
            yield rec
        finally:
            self._recording = previous

    # -- path resolution ---------------------------------------------------------------------

    def fs_path(self, logical: str) -> str:
        """The filesystem path of a logical path, *without* resolving symlinks."""
        return self._prefix + "/" + "/".join(_split(logical))

    def realpath(self, logical: str) -> str:
        """Resolve every symlink in `logical` inside the root; return the logical real path.

        Raises PathNotFound when a component is missing and SymlinkLoop after 40 hops.
        """
        if self._native:
            try:
                real = os.path.realpath("/" + "/".join(_split(logical)), strict=True)
            except OSError as err:
                raise _translate(err, logical) from err
            return real
        return self._resolve(logical, follow_last=True)

    def _resolve(self, logical: str, *, follow_last: bool, hops: list[int] | None = None) -> str:
        """Walk `logical` component by component under the root; return the real logical path.

        A symlink's target is resolved relative to the *real* directory holding it (or from the
        root when absolute); `..` never climbs above the root. Hops are counted across nested
        targets, so a cycle raises SymlinkLoop after 40 links instead of recursing forever.
        """
        if hops is None:
            hops = [0]
        cache = self._cache
        parts = _split(logical)
        if cache is not None and follow_last:
            hit = cache.get("/" + "/".join(parts))
            if hit is not None:
                return hit
        resolved = "/"
        last = len(parts) - 1
        for i, comp in enumerate(parts):
            if comp == "..":
                resolved = resolved.rsplit("/", 1)[0] or "/"
                continue
            candidate = (resolved if resolved != "/" else "") + "/" + comp
            if i == last and not follow_last:
                return candidate
            if cache is not None:
                hit = cache.get(candidate)
                if hit is not None:
                    resolved = hit
                    continue
            fs = self._prefix + candidate
            try:
                st = os.lstat(fs)
                link = os.readlink(fs) if stat.S_ISLNK(st.st_mode) else None
            except OSError as err:
                raise _translate(err, logical) from err
            if link is None:
                real = candidate
            else:
                hops[0] += 1
                if hops[0] > _MAX_SYMLINK_HOPS:
                    raise SymlinkLoop(logical, errno_mod.ELOOP, "too many levels of symbolic links")
                if self._recording is not None:
                    self._recording.links[candidate] = link
                base = "" if link.startswith("/") else (resolved if resolved != "/" else "")
                real = self._resolve(base + "/" + link, follow_last=True, hops=hops)
            if cache is not None:
                cache[candidate] = real
            resolved = real
        return resolved

    def _real_fs(self, logical: str) -> str:
        """Filesystem path of `logical` with every symlink but the last resolved in-root."""
        if self._native:
            return "/" + "/".join(_split(logical))
        cache = self._cache
        if cache is not None:
            # Hot path of a discovery pass: the directory was listed (and cached) just before
            # its attributes are read, so one dict lookup replaces the component walk.
            parent_key, _, name = logical.rpartition("/")
            hit = cache.get(parent_key)
            if hit is not None and name not in ("", ".", ".."):
                return self._prefix + (hit if hit != "/" else "") + "/" + name
        parts = _split(logical)
        if not parts:
            return self._prefix or "/"
        parent = self._resolve("/" + "/".join(parts[:-1]), follow_last=True) if parts[:-1] else "/"
        name = parts[-1]
        if name == "..":
            return self._prefix + self._resolve(parent + "/..", follow_last=True)
        return self._prefix + (parent.rstrip("/") + "/" + name)

    # -- reads -------------------------------------------------------------------------------

    def read_bytes(self, logical: str) -> bytes:
        """The whole content of a file. Raises a HostError subclass on any failure."""
        # O_NONBLOCK: a FIFO planted in a directory root must not hang discovery; regular,
        # sysfs and procfs files ignore the flag.
        flags = os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK
        try:
            fs = self._real_fs(logical)
            if not self._native:
                flags |= os.O_NOFOLLOW
            try:
                fd = os.open(fs, flags)
            except OSError as err:
                if err.errno != errno_mod.ELOOP or self._native:
                    raise
                # The last component is a symlink: resolve it inside the root, then open.
                fs = self._prefix + self._resolve(logical, follow_last=True)
                fd = os.open(fs, flags)
        except HostError:
            raise
        except OSError as err:
            raise _translate(err, logical) from err
        try:
            # A short read is EOF for sysfs attributes (one page, returned whole), for procfs
            # seq_files (seq_read fills the buffer until EOF) and for regular files, so the
            # common case is one read() instead of read() + an empty read().
            data = os.read(fd, _READ_CHUNK)
            if len(data) == _READ_CHUNK:
                chunks = [data]
                while chunk := os.read(fd, _READ_CHUNK):
                    chunks.append(chunk)
                data = b"".join(chunks)
        except OSError as err:
            raise _translate(err, logical) from err
        finally:
            os.close(fd)
        if self._recording is not None:
            self._recording.files[fs[len(self._prefix) :]] = data
        return data

    def read_text(self, logical: str) -> str:
        """File content decoded as UTF-8 (undecodable bytes replaced, so garbage stays visible
        to the parser, which then rejects it). Raises a HostError subclass."""
        return self.read_bytes(logical).decode("utf-8", errors="replace")

    def read_optional(self, logical: str) -> str | None:
        """Like read_text, but None for ENOENT/ENODEV/EINVAL ("not here / not supported").

        EACCES, ELOOP, EIO and the rest still raise: they are problems, not absence.
        """
        try:
            return self.read_text(logical)
        except (PathNotFound, NotSupported) as err:
            if err.errno in _ABSENT_ERRNOS:
                return None
            raise

    def readlink(self, logical: str) -> str | None:
        """The target of a symlink as stored, or None when `logical` is not a symlink or absent."""
        try:
            fs = self._real_fs(logical)
            target = os.readlink(fs)
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
            os.lstat(self._real_fs(logical))
        except (OSError, HostError):
            return False
        return True

    def is_dir(self, logical: str) -> bool:
        """True for a directory, following symlinks inside the root."""
        try:
            real = self.realpath(logical)
        except HostError:
            return False
        return os.path.isdir(self.fs_path(real))

    def scandir(self, logical: str) -> list[Entry]:
        """Entries of a directory, sorted by name, symlinks reported and never followed.

        The directory itself is resolved inside the root first. Within a oneshot() block the
        real subdirectories listed are remembered as resolved, so later reads below them cost
        one open each.
        """
        real = self.realpath(logical)
        fs = self.fs_path(real)
        try:
            try:
                # d_type from readdir answers both tests without a stat on sysfs, procfs, ext4
                # and tmpfs, so this is one getdents loop.
                with os.scandir(fs) as it:
                    out = [
                        Entry(de.name, de.is_dir(follow_symlinks=False), de.is_symlink())
                        for de in it
                    ]
            except FileNotFoundError:
                # Where d_type is unknown a stat is needed, and an entry may vanish between
                # readdir and that stat (a device going away): skip just that entry.
                out = self._scandir_tolerant(fs)
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

    @staticmethod
    def _scandir_tolerant(fs: str) -> list[Entry]:
        out = []
        with os.scandir(fs) as it:
            for de in it:
                try:
                    out.append(Entry(de.name, de.is_dir(follow_symlinks=False), de.is_symlink()))
                except FileNotFoundError:
                    continue
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
                with contextlib.suppress(OSError):
                    rec.links[f"{base}/{e.name}"] = os.readlink(f"{self._prefix}{base}/{e.name}")

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
            names = os.listdir(self.fs_path(real))
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
            st = os.lstat(fs)
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


def _is_tarball(path: Path) -> bool:
    name = path.name
    return name.endswith((".tar.gz", ".tgz", ".tar.bz2", ".tbz2", ".tar.xz", ".tar"))


def _member_ok(name: str) -> str | None:
    """Why a tar member name is refused, or None when it is safe to place under the root."""
    if name.startswith("/"):
        return "absolute member name"
    if any(p == ".." for p in name.split("/")):
        return "member name contains '..'"
    return None


def _safe_extract(tarball: Path, dest: Path) -> list[tuple[str, str]]:
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
        try:
            members = tf.getmembers()
        except _ARCHIVE_ERRORS as err:
            raise RootError(f"{tarball}: corrupt tar archive ({err})") from err
        for m in members:
            name = m.name
            while name.startswith("./"):
                name = name[2:]
            if name in ("", "."):
                continue
            why = _member_ok(name)
            if why is not None:
                notes.append((m.name, why))
                continue
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


def _find_top(dest: Path) -> Path:
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
