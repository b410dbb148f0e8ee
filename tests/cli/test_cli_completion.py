"""Dynamic completion as a shell asks for it: click's protocol (`_MCPNODE_COMPLETE`,
`COMP_WORDS`, `COMP_CWORD`) against a real `mcpnode` child, on a recorded HGX host's root:
profile names, GPU indices and UUIDs, and the finding ids that root's audit produces."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.support.tuningcli import run_process

HGX = str(Path(__file__).resolve().parents[1] / "fixtures" / "hosts" / "hgx-h100-8gpu-8nic")


def complete(*words: str) -> list[str]:
    """What bash completion offers for the last word of `mcpnode WORDS`."""
    env = {
        **os.environ,
        "_MCPNODE_COMPLETE": "bash_complete",
        "COMP_WORDS": " ".join(["mcpnode", *words]),
        "COMP_CWORD": str(len(words)),
    }
    got = subprocess.run(
        [sys.executable, "-m", "mcpnode"], env=env, capture_output=True, text=True, timeout=60
    )
    assert got.returncode == 0 and got.stderr == "", got.stderr
    return [line.split(",", 1)[1] for line in got.stdout.splitlines() if line]


def test_profile_names() -> None:
    names = complete("apply", "--profile", "")
    assert "base" in names and "inference-latency" in names
    assert complete("apply", "--profile", "inference-l") == ["inference-latency"]
    assert "base" in complete("profiles", "show", "")
    assert "base" in complete("audit", "--root", HGX, "--profile", "")


def test_gpu_indices_and_uuids() -> None:
    offered = complete("exec", "--root", HGX, "--gpu", "")
    indices = [o for o in offered if o.isdigit()]
    uuids = [o for o in offered if o.startswith("GPU-")]
    assert indices == [str(i) for i in range(8)]
    assert len(uuids) == 8 and "all-local" in offered
    assert complete("exec", "--root", HGX, "--gpu", uuids[3][:12]) == [uuids[3]]


def test_finding_ids_are_the_audits_and_the_area_globs() -> None:
    audit = json.loads(run_process("audit", "--root", HGX, "--format", "json").stdout)
    ids = {f["id"] for f in audit["findings"]}
    offered = set(complete("audit", "--root", HGX, "--only", ""))
    assert ids <= offered
    assert {"gpu.*", "tuning.*", "kernel.*"} <= offered
    assert set(complete("audit", "--root", HGX, "--skip", "gpu.x")) == {
        i for i in offered if i.startswith("gpu.x")
    }


def test_a_root_that_cannot_be_read_completes_nothing_quietly(tmp_path: Path) -> None:
    missing = str(tmp_path / "nope")
    assert complete("exec", "--root", missing, "--gpu", "") == []
    assert complete("apply", "--root", missing, "--profile", "") == []
    globs = complete("audit", "--root", missing, "--only", "")
    assert globs and all(g.endswith(".*") for g in globs)
