"""Man pages and shell completion scripts for `mcpnode`, generated from the click command tree.

Run at build time by tools/build_backend.py, which writes them under build/data/ for the
wheel's data files (pyproject.toml, [tool.setuptools.data-files]): `share/man/man1/*.1`,
`share/bash-completion/completions/mcpnode`, `share/zsh/site-functions/_mcpnode`,
`share/fish/vendor_completions.d/mcpnode.fish`. `python3 -m tools.manpages DIR` does the same
by hand. `python3 -m tools.manpages --prefix .venv` installs them where the wheel would, under
a prefix: `make run` does it for its editable install, which carries no data files.

One page per command, named as git names its pages: `mcpnode(1)` for the group and the exit
statuses, `mcpnode-topo(1)`, `mcpnode-profiles-list(1)`. Everything on a page comes from the
command's own help, options and defaults, so `--help` and `man` never disagree. The pages are
roff for the `man` macros (groff_man(7)); no date in `.TH`, so the same source gives the same
bytes (reproducible builds).

The completion scripts are click's own (click.shell_completion): each calls `mcpnode` back with
`_MCPNODE_COMPLETE=<shell>_complete` to complete, so they follow the installed version.
"""

from __future__ import annotations

import re
import sys
import tempfile
from pathlib import Path

import click

PROG = "mcpnode"
COMPLETE_VAR = "_MCPNODE_COMPLETE"
# shell -> the file name its completion directory expects (bash-completion loads the command's
# name, zsh's fpath wants `_name`, fish `name.fish`).
COMPLETION_FILES = {"bash": "mcpnode", "zsh": "_mcpnode", "fish": "mcpnode.fish"}

# The exit statuses every command shares, for mcpnode(1): mcpnode/exitcodes.py, in words.
EXIT_STATUS = (
    ("0", "success"),
    (
        "1",
        "the command ran and found something wrong (an audit FAIL, tuning drift); "
        "mcpnode agent: a failure at start, or an incomplete rollback at stop",
    ),
    ("2", "the command could not do its job (an unreadable root, a failed write)"),
    ("3", "verify could not tell (a key unreadable, no active profile)"),
    ("64", "usage error: a bad option or argument, an unknown profile (EX_USAGE)"),
    ("65", "invalid input data: a configuration, manifest or probe record (EX_DATAERR)"),
    ("66", "input missing: a configuration file, or pin's process (EX_NOINPUT)"),
    ("69", "the placement names CPUs or NUMA nodes this machine lacks (EX_UNAVAILABLE)"),
    ("75", "another mcpnode run holds the state lock; try again (EX_TEMPFAIL)"),
    ("77", "pin refused by a safety check (EX_NOPERM)"),
    ("78", "mcpnode agent: its configuration or profile cannot be used (EX_CONFIG)"),
    ("127", "exec: the command is not found or not executable"),
)
ENVIRONMENT = (
    ("NO_COLOR", "when set and not empty, no colour in any output unless --color=always "
     "(no-color.org)."),
    ("JOURNAL_STREAM", "set by systemd for a service whose output goes to the journal: logs "
     "are then JSON lines with an <N> syslog priority prefix, so journalctl -p filters them."),
)  # fmt: skip


def escape(text: str) -> str:
    """Text for a roff line: backslashes escaped, and a leading `.` or `'` (a request to roff)
    made literal with `\\&`."""
    text = text.replace("\\", "\\e")
    return "\n".join(
        "\\&" + line if line.startswith((".", "'")) else line for line in text.split("\n")
    )


def _opt(text: str) -> str:
    """An option spelling in bold, its hyphens as roff minus signs (so they copy as ASCII)."""
    return "\\fB" + escape(text).replace("-", "\\-") + "\\fR"


def _paragraphs(text: str) -> list[str]:
    """click help text as roff paragraphs: blank lines separate them; click's `\\b` marks a
    paragraph not to rewrap, kept as a no-fill block."""
    out: list[str] = []
    for para in re.split(r"\n\s*\n", text.strip()):
        if para.startswith("\b"):
            body = para[1:].strip("\n")
            out += [".PP", ".nf", escape(body), ".fi"]
        else:
            out += [".PP", escape(" ".join(para.split()))]
    return out


Path_ = tuple[str, ...]


def _commands(cmd: click.Command, path: Path_) -> list[tuple[Path_, click.Command]]:
    """Every command under `cmd`, itself first, depth first, hidden ones left out."""
    out = [(path, cmd)]
    if isinstance(cmd, click.Group):
        for name in sorted(cmd.commands):
            sub = cmd.commands[name]
            if not sub.hidden:
                out += _commands(sub, (*path, name))
    return out


def page_name(path: tuple[str, ...]) -> str:
    return "-".join(path)


