"""The peak RSS of one `mcpnode` command, as its own figure."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

# Linux charges a child's ru_maxrss with the high-water mark of the address space it replaced at
# execve(2) (fs/exec.c, exec_mmap() -> setmax_mm_hiwater_rss()): a child forked or vforked
# from this pytest process starts out "peaking" at pytest's own RSS, hundreds of MiB late in a
# full run. So a small launcher spawns the command and reports its child's figure; the
# launcher's own ~10 MiB is the floor the figure inherits.
_LAUNCHER = """
import os, sys
fa = [(os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0)]
pid = os.posix_spawn(sys.executable, [sys.executable, *sys.argv[1:]], os.environ, file_actions=fa)
_pid, status, usage = os.wait4(pid, 0)
print(usage.ru_maxrss, flush=True)
sys.exit(os.waitstatus_to_exitcode(status))
"""


def child_peak_rss_mib(argv: list[str]) -> tuple[int, float, str]:
    """Run `mcpnode ARGV` as a grandchild through `_LAUNCHER`; (exit code, its peak RSS in
    MiB, stderr)."""
    proc = subprocess.run(
        [sys.executable, "-c", _LAUNCHER, "-m", "mcpnode", *argv],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    return proc.returncode, int(proc.stdout.strip().splitlines()[-1]) / 1024, proc.stderr
