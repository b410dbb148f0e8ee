"""Options shared by the commands of several modules (main.py, config_cmd.py)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])


def root_option(fn: F) -> F:
    """`--root PATH`: read a snapshot, sysfs dump (dir or .tar.gz/.tar.bz2) instead of `/`."""
    return click.option(
        "--root",
        "root",
        default="/",
        show_default=True,
        type=click.Path(path_type=str),
        help="Machine root: / for this host, or a snapshot / sysfs dump (dir or tarball).",
    )(fn)


def _dir_option(flag: str, dest: str, help_text: str) -> Callable[[F], F]:
    """An optional directory option (None when not given)."""

    def deco(fn: F) -> F:
        return click.option(
            flag,
            dest,
            default=None,
            type=click.Path(file_okay=False, path_type=Path),
            help=help_text,
        )(fn)

    return deco


# `--profiles-dir DIR`: the system profiles (default: the shipped `profiles/`).
profiles_dir_option = _dir_option(
    "--profiles-dir",
    "profiles_dir",
    "System profiles directory (default: the profiles shipped with mcpnode).",
)
# `--state-dir DIR`: where the journal lives (default: var/lib/mcpnode under the root).
state_dir_option = _dir_option(
    "--state-dir",
    "state_dir",
    "Keep the tuning journal in DIR instead of /var/lib/mcpnode under --root.",
)
