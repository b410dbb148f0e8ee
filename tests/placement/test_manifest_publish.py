"""Publishing the manifest: atomic, mode 0644, never seen partial by a concurrent reader, and
the `mcpnode manifest publish|show` commands (exit codes for missing / newer manifests)."""

from __future__ import annotations

import json
import os
import shutil
import stat
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from mcpnode.cli.main import cli, main
from mcpnode.errors import ManifestError, PathNotFound
from mcpnode.exitcodes import EXIT_DATAERR, EXIT_ERROR
from mcpnode.host import Host
from mcpnode.placement.build import make_manifest
from mcpnode.placement.manifest import (
    MANIFEST_PATH,
    content_hash,
    dumps,
    publish,
    read_manifest,
)
from tests.support.manifest_race import read_while_republish

TESTS = Path(__file__).resolve().parents[1]
HOSTS = TESTS / "fixtures" / "hosts"
NOW = datetime(2025, 6, 1, 12, 0, 0, tzinfo=timezone.utc)


def copy_fixture(name: str, tmp_path: Path) -> Path:
    """A writable copy of a host fixture (symlinks kept as links: sysfs has cycles)."""
    dest = tmp_path / name
    shutil.copytree(HOSTS / name, dest, symlinks=True)
    return dest


def two_manifests() -> tuple[dict[str, Any], dict[str, Any]]:
    a = make_manifest(Host(HOSTS / "hgx-h100-8gpu-8nic"), now=NOW)
    b = make_manifest(Host(HOSTS / "h100-nvl-pair"), now=NOW)
    assert len(dumps(a)) > 4 * len(dumps(b))  # a torn read of one would not parse as the other
    return a, b


def test_publish_atomic_0644(tmp_path: Path) -> None:
    host = Host(tmp_path)
    doc = make_manifest(Host(HOSTS / "dgx-a100"), now=NOW)
    old = os.umask(0o077)  # a service's tight umask must not make the file private
    try:
        assert publish(host, doc) == MANIFEST_PATH
    finally:
        os.umask(old)
    path = tmp_path / "run" / "mcpnode" / "manifest.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert path.read_text() == dumps(doc)
    assert read_manifest(host) == doc
    assert sorted(p.name for p in path.parent.iterdir()) == ["manifest.json"]  # no temp left


def test_republish_replaces(tmp_path: Path) -> None:
    host = Host(tmp_path)
    a, b = two_manifests()
    publish(host, a)
    inode = (tmp_path / "run/mcpnode/manifest.json").stat().st_ino
    publish(host, b)
    assert read_manifest(host)["content_hash"] == b["content_hash"]
    assert (tmp_path / "run/mcpnode/manifest.json").stat().st_ino != inode  # renamed over


def test_no_partial_reads_while_republishing(tmp_path: Path) -> None:
    """100 republishes with a reader process looping over the file: zero partial reads (the
    1,000-round version is in bench/run.py)."""
    result = read_while_republish(tmp_path, two_manifests(), rounds=100)
    assert result.partial == 0
    assert result.missing == 0
    assert result.reads > 0


def test_race_check_catches_in_place_writes(tmp_path: Path) -> None:
    """Negative control: the same reader does see torn files when the writer truncates and
    writes in place, so the zero above means something."""

    def in_place(host: Host, doc: dict[str, Any]) -> None:
        data = dumps(doc).encode()
        with open(host.fs_path(MANIFEST_PATH), "wb") as f:  # truncates: readers see it empty
            f.write(data[: len(data) // 2])
            f.flush()
            time.sleep(0.0005)
            f.write(data[len(data) // 2 :])

    result = read_while_republish(tmp_path, two_manifests(), rounds=100, writer=in_place)
    assert result.partial > 0


def test_missing_manifest(tmp_path: Path) -> None:
    with pytest.raises(PathNotFound):
        read_manifest(Host(tmp_path))


def test_load_refuses_newer_schema(tmp_path: Path) -> None:
    doc = make_manifest(Host(HOSTS / "h100-nvl-pair"), now=NOW)
    doc["schema"] = "mcpnode.manifest/v2"
    doc["content_hash"] = content_hash(doc)
    path = tmp_path / "run" / "mcpnode" / "manifest.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(doc))
    with pytest.raises(ManifestError, match="newer"):
        read_manifest(Host(tmp_path))


# -- CLI -----------------------------------------------------------------------------------------


def run_main(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    out, err = capsys.readouterr()
    code = exc.value.code
    assert isinstance(code, int)
    return code, out, err


def test_cli_publish_then_show_published(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = copy_fixture("hgx-h100-8gpu-8nic", tmp_path)
    code, out, _ = run_main(["manifest", "publish", "--root", str(root)], capsys)
    assert code == 0
    assert "published /run/mcpnode/manifest.json" in out
    assert "mlx5_0(PIX)" in out
    written = json.loads((root / "run/mcpnode/manifest.json").read_text())
    code, out, _ = run_main(
        ["manifest", "show", "--published", "--format", "json", "--root", str(root)], capsys
    )
    assert code == 0
    assert json.loads(out) == written


def test_cli_show_json_builds_fresh(capsys: pytest.CaptureFixture[str]) -> None:
    root = HOSTS / "pcie-4x-l40s-2socket"
    code, out, _ = run_main(["manifest", "show", "--format", "json", "--root", str(root)], capsys)
    assert code == 0
    doc = json.loads(out)
    assert doc["schema"] == "mcpnode.manifest/v1"
    assert not (root / "run").exists()  # show writes nothing


def test_cli_housekeeping_option(capsys: pytest.CaptureFixture[str]) -> None:
    root = HOSTS / "hgx-h100-8gpu-8nic"
    argv = ["manifest", "show", "--format", "json", "--housekeeping", "none", "--root", str(root)]
    code, out, _ = run_main(argv, capsys)
    assert code == 0
    assert json.loads(out)["placement"]["gpus"][0]["slice_cpus"] == "0-11,96-107"
    code, _, err = run_main([*argv[:-4], "--housekeeping", "x", "--root", str(root)], capsys)
    assert code == 64 and "housekeeping 'x'" in err


def test_cli_newer_schema_exit_status(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = make_manifest(Host(HOSTS / "h100-nvl-pair"), now=NOW)
    doc["schema"] = "mcpnode.manifest/v2"
    doc["content_hash"] = content_hash(doc)
    path = tmp_path / "run" / "mcpnode" / "manifest.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(doc))
    code, out, err = run_main(["manifest", "show", "--published", "--root", str(tmp_path)], capsys)
    assert code == EXIT_DATAERR == 65
    assert out == ""
    assert "mcpnode.manifest/v2 is newer" in err


def test_cli_no_published_manifest(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_main(["manifest", "show", "--published", "--root", str(tmp_path)], capsys)
    assert code == EXIT_ERROR
    assert "manifest.json" in err


def test_cli_help_lists_manifest() -> None:
    result = CliRunner().invoke(cli, ["manifest", "--help"])
    assert result.exit_code == 0
    assert "publish" in result.output and "show" in result.output
