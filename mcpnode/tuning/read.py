"""The read primitives every tuning subsystem shares: one file as a `Reading`. A leaf of
tuning: it imports Host and paths only, so state.py and every plugin can use it.

The result type is the leaf layer's (mcpnode/codec/reading.py), shared with the audit; it is
re-exported here for the plugins. Values are kept as the kernel's text (trailing newline
removed). A file that is not there is
`Absent` (the key does not exist on this kernel); one that cannot be read is `Unreadable`
(EACCES: `net.core.bpf_jit_harden` needs CAP_SYS_ADMIN even to read). Neither is ever an
empty string or a zero.
"""

from __future__ import annotations

from collections.abc import Iterable

from mcpnode.codec.reading import Absent, Reading, Unreadable
from mcpnode.errors import AccessDenied, HostError, PathNotFound
from mcpnode.host import HostReader
from mcpnode.tuning import paths

__all__ = [
    "Absent",
    "Reading",
    "Unreadable",
    "as_reading",
    "file_reading",
    "optional",
    "read_value",
    "tokens",
]


def as_reading(host: HostReader, path: str, found: str | HostError | None) -> Reading:
    """What reading `path` gave (its text, the error, or None when absent: read_optional's and
    Host.read_directory's answers) as a Reading."""
    if found is None:
        return absent(host, path)
    if isinstance(found, AccessDenied):
        return Unreadable(f"cannot read {path}: {found.detail}", denied=True)
    if isinstance(found, HostError):
        return Unreadable(f"cannot read {path}: {found.detail}", denied=False)
    return found.rstrip("\n")


def absent(host: HostReader, path: str) -> Absent:
    """The key's file is not there: on the live machine the kernel lacks it; under a recorded
    root (`--root X`) it is the root that lacks it, which says nothing of any kernel."""
    if host.is_live:
        return Absent(f"no {path} on this kernel")
    return Absent(f"no {path} in the root {host.source}")


def read_value(host: HostReader, path: str) -> Reading:
    """One file as a Reading; sysctl paths must also resolve strictly under /proc/sys."""
    try:
        text = host.read_optional(path)
    except HostError as err:
        return as_reading(host, path, err)
    if text is None:
        return as_reading(host, path, None)
    if path.startswith(paths.SYSCTL_ROOT + "/") and not host.is_live:
        # A fake root may hold symlinks; a key must not read (or later write) anything that
        # is not a sysctl. /proc/sys itself has no symlinks, so the live root skips this.
        try:
            real = host.realpath(path)
        except PathNotFound:
            return absent(host, path)
        except HostError as err:
            return Unreadable(f"cannot resolve {path}: {err.detail}", denied=False)
        if not paths.is_sysctl_path(real):
            return Unreadable(f"{path} resolves to {real}, outside /proc/sys", denied=False)
    return text.rstrip("\n")


def read_values(host: HostReader, wanted: Iterable[str]) -> dict[str, Reading]:
    """Many one-file values as Readings, each as read_value() reads it, through one batch read
    (Host.read_files): a per-CPU key reads the same attribute of every CPU or policy. A sysctl
    path goes through read_value() itself, for its check that it resolves under /proc/sys."""
    sysctl = paths.SYSCTL_ROOT + "/"
    wanted = list(wanted)
    found = host.read_files([p for p in wanted if not p.startswith(sysctl)])
    return {
        path: read_value(host, path)
        if path.startswith(sysctl)
        else as_reading(host, path, found.get(path))
        for path in wanted
    }


def file_reading(host: HostReader, path: str, limit: int = 1 << 16) -> Reading:
    """A whole configuration file as a Reading: its text exactly (no newline stripped), "" when
    it does not exist (the drop-in is not there yet), Unreadable when it cannot be read."""
    try:
        text = host.read_optional(path, limit=limit)
    except AccessDenied as err:
        return Unreadable(f"cannot read {path}: {err.detail}", denied=True)
    except HostError as err:
        return Unreadable(f"cannot read {path}: {err.detail}", denied=False)
    return "" if text is None else text


def optional(host: HostReader, path: str) -> str | None:
    """The file's value, or None when it is absent or cannot be read."""
    value = read_value(host, path)
    return value if isinstance(value, str) else None


def tokens(text: str | None) -> frozenset[str] | None:
    """The words of a kernel list (`[madvise] always never`: the brackets removed)."""
    if text is None:
        return None
    return frozenset(t.strip("[]") for t in text.split())
