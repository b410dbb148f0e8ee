"""The one place an OSError becomes a mcpnode error (errors.py), for reads, writes and the
calls on threads."""

from __future__ import annotations

import errno as errno_mod

from mcpnode.errors import (
    AccessDenied,
    HostError,
    NotSupported,
    PathNotFound,
    ProcessGone,
    ReadError,
    SymlinkLoop,
    WriteError,
)


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


def _translate_task(err: OSError, tid: int) -> HostError:
    """An OSError from a sched_* call on thread `tid`."""
    if err.errno == errno_mod.ESRCH:
        return ProcessGone(f"tid:{tid}", err.errno, "no such process or thread")
    return _translate(err, f"tid:{tid}")
