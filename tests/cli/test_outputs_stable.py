"""What mcpnode prints for every fixture and every real sysfs dump stays byte for byte what it
was: `topo` (matrix, tree, JSON) and `gpus` (text, JSON). Speed work on the read path, the model
and the renderers must not change a byte; an intended change regenerates the hashes with
`MCPNODE_UPDATE_GOLDEN=1 pytest tests/cli/test_outputs_stable.py` and says why in its commit.

The committed fixtures are always compared; the dumps of ../shared/hosts when present (a plain
clone lacks them: skipped with a message). Hashes, not copies: the outputs are large, and a
difference is then looked at with the two versions' own output.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from mcpnode.cli.main import cli

TESTS = Path(__file__).resolve().parents[1]
HOSTS = TESTS / "fixtures" / "hosts"
SHARED = TESTS.parent.parent / "shared" / "hosts"
GOLDEN = TESTS / "fixtures" / "outputs.sha256.json"
FIXTURES = sorted(p.name for p in HOSTS.iterdir() if (p / "sys").is_dir())
DUMPS = sorted(p.name.removesuffix(".tar.bz2") for p in SHARED.glob("*.tar.bz2"))
VIEWS: dict[str, tuple[str, ...]] = {
    "topo": ("topo",),
    "topo-tree": ("topo", "--tree"),
    "topo-json": ("topo", "--format", "json"),
    "gpus": ("gpus",),
    "gpus-json": ("gpus", "--format", "json"),
}


def outputs(root: Path) -> dict[str, str]:
    runner = CliRunner()
    out = {}
    for view, args in VIEWS.items():
        res = runner.invoke(cli, [*args, "--root", str(root)])
        assert res.exit_code == 0, (view, res.output)
        out[view] = hashlib.sha256(res.stdout.encode()).hexdigest()
    return out


def golden() -> dict[str, dict[str, str]]:
    doc: dict[str, dict[str, str]] = json.loads(GOLDEN.read_text()) if GOLDEN.exists() else {}
    return doc


def check(name: str, root: Path) -> None:
    got = outputs(root)
    if os.environ.get("MCPNODE_UPDATE_GOLDEN"):
        doc = golden()
        doc[name] = got
        GOLDEN.write_text(json.dumps(dict(sorted(doc.items())), indent=1) + "\n")
    want = golden().get(name)
    assert want is not None, f"no hashes for {name}: run with MCPNODE_UPDATE_GOLDEN=1"
    changed = sorted(v for v in VIEWS if got[v] != want.get(v))
    assert changed == [], f"{name}: the output of {changed} changed"


@pytest.mark.parametrize("name", FIXTURES)
def test_fixture_outputs_are_unchanged(name: str) -> None:
    check(name, HOSTS / name)


@pytest.mark.skipif(not DUMPS, reason=f"{SHARED} not present (a plain clone): dumps not compared")
@pytest.mark.parametrize("name", DUMPS)
def test_dump_outputs_are_unchanged(name: str) -> None:
    check(name, SHARED / f"{name}.tar.bz2")  # read in place, as --root X.tar.bz2 is
