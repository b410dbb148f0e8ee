"""The audit as a whole: the area contract (collect through Host, pure check, registered in
AREAS), id globs, a failing collector as a SKIP plus a problem, the shared context, the CLI
(formats, exit codes, --output, --strict, colour), snapshot replay, and bad inputs."""

from __future__ import annotations

import json
import os
import stat
import xml.etree.ElementTree as ET
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from mcpnode.audit.context import AuditContext
from mcpnode.audit.model import Finding, Status
from mcpnode.audit.run import AREAS, Area, matches, run_audit, selected
from mcpnode.cli import render_audit
from mcpnode.cli.main import cli
from mcpnode.host import Host
from mcpnode.snapshot import write_snapshot
from tests.support import auditroot
from tests.support.fixtures import RootFactory
from tests.support.schema import validate

SCHEMA = json.loads((Path(__file__).resolve().parents[2] / "docs/audit-schema.json").read_text())
FIXED = datetime(2025, 1, 1, tzinfo=timezone.utc)


# -- the contract ------------------------------------------------------------------------------


def test_areas_are_registered_once_in_report_order() -> None:
    prefixes = [a.prefix for a in AREAS]
    # gpu three times: NVML's facts, the kernel log's XIDs, Fabric Manager (each collector
    # fails alone), next to each other so the report groups them under one heading
    assert prefixes == [
        "self", "cgroup", "kernel", "expect", "gpu", "gpu", "gpu", "pcie", "ib", "p2p", "numa",
        "tuning", "container", "kubelet",
    ]  # fmt: skip
    assert len({a.title for a in AREAS if a.prefix == "gpu"}) == 1


def test_every_golden_finding_belongs_to_its_area() -> None:
    prefixes = {a.prefix for a in AREAS}
    for path in auditroot.GOLDEN.glob("*.json"):
        for f in json.loads(path.read_text())["findings"]:
            assert f["area"] in prefixes and f["id"].startswith(f["area"] + ".")
            assert f["evidence"], f"{path.name}: {f['id']} has no evidence"
            if f["status"] in ("FAIL", "WARN"):
                assert f["remedy"], f"{path.name}: {f['id']} has no remedy"


@pytest.mark.parametrize(
    ("fid", "pattern", "hit"),
    [
        ("gpu.row-remap", "gpu.*", True),
        ("gpu.row-remap", "gpu", True),  # a bare prefix selects what is below it
        ("gpu.pcie.width", "gpu.pcie", True),
        ("gpu.pcie.width", "gpu.pcie.w*", True),
        ("gpu.pcie.width", "*.width", True),
        ("gpu.pcie.width", "gp", False),
        ("kernel.module.nvidia_uvm", "kernel.module.nvidia", False),
        ("kernel.module.nvidia", "kernel.module.nvidia", True),
        ("tuning.drift", "TUNING.*", False),
    ],
)
def test_id_globs(fid: str, pattern: str, hit: bool) -> None:
    assert matches(fid, pattern) is hit


def test_only_and_skip_together() -> None:
    f = Finding("gpu.ecc", Status.PASS, "x")
    assert selected(f, [], [])
    assert selected(f, ["gpu"], [])
    assert not selected(f, ["gpu"], ["gpu.ecc"])
    assert not selected(f, ["kernel.*"], [])


def _area(prefix: str, calls: list[str], fail: str | None = None) -> Area:
    def collect(host: Host, ctx: AuditContext) -> str:
        calls.append(f"collect {prefix}")
        if fail == "collect":
            raise ValueError("collector broke")
        return "facts"

    def check(facts: Any, ctx: AuditContext) -> list[Finding]:
        calls.append(f"check {prefix}")
        if fail == "check":
            raise KeyError("check broke")
        return [Finding(f"{prefix}.one", Status.PASS, "ok", ())]

    return Area(prefix, prefix.title(), collect, check)


