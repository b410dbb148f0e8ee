"""A systemd drop-in that starts a service where its GPU's placement says.

`/etc/systemd/system/NAME.d/50-mcpnode-placement.conf` holds `[Service]` `CPUAffinity=`,
`NUMAPolicy=`, `NUMAMask=` (systemd >= 243) and `Environment=`; systemd applies them to every
process of the unit at exec, the way `mcpnode exec` does for one command.

Syntax (systemd.syntax(7), systemd.exec(5), checked by `systemd-analyze verify` in the tests):
* `CPUAffinity=` and `NUMAMask=` *add* to earlier assignments (the unit's own, other drop-ins);
  an empty assignment resets the list, so each is reset first and then set: the drop-in wins.
* `Environment=` is not reset (that would drop the unit's own variables); a later assignment of
  the same variable overrides. Each assignment is double-quoted with `\\` and `"` escaped, and
  `%` doubled because unit files expand `%` specifiers there. Control characters have no
  portable spelling in a value and are refused, and so is any variable outside the manifest's
  allow-list (mcpnode/published.py). The comment naming the GPUs refuses control characters
  too: a newline in a UUID would start a directive of its own.
"""

from __future__ import annotations

import re

from mcpnode.codec.printable import printable
from mcpnode.errors import UsageError
from mcpnode.host import Host
from mcpnode.placement.apply import Target
from mcpnode.published import env_problem

DROPIN_NAME = "50-mcpnode-placement.conf"
UNIT_DIR = "/etc/systemd/system"
# Unit name characters (systemd's unit_name_is_valid: VALID_CHARS plus '@'), at most 255 bytes.
_UNIT_NAME = re.compile(r"[A-Za-z0-9:_.\\@-]+\Z")
_OTHER_UNIT_TYPES = frozenset(
    {"socket", "device", "mount", "automount", "swap", "target", "path", "timer", "slice", "scope"}
)
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def unit_name(name: str) -> str:
    """`NAME` as a service unit name, `.service` added when it has no unit suffix. Raises
    UsageError for anything systemd would not accept (so for any path: no `/`, no `..`), and
    for other unit types: the drop-in's settings live in `[Service]`."""
    suffix = name.rsplit(".", 1)[-1] if "." in name else ""
    if suffix in _OTHER_UNIT_TYPES:
        raise UsageError(f"--unit {name!r}: CPU and NUMA settings apply to .service units only")
    unit = name if suffix == "service" else name + ".service"
    stem = unit.removesuffix(".service")
    if not _UNIT_NAME.match(unit) or len(unit) > 255 or stem in ("", ".", ".."):
        raise UsageError(f"--unit {name!r}: not a valid systemd unit name")
    return unit


def dropin_path(unit: str) -> str:
    """Logical path of the drop-in for `unit` (already validated by unit_name)."""
    return f"{UNIT_DIR}/{unit}.d/{DROPIN_NAME}"


def quote_assignment(name: str, value: str) -> str:
    """`"NAME=value"` for `Environment=`, escaped per systemd.syntax(7) and specifier-safe.
    Raises UsageError for a variable mcpnode does not set (the manifest's allow-list,
    mcpnode/published.py: an `LD_PRELOAD=` here would be loaded into a root service), a bad
    name, or a control or non-ASCII character in the value."""
    if not _ENV_NAME.match(name):
        raise UsageError(f"environment variable name {name[:64]!r} is not valid")
    why = env_problem(name, value)
    if why is not None:
        raise UsageError(f"{name}: {why}; not written into a unit file")
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%")
    return f'"{name}={escaped}"'


def comment_text(text: str) -> str:
    """`text` for a `#` comment line of a unit file: a newline there would end the comment and
    start a directive (`ExecStartPre=` run as root), so any control character is refused.
    Raises UsageError."""
    if not text.isprintable():
        raise UsageError(f"{printable(text[:64])}: control characters cannot go into a unit file")
    return text


def slice_name(name: str) -> str:
    """`NAME` as a slice unit name (`.slice` added when missing). Raises UsageError for a name
    systemd would not accept, `-.slice` (the root slice) and `system.slice` (the point of a
    separate slice is to be outside it: docs/placement.md, housekeeping confinement)."""
    unit = name if name.endswith(".slice") else name + ".slice"
    stem = unit.removesuffix(".slice")
    if not _UNIT_NAME.match(unit) or len(unit) > 255 or stem in ("", ".", "..", "-", "system"):
        raise UsageError(f"--slice {name!r}: not a slice outside system.slice")
    return unit


def render_dropin(unit: str, target: Target, slice_unit: str | None = None) -> str:
    """The drop-in file's text for `unit`; `slice_unit` also moves the service into that slice
    (`Slice=`), outside system.slice when `[housekeeping] confine` narrows it."""
    gpus = ", ".join(
        f"GPU {g.index} ({comment_text(g.uuid or 'uuid unknown')}, {g.address})"
        for g in target.gpus
    )
    env = " ".join(quote_assignment(n, v) for n, v in target.env)
    lines = [
        f"# {unit}: placement of {gpus}.",
        f"# Written by mcpnode systemd-dropin ({target.scope} CPUs, {target.policy} memory);",
        "# regenerate rather than edit. Empty assignments reset what the unit set before.",
        "[Service]",
        "CPUAffinity=",
        f"CPUAffinity={target.cpus.cpulist()}",
        f"NUMAPolicy={target.policy}",
        "NUMAMask=",
        f"NUMAMask={target.memory_nodes.cpulist()}",
    ]
    if env:
        lines.append(f"Environment={env}")
    if slice_unit is not None:
        lines.append(f"Slice={slice_unit}")
    return "\n".join(lines) + "\n"


def write_dropin(host: Host, unit: str, text: str) -> str:
    """Write the drop-in atomically under `host`'s root; returns its logical path. Raises a
    HostError subclass (AccessDenied, WriteError); the previous file is kept on failure."""
    path = dropin_path(unit)
    host.write_file_atomic(path, text.encode("utf-8"), 0o644)
    return path
