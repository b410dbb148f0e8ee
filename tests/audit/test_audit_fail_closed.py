"""Gates that fail closed: an audit that could not run is exit 2, never "passed"; a
configuration the audit could not verify is a FAIL naming the file, so an Ansible gate stops
there (a dockerd or containerd refusing the same file is a broken host)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support import auditroot
from tests.support.fixtures import RootFactory
from tests.support.tuningcli import run_cli


def audit(root: Path, *extra: str) -> tuple[int, dict[str, object] | None, str]:
    code, out, err = run_cli("audit", "--format", "json", "--root", str(root), *extra)
    return code, (json.loads(out) if out.strip() else None), err


@pytest.mark.parametrize("contents", ["empty", "only-etc", "empty-sys-and-proc"])
def test_a_root_with_nothing_to_audit_exits_2(tmp_path: Path, contents: str) -> None:
    root = tmp_path / "root"
    root.mkdir()
    if contents == "only-etc":
        (root / "etc").mkdir()
        (root / "etc/hostname").write_text("x\n")
    elif contents == "empty-sys-and-proc":
        (root / "sys").mkdir()
        (root / "proc").mkdir()
    code, doc, err = audit(root)
    assert code == 2 and doc is None, err
    assert "no readable sysfs or procfs" in err and err.count("\n") == 1
    code, out, err = run_cli("audit", "--root", str(root))
    assert code == 2 and "audit passed" not in out


DEEP_JSON = "[" * 100_000 + "]" * 100_000
BOMBS = {
    "etc/docker/daemon.json": '{"runtimes": ' + DEEP_JSON + "}",
    "etc/containerd/config.toml": "x = " + "[" * 5000 + "]" * 5000 + "\n",
    "etc/cdi/nvidia.json": '{"cdiVersion": "0.6.0", "kind": "nvidia.com/gpu", "devices": '
    + DEEP_JSON
    + "}",
}


@pytest.mark.parametrize("rel", sorted(BOMBS))
def test_a_config_the_audit_cannot_parse_fails_naming_the_file(
    audit_root: RootFactory, rel: str
) -> None:
    root = audit_root(files={rel: BOMBS[rel]})
    code, doc, err = audit(root, "--only", "container")
    assert code == 1, err
    assert doc is not None and doc["problems"] == []  # handled as a fact, not a collector crash
    findings = doc["findings"]
    assert isinstance(findings, list)
    failed = [f for f in findings if f["status"] == "FAIL"]
    assert any(f"/{rel}" in json.dumps(f) and "nested" in json.dumps(f) for f in failed), (
        json.dumps(failed, indent=1)
    )
    assert not any(f["id"] == "container.audit" for f in findings)


def test_truncated_binary_and_nul_files_still_fail_naming_them(tmp_path: Path) -> None:
    for i, text in enumerate(['{"runtimes": {', "\x00\x01\x02", "\xff\xfe{}"]):
        root = auditroot.build(tmp_path / str(i), files={"etc/docker/daemon.json": text})
        code, doc, err = audit(root, "--only", "container")
        assert code == 1, err
        assert doc is not None and "/etc/docker/daemon.json" in json.dumps(doc["findings"])