def test_a_failing_collector_or_check_is_a_fail_and_a_problem(audit_root: RootFactory) -> None:
    """An area that could not be verified fails the gate: SKIP would let a host whose
    configuration could not even be read through."""
    calls: list[str] = []
    areas = [_area("aa", calls, "collect"), _area("bb", calls, "check"), _area("cc", calls)]
    with Host(audit_root(auditroot.NO_GPU)) as h:
        report = run_audit(h, areas=areas, now=FIXED)
    assert [(f.id, f.status) for f in report.findings] == [
        ("aa.audit", Status.FAIL),
        ("bb.audit", Status.FAIL),
        ("cc.one", Status.PASS),
    ]
    assert "could not be verified: the collector failed (ValueError: collector broke)" in (
        report.findings[0].summary
    )
    assert "the check failed (KeyError" in report.findings[1].summary
    assert len(report.problems) == 2 and report.problems[0].startswith("aa: collector failed")
    assert report.failed
    assert report.generated_at == "2025-01-01T00:00:00+00:00"


def test_unselected_areas_read_nothing(audit_root: RootFactory) -> None:
    calls: list[str] = []
    areas = [_area("aa", calls), _area("bb", calls), _area("cc", calls)]
    with Host(audit_root(auditroot.NO_GPU)) as h:
        report = run_audit(h, areas=areas, only=["bb.*"], skip=["cc"])
    assert calls == ["collect bb", "check bb"]
    assert [f.id for f in report.findings] == ["bb.one"]


def test_a_star_in_the_first_segment_reaches_every_area(
    tmp_path: Path, audit_root: RootFactory
) -> None:
    calls: list[str] = []
    with Host(audit_root(auditroot.NO_GPU)) as h:
        report = run_audit(h, areas=[_area("aa", calls), _area("bb", calls)], only=["*.one"])
    assert [f.id for f in report.findings] == ["aa.one", "bb.one"]
    report = auditroot.audit_case(tmp_path / "hgx", "hgx-healthy", only=["*fabric*"])
    assert {f.id for f in report.findings} == {"gpu.fabric"}


def test_context(audit_root: RootFactory) -> None:
    ctx = auditroot.context(auditroot.HGX)
    assert (ctx.gpu_count_sysfs, ctx.gpu_count_nvml, ctx.driver_version) == (8, 8, "570.133.20")
    assert ctx.has_rdma and ctx.has_gpus and ctx.cgroup_mode == "v2" and ctx.is_root
    assert ctx.profile == "base"
    # NVML unavailable: the driver version comes from /proc/driver/nvidia/version
    root = audit_root(
        nvml="driver-not-loaded",
        euid=1000,
        files={
            "proc/driver/nvidia/version": "NVRM version: NVIDIA UNIX x86_64 Kernel Module  "
            "550.54.15  Tue Mar  5 22:23:56 UTC 2024\n",
            "proc/self/mountinfo": auditroot.MOUNTINFO_HYBRID,
        },
    )
    from mcpnode.audit.context import build_context
    from mcpnode.topology.discover import discover_host

    with Host(root) as h:
        ctx = build_context(h, discover_host(h), "inference-latency")
    assert (ctx.gpu_count_sysfs, ctx.gpu_count_nvml, ctx.driver_version) == (8, None, "550.54.15")
    assert (ctx.cgroup_mode, ctx.is_root, ctx.profile) == ("hybrid", False, "inference-latency")


def test_not_root_says_so(tmp_path: Path) -> None:
    report = auditroot.audit_case(tmp_path, "hgx-not-root", only=["self"])
    (f,) = report.findings
    assert f.status is Status.INFO and "uid 1000" in f.summary


# -- the CLI -------------------------------------------------------------------------------------


def invoke(*args: str) -> Any:
    return CliRunner().invoke(cli, ["audit", *args], catch_exceptions=False)


@pytest.fixture(scope="module")
def healthy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return auditroot.build_case(tmp_path_factory.mktemp("healthy"), "hgx-healthy")


