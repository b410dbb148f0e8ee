"""One wheel of this checkout per test session, as a release would ship it, shared by the tests
that need one (test_wheel.py, test_ansible_role.py): pip builds it through the in-tree backend
(tools/build_backend.py) from a copy of the sources, since pip builds in the source tree and
build/ there is shared with whoever else builds at the same time."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# Not needed to build the wheel, and large (fixtures) or changing under other runs (caches).
NOT_SOURCE = shutil.ignore_patterns(
    ".*", "*.egg-info", "__pycache__", "build", "dist", "tests", "bench", "ansible"
)


def build(work: Path) -> tuple[Path, str]:
    """Build into `work`; (the wheel, pip's verbose output). Raises AssertionError on failure."""
    source = work / "source" / "mcpnode"
    shutil.copytree(REPO, source, ignore=NOT_SOURCE)
    dist = work / "dist"
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-v", "--no-deps", "-w", str(dist), str(source)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-6000:]
    (wheel,) = dist.glob("mcpnode-*.whl")
    return wheel, output
