"""Helpers for the scripts the namespace tests run as children of `unshare --net [--mount]`
(test_tuning_netns.py, test_agent_netns.py, test_agent_nic_drift.py, test_agent_sources.py):
`run_child` starts one and reads its report; the rest is for the child. Standard library only:
a child imports this after putting the repository on sys.path."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]


def run_child(
    argv: list[str],
    script: str,
    params: dict[str, Any],
    *,
    timeout: float = 60.0,
    env: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Run `script` in this Python under `argv` (`unshare ...`, or nothing) with `params` as its
    JSON argument, `env` added to this environment; return the JSON object it printed on its
    last stdout line, asserting it exited 0 and reported no `errors` (its `log_tail` shown)."""
    proc = subprocess.run(
        [*argv, sys.executable, "-c", script, json.dumps(params)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env=None if env is None else {**os.environ, **env},
    )
    assert proc.returncode == 0, f"child failed (rc {proc.returncode}):\n{proc.stderr[-5000:]}"
    lines = proc.stdout.strip().splitlines()
    assert lines, f"child printed nothing:\n{proc.stderr}"
    report: dict[str, Any] = json.loads(lines[-1])
    errors = report.get("errors")
    assert not errors, f"{errors}\n{report.get('log_tail', '')}{proc.stderr[-5000:]}"
    return report


def sysctl(key: str) -> str:
    """Whitespace-normalised, as `sysctl -n` users compare it (the kernel uses TABs)."""
    return " ".join(Path("/proc/sys", *key.split(".")).read_text().split())


def set_sysctl(key: str, value: str) -> None:
    Path("/proc/sys", *key.split(".")).write_text(value + "\n")


def fs_type(target: str) -> str | None:
    """The file system of the last mount on `target` in this mount namespace (mountinfo:
    fields, " - ", fstype)."""
    found = None
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        if left.split()[4] == target:
            found = right.split()[0]
    return found


def private_tmpfs(required: list[str], optional: tuple[str, ...] | list[str] = ()) -> None:
    """Make every mount private, then put a tmpfs over each target; refuse to go on when a
    required target is missing or does not end up on tmpfs (the real one would be written)."""
    subprocess.run(["mount", "--make-rprivate", "/"], check=True)
    for target in [*required, *optional]:
        if not Path(target).is_dir():
            if target in required:
                raise RuntimeError(f"{target} is missing: refusing to write the real one")
            continue
        subprocess.run(["mount", "-t", "tmpfs", "-o", "mode=0755", "tmpfs", target], check=True)
        if fs_type(target) != "tmpfs":
            raise RuntimeError(f"{target} is not on tmpfs after mounting: refusing to run")


def lands_on(path: str) -> tuple[str, str]:
    """(mount point, file system) of the mount a write to `path` lands on in this mount
    namespace: the longest mount point above its real path, the last one mounted there. `path`
    need not exist yet (realpath resolves what does)."""
    real = os.path.realpath(path)
    found = ("", "")
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        point = left.split()[4]
        inside = point == "/" or real == point or real.startswith(point + "/")
        if inside and len(point) >= len(found[0]):
            found = (point, right.split()[0])
    return found


def refuse_unless_private(paths: list[str], mounted: list[str], temp: str) -> None:
    """Refuse to go on unless every path a child's process may write lands on one of the tmpfs
    `mounted` by private_tmpfs, or under the test's temporary directory `temp`."""
    temp = os.path.realpath(temp)
    for path in paths:
        real = os.path.realpath(path)
        if real == temp or real.startswith(temp + "/"):
            continue
        point, fs = lands_on(path)
        if point not in mounted or fs != "tmpfs":
            raise RuntimeError(f"{path} lands on {point} ({fs}), not a private tmpfs: refusing")
