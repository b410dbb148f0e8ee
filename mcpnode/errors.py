"""The error hierarchy. Errors are translated into these types at the Host and NVML
boundaries only; the CLI maps each type to its one line and exit code in one place
(`cli/errors.py`, with the codes in `exitcodes.py`)."""

from __future__ import annotations


class McpnodeError(Exception):
    """Base of every error mcpnode raises on purpose."""


class UsageError(McpnodeError):
    """The caller asked for something impossible (bad option, unknown GPU)."""


class RootError(McpnodeError):
    """The `--root` given cannot be used at all (missing, not a directory or tarball, corrupt).
    `given_as` names what the user gave it as, for the error line: `--root`, or a command's
    argument read the same way (`fleet-report`'s DIR)."""

    given_as = "--root"


class HostError(McpnodeError):
    """A read of the machine failed. Carries the logical path and the errno."""

    def __init__(self, path: str, errno: int | None, detail: str) -> None:
        super().__init__(f"{path}: {detail}")
        self.path = path
        self.errno = errno
        self.detail = detail


class PathNotFound(HostError):
    """ENOENT/ENOTDIR: the path does not exist (a device may have vanished mid-walk)."""


class NotSupported(HostError):
    """ENODEV/EINVAL/EOPNOTSUPP: the attribute exists but the kernel or device cannot answer
    (e.g. `current_link_speed` on some root ports, `numa_node` on some virtual functions)."""


class AccessDenied(HostError):
    """EACCES/EPERM. Never treated as absence: an unreadable file is a finding, not a None."""


class SymlinkLoop(HostError):
    """ELOOP: too many symlinks while resolving inside the root (fixture dumps have cycles)."""


class ReadError(HostError):
    """Any other I/O failure (EIO from a dying device, a directory where a file was expected)."""


class TooLarge(ReadError):
    """The file holds more than the read may take (a sysfs attribute is one page, a profile a
    few MiB): refused while reading, before the rest is read into memory."""


class NotRegularFile(ReadError):
    """A FIFO, socket or device node where a file was expected. Under a recorded root it is
    refused before it is opened: opening a device node runs its driver."""


class Untrusted(HostError):
    """A file that would decide what mcpnode does as root (profile, config, journal, state) is
    not controlled by root: owned by another user, writable by group or others, in such a
    directory, or a symbolic link. Refused rather than read (sshd StrictModes, sudo)."""


class WriteError(HostError):
    """A write failed, or the kernel refused the value written (EINVAL/ERANGE for an out-of-range
    sysctl, ENOENT for an unregistered congestion control, EBUSY, EIO). EACCES/EPERM/EROFS on a
    write are AccessDenied instead, so privilege problems are reported as such."""


class CommandFailed(HostError):
    """A command Host ran (modprobe) exited non-zero or could not be started."""


class LockBusy(McpnodeError):
    """The state lock is held by another mcpnode run and was not released within the wait.
    `holder` is what that run recorded in the lock file (pid, command, since), possibly empty
    when it had only just taken the lock."""

    def __init__(self, path: str, holder: dict[str, object], waited_s: float) -> None:
        pid = holder.get("pid")
        command = holder.get("command")
        since = holder.get("since")
        who = (
            f"pid {pid} ({command}, since {since})"
            if pid is not None
            else "another mcpnode process (it has not recorded itself yet)"
        )
        super().__init__(
            f"{path} is held by {who}; waited {waited_s:g} s. Run again when it is done, or "
            "give --wait SECONDS"
        )
        self.path = path
        self.holder = holder
        self.waited_s = waited_s


# -- process placement (exec, pin) ------------------------------------------------------------


class ProcessGone(HostError):
    """ESRCH (or ENOENT under /proc/PID): the process or thread does not exist (any more), or it
    is a zombie whose threads are gone."""


class PlacementUnavailable(McpnodeError):
    """A placement names CPUs or memory nodes the live kernel does not have online (a placement
    read from another machine's `--root`), or the kernel applied a different CPU set than asked
    (a cpuset excludes some of them). Raised instead of letting the kernel narrow it silently."""


class CommandNotFound(McpnodeError):
    """`mcpnode exec`: the command is not on PATH or not executable. Raised before anything
    about this process has changed."""


class PinRefused(McpnodeError):
    """`mcpnode pin` will not touch this process: a kernel thread, or (without --force) one whose
    CPU affinity someone else already narrowed."""


class FileKeyError(McpnodeError):
    """A setting read from a file (a TOML table, most often) that cannot be used: `file` and
    `key` say where (key None: the whole file), `detail` what is wrong. The message is the one
    line shown: `FILE: KEY: DETAIL`."""

    def __init__(self, file: str, key: str | None, detail: str) -> None:
        where = f"{file}: {key}" if key else file
        super().__init__(f"{where}: {detail}")
        self.file = file
        self.key = key
        self.detail = detail


class ManifestError(McpnodeError):
    """A published manifest that cannot be used: not JSON, another schema, a newer schema
    version than this mcpnode reads, or a content hash that does not match."""


# -- probe ------------------------------------------------------------------------------------


class ProbeUnavailable(McpnodeError):
    """`mcpnode probe` cannot run here at all: the `mcpnode[probe]` extra is not installed, the
    NVIDIA driver is missing or refuses to start, no GPU is there, or a recorded root holds no
    probe run."""


class ProbeDataError(McpnodeError):
    """A recorded probe run that cannot be used: not JSON, another schema or version, or a field
    of the wrong shape. The message names the file and the field."""
