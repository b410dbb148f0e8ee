"""Inputs that decide what the audit passes or what the manifest publishes are trusted the way
the agent's configuration is: an `[expect]` table in the root's mcpnode.toml or in
`--expect FILE`, and the kept probe run (/var/lib/mcpnode/probe.json). Owned by `nobody`,
group/world-writable, or in a world-writable directory: refused with one line naming the file
and why. Root's, 0644, in 0755 directories: honoured. Real owners and modes in temporary roots;
the CLI runs as a child process. And `nic_rate_gbps` must be a finite rate in range."""

from __future__ import annotations

import json
import os
import shutil
from datetime import datetime, timezone
from pathlib import Path

import pytest

from mcpnode.audit.expect import parse_table
from mcpnode.audit.expectation import ExpectError
from mcpnode.host import Host
from mcpnode.placement.build import make_manifest
from mcpnode.probe.section import manifest_section
from tests.cli.test_cli_errors import mcpnode  # the CLI as a real child process
from tests.support import proberoot
from tests.support.exportcase import HOSTS

REPO = Path(__file__).resolve().parents[2]
NOBODY = 65534
EXPECT = "[expect]\ngpu_count = 2\nnuma_nodes = 2\n"
L40S = "pcie-4x-l40s-2socket"
NOW = datetime(2025, 6, 1, 12, 0, 0, tzinfo=timezone.utc)


def plant(path: Path, text: str, *, uid: int = 0, mode: int = 0o644, dir_mode: int = 0o755) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.parent.chmod(dir_mode)
    path.write_text(text)
    os.chown(path, uid, 0)
    path.chmod(mode)


def expect_findings(root: Path, *extra: str) -> tuple[int, dict[str, dict[str, object]]]:
    proc = mcpnode("audit", "--root", str(root), "--only", "expect.*", "--format", "json", *extra)
    assert "Traceback" not in proc.stderr
    doc = json.loads(proc.stdout)
    return proc.returncode, {f["id"]: f for f in doc["findings"]}


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """h100-nvl-pair (2 GPUs, 2 nodes): each test plants its own etc/mcpnode/mcpnode.toml."""
    dest = tmp_path_factory.mktemp("untrusted") / "root"
    shutil.copytree(HOSTS / "h100-nvl-pair", dest, symlinks=True)
    return dest


@pytest.mark.parametrize(
    ("uid", "mode", "dir_mode", "why"),
    [
        (NOBODY, 0o644, 0o755, "owned by uid 65534"),
        (0, 0o666, 0o755, "writable"),
        (0, 0o644, 0o777, "writable"),
    ],
)
def test_audit_refuses_an_untrusted_expect_table_in_the_root(
    root: Path, uid: int, mode: int, dir_mode: int, why: str
) -> None:
    plant(root / "etc/mcpnode/mcpnode.toml", EXPECT, uid=uid, mode=mode, dir_mode=dir_mode)
    code, found = expect_findings(root)
    assert code == 1
    assert set(found) == {"expect.config"}  # nothing was checked against it
    summary = str(found["expect.config"]["summary"])
    assert "/etc/mcpnode/mcpnode.toml: cannot be used: refusing to trust it" in summary
    assert why in summary, summary


def test_audit_honours_a_root_owned_expect_table(root: Path) -> None:
    plant(root / "etc/mcpnode/mcpnode.toml", EXPECT)
    code, found = expect_findings(root)
    assert code == 0, found
    assert found["expect.gpu.count"]["status"] == "PASS"
    assert found["expect.numa.nodes"]["status"] == "PASS"
    assert "expect.config" not in found


@pytest.mark.parametrize(("uid", "mode"), [(NOBODY, 0o644), (0, 0o666)])
def test_expect_option_refuses_an_untrusted_file_in_one_line(
    tmp_path: Path, uid: int, mode: int
) -> None:
    f = tmp_path / "conf" / "expect.toml"
    plant(f, EXPECT, uid=uid, mode=mode)
    proc = mcpnode("audit", "--root", str(HOSTS / "h100-nvl-pair"), "--expect", str(f))
    assert proc.returncode == 2, proc.stdout
    assert proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert f"{f}: cannot be used: refusing to trust it" in lines[0]


def test_expect_option_honours_a_root_owned_file(tmp_path: Path) -> None:
    f = tmp_path / "conf" / "expect.toml"
    plant(f, EXPECT)
    code, found = expect_findings(HOSTS / "h100-nvl-pair", "--expect", str(f))
    assert code == 0, found
    assert found["expect.gpu.count"]["status"] == "PASS"


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "-400", "0", "1e9", "+nan"])
def test_nic_rate_must_be_a_finite_rate_in_range(tmp_path: Path, value: str) -> None:
    with pytest.raises(ExpectError, match="nic_rate_gbps: must be a positive number, at most"):
        parse_table({"nic_rate_gbps": float(value)}, "x.toml")
    f = tmp_path / "conf" / "expect.toml"
    plant(f, f"[expect]\nnic_rate_gbps = {value}\n")
    proc = mcpnode("audit", "--root", str(HOSTS / "h100-nvl-pair"), "--expect", str(f))
    assert proc.returncode == 2
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "expect.nic_rate_gbps: must be a positive number, at most" in lines[0]


def test_nic_rate_in_range_is_kept() -> None:
    assert parse_table({"nic_rate_gbps": 400}, "x.toml").nic_rate_gbps == 400.0


def kept_probe_root(tmp_path: Path, *, uid: int, dir_mode: int) -> Path:
    """The L40S fixture with its recorded run kept where `mcpnode probe` keeps it."""
    dest = proberoot.build(tmp_path / "root", L40S)
    text = (dest / "mcpnode-probe.json").read_text()
    (dest / "mcpnode-probe.json").unlink()
    plant(dest / "var/lib/mcpnode/probe.json", text, uid=uid, dir_mode=dir_mode)
    (dest / "var/lib").chmod(0o755)
    (dest / "var").chmod(0o755)
    return dest


def test_manifest_refuses_a_probe_run_planted_by_nobody(tmp_path: Path) -> None:
    root = kept_probe_root(tmp_path, uid=NOBODY, dir_mode=0o777)
    section = make_manifest(Host(root), now=NOW, probe=manifest_section)["probe"]
    assert section["gpus"] == [] and section["peers"] == []
    assert section["error"].startswith("/var/lib/mcpnode/probe.json: cannot be used: refusing")
    proc = mcpnode("probe", "--root", str(root))
    assert proc.returncode == 65
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "/var/lib/mcpnode/probe.json: cannot be used: refusing to trust it" in lines[0]


def test_manifest_refuses_a_root_owned_run_in_a_world_writable_directory(tmp_path: Path) -> None:
    root = kept_probe_root(tmp_path, uid=0, dir_mode=0o777)
    section = make_manifest(Host(root), now=NOW, probe=manifest_section)["probe"]
    assert section["gpus"] == [] and "cannot be used" in section["error"]


def test_manifest_carries_a_root_owned_probe_run(tmp_path: Path) -> None:
    root = kept_probe_root(tmp_path, uid=0, dir_mode=0o755)
    section = make_manifest(Host(root), now=NOW, probe=manifest_section)["probe"]
    assert section["error"] is None
    assert section["source"] == "/var/lib/mcpnode/probe.json"
    assert len(section["gpus"]) == 4
