"""Every audit fixture (tests/auditroot.CASES) against its golden JSON, and every golden
against docs/audit-schema.json.

The goldens cover the areas this suite owns (the container area has its own fixtures and
goldens). `generated_at` is fixed through run_audit(now=...), so a golden holds no time.
Regenerate after an intended change with `MCPNODE_UPDATE_GOLDEN=1 pytest
tests/audit/test_audit_golden.py` and review the diff.
"""

from __future__ import annotations

import json
import os
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from mcpnode.audit.run import run_audit
from mcpnode.cli import render_audit
from mcpnode.host import Host
from tests.support import auditroot
from tests.support.schema import validate
from tools.fixturegen import auditnvml

FIXED = datetime(2025, 1, 1, tzinfo=timezone.utc)
SCHEMA = json.loads(
    (Path(__file__).resolve().parents[2] / "docs" / "audit-schema.json").read_text()
)
# Covered by their own tests and fixtures: test_audit_container.py, test_audit_kubelet.py.
SKIP_AREAS = ["container", "kubelet"]


def audit_json(root: Path) -> dict[str, Any]:
    with Host(root) as host:
        report = run_audit(host, skip=SKIP_AREAS, now=FIXED)
    return render_audit.report_json(report)


@pytest.mark.parametrize("case", sorted(auditroot.CASES))
def test_golden(case: str, tmp_path: Path) -> None:
    got = audit_json(auditroot.build_case(tmp_path, case))
    path = auditroot.GOLDEN / f"{case}.json"
    text = json.dumps(got, indent=2) + "\n"
    if os.environ.get("MCPNODE_UPDATE_GOLDEN"):
        path.write_text(text)
    assert path.exists(), f"no golden for {case}: run with MCPNODE_UPDATE_GOLDEN=1"
    assert json.loads(path.read_text()) == got, f"{case} differs from {path}"


def test_every_golden_has_a_case() -> None:
    assert {p.stem for p in auditroot.GOLDEN.glob("*.json")} == set(auditroot.CASES)


@pytest.mark.parametrize("case", sorted(auditroot.CASES))
def test_golden_matches_schema(case: str) -> None:
    doc = json.loads((auditroot.GOLDEN / f"{case}.json").read_text())
    assert validate(doc, SCHEMA) == []
    assert doc["generated_at"] == "2025-01-01T00:00:00+00:00"


def test_validator_rejects() -> None:
    """The validator rejects what the schema forbids, each error at its path."""
    doc = json.loads((auditroot.GOLDEN / "hgx-healthy.json").read_text())
    doc["findings"][0]["status"] = "OK"
    doc["summary"]["pass"] = -1
    doc["extra"] = 1
    del doc["problems"]
    assert validate(doc, SCHEMA) == [
        "$: 'problems' is a required property",
        "$: Additional properties are not allowed ('extra' was unexpected)",
        "$.findings[0].status: 'OK' is not one of ['PASS', 'WARN', 'FAIL', 'SKIP', 'INFO']",
        "$.summary.pass: -1 is less than the minimum of 0",
    ]


def test_audit_nvml_recordings_are_current(tmp_path: Path) -> None:
    """The committed recordings are what tools/fixturegen/auditnvml.py generates today."""
    for path in auditnvml.write_audit_nvml(tmp_path):
        committed = auditroot.AUDIT_NVML / path.name
        assert path.read_bytes() == committed.read_bytes(), (
            f"{committed} differs from the generator; regenerate: "
            "python3 tools/fixturegen/auditnvml.py"
        )
