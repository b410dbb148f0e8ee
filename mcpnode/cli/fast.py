"""The `mcpnode` entry point: a small dispatcher in front of click for the commands that run
hot, everything else handed to click (cli/main.py).

`topo`, `gpus` and `mcpnode --help` / `--version` are what scripts, launchers and people run
most, and click alone costs more to import (16 ms on a quiet 2-core VM) than hwloc's whole
`lstopo` run on a sysfs dump. Here their few options are parsed by hand — exactly the options
click declares for them, in the forms click accepts (`--root X`, `--root=X`); anything else
(`--help` of a command, a typo, an option this parser does not know) goes to click, which then
answers as it always did. After the output is flushed the process ends with os._exit: no
module teardown (several ms for what discovery and NVML allocated), and every file was
already closed (`with Host(...)`).

The top-level help is click's own text, generated into cli/help_text.py and served when the
terminal is at least click's maximum width (its text is the same at every width >= 80);
tests/test_cli_fast.py checks both against click, so a new command fails the suite until
`python -m mcpnode.cli.fast --write-help` regenerates it.
"""

from __future__ import annotations

import os
import sys

# Exit codes and error lines as cli/main.py's main() gives them (cli/exitcodes.py).
_EXIT_ERROR = 2

# command -> {option: takes a value, or the choices it takes}; flags are False.
_OPTIONS: dict[str, dict[str, bool | tuple[str, ...]]] = {
    "topo": {"--root": True, "--tree": False, "--format": ("text", "json")},
    "gpus": {"--root": True, "--format": ("text", "json")},
}


def _parse(command: str, args: list[str]) -> dict[str, str | bool] | None:
    """The options of `command` from `args`, or None when click must see them."""
    spec = _OPTIONS[command]
    out: dict[str, str | bool] = {}
    i = 0
    while i < len(args):
        arg = args[i]
        name, eq, inline = arg.partition("=")
        kind = spec.get(name)
        if kind is None or name in out:
            return None  # -h, --help, unknown or repeated: click says what it says
        if kind is False:
            if eq:
                return None
            out[name] = True
            i += 1
            continue
        if eq:
            value = inline
        elif i + 1 < len(args):
            value = args[i + 1]
            i += 1
        else:
            return None
        if isinstance(kind, tuple) and value not in kind:
            return None
        out[name] = value
        i += 1
    return out


def _run(command: str, opts: dict[str, str | bool]) -> str:
    """Render `command` (the same calls as its click command in cli/main.py)."""
    from mcpnode.host import Host
    from mcpnode.topology.discover import discover_host

    root = str(opts.get("--root", "/"))
    with Host(root) as host:
        topology = discover_host(host)
    fmt = opts.get("--format", "text")
    if command == "topo":
        from mcpnode.cli import render_topo

        if fmt == "json":
            return render_topo.as_json(topology) + "\n"
        if opts.get("--tree"):
            return render_topo.as_tree(topology)
        return render_topo.as_matrix(topology)
    from mcpnode.cli import render_gpus

    return render_gpus.as_json(topology) + "\n" if fmt == "json" else render_gpus.as_text(topology)


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


def _fast(argv: list[str]) -> str | None:
    """The output of a command this dispatcher serves, or None to hand `argv` to click."""
    if argv in (["--help"], ["-h"], []):
        if not _help_width_is_default():
            return None
        from mcpnode.cli.help_text import HELP

        return HELP
    if argv == ["--version"]:
        from mcpnode import __version__

        return f"mcpnode, version {__version__}\n"
    if argv and argv[0] in _OPTIONS:
        opts = _parse(argv[0], argv[1:])
        if opts is not None:
            return _run(argv[0], opts)
    return None


def _finish(text: str) -> None:
    """Write, flush, and end the process without teardown."""
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        # `mcpnode topo | head`: the reader left; nothing more to say, as `cat` would.
        os._exit(0)
    os._exit(0)


def _fail(line: str) -> None:
    sys.stderr.write(line + "\n")
    sys.stderr.flush()
    os._exit(_EXIT_ERROR)


def main() -> None:
    """`mcpnode`: the fast path when it serves the command, else click (cli/main.py main)."""
    argv = sys.argv[1:]
    if (argv and argv[0] in _OPTIONS) or argv in (["--help"], ["-h"], [], ["--version"]):
        from mcpnode.errors import HostError, McpnodeError, RootError

        try:
            text = _fast(argv)
        except RootError as err:  # as cli/main.py's main() says them: the option, one line
            _fail(f"mcpnode: --root {' '.join(str(err).split())}")
        except (HostError, OSError) as err:
            _fail(f"mcpnode: {err}")
        except McpnodeError as err:
            _fail(f"mcpnode: {type(err).__name__}: {err}")
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
        'tests/test_cli_fast.py fails when it is stale."""\n\n'
        "# fmt: off\n"
        f"HELP = {result.output!r}  # noqa: E501\n"
    )


if __name__ == "__main__":
    if sys.argv[1:] == ["--write-help"]:
        write_help()
    else:
        main()
