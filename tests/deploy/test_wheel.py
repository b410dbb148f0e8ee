"""The wheel as a release ships it (tests/support/wheelbuild.py: pip, through the in-tree backend
tools/build_backend.py): its metadata (the license as an SPDX expression),
its data files (the profiles without the test-only one, the units, man pages for every command
that pass groff's checks, completion scripts that complete for real in bash).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import click
import pytest

BIN = Path(sys.executable).parent
DATA = "mcpnode-0.1.0.data/data/share"


@pytest.fixture(scope="module")
def wheel(built_wheel: tuple[Path, str]) -> Path:
    path, output = built_wheel
    # setuptools warns about a table-form project.license (PEP 639); there must be none.
    assert "License classifiers are deprecated" not in output
    assert "`project.license` as a TOML table is deprecated" not in output
    return path


@pytest.fixture(scope="module")
def unpacked(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("unpacked")
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(out)
    return out


def test_license_is_an_spdx_expression(unpacked: Path) -> None:
    metadata = (unpacked / "mcpnode-0.1.0.dist-info/METADATA").read_text()
    assert "License-Expression: Apache-2.0" in metadata.splitlines()
    assert not [ln for ln in metadata.splitlines() if ln.startswith("License: ")]


def test_profiles_without_the_test_profile(wheel: Path, unpacked: Path) -> None:
    profiles = sorted(p.name for p in (unpacked / DATA / "mcpnode/profiles").iterdir())
    assert profiles == ["base.toml", "inference-latency.toml", "inference-throughput.toml"]
    with zipfile.ZipFile(wheel) as zf:
        assert not [n for n in zf.namelist() if "net-test" in n]


def visible_commands(cmd: click.Command, path: tuple[str, ...]) -> list[str]:
    out = ["-".join(path)]
    if isinstance(cmd, click.Group):
        for name, sub in sorted(cmd.commands.items()):
            if not sub.hidden:
                out += visible_commands(sub, (*path, name))
    return out


def test_a_man_page_for_every_command(unpacked: Path) -> None:
    from mcpnode.cli.main import cli

    man = unpacked / DATA / "man/man1"
    pages = sorted(p.name for p in man.iterdir())
    assert pages == sorted(f"{name}.1" for name in visible_commands(cli, ("mcpnode",)))
    top = (man / "mcpnode.1").read_text()
    for section in (".SH COMMANDS", ".SH EXIT STATUS", ".SH ENVIRONMENT", "NO_COLOR"):
        assert section in top
    export = (man / "mcpnode-export.1").read_text()
    assert "\\fB\\-\\-slurm\\-type [autodetect|short]\\fR" in export  # the options, from click
    assert ".SH SEE ALSO\n\\fBmcpnode\\fR(1)" in export


@pytest.mark.skipif(shutil.which("groff") is None, reason="groff not installed (package groff)")
def test_man_pages_pass_groff_checks(unpacked: Path) -> None:
    """groff -ww: every warning on, as man(1) would render them; -z: no output needed."""
    for page in sorted((unpacked / DATA / "man/man1").iterdir()):
        proc = subprocess.run(
            ["groff", "-man", "-Tutf8", "-ww", "-z", str(page)],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        assert proc.returncode == 0 and proc.stderr == "", (page.name, proc.stderr)


@pytest.mark.skipif(shutil.which("lexgrog") is None, reason="lexgrog (man-db) not installed")
def test_mandb_reads_each_name_line(unpacked: Path) -> None:
    """lexgrog parses NAME as mandb does for `apropos` / `man -k`."""
    page = unpacked / DATA / "man/man1/mcpnode-topo.1"
    proc = subprocess.run(["lexgrog", str(page)], capture_output=True, text=True, check=False)
    assert proc.returncode == 0
    assert '"mcpnode-topo - GPU/NIC topology matrix' in proc.stdout


def test_completion_scripts_for_three_shells(unpacked: Path) -> None:
    share = unpacked / DATA
    assert (
        "_MCPNODE_COMPLETE=bash_complete"
        in (share / "bash-completion/completions/mcpnode").read_text()
    )
    assert "#compdef mcpnode" in (share / "zsh/site-functions/_mcpnode").read_text()
    assert (
        "complete --no-files --command mcpnode"
        in (share / "fish/vendor_completions.d/mcpnode.fish").read_text()
    )


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash not installed")
def test_bash_completion_completes(unpacked: Path) -> None:
    """Sourced in a real bash, the script asks this checkout's mcpnode (on PATH) and fills
    COMPREPLY: subcommands, then an option's choices."""
    script = unpacked / DATA / "bash-completion/completions/mcpnode"
    program = f"""
source {script}
complete -p mcpnode
COMP_WORDS=(mcpnode pro); COMP_CWORD=1; COMPREPLY=()
_mcpnode_completion mcpnode; echo "words: ${{COMPREPLY[*]}}"
COMP_WORDS=(mcpnode export --slurm-type ""); COMP_CWORD=3; COMPREPLY=()
_mcpnode_completion mcpnode; echo "choices: ${{COMPREPLY[*]}}"
"""
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    proc = subprocess.run(
        ["bash", "--norc", "--noprofile", "-c", program],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "complete -o nosort -F _mcpnode_completion mcpnode" in proc.stdout
    assert "words: probe profiles" in proc.stdout
    assert "choices: autodetect short" in proc.stdout


def test_the_exit_statuses_on_the_man_page_are_the_codes() -> None:
    """mcpnode(1) lists every exit status mcpnode/exitcodes.py defines, and no other."""
    from mcpnode import exitcodes
    from tools import manpages

    codes = {v for k, v in vars(exitcodes).items() if k.startswith("EXIT_")}
    assert {int(code) for code, _ in manpages.EXIT_STATUS} == codes
