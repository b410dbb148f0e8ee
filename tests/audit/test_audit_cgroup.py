"""cgroup mode the way systemd decides it, from mount tables (v2, hybrid, v1, the v232 hybrid
variant, nothing mounted, shadowed mounts, garbage), and the finding per mode."""

from __future__ import annotations

from pathlib import Path

import pytest

from mcpnode.audit import cgroup
from mcpnode.audit.context import cgroup_mode_of, driver_version_of
from mcpnode.audit.facts import FileRead
from mcpnode.audit.model import Finding, Status
from mcpnode.codec.reading import Absent, Unreadable
from tests.support import auditroot

V232 = """\
22 28 0:21 / /sys rw - sysfs sysfs rw
31 22 0:26 / /sys/fs/cgroup ro - tmpfs tmpfs ro,mode=755
33 31 0:28 / /sys/fs/cgroup/systemd rw - cgroup2 cgroup2 rw
"""
SHADOWED = """\
31 22 0:26 / /sys/fs/cgroup ro - tmpfs tmpfs ro,mode=755
33 31 0:28 / /sys/fs/cgroup/systemd rw - cgroup cgroup rw,name=systemd
40 22 0:40 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw
"""


@pytest.mark.parametrize(
    ("text", "mode"),
    [
        (auditroot.MOUNTINFO_V2, "v2"),
        (auditroot.MOUNTINFO_HYBRID, "hybrid"),
        (auditroot.MOUNTINFO_V1, "v1"),
        (V232, "hybrid"),
        (SHADOWED, "v2"),  # a later mount over /sys/fs/cgroup is what statfs would see
        ("22 28 0:21 / /sys rw - sysfs sysfs rw\n", "unknown"),
        ("31 22 0:26 / /sys/fs/cgroup ro - tmpfs tmpfs ro\n", "unknown"),  # tmpfs, no hierarchy
        ("", "unknown"),
        ("garbage\n\x00\x01 - \n - - -\n", "unknown"),
        ("31 22 0:27 / /sys/fs/cgroup/ rw - cgroup2 cgroup2 rw\n", "v2"),  # trailing slash
    ],
)
def test_mode_table(text: str, mode: str) -> None:
    assert cgroup_mode_of(text)[0] == mode


def test_evidence_names_the_mounts() -> None:
    _mode, seen = cgroup_mode_of(auditroot.MOUNTINFO_HYBRID)
    assert seen == (
        "/sys/fs/cgroup: tmpfs, /sys/fs/cgroup/unified: cgroup2, /sys/fs/cgroup/systemd: cgroup"
    )


@pytest.mark.parametrize(
    ("text", "version"),
    [
        (
            "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 22:23:56 UTC "
            "2024\nGCC version:  gcc version 12.3.0\n",
            "550.54.15",
        ),
        (
            "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.86.15  Release Build  "
            "(dvs-builder@U16-I3-B13-4-3)  Thu Jan 23 22:50:36 UTC 2025\n",
            "570.86.15",
        ),
        ("NVRM version: NVIDIA UNIX aarch64 Kernel Module  535.161.08  Tue Mar 5\n", "535.161.08"),
        ("", None),
        ("not a driver\n", None),
    ],
)
def test_driver_version(text: str, version: str | None) -> None:
    assert driver_version_of(text) == version


def check(mountinfo: FileRead, cmdline: str = "", is_root: bool = True) -> list[Finding]:
    facts = cgroup.CgroupFacts(mountinfo, FileRead("/proc/cmdline", cmdline))
    return cgroup.check(facts, auditroot.context(is_root=is_root))


def read(text: str | None) -> FileRead:
    path = "/proc/self/mountinfo"
    return FileRead(path, Absent(f"no {path}") if text is None else text)


DENIED = FileRead("/proc/self/mountinfo", Unreadable("Permission denied", denied=True))


def test_hybrid_and_v1_warn_with_the_deprecation_and_the_switches() -> None:
    for text in (auditroot.MOUNTINFO_HYBRID, auditroot.MOUNTINFO_V1):
        (f,) = check(read(text), "ro quiet systemd.unified_cgroup_hierarchy=0")
        assert f.status is Status.WARN
        assert "v256 refuses to boot" in f.summary
        assert f.remedy is not None and "systemd.unified_cgroup_hierarchy=1" in f.remedy
        assert [e.source for e in f.evidence] == ["/proc/self/mountinfo", "/proc/cmdline"]
        assert f.evidence[1].value == "systemd.unified_cgroup_hierarchy=0"


def test_v2_passes_unknown_warns_missing_skips() -> None:
    assert [f.status for f in check(read(auditroot.MOUNTINFO_V2))] == [Status.PASS]
    assert [f.status for f in check(read(""))] == [Status.WARN]
    assert [f.status for f in check(read(None))] == [Status.SKIP]


def test_unreadable_skips_without_root_and_warns_as_root() -> None:
    (as_root,) = check(DENIED)
    assert as_root.status is Status.WARN
    (not_root,) = check(DENIED, is_root=False)
    assert not_root.status is Status.SKIP
    assert "needs root" in not_root.summary
    assert not_root.remedy is not None and "sudo" in not_root.remedy


@pytest.mark.parametrize(
    ("case", "status"),
    [("nogpu-cgroup-v2", "PASS"), ("nogpu-cgroup-hybrid", "WARN"), ("nogpu-cgroup-v1", "WARN")],
)
def test_cases(case: str, status: str, tmp_path: Path) -> None:
    report = auditroot.audit_case(tmp_path, case)
    assert auditroot.statuses(report, "cgroup.mode") == {None: status}
