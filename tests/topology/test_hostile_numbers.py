"""Numbers and cpulists a hostile root plants: a 5,000-digit integer, a 64 KiB cpulist naming
65,536 CPUs, a 5,000-digit schema version. Discovery records each as a problem (exit 0, the
rest of the topology intact); a recorded probe run is refused with one line (exit 65). Run
through the real CLI as a child process, as a shell would, against a copy of a fixture root."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest

from mcpnode.probe.record import SNAPSHOT_PROBE_NAME
from tests.cli.test_cli_errors import mcpnode  # the CLI as a real child process
from tests.support.exportcase import HOSTS

REPO = Path(__file__).resolve().parents[2]
FIXTURE = "h100-nvl-pair"  # 80 CPUs (possible 0-79), two nodes, GPUs 0001:00:00.0, 0002:00:00.0
GPU_DIR = "sys/devices/pci0001:00/0001:00:00.0"
NODE = "sys/devices/system/node"
DIGITS = "1" * 5000
HUGE_LIST = ",".join(["0-65535"] * 9362)[: 64 << 10]  # 64 KiB of ranges, each 65,536 CPUs


def hostile_root(tmp_path: Path, rel: str, text: str) -> Path:
    """A real copy (never hard links: a file is rewritten) of the fixture with `rel` planted."""
    root = tmp_path / "root"
    shutil.copytree(HOSTS / FIXTURE, root, symlinks=True)
    (root / rel).write_text(text)
    return root


@pytest.mark.parametrize(
    ("rel", "text", "why"),
    [
        ("sys/devices/system/cpu/online", DIGITS, "not a cpu list"),
        (f"{NODE}/node1/cpulist", DIGITS, "not a cpu list"),
        (f"{NODE}/node1/distance", f"10 {DIGITS}\n", "integer of 5000 digits"),
        (f"{NODE}/node1/meminfo", f"Node 1 MemTotal: {DIGITS} kB\n", "integer of 5000 digits"),
        (f"{GPU_DIR}/numa_node", DIGITS, "integer of 5000 digits"),
        (f"{GPU_DIR}/current_link_width", DIGITS, "integer of 5000 digits"),
        (f"{GPU_DIR}/local_cpulist", HUGE_LIST, "past the last possible cpu 79"),
        (f"{GPU_DIR}/local_cpus", "f" * 40 + "\n", "past the last possible cpu 79"),
        (f"{NODE}/node1/cpulist", HUGE_LIST, "past the last possible cpu 79"),
        (f"{NODE}/online", "0-1,4096\n", "past the last possible cpu 1023"),
    ],
)
def test_topo_records_a_hostile_number_as_a_problem(
    tmp_path: Path, rel: str, text: str, why: str
) -> None:
    root = hostile_root(tmp_path, rel, text)
    started = time.monotonic()
    proc = mcpnode("topo", "--root", str(root), "--format", "json")
    took = time.monotonic() - started
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    assert took < 30  # before the bounded parser: 13 s for one 64 KiB list
    doc = json.loads(proc.stdout)
    problems = [
        p for p in doc["problems"] if p["source"] == "/" + rel and p["code"] == "read.garbage"
    ]
    assert len(problems) == 1, doc["problems"]
    assert why in problems[0]["detail"]
    assert len(problems[0]["detail"]) < 200  # the value is clipped, not echoed
    assert len(doc["gpus"]) == 2


def test_topo_of_eight_hostile_node_cpulists_is_fast(tmp_path: Path) -> None:
    """88 s before: each node's 64 KiB list was expanded range by range."""
    root = tmp_path / "root"
    shutil.copytree(HOSTS / FIXTURE, root, symlinks=True)
    for n in range(8):
        d = root / NODE / f"node{n}"
        d.mkdir(exist_ok=True)
        (d / "cpulist").write_text(",".join(["0-79"] * 13000)[: 64 << 10])
    started = time.monotonic()
    proc = mcpnode("topo", "--root", str(root), "--format", "json")
    assert time.monotonic() - started < 30
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    "schema", [f"mcpnode.probe/v{DIGITS}", f"mcpnode.probe/v1{DIGITS}", "mcpnode.probe/v2"]
)
def test_probe_refuses_a_hostile_schema_version_in_one_line(tmp_path: Path, schema: str) -> None:
    root = tmp_path / "root"
    shutil.copytree(HOSTS / FIXTURE, root, symlinks=True)
    (root / SNAPSHOT_PROBE_NAME).write_text(json.dumps({"schema": schema}))
    proc = mcpnode("probe", "--root", str(root))
    assert proc.returncode == 65, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("mcpnode: /mcpnode-probe.json: schema: ")
    assert len(lines[0]) < 200
