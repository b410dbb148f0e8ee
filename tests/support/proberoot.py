"""A fixture host with a recorded probe run dropped in as `mcpnode-probe.json`, where
`mcpnode snapshot --probe` puts it, so the committed fixture itself is left as
tools/fixturegen/fixturegen.py makes it.

The copy hard-links the fixture's files (0.2 s instead of 2 s for the HGX tree) and falls back
to copying across file systems: only for tests that add files to the root, never for ones that
write into existing files (a write through a hard link would change the committed fixture).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from mcpnode.probe.record import SNAPSHOT_PROBE_NAME

TESTS = Path(__file__).resolve().parents[1]
HOSTS = TESTS / "fixtures" / "hosts"
RUNS = TESTS / "fixtures" / "probe"


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def build(dest: Path, fixture: str, run_text: str | None = None) -> Path:
    """`dest`: a read-mostly copy of fixture host `fixture` holding `run_text` (default: the
    committed recorded run of that fixture) as its probe run."""
    shutil.copytree(HOSTS / fixture, dest, symlinks=True, copy_function=_link_or_copy)
    text = run_text if run_text is not None else (RUNS / f"{fixture}.json").read_text()
    (dest / SNAPSHOT_PROBE_NAME).write_text(text)
    return dest