def man_page(path: tuple[str, ...], cmd: click.Command, version: str) -> str:
    """The roff page of one command (`path` = ("mcpnode", "profiles", "list"))."""
    name = page_name(path)
    ctx = click.Context(cmd, info_name=" ".join(path))
    help_text = cmd.help or ""
    short = cmd.get_short_help_str(limit=200).rstrip(".")
    roff_name = escape(name).replace("-", "\\-")
    lines = [
        f'.TH "{name.upper()}" "1" "" "mcpnode {version}" "mcpnode manual"',
        ".SH NAME",
        f"{roff_name} \\- {escape(short)}",
        ".SH SYNOPSIS",
        ".B " + escape(" ".join(path)),
        escape(" ".join(cmd.collect_usage_pieces(ctx))),
        ".SH DESCRIPTION",
        *_paragraphs(help_text),
    ]
    options = [p for p in cmd.get_params(ctx) if isinstance(p, click.Option) and not p.hidden]
    if options:
        lines.append(".SH OPTIONS")
        for opt in options:
            record = opt.get_help_record(ctx)
            if record is None:
                continue
            spelling, text = record
            lines += [".TP", _opt(spelling), escape(" ".join(text.split()))]
    if isinstance(cmd, click.Group):
        lines.append(".SH COMMANDS")
        for sub_path, sub in _commands(cmd, path)[1:]:
            if len(sub_path) != len(path) + 1:
                continue
            lines += [
                ".TP",
                f"\\fB{escape(sub_path[-1])}\\fR(1): \\fB{page_name(sub_path)}\\fR",
                escape(sub.get_short_help_str(limit=200)),
            ]
    if len(path) == 1:
        lines.append(".SH EXIT STATUS")
        for code, meaning in EXIT_STATUS:
            lines += [".TP", f"\\fB{code}\\fR", escape(meaning)]
        lines.append(".SH ENVIRONMENT")
        for var, meaning in ENVIRONMENT:
            lines += [".TP", f"\\fB{var}\\fR", escape(meaning)]
    see = [PROG] if len(path) > 1 else []
    if isinstance(cmd, click.Group):
        see += [page_name(p) for p, _ in _commands(cmd, path)[1:]]
    if see:
        lines += [".SH SEE ALSO", ", ".join(f"\\fB{escape(s)}\\fR(1)" for s in see)]
    return "\n".join(lines) + "\n"


def man_pages(cli: click.Command, version: str) -> dict[str, str]:
    """File name (`mcpnode-topo.1`) -> roff, for every visible command of the tree."""
    return {f"{page_name(p)}.1": man_page(p, c, version) for p, c in _commands(cli, (PROG,))}


def completion_scripts(cli: click.Command) -> dict[str, str]:
    """File name -> click's completion script, for bash, zsh and fish."""
    from click.shell_completion import get_completion_class

    out = {}
    for shell, filename in COMPLETION_FILES.items():
        cls = get_completion_class(shell)
        assert cls is not None, shell
        out[filename] = cls(cli, {}, PROG, COMPLETE_VAR).source()
    return out


def write_all(out: Path) -> list[Path]:
    """Write `out/man/man1/*.1` and `out/completion/*` from this checkout's CLI; return the
    files written. Imports mcpnode.cli.main, which needs only click."""
    from mcpnode import __version__
    from mcpnode.cli.main import cli

    written = []
    man = out / "man" / "man1"
    comp = out / "completion"
    for d in (man, comp):
        d.mkdir(parents=True, exist_ok=True)
        for old in d.iterdir():
            old.unlink()
    for name, text in man_pages(cli, __version__).items():
        (man / name).write_text(text, encoding="utf-8")
        written.append(man / name)
    for name, text in completion_scripts(cli).items():
        (comp / name).write_text(text, encoding="utf-8")
        written.append(comp / name)
    return written


# Where the wheel installs each generated file under its prefix (pyproject.toml,
# [tool.setuptools.data-files]).
INSTALLED = {
    "man/man1": "share/man/man1",
    f"completion/{COMPLETION_FILES['bash']}": "share/bash-completion/completions",
    f"completion/{COMPLETION_FILES['zsh']}": "share/zsh/site-functions",
    f"completion/{COMPLETION_FILES['fish']}": "share/fish/vendor_completions.d",
}


def install(prefix: Path) -> list[Path]:
    """Generate (in a temporary directory) and copy each file where the wheel puts it under
    `prefix`; the old mcpnode pages go first, so a removed command loses its page."""
    with tempfile.TemporaryDirectory() as tmp:
        return _install(prefix, Path(tmp))


def _install(prefix: Path, staging: Path) -> list[Path]:
    write_all(staging)
    out = []
    for source, target in INSTALLED.items():
        src = staging / source
        dest = prefix / target
        dest.mkdir(parents=True, exist_ok=True)
        if src.is_dir():
            for old in dest.glob("mcpnode*.1"):
                old.unlink()
            files = sorted(src.iterdir())
        else:
            files = [src]
        for f in files:
            (dest / f.name).write_bytes(f.read_bytes())
            out.append(dest / f.name)
    return out


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    if sys.argv[1:2] == ["--prefix"] and len(sys.argv) == 3:
        prefix = Path(sys.argv[2])
        files = install(prefix)
        man = (prefix / "share" / "man").resolve()
        bash = (prefix / "share" / "bash-completion" / "completions" / "mcpnode").resolve()
        print(
            f"man pages and completion in {prefix}/share: `MANPATH={man}: man mcpnode` "
            f"(or on PATH with {prefix}/bin), `. {bash}` for bash completion"
        )
    else:
        files = write_all(Path(sys.argv[1] if len(sys.argv) > 1 else "build/data"))
        print(f"wrote {len(files)} files")
