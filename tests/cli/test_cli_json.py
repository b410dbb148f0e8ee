"""`--format json` on every command that prints data and had only text: `exec --dry-run`,
`pin`, `systemd-dropin` (printed or written), `snapshot`. Each document names its schema, and
the values are the ones the text shows (cpulists as the kernel writes them).

exec and systemd-dropin read the placement from a recorded root shaped like this machine
(tests/support/placeroot.py); pin moves a real child process, so it needs CPUs 0-1 here."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support import placeroot
from tests.support.exportcase import HOSTS
from tests.support.pinchild import affinities, start_child, stop
from tests.support.tuningcli import run_cli

needs_machine = placeroot.needs_machine


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return placeroot.build(tmp_path_factory.mktemp("placed"))


@pytest.fixture
def child() -> Iterator[subprocess.Popen[str]]:
    proc = start_child()
    yield proc
    stop(proc)


def as_json(*args: str) -> dict[str, Any]:
    code, out, err = run_cli(*args)
    assert (code, err) == (0, ""), err
    doc: dict[str, Any] = json.loads(out)
    return doc


def check_placement(doc: dict[str, Any]) -> None:
    assert [g["index"] for g in doc["gpus"]] == [0]
    assert doc["gpus"][0]["uuid"].startswith("GPU-")
    assert doc["gpus"][0]["numa_node"] == 0
    assert (doc["scope"], doc["cpus"], doc["memory_nodes"]) == ("slice", "1", "0")
    assert doc["memory_policy"] == "preferred"
    assert doc["env"]["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"


def test_exec_dry_run(root: Path) -> None:
    doc = as_json(
        "exec", "--root", str(root), "--gpu", "0", "--fresh", "--dry-run", "--format", "json", "--",
        "true", "an argument",
    )  # fmt: skip
    assert doc["schema"] == "mcpnode.exec-plan/v1" and doc["dry_run"] is True
    assert doc["argv"] == ["true", "an argument"]
    assert doc["executable"] is not None and doc["executable"].endswith("/true")
    check_placement(doc["placement"])
    missing = as_json(
        "exec", "--root", str(root), "--gpu", "0", "--fresh", "--dry-run", "--format", "json", "--",
        "no-such-program-here",
    )  # fmt: skip
    assert missing["executable"] is None and missing["problems"]


def test_exec_json_needs_dry_run(root: Path) -> None:
    code, out, err = run_cli(
        "exec", "--root", str(root), "--gpu", "0", "--fresh", "--format", "json", "true"
    )
    assert (code, out) == (64, "")
    assert err == "mcpnode: --format json needs --dry-run: exec replaces this process\n"


@needs_machine
def test_pin(root: Path, child: subprocess.Popen[str]) -> None:
    before = affinities(child.pid)
    doc = as_json(
        "pin", str(child.pid), "--gpu", "0", "--fresh", "--root", str(root), "--format", "json"
    )
    assert doc["schema"] == "mcpnode.pin/v1" and doc["pid"] == child.pid
    check_placement(doc["placement"])
    assert doc["memory_policy_applied"] is False
    assert {t["tid"] for t in doc["threads"]} == set(before)
    assert {(t["before"], t["after"]) for t in doc["threads"]} == {("0-1", "1")}
    assert affinities(child.pid) == {tid: placeroot.SLICE for tid in before}
    assert doc["migration"] is None  # no --migrate


@needs_machine
def test_pin_migrate(root: Path, child: subprocess.Popen[str]) -> None:
    """--migrate's move in the JSON: this machine's nodes, the child's real numa_maps bytes."""
    doc = as_json(
        "pin", str(child.pid), "--gpu", "0", "--fresh", "--migrate", "--root", str(root),
        "--format", "json",
    )  # fmt: skip
    move = doc["migration"]
    assert set(move) == {
        "from_nodes", "to_nodes", "before_bytes", "after_bytes", "moved_bytes", "not_moved_pages"
    }  # fmt: skip
    assert move["to_nodes"] == "0"  # the fixture's GPU 0 is on node 0
    assert sum(move["after_bytes"].values()) > 0  # a live Python has mapped memory
    assert move["not_moved_pages"] >= 0 and move["moved_bytes"] >= 0


def test_systemd_dropin_printed_and_written(root: Path, tmp_path: Path) -> None:
    doc = as_json(
        "systemd-dropin",
        "--root",
        str(root),
        "--gpu",
        "0",
        "--fresh",
        "--unit",
        "vllm",
        "--format",
        "json",
    )
    assert doc["schema"] == "mcpnode.systemd-dropin/v1"
    assert doc["unit"] == "vllm.service" and doc["written"] is False
    assert doc["path"] == "/etc/systemd/system/vllm.service.d/50-mcpnode-placement.conf"
    assert "\nCPUAffinity=1\n" in doc["text"]
    check_placement(doc["placement"])
    assert not (root / doc["path"].lstrip("/")).exists()
    code, out, err = run_cli(
        "systemd-dropin", "--root", str(root), "--gpu", "0", "--fresh", "--unit", "vllm", "--write",
        "--format", "json",
    )  # fmt: skip
    assert code == 0
    written = json.loads(out)
    assert written["written"] is True
    assert (root / written["path"].lstrip("/")).read_text() == written["text"]
    assert err.startswith("wrote /etc/systemd/system/vllm.service.d/")


def test_snapshot(tmp_path: Path) -> None:
    out = tmp_path / "node.tar.gz"
    doc = as_json("snapshot", "--root", str(HOSTS / "h100-nvl-pair"), "-o", str(out), "--format",
                  "json")  # fmt: skip
    assert doc["schema"] == "mcpnode.snapshot/v1"
    assert doc["path"] == str(out) and out.is_file()
    assert doc["files"] > 100 and doc["symlinks"] > 0 and doc["gpus"] == 2
    assert doc["probe_recorded"] is False
    assert all({"code", "source", "detail"} <= set(p) for p in doc["problems"])
