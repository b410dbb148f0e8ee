"""The `mcpnode` entry point: a small dispatcher in front of click for the commands that run
hot, everything else handed to click (cli/main.py). Both call the same command bodies
(cli/commands.py): this module only parses options and prints.

`topo`, `gpus`, `exec` (the launcher in front of every inference server), `manifest show
--published` and `mcpnode --help` / `--version` are what scripts, launchers and people run
most (and `agent`, systemd's service, which would otherwise keep click in memory for its
life), and click alone costs more to import (16 ms on a quiet 2-core VM) than hwloc's whole
`lstopo` run on a sysfs dump. Here their few options are parsed by hand — exactly the options
click declares for them, in the forms click accepts (`--root X`, `--root=X`); anything else
(`--help` of a command, a typo, an option this parser does not know) goes to click, which then
answers as it always did. Errors read as click's path says them
(cli/errors.py, shared). After the output is flushed the process ends with os._exit: no
module teardown (several ms for what discovery and NVML allocated), and every file was
already closed (`with Host(...)`).

The top-level help is click's own text, generated into cli/help_text.py and served when the
terminal is at least click's maximum width (its text is the same at every width >= 80);
tests/cli/test_cli_fast.py checks both against click, so a new command fails the suite until
`python -m mcpnode.cli.fast --write-help` regenerates it.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy reads it the same)
if TYPE_CHECKING:
    from mcpnode.cli.commands import Output

# command -> {option: takes a value, or the choices it takes}; flags are False.
_OPTIONS: dict[str, dict[str, bool | tuple[str, ...]]] = {
    "topo": {
        "--root": True,
        "--tree": False,
        "--format": ("text", "json"),
        "--color": ("auto", "always", "never"),
    },
    "gpus": {"--root": True, "--format": ("text", "json")},
    # `manifest show`, served only with --published (reading the file is the cheap part; a
    # manifest built anew needs discovery, the audit and the profile: click's path)
    "manifest": {"--root": True, "--published": False, "--format": ("text", "json")},
    # the service itself (systemd's ExecStart): click and the other commands' modules it
    # imports would stay in the agent's memory for its whole life (~1.5 MB). --profiles-dir
    # (click checks it is a directory) and anything else go to click.
    "agent": {"--config": True, "--root": True, "--inject-fd": True},
}

# `exec`'s options before COMMAND (cli/main.py placement_options); --dry-run, --format and
# anything else go to click. True: takes a value, a tuple: the values it takes.
_EXEC_OPTIONS: dict[str, bool | tuple[str, ...]] = {
    "--root": True,
    "--gpu": True,
    "--scope": ("slice", "cache", "node", "socket"),
    "--housekeeping": True,
    "--membind": False,
    "--preferred": False,
    "--fresh": False,
}


def _value(
    args: list[str], i: int, kind: bool | tuple[str, ...], eq: str, inline: str
) -> tuple[str | bool, int] | None:
    """The value of the option at `args[i]` (`kind`: False a flag, True any value, a tuple its
    choices) and the index after it, or None when click must judge it."""
    if kind is False:
        return None if eq else (True, i + 1)
    if eq:
        value = inline
    elif i + 1 < len(args):
        i += 1
        value = args[i]
    else:
        return None
    if isinstance(kind, tuple) and value not in kind:
        return None
    return value, i + 1


def _parse(command: str, args: list[str]) -> dict[str, str | bool] | None:
    """The options of `command` from `args`, or None when click must see them."""
    spec = _OPTIONS[command]
    out: dict[str, str | bool] = {}
    i = 0
    while i < len(args):
        name, eq, inline = args[i].partition("=")
        kind = spec.get(name)
        if kind is None or name in out:
            return None  # -h, --help, unknown or repeated: click says what it says
        taken = _value(args, i, kind, eq, inline)
        if taken is None:
            return None
        out[name], i = taken
    return out


_SERVED = ("topo", "gpus", "manifest", "exec")


def _parse_exec(args: list[str]) -> tuple[dict[str, str | bool], list[str]] | None:
    """exec's options and COMMAND, as click reads them (options until `--` or the first word
    that is not one, the rest untouched), or None when click must see them."""
    out: dict[str, str | bool] = {}
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            i += 1
            break
        if not arg.startswith("-"):
            break
        name, eq, inline = arg.partition("=")
        kind = _EXEC_OPTIONS.get(name)
        # --membind and --preferred are one flag: either given twice is click's to judge
        key = "--membind" if name == "--preferred" else name
        if kind is None or key in out:
            return None
        taken = _value(args, i, kind, eq, inline)
        if taken is None:
            return None
        value, i = taken
        out[key] = name == "--membind" if key == "--membind" else value
    command = args[i:]
    if not command or "--gpu" not in out:
        return None  # click's "Missing argument" / "Missing option" says it
    return out, command


def _say(line: str) -> None:
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


def _exec(opts: dict[str, str | bool], command: list[str]) -> None:
    """`mcpnode exec` without --dry-run (cli/commands.py exec_command); returns only by
    raising."""
    from mcpnode.cli.commands import exec_command
    from mcpnode.cli.placing import PlacementRequest

    housekeeping = opts.get("--housekeeping")
    request = PlacementRequest(
        str(opts.get("--root", "/")),
        str(opts["--gpu"]),
        scope=str(opts.get("--scope", "slice")),
        membind=bool(opts.get("--membind", False)),
        housekeeping=None if housekeeping is None else str(housekeeping),
        fresh=bool(opts.get("--fresh", False)),
    )
    exec_command(request, command, os.environ, notice=_say)


def _run(command: str, opts: dict[str, str | bool]) -> Output:
    """The output of `topo`, `gpus` or `manifest show --published` (cli/commands.py)."""
    from mcpnode.cli import commands

    root = str(opts.get("--root", "/"))
    fmt = str(opts.get("--format", "text"))
    if command == "manifest":
        return commands.manifest_show_command(root, published=True, fmt=fmt)
    if command == "topo":
        from mcpnode.cli.color import use_color

        color = use_color(str(opts.get("--color", "auto")), os.environ, sys.stdout.isatty())
        return commands.topo_command(
            root, tree=bool(opts.get("--tree", False)), fmt=fmt, color=color
        )
    return commands.gpus_command(root, fmt=fmt)


def _agent(argv: list[str]) -> None:
    """`mcpnode agent` when its options are ones this parser serves: runs the agent and exits
    with its status, or returns to let click parse `argv`."""
    opts = _parse("agent", argv)
    if opts is None:
        return
    fd = opts.get("--inject-fd")
    if fd is not None and not (isinstance(fd, str) and fd.isascii() and fd.isdigit()):
        return  # click's int conversion says what it says
    from mcpnode.cli.commands import agent_command
    from mcpnode.cli.errors import error_line
    from mcpnode.errors import McpnodeError

    try:
        code = agent_command(
            str(opts.get("--root", "/")),
            None if "--config" not in opts else str(opts["--config"]),
            inject_fd=None if fd is None else int(fd),
        )
    except (McpnodeError, OSError) as err:
        said = error_line(err)
        if said is None:
            raise
        _say(said[0])
        sys.exit(said[1])
    sys.exit(code)


def _help_width_is_default() -> bool:
    """click's help text is the same at every terminal width of 80 and more (it caps the width
    at 80, HelpFormatter's max_width); shutil.get_terminal_size's order: COLUMNS, then the
    terminal, then 80."""
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        return int(columns) >= 80
    try:
        return os.get_terminal_size(sys.stdout.fileno()).columns >= 80
    except (OSError, ValueError):
        return True  # not a terminal: shutil falls back to 80 columns


def _fast(argv: list[str]) -> Output | None:
    """The output of a command this dispatcher serves, or None to hand `argv` to click."""
    if argv in (["--help"], ["-h"], []):
        if not _help_width_is_default():
            return None
        from mcpnode.cli.help_text import HELP

        return HELP
    if argv == ["--version"]:
        from mcpnode import __version__

        return f"mcpnode, version {__version__}\n"
    if argv[:2] == ["manifest", "show"]:
        opts = _parse("manifest", argv[2:])
        if opts is not None and opts.get("--published"):
            return _run("manifest", opts)
        return None
    if argv and argv[0] in ("topo", "gpus"):
        opts = _parse(argv[0], argv[1:])
        if opts is not None:
            return _run(argv[0], opts)
    if argv and argv[0] == "exec":
        parsed = _parse_exec(argv[1:])
        if parsed is not None:
            _exec(*parsed)  # execve, or raises
    return None


def _finish(text: Output) -> None:
    """Write (a text, or what a writer writes, then a newline), flush, and end the process
    without teardown."""
    try:
        if isinstance(text, str):
            sys.stdout.write(text)  # --help and --version import no command module
        else:
            from mcpnode.cli.commands import write_output

            write_output(text, sys.stdout.write)
        sys.stdout.flush()
    except BrokenPipeError:
        # `mcpnode topo | head`: the reader left; nothing more to say, as `cat` would.
        os._exit(0)
    os._exit(0)


def _fail(line: str, code: int) -> None:
    _say(line)
    os._exit(code)


def main() -> None:
    """`mcpnode`: the fast path when it serves the command, else click (cli/main.py main)."""
    argv = sys.argv[1:]
    if argv[:1] == ["agent"] and "_MCPNODE_COMPLETE" not in os.environ:
        _agent(argv[1:])  # a long-running service: no gc threshold or os._exit of the others
    # Shell completion calls the program with no arguments and the words in the environment
    # (click's `_MCPNODE_COMPLETE=bash_complete`): that is click's to answer, not --help's.
    served = (argv and argv[0] in _SERVED) or argv in (["--help"], ["-h"], [], ["--version"])
    if served and "_MCPNODE_COMPLETE" not in os.environ:
        # A one-shot command that builds tens of thousands of objects, nearly none in cycles:
        # the cyclic collector's default gen-0 threshold (700 allocations) runs it hundreds of
        # times for nothing. Raised as mypy raises it (mypy/main.py, `gc.set_threshold(200 *
        # 1000, 30, 30)`): `topo --format json` 0.93x the time on a small dump and at 8,192
        # VFs alike, for under 1 MiB more peak RSS.
        import gc

        gc.set_threshold(200_000, 30, 30)
        from mcpnode.cli.errors import error_line
        from mcpnode.errors import McpnodeError

        try:
            text = _fast(argv)
        except (McpnodeError, OSError) as err:
            said = error_line(err)
            if said is None:
                raise
            _fail(*said)
        if text is not None:
            _finish(text)
    from mcpnode.cli.main import main as click_main

    click_main()


def write_help() -> None:
    """Regenerate cli/help_text.py from click's own `mcpnode --help` (80 columns)."""
    from pathlib import Path

    from click.testing import CliRunner

    from mcpnode.cli.main import cli

    result = CliRunner().invoke(cli, ["--help"], prog_name="mcpnode", terminal_width=80)
    # Our own source file (a build step), not the machine: Host is not involved.
    Path(__file__).with_name("help_text.py").write_text(
        '"""`mcpnode --help` as click renders it at 80 columns, served by cli/fast.py.\n\n'
        "Generated by `python -m mcpnode.cli.fast --write-help`;\n"
        'tests/cli/test_cli_fast.py fails when it is stale."""\n\n'
        "# fmt: off\n"
        f"HELP = {result.output!r}  # noqa: E501\n"
    )


if __name__ == "__main__":
    if sys.argv[1:] == ["--write-help"]:
        write_help()
    else:
        main()
