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

Write primitives (tuning, and later the manifest), all under the same root and never through a
symlink's last component:
- `write_text` replaces the content of an *existing* file in one write(2) (a sysctl or sysfs
  attribute: never created, so a typo cannot plant a file under /proc/sys of a fake root);
- `write_file_atomic` creates or replaces a regular file: temp file in the same directory,
  fsync, rename, fsync of the directory (journal, /etc/sysctl.d file);
- `remove` unlinks a file; `load_module` runs modprobe, on the live root only.

Process placement (`mcpnode exec`, `pin`), on the live root only: `list_tasks`, `read_proc`,
`get_affinity`/`set_affinity`, `set_mempolicy` and `resolve_command`/`exec`. These act on the
live kernel even when discovery reads a fixture (`exec --root`): the CLI passes a live `Host("/")`
for the effects, and a recorded root refuses them with NotSupported.

Test hook: with `MCPNODE_FAULT_KILL_AFTER_WRITES=N` in the environment the process SIGKILLs
itself right after its N-th successful write (any of the four above), so crash tests can stop an
apply at every point. It is read at each write, never at import.
"""

from __future__ import annotations

import collections
import contextlib
import ctypes
import errno as errno_mod
import json
import os
import platform
import re
import shutil
import signal
import stat
import subprocess
import tempfile
import weakref
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, NamedTuple, NoReturn

from mcpnode.errors import (
    AccessDenied,
    CommandFailed,
    CommandNotFound,
    HostError,
    NotSupported,
    PathNotFound,
    PlacementUnavailable,
    ProcessGone,
    ReadError,
    RootError,
    SymlinkLoop,
    WriteError,
)

# Linux's own limit on symlinks followed in one lookup (fs/namei.c MAXSYMLINKS = 40).
_MAX_SYMLINK_HOPS = 40
# sysfs attributes are at most one page; procfs files like mountinfo can be larger, so reads
# loop until EOF in chunks of this size.
_READ_CHUNK = 65536

_ABSENT_ERRNOS = frozenset({errno_mod.ENOENT, errno_mod.ENODEV, errno_mod.EINVAL})

# The crash-test hook (module docstring). Counted per process, across every Host object, because
# the journal may live under a different Host (--state-dir) than the sysctls it protects.
FAULT_ENV = "MCPNODE_FAULT_KILL_AFTER_WRITES"
_writes_done = 0

# Kernel module names as modprobe takes them (module_name() in kmod: [A-Za-z0-9_-]).
_MODULE_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}\Z")
_MODPROBE_TIMEOUT_S = 30

# set_mempolicy(2) through libc's syscall(3) and ctypes rather than the `numa`/libnuma Python
# bindings: no new dependency, and no libnuma.so, which minimal hosts and distroless images lack.
# The syscall and its modes are ABI, unchanged since Linux 2.6.7. Numbers per architecture:
# arch/x86/entry/syscalls/syscall_64.tbl, include/uapi/asm-generic/unistd.h (arm64, riscv),
# arch/powerpc/kernel/syscalls/syscall.tbl, arch/s390/kernel/syscalls/syscall.tbl.
_SYS_SET_MEMPOLICY = {"x86_64": 238, "aarch64": 237, "riscv64": 237, "ppc64le": 261, "s390x": 270}
# include/uapi/linux/mempolicy.h
MPOL_MODES = {"default": 0, "preferred": 1, "bind": 2}
MempolicyMode = Literal["default", "preferred", "bind"]


def _count_write() -> None:
    """Count one successful write; SIGKILL this process after the N-th when the hook is set."""
    global _writes_done
    _writes_done += 1
    limit = os.environ.get(FAULT_ENV, "")
    if limit.isdigit() and _writes_done >= int(limit):
        os.kill(os.getpid(), signal.SIGKILL)


@dataclass
class Recording:
    """What a Host was asked for while recording: exactly what a snapshot must hold.

    Paths are logical real paths (symlinks resolved inside the root). `files` keeps the bytes
    as they were read, so a snapshot holds the same content the topology was computed from.
    """

    files: dict[str, bytes]
    links: dict[str, str]  # symlink path -> target as stored
    dirs: set[str]
    commands: dict[str, dict[str, object]] = field(default_factory=dict)  # argv joined by " "


@dataclass(frozen=True)
class CommandResult:
    """A version command's answer. `found` is False when the program is not installed (or, on a
    recorded root, when the snapshot holds no answer: `reason` says which)."""

    argv: tuple[str, ...]
    found: bool
    returncode: int | None
    stdout: str
    stderr: str
    reason: str | None = None

    def to_json(self) -> dict[str, object]:
        return {
            "found": self.found,
            "returncode": self.returncode,
            "stdout": self.stdout,
            "stderr": self.stderr,
            "reason": self.reason,
        }


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


def _translate_write(err: OSError, logical: str) -> HostError:
    """An OSError from open(2)/write(2) for writing. Permission problems stay AccessDenied (EROFS
    too: containers mount /proc/sys read-only); what the kernel refuses is a WriteError."""
    code = err.errno
    detail = err.strerror or str(err)
    if code in (errno_mod.EACCES, errno_mod.EPERM, errno_mod.EROFS):
        return AccessDenied(logical, code, detail)
    if code == errno_mod.ELOOP:
        return SymlinkLoop(logical, code, detail)
    return WriteError(logical, code, detail)


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
        self._commands: dict[str, dict[str, object]] | None = None
        if given.is_file():
            from mcpnode import host_tar  # tarfile and the compressors, only for tarball roots

            if not host_tar.is_tarball(given):
                raise RootError(f"{given}: not a directory, .tar.gz or .tar.bz2")
            self._tmpdir = tempfile.mkdtemp(prefix="mcpnode-root-")
            # Remove the unpacked copy when this Host is collected or the process exits.
            self._finalizer = weakref.finalize(self, shutil.rmtree, self._tmpdir, True)
            try:
                self.unpack_notes = host_tar.safe_extract(given, Path(self._tmpdir))
                top = host_tar.find_top(Path(self._tmpdir))
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

    # -- writes ------------------------------------------------------------------------------

    def write_text(self, logical: str, text: str) -> None:
        """Replace the content of an existing file with `text`, in a single write(2).

        For sysctls and sysfs attributes: the kernel parses one write as one value, so a
        multi-field value ("4096 131072 16777216") must not be split. The file is never created
        (no O_CREAT) and a symlink as the last component is refused (O_NOFOLLOW -> SymlinkLoop).

        Raises PathNotFound when the file does not exist, AccessDenied for EACCES/EPERM/EROFS,
        WriteError when the kernel refuses the value (EINVAL, ERANGE, ENOENT from write(2)...)
        or the write is short.
        """
        data = text.encode("utf-8")
        # O_NONBLOCK: a FIFO planted in a fake root fails (ENXIO) instead of hanging the apply.
        flags = os.O_WRONLY | os.O_TRUNC | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK
        try:
            fd = os.open(self._real_fs(logical), flags)
        except HostError:
            raise
        except OSError as err:
            if err.errno == errno_mod.ENOENT:
                raise PathNotFound(logical, err.errno, err.strerror or str(err)) from err
            raise _translate_write(err, logical) from err
        try:
            written = os.write(fd, data)
        except OSError as err:
            raise _translate_write(err, logical) from err
        finally:
            os.close(fd)
        if written != len(data):
            raise WriteError(logical, None, f"short write: {written} of {len(data)} bytes")
        _count_write()

    def makedirs(self, logical: str, mode: int = 0o755) -> None:
        """Create a directory and its missing parents inside the root (symlinks on the way are
        resolved in-root, so a link cannot lead the creation outside). Not counted as a write:
        creating an existing tree again is a no-op. Raises a HostError subclass."""
        real = "/"
        for comp in _split(logical):
            if comp == "..":
                raise PathNotFound(logical, errno_mod.EINVAL, "'..' in a directory to create")
            candidate = (real if real != "/" else "") + "/" + comp
            try:
                real = self.realpath(candidate)
            except PathNotFound:
                try:
                    os.mkdir(self.fs_path(candidate), mode)
                except FileExistsError:
                    pass
                except OSError as err:
                    raise _translate_write(err, logical) from err
                real = candidate
            if not os.path.isdir(self.fs_path(real)):
                raise WriteError(logical, errno_mod.ENOTDIR, f"{real} is not a directory")

    def write_file_atomic(self, logical: str, data: bytes, mode: int = 0o644) -> None:
        """Create or replace a regular file atomically: a temporary file in the same directory
        (O_EXCL), fsync, rename over the target, fsync of the directory. A crash leaves either
        the old content or the new, never a mix; parent directories are created (0755).

        Raises AccessDenied or WriteError (a HostError subclass)."""
        parts = _split(logical)
        if not parts or parts[-1] in ("..", "."):
            raise WriteError(logical, errno_mod.EINVAL, "not a file name")
        parent = "/" + "/".join(parts[:-1])
        self.makedirs(parent)
        dir_fs = self.fs_path(self.realpath(parent))
        final = dir_fs.rstrip("/") + "/" + parts[-1]
        tmp = f"{dir_fs.rstrip('/')}/.{parts[-1]}.{os.getpid()}.{os.urandom(4).hex()}.tmp"
        try:
            fd = os.open(
                tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW, mode
            )
        except OSError as err:
            raise _translate_write(err, logical) from err
        try:
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
                os.fchmod(fd, mode)  # the umask must not narrow a world-readable file
                os.fsync(fd)
            finally:
                os.close(fd)
            os.rename(tmp, final)
        except OSError as err:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise _translate_write(err, logical) from err
        self._fsync_dir(dir_fs)
        _count_write()

    def remove(self, logical: str) -> bool:
        """Unlink a file (a symlink itself, never its target). True when something was removed,
        False when it was already absent. Raises AccessDenied or WriteError otherwise."""
        try:
            fs = self._real_fs(logical)
            os.unlink(fs)
        except PathNotFound:
            return False
        except FileNotFoundError:
            return False
        except OSError as err:
            raise _translate_write(err, logical) from err
        self._fsync_dir(fs.rsplit("/", 1)[0] or "/")
        _count_write()
        return True

    @staticmethod
    def _fsync_dir(dir_fs: str) -> None:
        """Make a rename/unlink durable. Some filesystems refuse fsync on a directory (EINVAL);
        the rename itself is still atomic there."""
        try:
            fd = os.open(dir_fs, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError:
            return
        try:
            with contextlib.suppress(OSError):
                os.fsync(fd)
        finally:
            os.close(fd)

    def command(self, argv: tuple[str, ...], timeout_s: float = 10.0) -> CommandResult:
        """Run a read-only version/status command (`nvidia-ctk --version`) on the live host, or
        replay its recorded answer from a snapshot's `commands`. Never raises for a missing
        program or a non-zero exit: those are facts for the caller (the audit).

        Programs are looked up on PATH plus the sbin directories (services run with a short
        PATH); no shell is involved.
        """
        key = " ".join(argv)
        if not self.is_live:
            recorded = self._recorded_commands().get(key)
            if recorded is None:
                return CommandResult(argv, False, None, "", "", "not recorded in this snapshot")
            replayed = CommandResult(
                argv,
                bool(recorded.get("found")),
                _opt_int(recorded.get("returncode")),
                str(recorded.get("stdout") or ""),
                str(recorded.get("stderr") or ""),
                None if recorded.get("reason") is None else str(recorded.get("reason")),
            )
            if self._recording is not None:
                # A snapshot of a snapshot keeps the answers it replayed.
                self._recording.commands[key] = replayed.to_json()
            return replayed
        path = os.environ.get("PATH", "") + ":/usr/local/sbin:/usr/sbin:/sbin:/usr/bin:/bin"
        exe = shutil.which(argv[0], path=path)
        if exe is None:
            result = CommandResult(argv, False, None, "", "", f"{argv[0]} not found on PATH")
        else:
            try:
                proc = subprocess.run(
                    [exe, *argv[1:]],
                    capture_output=True,
                    text=True,
                    timeout=timeout_s,
                    check=False,
                    stdin=subprocess.DEVNULL,
                )
                result = CommandResult(argv, True, proc.returncode, proc.stdout, proc.stderr)
            except (OSError, subprocess.TimeoutExpired) as err:
                result = CommandResult(argv, True, None, "", "", f"{argv[0]}: {err}")
        if self._recording is not None:
            self._recording.commands[key] = result.to_json()
        return result

    def _recorded_commands(self) -> dict[str, dict[str, object]]:
        if self._commands is None:
            meta = self._snapshot_meta()
            commands = meta.get("commands")
            self._commands = (
                {str(k): v for k, v in commands.items() if isinstance(v, dict)}
                if isinstance(commands, dict)
                else {}
            )
        return self._commands

    def _snapshot_meta(self) -> dict[str, object]:
        """The root's `mcpnode-snapshot.json`, or {} when absent or unreadable (an unreadable
        snapshot answers "not recorded" for everything it would hold)."""
        try:
            text = self.read_optional("/mcpnode-snapshot.json")
            meta = json.loads(text) if text else {}
        except (HostError, ValueError):
            return {}
        return meta if isinstance(meta, dict) else {}

    def effective_uid(self) -> int | None:
        """The effective uid the machine was read with: this process's on the live host, the
        one a snapshot recorded (`euid`) on a recorded root, None when a root does not say (a
        plain sysfs dump: treat as privileged, nothing there was refused)."""
        if self.is_live:
            return os.geteuid()
        return _opt_int(self._snapshot_meta().get("euid"))

    def load_module(self, name: str) -> None:
        """`modprobe -q -- NAME` on the live machine (needs CAP_SYS_MODULE).

        A recorded root has no kernel to load into: raises NotSupported there rather than
        touching this machine. Raises CommandFailed when modprobe fails or is missing."""
        if not _MODULE_NAME.match(name):
            raise CommandFailed(f"module:{name}", errno_mod.EINVAL, "not a module name")
        if not self.is_live:
            raise NotSupported(
                f"module:{name}", None, "loading a kernel module needs the live host (--root /)"
            )
        # sbin is not on every PATH (sudo -E, cron), and modprobe lives there.
        modprobe = shutil.which("modprobe", path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin")
        if modprobe is None:
            raise CommandFailed(f"module:{name}", errno_mod.ENOENT, "modprobe not found")
        try:
            proc = subprocess.run(
                [modprobe, "-q", "--", name],
                capture_output=True,
                text=True,
                timeout=_MODPROBE_TIMEOUT_S,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as err:
            raise CommandFailed(f"module:{name}", None, f"modprobe: {err}") from err
        if proc.returncode != 0:
            detail = proc.stderr.strip() or f"modprobe exited {proc.returncode}"
            raise CommandFailed(f"module:{name}", None, detail)
        _count_write()

    # -- processes (live only) ---------------------------------------------------------------

    def _require_live(self, what: str) -> None:
        if not self.is_live:
            raise NotSupported(
                what, None, "needs the live host: a recorded root has no processes to change"
            )

    def read_proc(self, pid: int, name: str) -> str:
        """`/proc/PID/NAME` of a live process (`stat`, `status`, `cmdline`; NUL bytes kept).

        Raises ProcessGone when the process does not exist (ENOENT, ESRCH), AccessDenied for
        EACCES/EPERM, NotSupported on a recorded root (its /proc is not this kernel's)."""
        self._require_live(f"pid:{pid}")
        logical = f"/proc/{int(pid)}/{name}"
        try:
            return self.read_text(logical)
        except PathNotFound as err:
            raise ProcessGone(logical, err.errno, "no such process") from err
        except ReadError as err:
            if err.errno == errno_mod.ESRCH:  # the process exited between open and read
                raise ProcessGone(logical, err.errno, "no such process") from err
            raise

    def list_tasks(self, pid: int) -> tuple[int, ...]:
        """Thread ids of live process `pid` (`/proc/PID/task`), ascending.

        Raises ProcessGone when the process does not exist, NotSupported on a recorded root."""
        self._require_live(f"pid:{pid}")
        logical = f"/proc/{int(pid)}/task"
        try:
            names = os.listdir(logical)
        except OSError as err:
            if err.errno in (errno_mod.ENOENT, errno_mod.ESRCH):
                raise ProcessGone(logical, err.errno, "no such process") from err
            raise _translate(err, logical) from err
        return tuple(sorted(int(n) for n in names if n.isdigit()))

    def get_affinity(self, tid: int) -> frozenset[int]:
        """CPU affinity of a live thread (sched_getaffinity(2); 0 = the calling thread).

        Raises ProcessGone (ESRCH), AccessDenied (EPERM), NotSupported on a recorded root."""
        self._require_live(f"tid:{tid}")
        try:
            return frozenset(os.sched_getaffinity(tid))
        except OSError as err:
            raise _translate_task(err, tid) from err

    def set_affinity(self, tid: int, cpus: Iterable[int]) -> frozenset[int]:
        """Set the CPU affinity of one live thread (sched_setaffinity(2); 0 = the calling
        thread, which passes it on across fork and execve). Returns the affinity now in force.

        The kernel silently drops CPUs that are offline, absent or outside the thread's cpuset
        and fails (EINVAL) only when none is left; both raise PlacementUnavailable here, so a
        placement from another machine is never half-applied quietly. Also raises ProcessGone
        (ESRCH), AccessDenied (EPERM: another user's process without CAP_SYS_NICE), NotSupported
        on a recorded root."""
        self._require_live(f"tid:{tid}")
        wanted = frozenset(cpus)
        if not wanted:
            raise PlacementUnavailable(f"thread {tid}: an empty CPU set cannot be applied")
        try:
            os.sched_setaffinity(tid, wanted)
            applied = frozenset(os.sched_getaffinity(tid))
        except OSError as err:
            if err.errno == errno_mod.EINVAL:
                raise PlacementUnavailable(
                    f"thread {tid}: none of CPUs {_cpulist(wanted)} is online and allowed here"
                ) from err
            raise _translate_task(err, tid) from err
        if applied != wanted:
            raise PlacementUnavailable(
                f"thread {tid}: asked for CPUs {_cpulist(wanted)}, the kernel applied "
                f"{_cpulist(applied)} (the others are offline, absent or outside the cpuset)"
            )
        return applied

    def set_mempolicy(self, mode: MempolicyMode, nodes: Iterable[int]) -> None:
        """Set the NUMA memory policy of the *calling thread* (set_mempolicy(2)); it is kept
        across fork and execve. There is no system call to set another process's policy.

        `preferred` allocates on the first node of `nodes` and falls back to the others when it
        is full; `bind` restricts allocations to `nodes` (the OOM killer acts rather than fall
        back); `default` (no nodes) restores the system default. Raises PlacementUnavailable
        when the kernel refuses the nodes (EINVAL: not online or outside the cpuset's mems),
        NotSupported on a recorded root, an unknown architecture or a kernel without NUMA
        (ENOSYS)."""
        self._require_live("set_mempolicy")
        node_set = sorted(frozenset(nodes))
        if (mode == "default") != (not node_set) or any(n < 0 for n in node_set):
            raise PlacementUnavailable(f"set_mempolicy {mode}: bad node list {node_set}")
        machine = platform.machine()
        nr = _SYS_SET_MEMPOLICY.get(machine)
        if nr is None:
            raise NotSupported("set_mempolicy", None, f"syscall number unknown for {machine}")
        bits = ctypes.sizeof(ctypes.c_ulong) * 8
        words = (node_set[-1] // bits + 1) if node_set else 1
        mask = (ctypes.c_ulong * words)()
        for node in node_set:
            mask[node // bits] |= 1 << (node % bits)
        # maxnode is one more than the bits passed: mm/mempolicy.c get_nodes() decrements it
        # first (a historical off-by-one that libnuma also compensates for).
        maxnode = words * bits + 1 if node_set else 0
        libc = ctypes.CDLL(None, use_errno=True)
        rc = libc.syscall(
            ctypes.c_long(nr),
            ctypes.c_int(MPOL_MODES[mode]),
            mask if node_set else None,
            ctypes.c_ulong(maxnode),
        )
        if rc != 0:
            code = ctypes.get_errno()
            if code == errno_mod.EINVAL:
                raise PlacementUnavailable(
                    f"set_mempolicy {mode} {_cpulist(frozenset(node_set))}: the kernel refused "
                    "the nodes (not online here, or outside this cpuset's memory nodes)"
                )
            if code == errno_mod.ENOSYS:
                raise NotSupported("set_mempolicy", code, "kernel built without NUMA")
            raise _translate(OSError(code, os.strerror(code)), "set_mempolicy")

    def resolve_command(self, name: str, env: Mapping[str, str]) -> str:
        """The executable `name` runs as, looked up on `env`'s PATH like execvp(3) does (a name
        with a slash is taken as a path). Raises CommandNotFound when there is none, or it is
        not an executable file; NotSupported on a recorded root."""
        self._require_live(f"command:{name}")
        path = env.get("PATH", os.defpath)
        found = shutil.which(name, path=path)
        if found is None or not os.path.isfile(found):
            where = "" if "/" in name else f" on PATH ({path})"
            raise CommandNotFound(f"{name}: command not found{where} or not executable")
        return found

    def exec(self, executable: str, argv: Sequence[str], env: Mapping[str, str]) -> NoReturn:
        """Replace this process with `executable` (execve(2), no shell). The CPU affinity and
        memory policy set before are inherited. Only returns by raising CommandNotFound (the
        file vanished or is not executable after all) or another HostError."""
        self._require_live(f"command:{executable}")
        try:
            # No shell on purpose: argv reaches the program exactly as given.
            os.execve(executable, list(argv), dict(env))  # noqa: S606
        except OSError as err:
            if err.errno in (errno_mod.ENOENT, errno_mod.EACCES, errno_mod.ENOEXEC):
                raise CommandNotFound(f"{executable}: cannot execute: {err.strerror}") from err
            raise _translate(err, executable) from err

    # -- the kernel log (/dev/kmsg) ----------------------------------------------------------

    def read_kmsg(self, max_bytes: int | None = None, max_records: int | None = None) -> KmsgRead:
        """Every record the kernel log buffer holds now, oldest first, in /dev/kmsg's format
        (`PRIORITY,SEQ,USEC,FLAGS;MESSAGE`, then ` KEY=VALUE` continuation lines;
        Documentation/ABI/testing/dev-kmsg). At most the newest `max_records` records and
        `max_bytes` bytes are kept (default KMSG_MAX_RECORDS, KMSG_MAX_BYTES; `truncated` says
        when older ones were dropped).

        Live root: `/dev/kmsg` opened O_RDONLY|O_NONBLOCK, one record per read(2) until EAGAIN
        (the end of the buffer); EPIPE (records overwritten while reading) is counted in
        `overwritten` and reading goes on. Other roots: the regular file `dev/kmsg` of the
        root, one record per line (a snapshot writes it so); anything but a regular file is
        refused, so a FIFO planted there cannot hang the read.

        Raises PathNotFound (no kmsg: CONFIG_PRINTK off, or not in this root), AccessDenied
        (EPERM/EACCES: kernel.dmesg_restrict without CAP_SYSLOG), ReadError. While recording,
        the records read are kept as the file /dev/kmsg of the snapshot."""
        stream = self.open_kmsg()
        try:
            got = stream.read_new(max_bytes, max_records, final=True)
        finally:
            stream.close()
        if self._recording is not None:
            self._recording.files[KMSG_PATH] = "".join(r + "\n" for r in got.records).encode()
        return got

    def open_kmsg(self) -> KmsgStream:
        """The kernel log as a stream for a watcher, positioned at the oldest record.

        Live root: `/dev/kmsg` non-blocking; `fileno()` can wait in a selector (readable when a
        record arrives) and `read_new()` drains what arrived. Other roots: the regular file
        `dev/kmsg`, read from where the last `read_new()` stopped; a regular file is always
        readable, so `fileno()` is None there and the caller polls. Raises as read_kmsg."""
        if self.is_live:
            try:
                fd = os.open(KMSG_PATH, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
            except OSError as err:
                raise _translate(err, KMSG_PATH) from err
            return KmsgStream(fd, None, KMSG_PATH)
        try:
            fs = self._real_fs(KMSG_PATH)
            fd = os.open(fs, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOFOLLOW)
        except HostError:
            raise
        except OSError as err:
            raise _translate(err, KMSG_PATH) from err
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise ReadError(KMSG_PATH, None, "not a regular file (a snapshot's kmsg is one)")
        except BaseException:
            os.close(fd)
            raise
        return KmsgStream(None, fd, KMSG_PATH)


def _opt_int(v: object) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _translate_task(err: OSError, tid: int) -> HostError:
    """An OSError from a sched_* call on thread `tid`."""
    if err.errno == errno_mod.ESRCH:
        return ProcessGone(f"tid:{tid}", err.errno, "no such process or thread")
    return _translate(err, f"tid:{tid}")


def _cpulist(ids: frozenset[int]) -> str:
    """`0-3,8` for messages (the model's CpuSet.cpulist(), which host.py cannot import)."""
    runs: list[tuple[int, int]] = []
    for i in sorted(ids):
        if runs and runs[-1][1] == i - 1:
            runs[-1] = (runs[-1][0], i)
        else:
            runs.append((i, i))
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


# -- the kernel log --------------------------------------------------------------------------

KMSG_PATH = "/dev/kmsg"
# The kernel's own bound on one /dev/kmsg record (CONSOLE_EXT_LOG_MAX, kernel/printk): a
# read(2) with a smaller buffer fails with EINVAL.
_KMSG_RECORD_MAX = 8192
# What a read of the log keeps: the kernel buffer is 128 KiB to a few MiB (CONFIG_LOG_BUF_SHIFT,
# log_buf_len=), so these hold all of it on every real host; they bound a hostile root.
KMSG_MAX_BYTES = 16 << 20
KMSG_MAX_RECORDS = 200_000
# How much one drain reads before stopping even if records keep coming (a flood racing us).
_KMSG_DRAIN_BYTES = 64 << 20


@dataclass(frozen=True)
class KmsgRead:
    """Kernel log records, oldest first, each `PRIORITY,SEQ,USEC,FLAGS;MESSAGE` with its
    continuation lines after a newline. `truncated`: older records were dropped to stay in
    bounds; `overwritten`: how many times the kernel reported records lost (EPIPE)."""

    records: tuple[str, ...]
    truncated: bool = False
    overwritten: int = 0


class KmsgStream:
    """An open kernel log (Host.open_kmsg): the live char device, or a root's regular file.

    `read_new()` returns the records that arrived since the last call (the first call: every
    record held), newest kept when over the bounds. Not thread-safe; close() once done."""

    def __init__(self, device_fd: int | None, file_fd: int | None, path: str) -> None:
        self._dev = device_fd
        self._file = file_fd
        self.path = path
        self._offset = 0
        self._partial = b""

    def fileno(self) -> int | None:
        """The fd a selector can wait on (live /dev/kmsg), None for a regular file."""
        return self._dev

    def read_new(
        self, max_bytes: int | None = None, max_records: int | None = None, *, final: bool = False
    ) -> KmsgRead:
        """Records since the last call. In a regular file a last line without its newline is
        held back until it is complete, unless `final` (nothing more will be read). Raises
        AccessDenied / ReadError."""
        max_bytes = KMSG_MAX_BYTES if max_bytes is None else max_bytes
        max_records = KMSG_MAX_RECORDS if max_records is None else max_records
        if self._dev is not None:
            return self._drain_device(self._dev, max_bytes, max_records)
        if self._file is not None:
            return self._read_file(self._file, max_bytes, max_records, final)
        raise ReadError(self.path, None, "kernel log already closed")

    def _drain_device(self, fd: int, max_bytes: int, max_records: int) -> KmsgRead:
        kept: collections.deque[str] = collections.deque()
        size = 0
        total = 0
        truncated = False
        overwritten = 0
        while total < _KMSG_DRAIN_BYTES:
            try:
                data = os.read(fd, _KMSG_RECORD_MAX)
            except BlockingIOError:
                break
            except OSError as err:
                if err.errno == errno_mod.EPIPE:
                    # The record at our position was overwritten before we read it; the next
                    # read returns the oldest one still held (Documentation/ABI/testing/
                    # dev-kmsg).
                    overwritten += 1
                    continue
                raise _translate(err, self.path) from err
            if not data:
                break
            total += len(data)
            # One read(2) is one record, its continuation lines included; splitting on lines
            # gives the same records and also reads a pipe that carries several at once.
            for record in _kmsg_records(data.decode("utf-8", errors="replace"), kept):
                kept.append(record)
                size += len(record) + 1
            while len(kept) > max_records or (size > max_bytes and len(kept) > 1):
                size -= len(kept.popleft()) + 1
                truncated = True
        else:
            truncated = True
        return KmsgRead(tuple(kept), truncated, overwritten)

    def _read_file(self, fd: int, max_bytes: int, max_records: int, final: bool) -> KmsgRead:
        try:
            end = os.fstat(fd).st_size
            if end < self._offset:  # rewritten shorter: start over
                self._offset, self._partial = 0, b""
            start = self._offset
            truncated = False
            if end - start > max_bytes:
                start, truncated = end - max_bytes, True
                self._partial = b""
            chunks = []
            pos = start
            while pos < end:
                chunk = os.pread(fd, min(_READ_CHUNK, end - pos), pos)
                if not chunk:
                    break
                chunks.append(chunk)
                pos += len(chunk)
        except OSError as err:
            raise _translate(err, self.path) from err
        self._offset = pos
        data = self._partial + b"".join(chunks)
        if truncated and start > 0:
            data = data.split(b"\n", 1)[1] if b"\n" in data else b""  # drop a partial line
        body, _, self._partial = data.rpartition(b"\n")
        if final and self._partial:
            body, self._partial = data, b""
        records: collections.deque[str] = collections.deque()
        records.extend(_kmsg_records(body.decode("utf-8", errors="replace"), records))
        if len(records) > max_records:
            records, truncated = collections.deque(list(records)[-max_records:]), True
        return KmsgRead(tuple(records), truncated, 0)

    def close(self) -> None:
        for fd in (self._dev, self._file):
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._dev = self._file = None


def _kmsg_records(text: str, before: collections.deque[str]) -> list[str]:
    """Lines of kmsg text as records: a line starting with a space continues the record before
    it (the ` KEY=VALUE` dictionary lines), which may be the last one of `before` (updated in
    place). Empty lines are dropped."""
    out: list[str] = []
    for line in text.split("\n"):
        if not line:
            continue
        if line.startswith(" "):
            if out:
                out[-1] += "\n" + line
            elif before:
                before[-1] += "\n" + line
            continue
        out.append(line)
    return out
