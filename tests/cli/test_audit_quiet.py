"""The audit's text report leads with what needs a look: FAIL, WARN and SKIP findings (failures
first) with the remedies, then one line per area counting the rest, then the summary. A healthy
8-GPU HGX host fits on a screen; `--verbose` lists every finding by area; `--status` filters
every format (JSON and JUnit are byte for byte what they were without it).

Golden texts: tests/fixtures/audit/text/, regenerated with
`MCPNODE_UPDATE_GOLDEN=1 pytest tests/cli/test_audit_quiet.py` after an intended change."""

from __future__ import annotations

import json
import os
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from mcpnode.cli.main import cli
from tests.support import auditroot
from tests.support.tuningcli import run_process

TEXT_GOLDEN = Path(__file__).resolve().parents[1] / "fixtures" / "audit" / "text"
# The audit areas with their own fixtures (as tests/test_audit_golden.py): their SKIPs on these
# roots depend on nothing of the case.
CASES = ("hgx-healthy", "hgx-tuning-drift-override")
MAX_HEALTHY_LINES = 40


@pytest.fixture(scope="module")
def roots(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return {c: auditroot.build_case(tmp_path_factory.mktemp(c), c) for c in CASES}


def audit(root: Path, *args: str) -> Result:
    return CliRunner().invoke(cli, ["audit", "--root", str(root), *args], catch_exceptions=False)


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("verbose", [False, True])
def test_text_matches_golden(case: str, verbose: bool, roots: dict[str, Path]) -> None:
    got = audit(roots[case], *(["--verbose"] if verbose else [])).stdout
    path = TEXT_GOLDEN / f"{case}{'.verbose' if verbose else ''}.txt"
    if os.environ.get("MCPNODE_UPDATE_GOLDEN"):
        path.write_text(got, encoding="utf-8")
    assert path.exists(), f"no golden {path.name}: run with MCPNODE_UPDATE_GOLDEN=1"
    assert got == path.read_text(encoding="utf-8"), f"{case} differs from {path}"


def test_healthy_hgx_fits_a_screen_and_lists_no_pass(roots: dict[str, Path]) -> None:
    res = audit(roots["hgx-healthy"])
    assert res.exit_code == 0
    lines = res.stdout.splitlines()
    assert len(lines) <= MAX_HEALTHY_LINES, len(lines)
    assert not [line for line in lines if line.startswith(("[PASS]", "[INFO]"))]
    skips = [line for line in lines if line.startswith("[SKIP]")]
    assert len(skips) == 4
    # the per-area lines account for every PASS of the summary
    areas = lines[lines.index("== Areas (--verbose lists every finding) ==") + 1 :]
    areas = areas[: areas.index("")]
    passed = sum(
        int(part.split()[0])
        for line in areas
        for part in line.split(": ", 1)[1].split(", ")
        if part.endswith(" PASS")
    )
    assert passed == 216 and "216 PASS" in lines[-1]
    verbose = audit(roots["hgx-healthy"], "--verbose").stdout.splitlines()
    assert len([line for line in verbose if line.startswith("[PASS]")]) == 216


def test_failures_come_first_with_their_remedies(roots: dict[str, Path]) -> None:
    res = audit(roots["hgx-tuning-drift-override"])
    assert res.exit_code == 1
    lines = res.stdout.splitlines()
    marks = [line.split("]", 1)[0] + "]" for line in lines if line.startswith("[")]
    order = {"[FAIL]": 0, "[WARN]": 1, "[SKIP]": 2}
    assert marks and [order[m] for m in marks] == sorted(order[m] for m in marks)
    assert "[FAIL]" in marks and "[WARN]" in marks
    assert "== Remedies ==" in lines


def test_status_filters_every_format(roots: dict[str, Path]) -> None:
    root = roots["hgx-tuning-drift-override"]
    full = json.loads(audit(root, "--format", "json").stdout)
    doc = json.loads(audit(root, "--status", "FAIL,warn", "--format", "json").stdout)
    want = [f for f in full["findings"] if f["status"] in ("FAIL", "WARN")]
    assert doc["findings"] == want and want
    assert doc["summary"]["total"] == len(want) and doc["summary"]["pass"] == 0
    junit = ET.fromstring(audit(root, "--status", "FAIL", "--format", "junit").stdout)
    cases = junit.findall(".//testcase")
    assert len(cases) == full["summary"]["fail"] == int(junit.get("failures", "-1"))
    text = audit(root, "--status", "PASS").stdout.splitlines()
    assert text and all(not line.startswith(("[FAIL]", "[WARN]", "[SKIP]")) for line in text)
    assert sum(line.startswith("[PASS]") for line in text) == full["summary"]["pass"]
    # repeated and comma-separated say the same
    again = audit(root, "--status", "FAIL", "--status", "WARN", "--format", "json").stdout
    assert json.loads(again)["findings"] == want


def test_unfiltered_json_and_junit_are_unchanged(roots: dict[str, Path]) -> None:
    root = roots["hgx-healthy"]
    every = "PASS,FAIL,WARN,SKIP,INFO"
    for fmt in ("json", "junit"):
        plain = audit(root, "--format", fmt).stdout
        filtered = audit(root, "--format", fmt, "--status", every).stdout
        verbose = audit(root, "--format", fmt, "--verbose").stdout
        if fmt == "json":  # the time it was generated is the one thing that may move
            plain, filtered, verbose = (
                json.dumps({**json.loads(t), "generated_at": None})
                for t in (plain, filtered, verbose)
            )
        assert plain == filtered == verbose


def test_a_word_that_is_no_status_is_a_usage_error(roots: dict[str, Path]) -> None:
    res = run_process("audit", "--root", str(roots["hgx-healthy"]), "--status", "FAIL,BAD")
    assert res.returncode == 64 and res.stdout == ""
    assert "'BAD' is not one of FAIL, INFO, PASS, SKIP, WARN" in res.stderr
