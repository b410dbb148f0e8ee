"""Text from files and NVML never reaches root's terminal as control characters: a process
names itself with an ESC sequence or a newline that would forge a `mcpnode ps` row, a recorded
NVML product name and a netdev name carry the same, an `[expect]` gpu_model too. Every text
renderer shows them through printable(): no raw ESC, no extra line, the escape visible."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from tests.cli.test_cli_errors import mcpnode  # the CLI as a real child process
from tests.support import placeroot
from tests.support.exportcase import HOSTS
from tests.support.tuningcli import run_process
from tools.fixturegen import nvmlgen
from tools.fixturegen.fixturegen import write_host

REPO = Path(__file__).resolve().parents[2]
RED = "\x1b[31m"
FORGED = "x\n  999 0 nvml"  # 14 bytes: fits TASK_COMM_LEN, starts a fake `ps` row
NIC_NET = "sys/devices/pci0000:00/0000:00:02.3/0000:04:00.0/net"

# Takes CPU 1 (GPU 0's slice on placeroot's machine), names itself as told through
# /proc/self/comm (prctl(PR_SET_NAME) by another door), says so, waits for stdin to close.
CHILD = """
import os, sys
os.sched_setaffinity(0, {1})
with open("/proc/self/comm", "w") as f:
    f.write(sys.argv[1])
print("ready", flush=True)
sys.stdin.read()
"""


def start(comm: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, comm],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
    return proc


@pytest.fixture
def hostile_children() -> Iterator[list[subprocess.Popen[str]]]:
    procs = [start(RED + "red"), start(FORGED)]
    try:
        yield procs
    finally:
        for p in procs:
            assert p.stdin is not None
            p.stdin.close()
            p.wait(timeout=30)


@placeroot.needs_machine
def test_ps_shows_a_hostile_comm_escaped_and_forges_no_row(
    tmp_path: Path, hostile_children: list[subprocess.Popen[str]]
) -> None:
    pids = sorted(p.pid for p in hostile_children)
    for p in hostile_children:  # the kernel took the names as given
        comm = Path(f"/proc/{p.pid}/comm").read_text()
        assert comm.rstrip("\n") in (RED + "red", FORGED)
    root = tmp_path / "root"
    host = placeroot.spec()
    write_host(host, root)
    gpus = nvmlgen.base_gpus(host, nvmlgen.H100_PCIE)
    gpus = (replace(gpus[0], processes=tuple((p, 512 << 20) for p in pids)), *gpus[1:])
    meta = nvmlgen.snapshot_meta_json(host, nvmlgen.record(root, nvmlgen.NvmlSpec(gpus))["nvml"])
    (root / nvmlgen.SNAPSHOT_NAME).write_text(meta)

    proc = run_process("ps", "--root", str(root), "--fresh")
    assert "Traceback" not in proc.stderr
    assert "\x1b" not in proc.stdout
    lines = proc.stdout.splitlines()
    rows = [line for line in lines[1:] if not line.startswith("note:")]
    assert len(rows) == 2, proc.stdout  # one per child: the newline forged nothing
    assert [r.split()[0] for r in rows] == [str(p) for p in pids]
    assert "\\x1b[31mred" in proc.stdout
    assert "x\\n  999 0 nvml" in proc.stdout
    assert not any(line.lstrip().startswith("999 0 nvml") for line in lines)

    doc = json.loads(run_process("ps", "--root", str(root), "--fresh", "--format", "json").stdout)
    assert sorted(r["comm"] for r in doc["processes"]) == sorted([RED + "red", FORGED])


def hostile_root(tmp_path: Path) -> Path:
    """The one-GPU VM fixture with NVML naming its GPU with an ESC sequence and a forged line,
    and its NIC's netdev renamed to hold an ESC (a directory name may)."""
    root = tmp_path / "root"
    shutil.copytree(HOSTS / "single-gpu-kvm-vm-h100-pcie", root, symlinks=True)
    snap = root / "mcpnode-snapshot.json"
    doc = json.loads(snap.read_text())
    for call in doc["nvml"]["calls"]:
        if call["fn"] == "nvmlDeviceGetName":
            call["value"] = f"NVIDIA {RED}H100\n  GPU9 FAKE"
    snap.write_text(json.dumps(doc))
    net = root / NIC_NET
    (old,) = [p for p in net.iterdir() if p.name.startswith("en")]
    os.rename(old, net / f"en{RED}x")
    return root


def assert_clean(proc: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in proc.stderr
    assert "\x1b" not in proc.stdout and "\x1b" not in proc.stderr
    assert not any(line.lstrip().startswith("GPU9 FAKE") for line in proc.stdout.splitlines())


def test_gpus_topo_and_audit_show_hostile_names_escaped(tmp_path: Path) -> None:
    root = hostile_root(tmp_path)
    gpus = mcpnode("gpus", "--root", str(root))
    assert gpus.returncode == 0, gpus.stderr
    assert_clean(gpus)
    assert "NVIDIA \\x1b[31mH100\\n  GPU9 FAKE" in gpus.stdout

    topo = mcpnode("topo", "--root", str(root))
    assert topo.returncode == 0, topo.stderr
    assert_clean(topo)
    assert "en\\x1b[31mx" in topo.stdout
    tree = mcpnode("topo", "--root", str(root), "--tree")
    assert_clean(tree)
    assert "en\\x1b[31mx" in tree.stdout
    p2p = mcpnode("topo", "--root", str(root), "--p2p")
    assert_clean(p2p)

    expect = tmp_path / "expect.toml"
    expect.write_text('[expect]\ngpu_model = "NVIDIA H100\\u001b[2J\\n  PASS forged"\n')
    audit = mcpnode("audit", "--root", str(root), "--only", "expect.*", "--expect", str(expect))
    assert audit.returncode == 1, audit.stderr  # the model differs: a FAIL
    assert_clean(audit)
    assert "NVIDIA H100\\x1b[2J\\n  PASS forged" in audit.stdout
    assert "NVIDIA \\x1b[31mH100\\n  GPU9 FAKE" in audit.stdout
    assert not any(line.startswith("  PASS forged") for line in audit.stdout.splitlines())
    junit = mcpnode("audit", "--root", str(root), "--expect", str(expect), "--format", "junit")
    assert "\x1b" not in junit.stdout
