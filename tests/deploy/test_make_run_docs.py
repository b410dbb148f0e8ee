"""`make run` installs the man pages and completion scripts into the venv, where a wheel puts
them (the editable install carries none), and says in one line how to reach them. Run here on a
stand-in venv directory: its install stamp is made up to date first, so make does not install
the package again; the Makefile's own rule does the rest."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from mcpnode import __version__
from mcpnode.cli.main import cli
from tools.manpages import man_pages

REPO = Path(__file__).resolve().parents[2]


def make(venv: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            "make",
            "-s",
            "-C",
            str(REPO),
            f"VENV={venv}",
            f"PY={sys.executable}",
            f"{venv}/.installed-docs",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.skipif(shutil.which("make") is None, reason="make not installed: skipped")
def test_make_installs_man_pages_and_completion_into_the_venv(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / ".installed-run").touch()  # `make run`'s install, done: not redone here
    first = make(venv)
    assert first.returncode == 0, first.stderr
    lines = first.stdout.splitlines()
    assert len(lines) == 1 and "man mcpnode" in lines[0] and "bash completion" in lines[0]
    pages = sorted(p.name for p in (venv / "share" / "man" / "man1").iterdir())
    assert pages == sorted(man_pages(cli, __version__)) and "mcpnode-audit.1" in pages
    bash = venv / "share" / "bash-completion" / "completions" / "mcpnode"
    assert "_MCPNODE_COMPLETE" in bash.read_text()
    assert (venv / "share" / "zsh" / "site-functions" / "_mcpnode").is_file()
    assert (venv / "share" / "fish" / "vendor_completions.d" / "mcpnode.fish").is_file()
    if shutil.which("man"):
        env = {**os.environ, "MANPATH": f"{venv / 'share' / 'man'}:"}
        found = subprocess.run(["man", "-w", "mcpnode"], env=env, capture_output=True, text=True)
        assert found.stdout.strip() == str(venv / "share" / "man" / "man1" / "mcpnode.1")
    again = make(venv)
    assert again.returncode == 0 and again.stdout == ""  # up to date: said once
