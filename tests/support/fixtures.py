"""The roots of tests/support/ as pytest fixtures, each a thin wrapper over its builder (the
building itself stays in the builder module). A layer's conftest.py imports the ones its tests
use, so `pytest tests/<layer>` sees exactly those; tests/README.md lists which gives which.

A fixture that takes arguments is a factory: `audit_root(auditroot.HGX, files={...})` builds
in the test's own tmp_path, as `auditroot.build(tmp_path, ...)` did."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support import auditroot, irqroot, minihost, placeroot, proberoot, tuningroot

RootFactory = Callable[..., Path]


@pytest.fixture
def mini_root(tmp_path: Path) -> Path:
    """minihost's tiny sysfs tree (one node, two CPUs, one GPU, one NIC), built in tmp_path."""
    return minihost.build(tmp_path)


@pytest.fixture
def tuning_root(tmp_path: Path) -> Path:
    """tuningroot's fake host for the tuning engine, with its defaults, at tmp_path/root."""
    return tuningroot.build(tmp_path / "root")


@pytest.fixture
def tuning_profiles(tmp_path: Path) -> Path:
    """tuningroot's test profiles (base, latency, ...), written to tmp_path/profiles."""
    return tuningroot.write_profiles(tmp_path / "profiles")


@pytest.fixture
def irq_root(tmp_path: Path) -> irqroot.IrqRoot:
    """irqroot's copy of the HGX H100 fixture with a real node's interrupts and Debian's
    irqbalance file, at tmp_path/root."""
    return irqroot.build(tmp_path / "root")


@pytest.fixture
def audit_root(tmp_path: Path) -> RootFactory:
    """auditroot.build in this test's tmp_path: `audit_root(host, files=..., nvml=...)`."""
    return functools.partial(auditroot.build, tmp_path)


@pytest.fixture
def placed_root(tmp_path: Path) -> Path:
    """placeroot's root shaped like this machine (CPUs 0-1, node 0), at tmp_path/root."""
    return placeroot.build(tmp_path / "root")


@pytest.fixture
def probe_root(tmp_path: Path) -> RootFactory:
    """proberoot.build at tmp_path/root: `probe_root(fixture, run_text=None)`."""
    return functools.partial(proberoot.build, tmp_path / "root")
