"""Options shared by the commands of several modules (main.py, config_cmd.py)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from mcpnode.errors import McpnodeError

F = TypeVar("F", bound=Callable[..., Any])


# Each option is click's decorator itself, made once: `@root_option` on a command.

# `--root PATH`: read a snapshot, sysfs dump (dir or .tar.gz/.tar.bz2) instead of `/`.
root_option = click.option(
    "--root",
    "root",
    default="/",
    show_default=True,
    type=click.Path(path_type=str),
    help="Machine root: / for this host, or a snapshot / sysfs dump (dir or tarball).",
)
# `--format text|json` (default text), as `fmt`.
format_option = click.option(
    "--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True
)
# `--config PATH`: the agent's configuration file (under --root), as `config_path`; each
# command says what it reads it for: `@config_option(help=...)`.
config_option = functools.partial(
    click.option,
    "--config",
    "config_path",
    default="/etc/mcpnode/mcpnode.toml",
    show_default=True,
    metavar="PATH",
)
# `--housekeeping first-core|none|CPULIST` (default first-core).
housekeeping_option = click.option(
    "--housekeeping",
    default="first-core",
    show_default=True,
    metavar="first-core|none|CPULIST",
    help="CPUs kept out of every GPU's exclusive slice.",
)
# An optional directory (None when not given): `_dir_option(FLAG, DEST, help=...)`.
_dir_option = functools.partial(
    click.option, default=None, type=click.Path(file_okay=False, path_type=Path)
)
# `--profiles-dir DIR`: the system profiles (default: the shipped `profiles/`).
profiles_dir_option = _dir_option(
    "--profiles-dir",
    "profiles_dir",
    help="System profiles directory (default: the profiles shipped with mcpnode).",
)
# `--state-dir DIR`: where the journal lives (default: var/lib/mcpnode under the root).
state_dir_option = _dir_option(
    "--state-dir",
    "state_dir",
    help="Keep the tuning journal in DIR instead of /var/lib/mcpnode under --root.",
)


class OutputDirMissing(McpnodeError):
    """The directory an output file (`-o FILE`) should go into does not exist, or is not a
    directory. The command cannot do its job: exit 2, as for any file it cannot write (the
    audit's 0/1/2 contract), in one line."""


def check_output_dir(ctx: click.Context, param: click.Parameter, value: Path | None) -> Path | None:
    """click callback of an output-file option (`-o FILE`): the directory FILE goes into must
    exist, else OutputDirMissing before any work is done, rather than an OSError naming the
    temporary file the atomic write would have used."""
    del ctx
    if value is None:
        return None
    from mcpnode.host import Host

    parent = Path(value).absolute().parent
    flag = max(param.opts, key=len) if param.opts else "FILE"  # --output, whichever was typed
    with Host("/") as live:
        if not live.is_dir(str(parent)):
            what = "is not a directory" if live.exists(str(parent)) else "does not exist"
            raise OutputDirMissing(f"{flag} {value}: the directory {parent} {what}")
    return value
