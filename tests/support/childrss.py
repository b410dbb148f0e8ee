"""The peak RSS of one `mcpnode` command, as its own figure."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# Linux charges a child's ru_maxrss with the high-water mark of the address space it replaced at
# execve(2) (fs/exec.c, exec_mmap() -> setmax_mm_hiwater_rss()): a child forked or vforked
# from this pytest process starts out "peaking" at pytest's own RSS, hundreds of MiB late in a
# full run. So a small launcher spawns the command and reports its child's figure; the
# launcher's own ~10 MiB is the floor the figure inherits.
_LAUNCHER = """
import os, sys
fa = [(os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0)]
pid = os.posix_spawnp(sys.argv[1], sys.argv[1:], os.environ, file_actions=fa)
_pid, status, usage = os.wait4(pid, 0)
print(usage.ru_maxrss, flush=True)
sys.exit(os.waitstatus_to_exitcode(status))
"""


def peak_rss_mib(
    argv: list[str], env: dict[str, str] | None = None, cwd: Path | None = None
) -> tuple[int, float, str]:
    """Run ARGV as a grandchild through `_LAUNCHER` (its stdout discarded); (exit code, its
    peak RSS in MiB, stderr)."""
    proc = subprocess.run(
        [sys.executable, "-c", _LAUNCHER, *argv],
        cwd=REPO if cwd is None else cwd,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    lines = proc.stdout.strip().splitlines()
    if not lines:  # the launcher itself failed (ARGV[0] not found): no figure
        raise RuntimeError(f"{argv[0]}: not run: {proc.stderr.strip()[-500:]}")
    return proc.returncode, int(lines[-1]) / 1024, proc.stderr


def child_peak_rss_mib(argv: list[str]) -> tuple[int, float, str]:
    """`mcpnode ARGV` by peak_rss_mib(), with this interpreter."""
    return peak_rss_mib([sys.executable, "-m", "mcpnode", *argv])
