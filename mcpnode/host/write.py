"""Writes under the root, never through a symlink's last component, and the lock.

- `write_text` replaces the content of an *existing* file in one write(2) (a sysctl or sysfs
  attribute: never created, so a typo cannot plant a file under /proc/sys of a fake root);
- `write_file_atomic` creates or replaces a regular file: temp file in the same directory,
  fsync, rename, fsync of the directory (journal, /etc/sysctl.d file, manifest);
- `remove` unlinks a file;
- `lock` takes an exclusive flock(2) on a file, waiting a bounded time, and records the holder
  (pid, command, since) in it for the next one to name; the tuning state lock is built on it.
Under a tarball root each of them raises AccessDenied (EROFS): the archive is never changed.
Modes are set explicitly (fchmod/chmod), so what mcpnode creates has the same modes whatever
the caller's umask (files 0644 or as asked, directories 0755: the unit's UMask=0022). A
temporary file left by a SIGKILLed writer (`.NAME.PID.RAND.tmp`, PID no longer running) is
removed by the next write of the same file, or by `remove_stale_temps` when a writer starts.

Test hooks, read at each write, never at import: with `MCPNODE_FAULT_KILL_AFTER_WRITES=N` in
the environment the process SIGKILLs itself right after its N-th successful write (these, and
load_module), so crash tests can stop an apply at every point; with
`MCPNODE_FAULT_STOP_AFTER_WRITES=N` it SIGSTOPs itself there instead (and goes on when sent
SIGCONT), so overlap tests can run another writer at that exact point.
"""

from __future__ import annotations

import errno as errno_mod
import os
import stat

from mcpnode.codec.lazyre import pattern
from mcpnode.errors import HostError, LockBusy, PathNotFound, Untrusted, WriteError
from mcpnode.host.read import HostReads
from mcpnode.host.root import _split
from mcpnode.host.translate import _translate_write
from mcpnode.host.trust import _mode_problem, _pid_running, _untrusted_dirs

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (codec/typenames.py)
if TYPE_CHECKING:
    from collections.abc import Iterator
    from contextlib import AbstractContextManager

# The crash-test hook (module docstring). Counted per process, across every Host object, because
# the journal may live under a different Host (--state-dir) than the sysctls it protects.
FAULT_ENV = "MCPNODE_FAULT_KILL_AFTER_WRITES"
STOP_ENV = "MCPNODE_FAULT_STOP_AFTER_WRITES"
_writes_done = 0
# Our temporary files: `.NAME.PID.RANDHEX.tmp` (write_file_atomic: a pid as the kernel prints
# it, no leading zero, and os.urandom(4).hex()). Tarball copies `mcpnode-root-PID-*` in the
# temporary directory (Host on a tarball) are host/root.py's.
# codec/lazyre.py: compiled at the first sweep, so commands that write nothing never import re.
_TMP_NAME = r"\.(?P<name>.+)\.(?P<pid>[1-9][0-9]{0,9})\.[0-9a-f]{8}\.tmp\Z"
# A lock file holds one JSON line naming its holder.
_LOCK_INFO_LIMIT = 4096
_LOCK_POLL_S = 0.02


def _count_write() -> None:
    """Count one successful write; SIGKILL (or SIGSTOP) this process after the N-th when a
    test hook asks for it (module docstring)."""
    import signal

    global _writes_done
    _writes_done += 1
    limit = os.environ.get(FAULT_ENV, "")
    if limit.isdigit() and _writes_done >= int(limit):
        os.kill(os.getpid(), signal.SIGKILL)
    stop = os.environ.get(STOP_ENV, "")
    if stop.isdigit() and _writes_done == int(stop):
        os.kill(os.getpid(), signal.SIGSTOP)


