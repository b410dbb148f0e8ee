"""A person never reads Python's `None` or a bare `?`: unknown values say "unknown" or "not
recorded" (with the reason where there is one), and `--format json` is JSON in every outcome.
"""

from __future__ import annotations

import json
import re

from click.testing import CliRunner

from mcpnode.audit.model import AuditReport, Evidence, Finding, Status
from mcpnode.cli import render_audit, render_placement
from mcpnode.cli.main import cli
from tests.support import auditroot
from tests.support.fixtures import RootFactory

# `?` standing alone (`driver ?`, `(?)`, `=?`), or the word None
UNTUNED = "etc/sysctl.d/90-mcpnode.conf"  # the persisted file names the profile
BARE = re.compile(r"(^|[\s(=:/])\?($|[\s),;/])|\bNone\b")


def test_no_golden_finding_prints_none_or_a_bare_question_mark() -> None:
    for path in sorted(auditroot.GOLDEN.glob("*.json")):
        for f in json.loads(path.read_text())["findings"]:
            texts = [f["summary"], f["remedy"] or ""]
            texts += [t for e in f["evidence"] for t in (e["source"], e["value"])]
            for text in texts:
                assert not BARE.search(text), f"{path.name}: {f['id']}: {text!r}"


def test_audit_header_without_host_kernel_or_profile() -> None:
    report = AuditReport(
        (Finding("self.privilege", Status.PASS, "root", (Evidence("euid", "0"),)),),
        None,
        None,
        "2025-01-01T00:00:00+00:00",
    )
    head = render_audit.as_text(report).splitlines()[0]
    assert head == (
        "mcpnode audit: host unknown (no hostname recorded), kernel unknown (no /proc/version), "
        "no tuning profile checked"
    )
    assert not BARE.search(head)


def test_manifest_show_without_profile_driver_or_node(audit_root: RootFactory) -> None:
    root = audit_root(auditroot.HGX, files={UNTUNED: None})
    res = CliRunner().invoke(cli, ["manifest", "show", "--root", str(root), "--format", "json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["tuning"]["profile"] is None  # nobody tuned the fixture
    doc["host"]["driver"] = None
    doc["gpus"][0]["numa_node"] = None
    doc["placement"]["gpus"][0]["numa_node"] = None
    text = render_placement.as_text(doc)
    assert "tuning: no active profile (not tuned by mcpnode)" in text
    assert "driver not recorded" in text
    assert not BARE.search(text), text


def test_verify_json_without_an_active_profile_is_json(audit_root: RootFactory) -> None:
    root = audit_root(auditroot.HGX, files={UNTUNED: None})
    res = CliRunner().invoke(cli, ["verify", "--root", str(root), "--format", "json"])
    assert res.exit_code == 3
    doc = json.loads(res.stdout)
    assert doc["schema"] == "mcpnode.tuning-verify/v1" and doc["compliant"] is None
    assert doc["unknown_reason"].startswith("no active profile: not tuned by mcpnode")
    text = CliRunner().invoke(cli, ["verify", "--root", str(root)])
    assert text.exit_code == 3 and "no active profile" in text.stdout
