"""Tuning compliance: each drifted key a FAIL with expected and actual, each sysctl.d line that
overrides the persisted profile at boot a WARN, keys the kernel lacks one INFO, and the
configured profile read from the persisted file."""

from __future__ import annotations

from pathlib import Path

from mcpnode.audit.model import Status
from mcpnode.audit.run import run_audit
from mcpnode.host import Host
from mcpnode.tuning.active import active_profile
from tests.support import auditroot
from tests.support.fixtures import RootFactory


def test_applied_profile_passes(tmp_path: Path) -> None:
    report = auditroot.audit_case(tmp_path, "hgx-healthy", only=["tuning"])
    (f,) = report.findings
    assert (f.id, f.status) == ("tuning.drift", Status.PASS)
    assert report.profile == "base"


def test_drift_and_override(tmp_path: Path) -> None:
    report = auditroot.audit_case(tmp_path, "hgx-tuning-drift-override", only=["tuning"])
    assert auditroot.statuses(report, "tuning.drift") == {
        "vm.swappiness": "FAIL",
        "net.core.somaxconn": "FAIL",
    }
    (swap,) = [
        f for f in report.findings if f.subject == "vm.swappiness" and f.status.value == "FAIL"
    ]
    assert swap.summary == "vm.swappiness = 60, profile 'base' expects 10"
    assert [(e.source, e.value) for e in swap.evidence] == [
        ("/proc/sys/vm/swappiness", "actual 60"),
        ("profile base (base.toml)", "expected 10"),
    ]
    # One command for all the drift, the same on every key (the profile was persisted).
    assert swap.remedy == "mcpnode apply --profile base --persist"
    drift = [f for f in report.findings if f.id == "tuning.drift"]
    assert len(drift) > 1 and {f.remedy for f in drift} == {swap.remedy}
    # 99-local.conf runs after 90-mcpnode.conf and sets another value: it wins at boot.
    # 10-early.conf runs before it: not an override.
    (override,) = [f for f in report.findings if f.id == "tuning.override"]
    assert (override.status, override.subject) == (Status.WARN, "vm.swappiness")
    assert override.evidence[0].source == "/etc/sysctl.d/99-local.conf:2"
    assert override.remedy is not None and "99-local.conf" in override.remedy


def test_keys_missing_from_the_root_are_one_info(audit_root: RootFactory) -> None:
    with Host(audit_root(auditroot.NO_GPU, healthy=False)) as h:
        report = run_audit(h, only=["tuning"], profile="base")
    got = {f.id: f.status.value for f in report.findings}
    assert got == {"tuning.drift": "SKIP", "tuning.unsupported": "INFO"}


def test_untuned_host_is_info_not_fail(audit_root: RootFactory) -> None:
    """No agent, journal, persisted file or config: nobody chose a profile, so nothing FAILs
    against one; the one finding says how to tune it."""
    with Host(audit_root(auditroot.NO_GPU, healthy=False)) as h:
        report = run_audit(h)
    tuning = [f for f in report.findings if f.area == "tuning"]
    assert [(f.id, f.status) for f in tuning] == [("tuning.profile", Status.INFO)]
    assert "not tuned by mcpnode" in tuning[0].summary
    assert tuning[0].remedy is not None and "mcpnode apply --profile NAME" in tuning[0].remedy
    assert report.profile is None


def test_active_profile_from_the_persisted_file(tmp_path: Path, audit_root: RootFactory) -> None:
    root = audit_root(
        auditroot.NO_GPU,
        files={"etc/sysctl.d/90-mcpnode.conf": "# Generated\n# profile: inference-latency (x)\n"},
    )
    with Host(root) as h:
        assert active_profile(h).name == "inference-latency"
        assert run_audit(h, only=["tuning"]).profile == "inference-latency"
        assert run_audit(h, only=["tuning"], profile="base").profile == "base"
    bare = auditroot.build(tmp_path / "bare", auditroot.NO_GPU, healthy=False)
    with Host(bare) as h:
        assert active_profile(h).name is None


def test_unknown_profile_is_a_fail_not_a_crash(audit_root: RootFactory) -> None:
    with Host(audit_root(auditroot.NO_GPU)) as h:
        report = run_audit(h, only=["tuning"], profile="nope")
    (f,) = report.findings
    assert (f.id, f.status) == ("tuning.profile", Status.FAIL)
    assert "nope" in f.summary and f.remedy