def _remove_stale_temps(dir_fs: str, name: str) -> int:
    """Unlink `.NAME.PID.RAND.tmp` files in `dir_fs` whose writer no longer runs (a SIGKILL
    between create and rename leaves one; the file they were for is whole either way). Only
    regular files of exactly that name pattern: a symlink or directory named like one is not
    ours (lstat, never followed). Returns how many were removed."""
    try:
        entries = os.listdir(dir_fs)
    except OSError:
        return 0
    removed = 0
    for entry in entries:
        m = pattern(_TMP_NAME).match(entry)
        if m is None or m.group("name") != name or _pid_running(int(m.group("pid"))):
            continue
        path = f"{dir_fs.rstrip('/')}/{entry}"
        try:
            if not stat.S_ISREG(os.lstat(path).st_mode):
                continue
            os.unlink(path)
        except OSError:
            continue
        removed += 1
    return removed


def _lock_holder(fd: int) -> dict[str, object]:
    """What the holder of a lock recorded in it ({} when nothing readable was recorded)."""
    import json

    try:
        data = os.pread(fd, _LOCK_INFO_LIMIT, 0)
        doc = json.loads(data.decode("utf-8", "replace")) if data.strip() else {}
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


class HostWrites(HostReads):
    """Writes under the root, and the lock."""

    def write_text(self, logical: str, text: str) -> None:
        """Replace the content of an existing file with `text`, in a single write(2).

        For sysctls and sysfs attributes: the kernel parses one write as one value, so a
        multi-field value ("4096 131072 16777216") must not be split. The file is never created
        (no O_CREAT) and a symlink as the last component is refused (O_NOFOLLOW -> SymlinkLoop).

        Raises PathNotFound when the file does not exist, AccessDenied for EACCES/EPERM/EROFS,
        WriteError when the kernel refuses the value (EINVAL, ERANGE, ENOENT from write(2)...)
        or the write is short.
        """
        self._require_writable(logical)
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
        self._require_writable(logical)
        real = "/"
        for comp in _split(logical):
            if comp == "..":
                raise PathNotFound(logical, errno_mod.EINVAL, "'..' in a directory to create")
            candidate = (real if real != "/" else "") + "/" + comp
            try:
                real = self.realpath(candidate)
            except PathNotFound:
                fs = self.fs_path(candidate)
                try:
                    os.mkdir(fs, mode)
                    # mkdir(2) applies the umask: a caller's 077 would leave /run/mcpnode
                    # unreadable by the launchers that read the manifest.
                    os.chmod(fs, mode, follow_symlinks=False)
                except FileExistsError:
                    pass
                except OSError as err:
                    raise _translate_write(err, logical) from err
                real = candidate
            if not os.path.isdir(self.fs_path(real)):
                raise WriteError(logical, errno_mod.ENOTDIR, f"{real} is not a directory")

    def write_file_atomic(
        self,
        logical: str,
        data: bytes,
        mode: int = 0o644,
        owner: tuple[int, int] | None = None,
    ) -> None:
        """Create or replace a regular file atomically: a temporary file in the same directory
        (O_EXCL), fsync, rename over the target, fsync of the directory. A crash leaves either
        the old content or the new, never a mix; parent directories are created (0755).
        `mode` is set exactly (not narrowed by the umask); `owner` (uid, gid) when given, else
        the writer's. Temporary files of this name left by a writer that no longer runs are
        removed first.

        Raises AccessDenied or WriteError (a HostError subclass)."""
        self._require_writable(logical)
        parts = _split(logical)
        if not parts or parts[-1] in ("..", "."):
            raise WriteError(logical, errno_mod.EINVAL, "not a file name")
        parent = "/" + "/".join(parts[:-1])
        self.makedirs(parent)
        dir_fs = self.fs_path(self.realpath(parent))
        _remove_stale_temps(dir_fs, parts[-1])
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
                if owner is not None:
                    os.fchown(fd, owner[0], owner[1])  # before fchmod: chown clears setuid bits
                os.fchmod(fd, mode)  # the umask must not narrow a world-readable file
                os.fsync(fd)
            finally:
                os.close(fd)
            os.rename(tmp, final)
        except OSError as err:
            import contextlib  # not at import (lock() says why)

            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise _translate_write(err, logical) from err
        self._fsync_dir(dir_fs)
        _count_write()

    def remove_stale_temps(self, logical: str) -> int:
        """Remove the temporary files a killed write_file_atomic of `logical` left beside it
        (`.NAME.PID.RAND.tmp`, PID no longer running, regular files only), without writing
        `logical` itself: for a writer's start, so a crash's leftovers do not wait for the next
        write of that file. Best effort: 0 when the root is read-only (a tarball) or the
        directory is absent. Returns how many were removed."""
        parts = _split(logical)
        if not parts or self._archive is not None or parts[-1] in ("..", "."):
            return 0
        try:
            dir_fs = self.fs_path(self.realpath("/" + "/".join(parts[:-1])))
        except HostError:
            return 0
        return _remove_stale_temps(dir_fs, parts[-1])

    def lock(
        self, logical: str, *, wait_s: float, holder: dict[str, object]
    ) -> AbstractContextManager[None]:
        """Hold an exclusive flock(2) on `logical` (created 0600 if absent) for the block.

        Waits up to `wait_s` seconds for another holder to let go, then raises LockBusy naming
        the holder it recorded. Once taken, `holder` (JSON: pid, command, since) is written into
        the file for the next one to read; it is emptied again at release. The lock file and
        its directories must be trusted like a journal (Untrusted otherwise): a lock anyone can
        write or replace would not exclude anyone. The lock goes with the process: a SIGKILLed
        holder releases it, and the next one overwrites what it recorded."""
        # contextlib at the first lock, not at import: `topo` never loads it (host/root.py).
        import contextlib

        return contextlib.contextmanager(self._locked)(logical, wait_s, holder)

    def _locked(self, logical: str, wait_s: float, holder: dict[str, object]) -> Iterator[None]:
        """lock()'s block, as a generator."""
        import contextlib
        import fcntl  # only writers take the lock
        import json
        import time

        self._require_writable(logical)
        parts = _split(logical)
        if not parts:
            raise WriteError(logical, errno_mod.EINVAL, "not a file name")
        self.makedirs("/" + "/".join(parts[:-1]))
        fs = self._real_fs(logical)
        # The directory first: nothing is created in one that others could write.
        problem = _untrusted_dirs(os.path.dirname(fs) or "/")
        if problem is not None:
            raise Untrusted(logical, None, f"refusing to lock it: {problem}")
        try:
            fd = os.open(fs, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        except OSError as err:
            raise _translate_write(err, logical) from err
        try:
            st = os.fstat(fd)
            problem = None if stat.S_ISREG(st.st_mode) else f"{fs} is not a regular file"
            problem = problem or _mode_problem(st, "lock file", fs)
            if problem is not None:
                raise Untrusted(logical, None, f"refusing to lock it: {problem}")
            deadline = time.monotonic() + max(0.0, wait_s)
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise LockBusy(self.fs_path(logical), _lock_holder(fd), wait_s) from None
                    time.sleep(min(_LOCK_POLL_S, left))
            info = (json.dumps(holder, sort_keys=True) + "\n").encode()
            with contextlib.suppress(OSError):  # the record is for messages; the flock is the lock
                os.ftruncate(fd, 0)
                os.pwrite(fd, info, 0)
            try:
                yield
            finally:
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, 0)
        finally:
            os.close(fd)

    def remove(self, logical: str) -> bool:
        """Unlink a file (a symlink itself, never its target). True when something was removed,
        False when it was already absent. Raises AccessDenied or WriteError otherwise."""
        self._require_writable(logical)
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
        import contextlib  # not at import (lock() says why)

        try:
            fd = os.open(dir_fs, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError:
            return
        try:
            with contextlib.suppress(OSError):
                os.fsync(fd)
        finally:
            os.close(fd)
