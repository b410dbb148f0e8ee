"""Readers must never see a partial manifest: a reader *process* reads
/run/mcpnode/manifest.json in a tight loop while this process republishes it N times,
alternating two manifests of different sizes (a torn or truncated read would fail to parse or
fail its content hash). Used by tests/placement/test_manifest_publish.py (100 rounds) and
bench/run.py (1,000 rounds)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mcpnode.host import Host
from mcpnode.placement.manifest import MANIFEST_PATH, publish

REPO = Path(__file__).resolve().parents[2]

_READER = r"""
import json, os, sys
sys.path.insert(0, sys.argv[3])
from mcpnode.placement.manifest import parse_manifest
path, stop = sys.argv[1], sys.argv[2]
reads = partial = missing = 0
hashes = set()
ready = False
while True:
    done = os.path.exists(stop)  # checked before the read: the last read sees the last write
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        missing += 1
    else:
        reads += 1
        try:
            hashes.add(parse_manifest(text, path)["content_hash"])
        except Exception:
            partial += 1
        if not ready:
            open(stop + ".ready", "w").close()
            ready = True
    if done:
        break
print(json.dumps({"reads": reads, "partial": partial, "missing": missing, "hashes": len(hashes)}))
"""


@dataclass(frozen=True)
class RaceResult:
    rounds: int
    reads: int
    partial: int
    missing: int
    distinct_hashes_seen: int
    seconds: float


Writer = Callable[[Host, dict[str, Any]], object]


def read_while_republish(
    root: Path,
    manifests: tuple[dict[str, Any], dict[str, Any]],
    rounds: int,
    writer: Writer = publish,
) -> RaceResult:
    """Publish `manifests` alternately `rounds` times under `root` while a reader process
    reads; returns what the reader saw. `writer` replaces `publish` for the negative control
    (a plain in-place write, which the reader must catch)."""
    host = Host(root)
    publish(host, manifests[1])
    path = host.fs_path(MANIFEST_PATH)
    stop = root / "stop-reader"
    reader = subprocess.Popen(
        [sys.executable, "-c", _READER, path, str(stop), str(REPO)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while not (root / "stop-reader.ready").exists():
            if reader.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("manifest reader did not start")
            time.sleep(0.001)
        t0 = time.perf_counter()
        for i in range(rounds):
            writer(host, manifests[i % 2])
        seconds = time.perf_counter() - t0
        stop.touch()
        out, _ = reader.communicate(timeout=60)
    finally:
        if reader.poll() is None:
            reader.kill()
            reader.wait()
    got = json.loads(out)
    return RaceResult(rounds, got["reads"], got["partial"], got["missing"], got["hashes"], seconds)
