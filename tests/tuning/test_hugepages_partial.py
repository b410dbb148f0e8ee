"""The kernel reserves fewer huge pages than asked: apply says so (a "partial" write, exit 1),
verify keeps the node in drift, rollback puts the original count back.

A plain file reads back what was written, so the kernel's answer is made the way a real one
arrives: `mcpnode apply` runs as a child process that stops itself right after writing node1's
nr_hugepages (MCPNODE_FAULT_STOP_AFTER_WRITES, host/write.py), the test sets that file to what
the kernel "found" (300 pages), and the apply goes on to read it back."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from mcpnode.host import Host
from mcpnode.tuning.apply import rollback
from mcpnode.tuning.journal import JournalStore
from mcpnode.tuning.profile import load_profile
from mcpnode.tuning.verify import verify
from tests.support.powerroot import NODE, power_root, read

PROFILE = '[profile]\nsummary = "pages"\n\n[vm]\nhugepages_2048kB = 512\n'
NR = NODE + "/node{}/hugepages/hugepages-2048kB/nr_hugepages"


def _state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rpartition(")")[2].split()[0]


def test_fewer_pages_than_asked_is_a_partial_result(tmp_path: Path) -> None:
    root = power_root(tmp_path / "root")
    profiles = tmp_path / "profiles"
    profiles.mkdir()
    (profiles / "pages.toml").write_text(PROFILE)
    # Writes: 1 the journal ("applying"), 2 node0, 3 node1 -> stopped right after it.
    env = {**os.environ, "MCPNODE_FAULT_STOP_AFTER_WRITES": "3"}
    args = ["apply", "--profile", "pages", "--root", str(root), "--profiles-dir", str(profiles)]
    proc = subprocess.Popen(
        [sys.executable, "-m", "mcpnode", *args, "--format", "json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    deadline = time.monotonic() + 60
    while _state(proc.pid) != "T":
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "apply did not stop after its third write"
        time.sleep(0.01)
    assert read(root, NR.format(1)) == "512"  # written; now the kernel's own count
    (root / NR.format(1)).write_text("300\n")
    os.kill(proc.pid, signal.SIGCONT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 1, err  # written, but not what was asked: never a silent 0
    doc = json.loads(out)
    writes = {w["key"]: w for w in doc["writes"]}
    assert writes["vm:hugepages_2048kB:node0"]["result"] == "ok"
    node1 = writes["vm:hugepages_2048kB:node1"]
    assert node1["result"] == "partial"
    assert node1["error"] == "the kernel took 300 of 512"
    (note,) = doc["notes"]
    assert note.startswith("PARTIAL: vm:hugepages_2048kB:node1: asked 512 pages, the kernel took")

    host = Host(root)
    report = verify(host, load_profile("pages", host, profiles))
    assert [(d.key, d.actual) for d in report.drift] == [("vm:hugepages_2048kB:node1", "300")]
    rollback(host, JournalStore(host))
    assert read(root, NR.format(0)) == "0" and read(root, NR.format(1)) == "0"
