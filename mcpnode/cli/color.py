"""Colour in terminal output: `--color=auto|always|never` and `NO_COLOR`.

The rule, as no-color.org states it and most CLIs follow it: `always` and `never` are the
user's explicit word and win; `auto` colours only a terminal, and not when `NO_COLOR` is set to
anything but the empty string, nor when `TERM=dumb`. The option is on the `mcpnode` group (for
every command) and on the commands that colour (for `mcpnode audit --color=never`); the
command's own wins. Logs are never coloured (mcpnode/logs.py).

click is imported inside the functions that need it: cli/fast.py decides `topo --color` with
`use_color` and must not pay for importing click.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (codec/typenames.py)
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from typing import Any, TypeVar

    import click

    F = TypeVar("F", bound=Callable[..., Any])  # cli/options.py's, which imports click

CHOICES = ("auto", "always", "never")


def use_color(choice: str, env: Mapping[str, str], isatty: bool) -> bool:
    """Whether to colour: pure, table-tested."""
    if choice == "always":
        return True
    if choice == "never":
        return False
    if env.get("NO_COLOR", "") != "" or env.get("TERM") == "dumb":
        return False
    return isatty


def color_option(fn: F) -> F:
    """`--color=auto|always|never`; None when not given (then the group's, then auto)."""
    import click

    return click.option(
        "--color",
        "color",
        type=click.Choice(CHOICES),
        default=None,
        metavar="auto|always|never",
        help="Colour the output: auto (a terminal, unless NO_COLOR is set), always, never.",
    )(fn)


def stdout_color(ctx: click.Context, choice: str | None) -> bool:
    """The decision for stdout: the command's --color, else the group's, else auto."""
    chosen = choice or ctx.find_root().params.get("color") or "auto"
    return use_color(chosen, os.environ, sys.stdout.isatty())
