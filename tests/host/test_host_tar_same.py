"""A tarball root gives, byte for byte, what the directory it was made from gives: `topo`,
`gpus` and `audit`, each `--format json`, on every fixture host (packed into a .tar.gz here)
and every real sysfs dump of ../shared/hosts (unpacked into a directory here by GNU tar, as
bench/run.py does; skipped with a message when absent). The audit's `generated_at` is the one
field that differs between two runs of anything; it is masked."""

from __future__ import annotations

import re
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from mcpnode.cli.main import cli

TESTS = Path(__file__).resolve().parents[1]
HOSTS = TESTS / "fixtures" / "hosts"
SHARED = TESTS.parent.parent / "shared" / "hosts"
FIXTURES = sorted(p.name for p in HOSTS.iterdir() if (p / "sys").is_dir())
DUMPS = sorted(p.name.removesuffix(".tar.bz2") for p in SHARED.glob("*.tar.bz2"))
COMMANDS = {
    "topo": ("topo", "--format", "json"),
    "gpus": ("gpus", "--format", "json"),
    "audit": ("audit", "--format", "json"),
}
_GENERATED_AT = re.compile(r'"generated_at": "[^"]*"')


def outputs(root: Path) -> dict[str, tuple[int, str]]:
    runner = CliRunner()
    out = {}
    for name, args in COMMANDS.items():
        res = runner.invoke(cli, [*args, "--root", str(root)])
        assert res.exception is None or isinstance(res.exception, SystemExit), res.output
        out[name] = (res.exit_code, _GENERATED_AT.sub('"generated_at": -', res.stdout))
    return out


def same(directory: Path, tarball: Path) -> None:
    want, got = outputs(directory), outputs(tarball)
    for name in COMMANDS:
        assert got[name][0] == want[name][0], (name, got[name][0], want[name][0])
        assert got[name][1] == want[name][1], f"{name} differs between {directory} and {tarball}"
    assert want["topo"][0] == 0 and len(want["topo"][1]) > 100


@pytest.mark.parametrize("name", FIXTURES)
def test_fixture_as_tarball_gives_the_same_outputs(name: str, tmp_path: Path) -> None:
    tarball = tmp_path / f"{name}.tar.gz"
    with tarfile.open(tarball, "w:gz") as tf:
        tf.add(HOSTS / name, arcname=name)
    same(HOSTS / name, tarball)


@pytest.mark.skipif(not DUMPS, reason=f"{SHARED} not present (a plain clone): dumps not compared")
@pytest.mark.skipif(shutil.which("tar") is None, reason="GNU tar unpacks the reference directory")
@pytest.mark.parametrize("name", DUMPS)
def test_dump_gives_the_same_outputs_as_its_directory(name: str, tmp_path: Path) -> None:
    tarball = SHARED / f"{name}.tar.bz2"
    subprocess.run(["tar", "-xf", str(tarball), "-C", str(tmp_path)], check=True)
    (top,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    same(top, tarball)
