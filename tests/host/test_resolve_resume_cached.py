"""Inside a oneshot() pass the resolver resumes from the deepest directory it already resolved:
the answers must be the ones a cold walk gives, symlinks (relative, absolute, `..`, pointing
back up the tree) included, and a missing component must still raise."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mcpnode.errors import PathNotFound
from mcpnode.host import Host


def _tree(root: Path) -> None:
    cpu = root / "sys/devices/system/cpu"
    for n in range(3):
        (cpu / f"cpu{n}/power").mkdir(parents=True)
        (cpu / f"cpu{n}/power/energy_perf_bias").write_text(f"{n}\n")
    (root / "sys/bus/cpu/devices").mkdir(parents=True)
    for n in range(3):
        os.symlink(f"../../../devices/system/cpu/cpu{n}", root / f"sys/bus/cpu/devices/cpu{n}")
    os.symlink("/sys/devices/system/cpu", root / "sys/cpus")  # absolute: the root is `/`
    os.symlink("../../../../..", cpu / "cpu0/up")  # `..` past the top stays at the root


LOGICAL = [
    "/sys/devices/system/cpu/cpu1/power/energy_perf_bias",
    "/sys/bus/cpu/devices/cpu2/power/energy_perf_bias",
    "/sys/cpus/cpu0/power",
    "/sys/cpus/cpu0/up/sys/cpus/cpu1/power/energy_perf_bias",
    "/sys/devices/system/cpu/cpu0/up/sys/bus/cpu/devices/cpu0/../cpu2",
]


def test_resolution_inside_a_pass_is_the_cold_one(tmp_path: Path) -> None:
    _tree(tmp_path)
    host = Host(tmp_path)
    cold = [host.realpath(p) for p in LOGICAL]
    assert cold[0] == "/sys/devices/system/cpu/cpu1/power/energy_perf_bias"
    assert cold[1] == "/sys/devices/system/cpu/cpu2/power/energy_perf_bias"
    with host.oneshot():
        host.scandir("/sys/devices/system/cpu")  # every cpuN known resolved
        warm = [host.realpath(p) for p in LOGICAL]
        again = [host.realpath(p) for p in reversed(LOGICAL)][::-1]
        texts = [host.read_text(p) for p in LOGICAL if p.endswith("bias")]
    assert warm == cold == again
    assert texts == ["1\n", "2\n", "1\n"]


def test_missing_component_below_a_cached_directory_raises(tmp_path: Path) -> None:
    _tree(tmp_path)
    host = Host(tmp_path)
    with host.oneshot():
        host.realpath("/sys/devices/system/cpu/cpu1/power")
        with pytest.raises(PathNotFound):
            host.realpath("/sys/devices/system/cpu/cpu1/power/nope/deeper")
        assert host.read_optional("/sys/devices/system/cpu/cpu1/power/nope") is None
