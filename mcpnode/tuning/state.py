"""Read, through Host, everything a plan is decided on. The only I/O before a tuning decision.

Each value is a `Reading` (tuning/read.py, the primitives shared with the subsystems): the
kernel's text, `Absent` or `Unreadable`, never an empty string or a zero.
"""

from __future__ import annotations

from collections.abc import Iterable

from mcpnode.host import HostReader
from mcpnode.tuning import paths, plugins
from mcpnode.tuning.errors import ProfileError
from mcpnode.tuning.model import HostState
from mcpnode.tuning.partition import CpuPartition
from mcpnode.tuning.plugins.base import StateDraft
from mcpnode.tuning.privilege import Privileges
from mcpnode.tuning.profile import Profile
from mcpnode.tuning.read import Reading, optional, read_value


def parse_status(text: str | None) -> Privileges:
    """Effective uid and CapEff from /proc/self/status text (pure)."""
    euid: int | None = None
    cap: int | None = None
    for line in (text or "").splitlines():
        name, _, rest = line.partition(":")
        fields = rest.split()
        try:
            if name == "Uid" and len(fields) >= 2:
                euid = int(fields[1])
            elif name == "CapEff" and fields:
                cap = int(fields[0], 16)
        except ValueError:
            continue
    return Privileges(euid, cap)


def parse_modules(text: str) -> frozenset[str]:
    """Module names from /proc/modules (`tcp_bbr 20480 2 - Live 0x...`)."""
    return frozenset(line.split(maxsplit=1)[0] for line in text.splitlines() if line.strip())


def refuse_directory_keys(host: HostReader, profile: Profile) -> None:
    """Raise ProfileError for the first sysctl key that names a directory under /proc/sys
    (`net.core`): it passes the name rules, but there is nothing to write, and it is a typo for
    one of the files in it. apply refuses it in one line rather than planning it as "skipped"
    and exiting 0; verify and the audit report it as unreadable (unknown), as any other."""
    for setting in profile.settings:
        path = plugins.path_of(setting.key)
        if path is not None and paths.is_sysctl_path(path) and host.is_dir(path):
            raise ProfileError(
                setting.source,
                setting.key,
                f"names the directory {path}, not a sysctl: name one of the files in it",
                "sysctl",
            )


def read_state(
    host: HostReader,
    profile: Profile,
    extra_paths: Iterable[str] = (),
    *,
    partition: CpuPartition | None = None,
    managed: frozenset[int] = frozenset(),
) -> HostState:
    """Read what planning `profile` needs, plus `extra_paths` (journal entries to restore).
    `partition` and `managed` are passed through for `[irq]` (HostState)."""
    draft = StateDraft(modules=set(profile.modules))
    # One read pass: symlink resolutions are cached inside it (Host.oneshot), as discovery's
    # are; a per-CPU profile reads every CPU's files under the same few directories.
    with host.oneshot():
        for setting in profile.settings:
            plugins.subsystem_of(setting.key).read(host, setting, draft)
        readings = draft.readings
        for path in extra_paths:
            if path in readings:
                continue
            readings[path] = _restore_reading(host, path)

    modules: frozenset[str] | None = None
    proc_modules = optional(host, paths.PROC_MODULES)
    if proc_modules is not None:
        builtin = {m for m in draft.modules if host.exists(f"{paths.SYS_MODULE}/{m}")}
        modules = parse_modules(proc_modules) | builtin

    return HostState(
        readings=readings,
        available=draft.available,
        modules=modules,
        privileges=parse_status(optional(host, paths.PROC_STATUS)),
        cmdline=draft.cmdline,
        policies=draft.policies,
        live=host.is_live,
        partition=partition,
        managed=managed,
        found=draft.found,
    )


def _restore_reading(host: HostReader, path: str) -> Reading:
    """A journaled path the profile no longer sets, read as its subsystem reads it for a
    restore (a whole file, grubby's arguments), else as one value."""
    for subsystem in plugins.SUBSYSTEMS:
        reading = subsystem.read_restore(host, path)
        if reading is not None:
            return reading
    return read_value(host, path)
