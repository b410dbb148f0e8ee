"""`mcpnode agent` through the fast entry point (cli/fast.py): the service starts without click
in its memory, and where it cannot start it says what click's path says, with the same exit
status; the forms it does not serve reach click."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CLICK = [sys.executable, "-c", "from mcpnode.cli.main import main; main()"]
FAST = [sys.executable, "-m", "mcpnode"]
# Which of click and the agent's modules a run imported, printed at exit.
SPY = (
    "import atexit, sys, runpy; "
    "atexit.register(lambda: print(sorted(m for m in ('click', 'mcpnode.agent.service') "
    "if m in sys.modules), file=sys.stderr)); "
    "sys.argv = ['mcpnode', *sys.argv[1:]]; runpy.run_module('mcpnode', run_name='__main__')"
)


def run(argv: list[str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*argv, *args], cwd=REPO, capture_output=True, text=True, check=False, timeout=120
    )


@pytest.mark.parametrize(
    "args",
    [
        ["--root", "{missing}"],
        ["--root={missing}", "--config", "/etc/mcpnode/other.toml"],
        ["--inject-fd", "x", "--root", "{missing}"],  # click's int conversion refuses it
        ["--profiles-dir", "{missing}", "--root", "{missing}"],
        ["--root", "{missing}", "--verbose"],
    ],
)
def test_a_root_that_cannot_be_read_reads_as_clicks(tmp_path: Path, args: list[str]) -> None:
    argv = ["agent", *(a.replace("{missing}", str(tmp_path / "missing")) for a in args)]
    fast, slow = run(FAST, *argv), run(CLICK, *argv)
    assert (fast.returncode, fast.stdout, fast.stderr) == (
        slow.returncode,
        slow.stdout,
        slow.stderr,
    )
    assert fast.returncode != 0


def test_the_served_agent_never_imports_click(tmp_path: Path) -> None:
    served = run([sys.executable, "-c", SPY], "agent", "--root", str(tmp_path / "missing"))
    assert served.stderr.splitlines()[-1] == "['mcpnode.agent.service']"
    handed = run([sys.executable, "-c", SPY], "agent", "--root", str(tmp_path), "--bogus")
    assert "'click'" in handed.stderr.splitlines()[-1]
