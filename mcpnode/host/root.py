"""A Host's root and the resolution of logical paths inside it.

Everything above Host names *logical* absolute paths (`/sys/devices/system/node`) and a Host
maps them under its root: `/` for the live machine, a directory holding a snapshot or a sysfs
dump, or a `.tar.gz`/`.tar.bz2` of one (tarball.py).

The files behind the root are reached through `self._io` (host/backend.py): the operating
system for `/` and for a directory, the archive's in-memory index for a tarball, which is read
in place and never unpacked. A tarball root is read-only: every write refuses it (EROFS).

Symlinks under a non-`/` root are resolved here, one component at a time, with the root acting
as `/` (an absolute link target or a `..` past the top stays inside the root, as under chroot).
The resolver counts hops instead of recursing, so the symlink cycles found in real dumps
(`device`, `driver`, `subsystem` pointing back up the tree) end in `SymlinkLoop`, never in a
hang. Within a `oneshot()` block resolutions are cached for one discovery pass.
"""

from __future__ import annotations

import errno as errno_mod
import os
import stat

from mcpnode.errors import AccessDenied, RootError, SymlinkLoop
from mcpnode.host.backend import OS, Backend
from mcpnode.host.translate import _translate
from mcpnode.host.types import Recording

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (codec/typenames.py)
if TYPE_CHECKING:
    from contextlib import AbstractContextManager
    from typing import TypeVar

    from mcpnode.host.tarball import ArchiveBackend

    _H = TypeVar("_H", bound="HostRoot")

# Linux's own limit on symlinks followed in one lookup (fs/namei.c MAXSYMLINKS = 40).
_MAX_SYMLINK_HOPS = 40


def _split(logical: str) -> list[str]:
    return [p for p in logical.split("/") if p not in ("", ".")]


class HostRoot:
    """The root and path resolution; the rest of Host builds on it (host/__init__.py).

    Not thread-safe while a `oneshot()` block is open (the resolution cache is shared).
    """

    def __init__(self, root: str | os.PathLike[str] = "/") -> None:
        given = os.fspath(root)
        self.unpack_notes: list[tuple[str, str]] = []  # (tar member, why it was skipped)
        self._io: Backend = OS
        self._archive: ArchiveBackend | None = None
        self._cache: dict[str, str] | None = None
        self._oneshot_depth = 0
        self._recording: Recording | None = None
        self._commands: dict[str, dict[str, object]] | None = None
        # The snapshot's recorded euid, read once ((value,) once read): the audit asks for it
        # several times per run, and the file also holds every NVML answer (megabytes of JSON).
        self._euid: tuple[int | None] | None = None
        try:
            st: os.stat_result | None = os.stat(given)
        except OSError:
            st = None
        if st is not None and stat.S_ISREG(st.st_mode):
            self.root = self._open_archive(given)
        elif st is not None and stat.S_ISDIR(st.st_mode):
            self.root = os.path.realpath(given)
        elif st is not None or os.path.lexists(given):
            raise RootError(f"{given}: not a directory, .tar.gz or .tar.bz2")
        else:
            raise RootError(f"{given}: no such file or directory")
        self.source = given
        self.is_live = self.root == "/"
        # Prefix joined to a logical path to get the filesystem path.
        self._prefix = "" if self.is_live else self.root

    def _open_archive(self, given: str) -> str:
        """Index a tarball root in memory (tarball.py); the filesystem path of its top."""
        from mcpnode.host import tarball  # the compressors, only for tarball roots

        if not tarball.is_tarball(given):
            raise RootError(f"{given}: not a directory, .tar.gz or .tar.bz2")
        archive, self.unpack_notes = tarball.open_root(given)
        self._io = self._archive = archive
        return archive.top

    def _require_writable(self, logical: str) -> None:
        """Refuse a write under a tarball root: the archive is read, never changed, and nothing
        is unpacked that a write could land in. AccessDenied (EROFS), as a read-only mount."""
        if self._archive is not None:
            raise AccessDenied(
                logical, errno_mod.EROFS, f"read-only: the root is a tarball ({self.source})"
            )

    @property
    def _native(self) -> bool:
        """Let the kernel resolve paths: only for the live root, and not while recording (the
        in-root resolver is what sees each symlink hop a snapshot must keep)."""
        return self.is_live and self._recording is None

    def close(self) -> None:
        """Let go of a tarball's in-memory index now rather than when the Host is collected;
        reads after that find nothing. A no-op for other roots."""
        if self._archive is not None:
            self._archive.close_all()

    def __enter__(self: _H) -> _H:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Host({self.source!r})"

    def oneshot(self) -> AbstractContextManager[None]:
        """Cache symlink resolution for the duration of one discovery pass.

        Outside this block nothing is cached, so a long-running agent sees devices come and go.
        """
        return _OneShot(self)

    def recording(self) -> AbstractContextManager[Recording]:
        """Record every file read, symlink crossed and directory listed inside the block."""
        return _Recorder(self)

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
        start = 0
        if cache is not None:
            # Resume from the deepest directory already resolved in this pass: a per-CPU read
            # (cpuN/power/energy_perf_bias) finds cpuN there and walks one component, not ten.
            for k in range(len(parts) - 1, 0, -1):
                hit = cache.get("/" + "/".join(parts[:k]))
                if hit is not None:
                    resolved, start = hit, k
                    break
        last = len(parts) - 1
        for i, comp in enumerate(parts[start:], start):
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
                st = self._io.lstat(fs)
                link = self._io.readlink(fs) if stat.S_ISLNK(st.st_mode) else None
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


# The two blocks as classes rather than contextlib.contextmanager generators: contextlib imports
# functools and collections (~1.5 ms on a quiet 2-core VM), which `topo` otherwise never loads.
class _OneShot:
    """Host.oneshot()'s block: the resolution cache lives from the outermost entry to its
    exit (blocks nest)."""

    __slots__ = ("_root",)

    def __init__(self, root: HostRoot) -> None:
        self._root = root

    def __enter__(self) -> None:
        root = self._root
        if root._oneshot_depth == 0:
            root._cache = {}
        root._oneshot_depth += 1

    def __exit__(self, *exc: object) -> None:
        root = self._root
        root._oneshot_depth -= 1
        if root._oneshot_depth == 0:
            root._cache = None


class _Recorder:
    """Host.recording()'s block: a fresh Recording while inside, the previous one restored."""

    __slots__ = ("_previous", "_root")

    def __init__(self, root: HostRoot) -> None:
        self._root = root
        self._previous: Recording | None = None

    def __enter__(self) -> Recording:
        rec = Recording(files={}, links={}, dirs=set())
        self._previous, self._root._recording = self._root._recording, rec
        return rec

    def __exit__(self, *exc: object) -> None:
        self._root._recording = self._previous
