"""`mcpnode export KIND`: writes under --root atomically (no temp file left, mode 0644 whatever
the umask), --dir, --stdout, and the exit codes for bad input."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from mcpnode.cli.main import cli
from tests.support.exportcase import HOSTS

FIXTURE = "h100-nvl-pair"  # small: copied per test
DEFAULT_PATHS = {
    "nfd": "etc/kubernetes/node-feature-discovery/features.d/mcpnode",
    "prom": "var/lib/node_exporter/textfile_collector/mcpnode.prom",
    "slurm": "etc/slurm/gres-mcpnode.conf",
    "ansible": "etc/ansible/facts.d/mcpnode.fact",
}


@pytest.fixture
def root(tmp_path: Path) -> Path:
    dst = tmp_path / "root"
    shutil.copytree(HOSTS / FIXTURE, dst, symlinks=True)
    return dst


@pytest.fixture
def tight_umask() -> Iterator[None]:
    old = os.umask(0o077)
    try:
        yield
    finally:
        os.umask(old)


def files_under(d: Path) -> list[str]:
    return sorted(p.name for p in d.iterdir())


@pytest.mark.parametrize("kind", sorted(DEFAULT_PATHS))
def test_writes_atomically_with_mode_0644(kind: str, root: Path, tight_umask: None) -> None:
    res = CliRunner().invoke(cli, ["export", kind, "--root", str(root)])
    assert res.exit_code == 0, res.output
    path = root / DEFAULT_PATHS[kind]
    assert path.is_file() and not path.is_symlink()
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert files_under(path.parent) == [path.name]  # no temp file left beside it
    assert path.read_text().strip()
    # A second export replaces the file (rename over it), still nothing else in the directory.
    inode = path.stat().st_ino
    res = CliRunner().invoke(cli, ["export", kind, "--root", str(root)])
    assert res.exit_code == 0, res.output
    assert files_under(path.parent) == [path.name]
    assert path.stat().st_ino != inode


def test_stdout_prints_and_writes_nothing(root: Path) -> None:
    res = CliRunner().invoke(cli, ["export", "ansible", "--root", str(root), "--stdout"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["gpu_count"] == 2
    assert not (root / "etc" / "ansible").exists()


def test_dir_option(root: Path) -> None:
    res = CliRunner().invoke(
        cli, ["export", "prom", "--root", str(root), "--dir", "/srv/metrics", "--no-audit"]
    )
    assert res.exit_code == 0, res.output
    text = (root / "srv/metrics/mcpnode.prom").read_text()
    assert "mcpnode_gpu_info" in text and "mcpnode_audit_findings" not in text
    assert not (root / "var/lib/node_exporter").exists()


def test_with_audit_from_the_root(root: Path) -> None:
    res = CliRunner().invoke(cli, ["export", "nfd", "--root", str(root), "--stdout"])
    assert res.exit_code == 0, res.output
    assert "mcpnode.io/audit-fail=" in res.stdout
    assert "mcpnode.io/gpu-numa-layout=0-1" in res.stdout


def run_main(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mcpnode", *args], capture_output=True, text=True, check=False
    )


def test_unknown_kind_is_a_usage_error() -> None:
    proc = run_main("export", "yaml", "--root", str(HOSTS / FIXTURE), "--stdout")
    assert proc.returncode == 64
    assert "yaml" in proc.stderr


def test_relative_dir_is_a_usage_error(root: Path) -> None:
    proc = run_main("export", "prom", "--root", str(root), "--dir", "srv", "--no-audit")
    assert proc.returncode == 64
    assert "absolute" in proc.stderr
    assert not (root / "srv").exists()


def test_failed_write_is_an_error_and_leaves_no_temp_file(root: Path) -> None:
    # A directory where the file should be: the rename fails (EISDIR) even for root, after the
    # temp file was written, so this checks the clean-up as well as the exit status.
    target = root / "etc/ansible/facts.d"
    (target / "mcpnode.fact").mkdir(parents=True)
    proc = run_main("export", "ansible", "--root", str(root), "--no-audit")
    assert proc.returncode == 2, proc.stderr
    assert "mcpnode.fact" in proc.stderr
    assert files_under(target) == ["mcpnode.fact"]
    assert (target / "mcpnode.fact").is_dir()


def test_cli_kinds_are_the_exporters() -> None:
    # main.py lists the kinds literally so `mcpnode --help` need not import the exporters.
    from mcpnode.cli.main import export
    from mcpnode.placement.exporters.write import KINDS

    choice = export.params[0].type
    assert isinstance(choice, click.Choice)
    assert list(choice.choices) == list(KINDS)


def test_expiry_and_slurm_type_options(root: Path) -> None:
    from datetime import datetime, timedelta, timezone

    from mcpnode.placement.exporters import nfd

    res = CliRunner().invoke(
        cli, ["export", "nfd", "--root", str(root), "--stdout", "--no-audit", "--expiry", "3600"]
    )
    assert res.exit_code == 0, res.output
    expires = nfd.expiry_of(res.stdout)
    assert expires is not None
    assert timedelta(seconds=3590) < expires - datetime.now(timezone.utc) <= timedelta(hours=1)
    plain = CliRunner().invoke(cli, ["export", "nfd", "--root", str(root), "--stdout"])
    assert nfd.expiry_of(plain.stdout) is None  # by hand: no expiry unless asked
    short = CliRunner().invoke(
        cli, ["export", "slurm", "--root", str(root), "--stdout", "--slurm-type", "short"]
    )
    assert " Type=h100 " in short.stdout
    full = CliRunner().invoke(cli, ["export", "slurm", "--root", str(root), "--stdout"])
    assert " Type=nvidia_h100_nvl " in full.stdout


def test_too_short_an_expiry_is_a_usage_error(root: Path) -> None:
    proc = run_main("export", "nfd", "--root", str(root), "--stdout", "--expiry", "10")
    assert proc.returncode == 64
    assert "--expiry" in proc.stderr
