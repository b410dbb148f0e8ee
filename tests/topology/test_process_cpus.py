"""CPUs this process may use, separate from device locality: status first, then the cgroup
cpuset (v2, v1 with prefix, legacy `cpuset` fs / `noprefix`), clipped to online CPUs."""

from __future__ import annotations

from pathlib import Path

import pytest

from mcpnode.host import Host
from mcpnode.topology.discover import discover
from tests.support.minihost import put

MOUNTINFO_V2 = "30 23 0:26 / /sys/fs/cgroup rw,nosuid shared:4 - cgroup2 cgroup2 rw\n"


def process(root: Path) -> tuple[str | None, str | None, str | None]:
    with Host(root) as host:
        p = discover(host).process
    return (
        p.cpus.cpulist() if p.cpus is not None else None,
        p.mems.cpulist() if p.mems is not None else None,
        p.source,
    )


def test_status_wins(mini_root: Path) -> None:
    root = mini_root
    assert process(root) == ("0-1", "0", "/proc/self/status")


def test_cgroup_v2_effective(mini_root: Path) -> None:
    root = mini_root
    (root / "proc/self/status").unlink()
    put(root, "proc/self/cgroup", "0::/slurm/job7\n")
    put(root, "proc/self/mountinfo", MOUNTINFO_V2)
    put(root, "sys/fs/cgroup/slurm/job7/cpuset.cpus.effective", "1\n")
    put(root, "sys/fs/cgroup/slurm/job7/cpuset.mems.effective", "0\n")
    assert process(root) == ("1", "0", "/sys/fs/cgroup/slurm/job7/cpuset.cpus.effective")


@pytest.mark.parametrize(
    ("fstype", "opts", "prefix"),
    [
        ("cgroup", "rw,cpuset", "cpuset."),
        ("cgroup", "rw,cpuset,noprefix", ""),
        ("cpuset", "rw", ""),
    ],
)
def test_cgroup_v1_and_legacy_cpuset(mini_root: Path, fstype: str, opts: str, prefix: str) -> None:
    root = mini_root
    (root / "proc/self/status").unlink()
    put(root, "proc/self/cgroup", "3:cpuset:/jobs/a\n")
    put(root, "proc/mounts", f"none /dev/cpuset {fstype} {opts} 0 0\n")
    put(root, f"dev/cpuset/jobs/a/{prefix}cpus", "0-1\n")
    put(root, f"dev/cpuset/jobs/a/{prefix}mems", "0\n")
    assert process(root) == ("0-1", "0", f"/dev/cpuset/jobs/a/{prefix}cpus")


def test_cpuset_naming_absent_cpus_is_clipped_to_online(mini_root: Path) -> None:
    root = mini_root
    put(root, "proc/self/status", "Cpus_allowed_list:\t0-87\nMems_allowed_list:\t0\n")
    assert process(root)[0] == "0-1"


def test_nothing_known(mini_root: Path) -> None:
    root = mini_root
    (root / "proc/self/status").unlink()
    assert process(root) == (None, None, None)
