"""`[housekeeping] confine`: AllowedCPUs= drop-ins for system.slice, user.slice and init.scope
through the tuning engine (plan, journal, apply, verify, drift, rollback) on a copy of the HGX
fixture, each drop-in checked by the real `systemd-analyze verify`; and `systemd-dropin --slice`
for the inference units that must then live outside system.slice."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support import irqroot
from tests.support.tuningcli import run_cli

ANALYZE = shutil.which("systemd-analyze")
needs_analyze = pytest.mark.skipif(ANALYZE is None, reason="systemd-analyze is not installed")
UNITS = ("system.slice", "user.slice", "init.scope")
HOUSEKEEPING = "0,48,96,144"  # the HGX fixture's first core of each node, both threads

CONFINED = """\
[profile]
name = "confined"
summary = "throughput plus housekeeping confinement"
include = ["inference-throughput"]

[housekeeping]
# Test: every unit mcpnode may confine.
confine = ["system.slice", "user.slice", "init.scope"]
"""


@pytest.fixture
def root(irq_root: irqroot.IrqRoot) -> Path:
    r = irq_root.root
    (r / "etc/mcpnode/profiles").mkdir(parents=True, exist_ok=True)
    (r / "etc/mcpnode/profiles/confined.toml").write_text(CONFINED)
    assert run_cli("manifest", "publish", "--root", str(r))[0] == 0
    return r


def dropin(root: Path, unit: str) -> Path:
    return root / f"etc/systemd/system/{unit}.d/50-mcpnode-housekeeping.conf"


def analyze(unit_dir: Path, unit: str) -> subprocess.CompletedProcess[str]:
    """`systemd-analyze verify` of a slice with the drop-ins beside it (`SYSTEMD_UNIT_PATH`
    ending in ':' keeps the built-in directories). system.slice ships no file on Debian (it is
    built in), so a minimal one stands in; its drop-in is what is checked."""
    if not (unit_dir / unit).exists():
        (unit_dir / unit).write_text(f"[Unit]\nDescription={unit} (test)\n")
    assert ANALYZE is not None
    return subprocess.run(
        [ANALYZE, "verify", str(unit_dir / unit)],
        env={**os.environ, "SYSTEMD_UNIT_PATH": f"{unit_dir}:", "SYSTEMD_LOG_LEVEL": "notice"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_apply_confines_verify_drift_and_rollback(root: Path) -> None:
    code, out, err = run_cli("apply", "--profile", "confined", "--root", str(root))
    assert code == 0, err
    for unit in UNITS:
        text = dropin(root, unit).read_text()
        section = "[Scope]" if unit.endswith(".scope") else "[Slice]"
        assert f"{section}\nAllowedCPUs={HOUSEKEEPING}\n" in text
        assert oct(dropin(root, unit).stat().st_mode & 0o777) == "0o644"
    assert run_cli("verify", "--profile", "confined", "--root", str(root))[0] == 0

    dropin(root, "user.slice").write_text("[Slice]\nAllowedCPUs=0-191\n")  # edited by hand
    code, out, _ = run_cli(
        "verify", "--profile", "confined", "--root", str(root), "--format", "json"
    )
    assert code == 1
    assert [d["key"] for d in json.loads(out)["drift"]] == ["systemd:user.slice"]
    assert run_cli("apply", "--profile", "confined", "--root", str(root))[0] == 0
    assert f"AllowedCPUs={HOUSEKEEPING}" in dropin(root, "user.slice").read_text()

    assert run_cli("rollback", "--root", str(root))[0] == 0
    for unit in UNITS:
        assert not dropin(root, unit).exists()


def test_an_existing_dropin_of_that_name_is_restored_byte_for_byte(root: Path) -> None:
    path = dropin(root, "system.slice")
    path.parent.mkdir(parents=True)
    path.write_text("# an operator's own\n[Slice]\nCPUWeight=50\n")
    path.chmod(0o600)
    assert run_cli("apply", "--profile", "confined", "--root", str(root))[0] == 0
    assert "AllowedCPUs=" in path.read_text()
    assert run_cli("rollback", "--root", str(root))[0] == 0
    assert path.read_text() == "# an operator's own\n[Slice]\nCPUWeight=50\n"
    assert oct(path.stat().st_mode & 0o777) == "0o600"


@needs_analyze
def test_systemd_analyze_accepts_the_slice_dropins(root: Path, tmp_path: Path) -> None:
    assert run_cli("apply", "--profile", "confined", "--root", str(root))[0] == 0
    units = tmp_path / "units"
    units.mkdir()
    for unit in ("system.slice", "user.slice"):
        (units / f"{unit}.d").mkdir()
        shutil.copy(dropin(root, unit), units / f"{unit}.d" / "50-mcpnode-housekeeping.conf")
        proc = analyze(units, unit)
        assert (proc.returncode, proc.stdout, proc.stderr) == (0, "", ""), proc.stderr
    # The control: a bad value in the same place is reported, so the drop-in is really read.
    bad = units / "system.slice.d" / "50-mcpnode-housekeeping.conf"
    bad.write_text("[Slice]\nAllowedCPUs=0-x\n")
    assert "Failed to parse CPU affinity" in analyze(units, "system.slice").stderr


@needs_analyze
def test_dropin_with_a_slice_of_its_own(root: Path, tmp_path: Path) -> None:
    code, out, err = run_cli(
        "systemd-dropin", "--gpu", "0", "--unit", "vllm", "--slice", "mcpnode-gpu",
        "--root", str(root),
    )  # fmt: skip
    assert code == 0, err
    assert out.splitlines()[-1] == "Slice=mcpnode-gpu.slice"
    units = tmp_path / "units"
    (units / "vllm.service.d").mkdir(parents=True)
    (units / "vllm.service").write_text(
        f"[Unit]\nDescription=vllm\n[Service]\nExecStart={shutil.which('true')}\n"
    )
    (units / "vllm.service.d" / "50-mcpnode-placement.conf").write_text(out)
    assert ANALYZE is not None
    proc = subprocess.run(
        [ANALYZE, "verify", str(units / "vllm.service")],
        env={**os.environ, "SYSTEMD_UNIT_PATH": f"{units}:", "SYSTEMD_LOG_LEVEL": "notice"},
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "", "")
    for bad in ("system", "-", "../x"):
        code, _, err = run_cli(
            "systemd-dropin", "--gpu", "0", "--unit", "vllm", "--slice", bad, "--root", str(root)
        )
        assert code == 64, err


def test_confine_names_only_known_units(tmp_path: Path) -> None:
    from mcpnode.tuning.errors import ProfileError
    from mcpnode.tuning.profile import parse_profile

    with pytest.raises(ProfileError, match=r"must be a list of system\.slice, user\.slice"):
        parse_profile(
            '[profile]\nname = "x"\n[housekeeping]\nconfine = ["kubepods.slice"]\n', "x.toml", "x"
        )


def test_a_set_property_dropin_that_wins_is_reported(root: Path) -> None:
    control = root / "etc/systemd/system.control/user.slice.d/50-AllowedCPUs.conf"
    control.parent.mkdir(parents=True)
    control.write_text(
        '# This is a drop-in unit file extension, created via "systemctl set-property"\n'
        "[Slice]\nAllowedCPUs=0-191\n"
    )
    code, out, err = run_cli(
        "apply", "--profile", "confined", "--root", str(root), "--format", "json"
    )
    assert code == 0, err
    items = {i["key"]: i for i in json.loads(out)["items"]}
    user = items["systemd:user.slice"]
    assert user["action"] == "skipped"
    assert (
        "system.control/user.slice.d/50-AllowedCPUs.conf sets AllowedCPUs=0-191" in user["reason"]
    )
    assert not dropin(root, "user.slice").exists()
    assert dropin(root, "system.slice").exists()