@pytest.fixture(scope="module")
def sick(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return auditroot.build_case(tmp_path_factory.mktemp("sick"), "hgx-remap-pending")


@pytest.fixture(scope="module")
def warned(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return auditroot.build_case(tmp_path_factory.mktemp("warned"), "hgx-persistence-off")


def test_text_report_shape(healthy: Path, sick: Path) -> None:
    ok = invoke("--root", str(healthy), "--skip", "container")
    assert ok.exit_code == 0
    lines = ok.output.splitlines()
    assert lines[0].startswith("mcpnode audit: host hgx-h100-node01")
    assert "Self: 1 PASS" in lines and "GPU health: 126 PASS" in lines
    verbose = invoke("--root", str(healthy), "--skip", "container", "--verbose").output
    assert "== Self ==" in verbose.splitlines() and "== GPU health ==" in verbose.splitlines()
    assert lines[-2:] == [
        "== Summary ==",
        # 2 SKIP: expect.config (no [expect] given) and kubelet.config (not a Kubernetes node)
        "219 checks: 216 PASS, 0 FAIL, 0 WARN, 2 SKIP, 1 INFO; audit passed",
    ]
    assert "\033[" not in ok.output  # not a TTY: no colour
    bad = invoke("--root", str(sick), "--skip", "container")
    assert bad.exit_code == 1
    remedies = bad.output.split("== Remedies ==\n", 1)[1].split("\n\n", 1)[0]
    assert remedies.startswith("gpu.row-remap [0000:3a:00.0]: Drain the GPU")
    assert "[FAIL] gpu.row-remap [0000:3a:00.0]: GPU 2: row remap pending" in bad.output


def test_colour_only_when_asked() -> None:
    from mcpnode.audit.model import AuditReport

    report = AuditReport((Finding("gpu.ecc", Status.FAIL, "bad", (), "fix"),), "h", "k", "t")
    assert "\033[31m[FAIL]\033[0m" in render_audit.as_text(report, color=True)
    assert "\033[" not in render_audit.as_text(report)


def test_exit_codes_strict_only_skip(healthy: Path, warned: Path, tmp_path: Path) -> None:
    assert invoke("--root", str(warned), "--skip", "container").exit_code == 0
    strict = invoke("--root", str(warned), "--skip", "container", "--strict")
    assert strict.exit_code == 1 and "--strict: WARN fails" in strict.output
    only = invoke("--root", str(warned), "--only", "gpu.persistence", "--format", "json")
    doc = json.loads(only.output)
    assert {f["id"] for f in doc["findings"]} == {"gpu.persistence"}
    assert doc["summary"] == {"total": 8, "pass": 7, "fail": 0, "warn": 1, "skip": 0, "info": 0}
    skipped = invoke(
        "--root", str(warned), "--skip", "gpu.persistence", "--strict", "--skip", "container"
    )
    assert skipped.exit_code == 0
    missing = CliRunner().invoke(cli, ["audit", "--root", str(tmp_path / "nope")])
    assert missing.exit_code != 0


def test_exit_2_when_the_audit_cannot_run(tmp_path: Path) -> None:
    from mcpnode.cli.main import main

    with pytest.raises(SystemExit) as exc:
        main(["audit", "--root", str(tmp_path / "nope")])
    assert exc.value.code == 2
    garbage = tmp_path / "x.tar.gz"
    garbage.write_bytes(b"not a tarball")
    with pytest.raises(SystemExit) as exc:
        main(["audit", "--root", str(garbage)])
    assert exc.value.code == 2


def test_json_matches_schema_and_strict_result(warned: Path) -> None:
    doc = json.loads(invoke("--root", str(warned), "--format", "json", "--strict").output)
    assert validate(doc, SCHEMA) == []
    assert (doc["schema"], doc["strict"], doc["result"]) == ("mcpnode.audit/v1", True, "fail")


def test_junit(sick: Path) -> None:
    result = invoke("--root", str(sick), "--format", "junit", "--skip", "container")
    assert result.exit_code == 1
    suites = ET.fromstring(result.output.split("\n", 1)[1])
    assert suites.tag == "testsuites"
    assert (suites.get("tests"), suites.get("failures"), suites.get("skipped")) == ("219", "1", "2")
    gpu = next(s for s in suites if s.get("name") == "GPU health")
    failures = [c for c in gpu if c.find("failure") is not None]
    assert [c.get("name") for c in failures] == ["gpu.row-remap [0000:3a:00.0]"]
    failure = failures[0].find("failure")
    assert failure is not None and "remedy: Drain the GPU" in (failure.text or "")


def test_output_file_is_written_atomically(sick: Path, tmp_path: Path) -> None:
    out = tmp_path / "report.json"
    out.write_text("old")
    result = invoke("--root", str(sick), "--format", "json", "-o", str(out))
    assert result.exit_code == 1
    assert json.loads(out.read_text())["result"] == "fail"
    assert stat.S_IMODE(out.stat().st_mode) == 0o644
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.json"]  # no temp left behind
    assert "audit FAILED" in result.output  # the summary line (stderr) for the log


def test_output_into_a_missing_directory_is_exit_2(sick: Path, tmp_path: Path) -> None:
    from mcpnode.cli.main import main

    with pytest.raises(SystemExit) as exc:
        main(["audit", "--root", str(sick), "-o", str(tmp_path / "no" / "r.json")])
    assert exc.value.code == 2


# -- snapshot replay -----------------------------------------------------------------------------


def _without_time(doc: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in doc.items() if k != "generated_at"}


def test_snapshot_replays_the_same_audit(tmp_path: Path) -> None:
    root = auditroot.build_case(tmp_path, "hgx-tuning-drift-override")
    with Host(root) as h:
        before = render_audit.report_json(run_audit(h))
        write_snapshot(h, tmp_path / "node.tar.gz")
    with Host(tmp_path / "node.tar.gz") as h:
        after = render_audit.report_json(run_audit(h))
    assert _without_time(after) == _without_time(before)
    assert after["result"] == "fail"


@pytest.mark.skipif(not Path("/proc/self/mountinfo").exists(), reason="needs Linux /proc")
def test_live_snapshot_replays_the_live_audit(tmp_path: Path) -> None:
    with Host("/") as h:
        live = render_audit.report_json(run_audit(h))
        write_snapshot(h, tmp_path / "live.tar.gz")
    with Host(tmp_path / "live.tar.gz") as h:
        meta = json.loads(h.read_text("/mcpnode-snapshot.json"))
        replay = render_audit.report_json(run_audit(h))
    assert meta["euid"] == os.geteuid()
    assert _without_time(replay) == _without_time(live)


# -- bad inputs ----------------------------------------------------------------------------------

GARBAGE: dict[str, str | None] = {
    "proc/modules": "\x00\x01\x02 not modules\n\n   \n",
    "proc/self/mountinfo": "1 2 3\n - \n\x00 - cgroup2\n",
    "proc/cmdline": "\xff\xfe intel_iommu=\n",
    "proc/version": "",
    "proc/sys/kernel/numa_balancing": "banana\n",
    "proc/sys/net/ipv4/tcp_available_congestion_control": "",
    "proc/driver/nvidia/version": "\x00garbage",
    "etc/sysctl.d/99-bad.conf": "= = =\nvm.swappiness\n\x00=\n",
    "etc/sysctl.d/90-mcpnode.conf": "# profile:\n",
}


def test_garbage_never_crashes(audit_root: RootFactory) -> None:
    root = audit_root(files=GARBAGE)
    with Host(root) as h:
        report = run_audit(h, now=FIXED)
    assert report.problems == ()
    assert validate(render_audit.report_json(report), SCHEMA) == []
    got = {f.id: f.status.value for f in report.findings if f.subject is None}
    assert got["cgroup.mode"] == "WARN"  # nothing usable at /sys/fs/cgroup
    assert got["numa.balancing"] == "WARN"  # "banana" is not 0


def test_directories_and_loops_where_files_are_expected(audit_root: RootFactory) -> None:
    root = audit_root(files={"proc/modules": None, "proc/cmdline": None})
    (root / "proc/modules").mkdir()
    (root / "proc/cmdline").symlink_to("cmdline")  # ELOOP
    group = auditroot.device_dir(root, "0000:18:00.0") / "iommu_group"
    group.symlink_to("iommu_group")
    with Host(root) as h:
        report = run_audit(h)
    assert report.problems == ()
    got = {f.id: f for f in report.findings if f.subject is None}
    assert got["kernel.module.nvidia"].status is Status.WARN  # unreadable even as root
    assert "unreadable" in got["kernel.module.nvidia"].evidence[0].value


def test_malformed_snapshot_metadata(audit_root: RootFactory) -> None:
    root = audit_root()
    (root / "mcpnode-snapshot.json").write_text("{not json")
    with Host(root) as h:
        report = run_audit(h)
    assert report.problems == ()
    (nvml,) = [f for f in report.findings if f.id == "gpu.nvml"]
    assert nvml.status is Status.FAIL and "NotRecorded" in nvml.summary
