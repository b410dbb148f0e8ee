"""The entry point's fast path (cli/fast.py) says exactly what click says: the same bytes for
topo and gpus on every fixture, the same help and version, the same errors and exit codes;
and whatever it does not serve reaches click unchanged."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from mcpnode.cli.help_text import HELP
from mcpnode.cli.main import cli
from tests.test_outputs_stable import FIXTURES, GOLDEN, VIEWS

REPO = Path(__file__).resolve().parent.parent
HOSTS = REPO / "tests" / "fixtures" / "hosts"


def mcpnode(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mcpnode", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        check=False,
    )


def test_fast_outputs_are_the_committed_ones() -> None:
    """Every fixture, every view: the fast path's bytes hash to test_outputs_stable's."""
    import hashlib

    golden = json.loads(GOLDEN.read_text())
    for name in FIXTURES:
        for view, args in VIEWS.items():
            res = mcpnode(*args, "--root", str(HOSTS / name))
            assert res.returncode == 0, res.stderr
            got = hashlib.sha256(res.stdout.encode()).hexdigest()
            assert got == golden[name][view], (name, view)


def test_options_in_every_form_click_accepts() -> None:
    root = str(HOSTS / "hgx-h100-8gpu-8nic")
    want = mcpnode("topo", "--format", "json", "--root", root).stdout
    assert mcpnode("topo", f"--root={root}", "--format=json").stdout == want
    assert mcpnode("topo", "--tree", "--root", root).stdout == (
        CliRunner().invoke(cli, ["topo", "--tree", "--root", root]).stdout
    )


def test_help_and_version_are_clicks() -> None:
    runner = CliRunner()
    assert runner.invoke(cli, ["--help"], prog_name="mcpnode", terminal_width=80).output == HELP, (
        "cli/help_text.py is stale: python -m mcpnode.cli.fast --write-help"
    )
    for argv in (["--help"], ["-h"], []):
        assert mcpnode(*argv).stdout == HELP
    narrow = mcpnode("--help", env={"COLUMNS": "50"})
    assert narrow.stdout != HELP and "Usage: " in narrow.stdout  # click itself, 50 wide
    version = mcpnode("--version")
    assert version.returncode == 0
    assert version.stdout == runner.invoke(cli, ["--version"], prog_name="mcpnode").output


@pytest.mark.parametrize(
    "argv",
    [
        ["topo", "--help"],
        ["topo", "--bogus"],
        ["topo", "--format", "yaml"],
        ["topo", "--root"],
        ["gpus", "--tree"],
        ["topo", "--tree=yes"],
    ],
)
def test_what_the_fast_path_does_not_serve_goes_to_click(argv: list[str]) -> None:
    fast = mcpnode(*argv)
    slow = subprocess.run(
        [sys.executable, "-c", "from mcpnode.cli.main import main; main()", *argv],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    assert (fast.returncode, fast.stdout, fast.stderr) == (
        slow.returncode,
        slow.stdout,
        slow.stderr,
    )


def test_errors_are_one_line_with_clicks_exit_code(tmp_path: Path) -> None:
    res = mcpnode("topo", "--root", str(tmp_path / "missing"))
    assert res.returncode == 2
    assert res.stderr == f"mcpnode: --root {tmp_path / 'missing'}: no such file or directory\n"
    (tmp_path / "file").write_text("x")
    res = mcpnode("gpus", "--root", str(tmp_path / "file"))
    assert res.returncode == 2 and "not a directory, .tar.gz or .tar.bz2" in res.stderr


def test_a_reader_that_leaves_early_is_no_error() -> None:
    root = str(HOSTS / "hgx-h100-8gpu-8nic")
    proc = subprocess.Popen(
        [sys.executable, "-m", "mcpnode", "topo", "--format", "json", "--root", root],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.read(10)
    proc.stdout.close()  # like `| head -c 10`
    err = proc.stderr.read()
    assert proc.wait(timeout=30) == 0 and err == b""
