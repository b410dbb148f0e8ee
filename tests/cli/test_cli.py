"""The command line as operators use it: real processes for exit codes and start-up, the click
runner for output."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from mcpnode.cli.main import cli
from tests.support.minihost import build


def mcpnode(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mcpnode", *args], capture_output=True, text=True, check=False
    )


def test_help_lists_commands() -> None:
    proc = mcpnode("--help")
    assert proc.returncode == 0
    assert "topo" in proc.stdout and "snapshot" in proc.stdout


def test_help_does_not_import_heavy_modules() -> None:
    code = (
        "import sys; from mcpnode.cli.main import cli;"
        "heavy = {'pynvml','pyroute2','pyudev','prometheus_client','psutil','structlog'};"
        "print(sorted(heavy & set(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_topo_matrix_and_json(mini_root: Path) -> None:
    root = mini_root
    runner = CliRunner()
    res = runner.invoke(cli, ["topo", "--root", str(root)])
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert lines[0] == "\tGPU0\tNIC0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID"
    assert lines[1] == "GPU0\t X \tPHB\t0-1\t0\t\tN/A"
    assert lines[2] == "NIC0\tPHB\t X \t\t\t\t"
    assert "  NIC0: mlx5_0" in lines
    res = runner.invoke(cli, ["topo", "--root", str(root), "--format", "json"])
    doc = json.loads(res.output)
    assert doc["schema"] == "mcpnode.topology/v1"
    assert doc["gpus"][0]["address"] == "0000:01:00.0"
    assert doc["gpus"][0]["vendor_id"] == "0x10de"


def test_topo_tree_marks_downtrained_links(mini_root: Path) -> None:
    root = mini_root
    gpu = root / "sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0"
    (gpu / "current_link_width").write_text("8\n")
    res = CliRunner().invoke(cli, ["topo", "--root", str(root), "--tree"])
    assert res.exit_code == 0, res.output
    line = next(x for x in res.output.splitlines() if "GPU0" in x)
    assert "[32GT/s x8 of 32GT/s x16]" in line and "DOWNTRAINED" in line
    assert "pci.link.width-downtrained" in res.output


def test_no_gpu_host_says_so(mini_root: Path) -> None:
    root = mini_root
    (root / "sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/class").write_text("0x010802\n")
    res = CliRunner().invoke(cli, ["topo", "--root", str(root)])
    assert res.exit_code == 0
    assert res.output.startswith("No NVIDIA GPUs found on this host")
    assert "node0: CPUs 0-1, 4096 MiB" in res.output


def test_bad_root_exit_code_and_message(tmp_path: Path) -> None:
    proc = mcpnode("topo", "--root", str(tmp_path / "nope"))
    assert proc.returncode == 2
    assert "no such file or directory" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_snapshot_command_roundtrip(tmp_path: Path) -> None:
    root = build(tmp_path / "tree")
    out = tmp_path / "s.tar.gz"
    proc = mcpnode("snapshot", "--root", str(root), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "1 GPUs" in proc.stdout
    a = mcpnode("topo", "--root", str(root), "--format", "json").stdout
    b = mcpnode("topo", "--root", str(out), "--format", "json").stdout
    assert a == b


def test_usage_error_exit_code() -> None:
    proc = mcpnode("topo", "--format", "yaml")
    assert proc.returncode == 64
    assert "Invalid value" in proc.stderr
