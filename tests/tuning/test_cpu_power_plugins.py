"""CPU power, C-states, per-node huge pages and THP defrag: plan, apply, verify and rollback
against temporary roots laid out like sysfs (tests/support/powerroot.py) under intel_pstate, under
acpi-cpufreq and in a VM, with the CPU partition selecting the GPU slices."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mcpnode.host import Host
from mcpnode.tuning.apply import apply_profile, rollback
from mcpnode.tuning.errors import JournalError
from mcpnode.tuning.explain import explain
from mcpnode.tuning.journal import JournalStore, from_json
from mcpnode.tuning.partition import CpuPartition
from mcpnode.tuning.plan import plan
from mcpnode.tuning.profile import load_profile
from mcpnode.tuning.state import read_state
from mcpnode.tuning.verify import verify
from tests.support.powerroot import CPU, NODE, THP, journal_text, partition, power_root, read
from tests.support.tuningroot import kernel_view

POWER = """\
[profile]
summary = "cpu power on the GPU slices"

[cpu]
cpus = "gpu-slices"
governor = ["performance"]
energy_performance_preference = ["performance", "balance_performance"]
energy_perf_bias = "performance"
min_perf_pct = 100
no_turbo = false
boost = true
max_latency_us = 10

[vm]
transparent_hugepage_defrag = "defer+madvise"
khugepaged_defrag = false
hugepages_2048kB = 512
hugepages_nodes = "gpu-nodes"
"""


def env(tmp_path: Path, driver: str, text: str = POWER) -> tuple[Path, Host, Path]:
    root = power_root(tmp_path / "root", driver)
    profiles = tmp_path / "profiles"
    profiles.mkdir()
    (profiles / "power.toml").write_text(text)
    return root, Host(root), profiles


def actions(host: Host, profiles: Path, part: CpuPartition | None) -> dict[str, tuple[str, str]]:
    profile = load_profile("power", host, profiles)
    p = plan(profile, read_state(host, profile, partition=part))
    return {i.key: (i.action, i.reason) for i in p.items}


def test_intel_pstate_round_trip_touches_only_the_gpu_slices(tmp_path: Path) -> None:
    root, host, profiles = env(tmp_path, "intel_pstate")
    before = kernel_view(root)
    profile = load_profile("power", host, profiles)
    part = partition()
    result = apply_profile(host, profile, JournalStore(host), partition=part)
    written = {o.key for o in result.writes}
    slices = (1, 2, 3, 5, 6, 7)
    for cpu in slices:
        assert read(root, f"{CPU}/cpufreq/policy{cpu}/scaling_governor") == "performance"
        epp = f"{CPU}/cpufreq/policy{cpu}/energy_performance_preference"
        assert read(root, epp) == "performance"
        assert read(root, f"{CPU}/cpu{cpu}/power/energy_perf_bias") == "0"
        assert read(root, f"{CPU}/cpu{cpu}/cpuidle/state3/disable") == "1"  # C6, 170 us
        assert read(root, f"{CPU}/cpu{cpu}/cpuidle/state2/disable") == "0"  # C1E, 10 us: kept
    for cpu in (0, 4):  # housekeeping: untouched
        assert read(root, f"{CPU}/cpufreq/policy{cpu}/scaling_governor") == "powersave"
        assert read(root, f"{CPU}/cpu{cpu}/cpuidle/state3/disable") == "0"
        assert f"cpu:energy_perf_bias:cpu{cpu}" not in written
    assert read(root, f"{CPU}/intel_pstate/min_perf_pct") == "100"
    assert "cpu:no_turbo" not in written  # already 0
    assert read(root, f"{THP}/defrag") == "defer+madvise"
    assert read(root, f"{THP}/khugepaged/defrag") == "0"
    for node in (0, 1):
        assert read(root, f"{NODE}/node{node}/hugepages/hugepages-2048kB/nr_hugepages") == "512"
    items = {i.key: i for i in result.plan.items}
    # intel_pstate has neither cpufreq/boost nor (before 6.11) policyN/boost: not applicable.
    assert items["cpu:boost"].action == "unsupported"
    assert "intel_pstate has no boost" in items["cpu:boost"].reason

    report = verify(host, profile, part)
    assert report.drift == () and report.compliant is True

    rollback(host, JournalStore(host))
    after = kernel_view(root)
    assert {k: v for k, v in after.items() if not k.startswith("var")} == before


def test_acpi_cpufreq_has_no_epp_epb_or_pstate_limits(tmp_path: Path) -> None:
    root, host, profiles = env(tmp_path, "acpi-cpufreq")
    got = actions(host, profiles, partition())
    assert got["cpu:energy_performance_preference"] == (
        "unsupported",
        "the cpufreq driver acpi-cpufreq has no energy_performance_preference "
        "(intel_pstate and amd-pstate in active mode have it)",
    )
    assert got["cpu:energy_perf_bias"][0] == "unsupported"
    assert "energy_perf_bias" in got["cpu:energy_perf_bias"][1]
    for key in ("cpu:min_perf_pct", "cpu:no_turbo"):
        assert got[key] == (
            "unsupported",
            f"no /sys/devices/system/cpu/intel_pstate/{key[4:]}: the CPU frequency driver is "
            "not intel_pstate",
        )
    assert got["cpu:boost"][0] == "ok"  # cpufreq/boost already 1
    assert got["cpu:governor:policy1"][0] == "set"
    assert "cpu:governor:policy0" not in got  # housekeeping
    profile = load_profile("power", host, profiles)
    apply_profile(host, profile, JournalStore(host), partition=partition())
    assert read(root, f"{CPU}/cpufreq/policy5/scaling_governor") == "performance"
    assert verify(host, profile, partition()).compliant is True


def test_a_vm_has_none_of_it_and_nothing_fails(tmp_path: Path) -> None:
    _root, host, profiles = env(tmp_path, "vm")
    got = actions(host, profiles, partition())
    for key in (
        "cpu:governor",
        "cpu:energy_performance_preference",
        "cpu:energy_perf_bias",
        "cpu:min_perf_pct",
        "cpu:no_turbo",
        "cpu:boost",
        "cpu:max_latency_us",
    ):
        assert got[key][0] == "unsupported", (key, got[key])
    assert "cpuidle driver none" in got["cpu:max_latency_us"][1]
    assert "no cpufreq policies" in got["cpu:governor"][1]


def test_slices_unknown_to_the_run_are_skipped_not_guessed(tmp_path: Path) -> None:
    _root, host, profiles = env(tmp_path, "intel_pstate")
    got = actions(host, profiles, None)
    for key in ("cpu:governor", "cpu:energy_perf_bias", "cpu:max_latency_us"):
        assert got[key][0] == "skipped"
        assert "GPU slices are not known" in got[key][1]
    assert got["vm:hugepages_2048kB"][0] == "skipped"


def test_epp_other_than_performance_under_the_performance_governor(tmp_path: Path) -> None:
    text = '[profile]\nsummary = "x"\n[cpu]\nenergy_performance_preference = "balance_power"\n'
    root, host, profiles = env(tmp_path, "intel_pstate", text)
    (root / f"{CPU}/cpufreq/policy2/scaling_governor").write_text("performance\n")
    got = actions(host, profiles, None)
    assert got["cpu:energy_performance_preference:policy1"][0] == "set"
    action, why = got["cpu:energy_performance_preference:policy2"]
    assert action == "unsupported" and "EBUSY" in why


@pytest.mark.parametrize(
    ("limit", "disabled"),
    [(10, (3,)), (1, (1, 2, 3)), (0, (1, 2, 3)), (169, (3,)), (170, ())],
)
def test_cstates_deeper_than_the_limit(
    tmp_path: Path, limit: int, disabled: tuple[int, ...]
) -> None:
    text = f'[profile]\nsummary = "x"\n[cpu]\ncpus = "2"\nmax_latency_us = {limit}\n'
    _root, host, profiles = env(tmp_path, "intel_pstate", text)
    got = actions(host, profiles, None)
    if not disabled:
        assert got == {"cpu:max_latency_us": ("ok", "every idle state exits within 170 us")}
        return
    assert set(got) == {f"cpu:cstate:cpu2:state{s}" for s in disabled}
    assert all(a == "set" for a, _ in got.values())


def test_hugepages_on_the_gpu_nodes_only_and_never_lowered(tmp_path: Path) -> None:
    text = (
        '[profile]\nsummary = "x"\n[vm]\nhugepages_2048kB = { min = 256 }\n'
        'hugepages_nodes = "gpu-nodes"\n'
    )
    root, host, profiles = env(tmp_path, "intel_pstate", text)
    nodes = {0: frozenset(range(4)), 1: frozenset(range(4, 8))}
    part = CpuPartition(frozenset({0, 1, 2, 3, 4}), frozenset({5, 6, 7}), nodes, "test")
    (root / f"{NODE}/node1/hugepages/hugepages-2048kB/nr_hugepages").write_text("1024\n")
    got = actions(host, profiles, part)
    assert set(got) == {"vm:hugepages_2048kB:node1"}
    assert got["vm:hugepages_2048kB:node1"][0] == "ok"  # 1024 >= 256: kept


def test_the_journal_names_only_the_plugins_files(tmp_path: Path) -> None:
    doc = journal_text
    good = (
        ("cpu:energy_perf_bias:cpu3", "/sys/devices/system/cpu/cpu3/power/energy_perf_bias"),
        ("cpu:cstate:cpu3:state2", "/sys/devices/system/cpu/cpu3/cpuidle/state2/disable"),
        ("vm:hugepages_2048kB:node1", f"/{NODE}/node1/hugepages/hugepages-2048kB/nr_hugepages"),
        ("vm:khugepaged_defrag", f"/{THP}/khugepaged/defrag"),
        ("cpu:min_perf_pct", "/sys/devices/system/cpu/intel_pstate/min_perf_pct"),
    )
    for key, path in good:
        assert from_json(doc(key, path), "j").entries[0].path == path
    for key, path in (
        ("cpu:energy_perf_bias:cpu3", "/etc/passwd"),
        ("cpu:cstate:cpu3:state2", "/sys/devices/system/cpu/cpu4/cpuidle/state2/disable"),
        ("cpu:cstate:cpu3:state2/../..", "/sys/devices/system/cpu/cpu3/cpuidle/state2/disable"),
        ("vm:hugepages_2048kB:node1", f"/{NODE}/node1/hugepages/hugepages-1048576kB/x"),
        ("cpu:boost:policy1/../../x", "/sys/devices/system/cpu/cpufreq/policy1/boost"),
    ):
        with pytest.raises(JournalError, match="is not the file of"):
            from_json(doc(key, path), "j")


def test_explain_covers_the_new_keys(tmp_path: Path) -> None:
    _root, host, profiles = env(tmp_path, "intel_pstate")
    e = explain("cpu:energy_perf_bias:cpu2", host, profiles)
    assert e.path == "/sys/devices/system/cpu/cpu2/power/energy_perf_bias"
    assert e.current == "6" and e.default is not None and "6" in e.default
    assert [s.rule for s in e.set_by] == ["0"]
    e = explain("vm:hugepages_2048kB", host, profiles)
    assert e.path is None and e.default == "0 (none reserved)"
    assert [s.rule for s in e.set_by] == ["512"]
    e = explain("cpu:max_latency_us", host, profiles)
    assert e.default is not None and [s.rule for s in e.set_by] == ["10"]
    e = explain("vm:transparent_hugepage_defrag", host, profiles)
    assert e.current == "always defer defer+madvise [madvise] never"


def test_a_tarball_root_is_planned_but_never_written(tmp_path: Path) -> None:
    """A snapshot (`--root X.tar.gz`) shows the plan of every new key and refuses the apply
    in one line: the archive is never changed."""
    import hashlib

    from tests.cli.test_cli_errors import mcpnode, one_line
    from tests.host.test_host_tar import pack

    # Every CPU and node: the CLI needs no CPU partition (no discovery of this bare root).
    flat = "\n".join(
        line for line in POWER.splitlines() if not line.startswith(("cpus", "hugepages_nodes"))
    )
    root, _, profiles = env(tmp_path, "intel_pstate", flat + "\n")
    tarball = pack(root, tmp_path / "root.tar.gz")
    digest = hashlib.sha256(tarball.read_bytes()).hexdigest()
    where = ("--profile", "power", "--root", str(tarball), "--profiles-dir", str(profiles))
    dry = mcpnode("apply", *where, "--dry-run", "--format", "json")
    assert dry.returncode == 0, dry.stderr
    planned = {i["key"]: i["action"] for i in json.loads(dry.stdout)["items"]}
    for key in (
        "cpu:governor:policy0",
        "cpu:energy_performance_preference:policy7",
        "cpu:energy_perf_bias:cpu0",
        "cpu:min_perf_pct",
        "cpu:cstate:cpu0:state3",
        "vm:hugepages_2048kB:node1",
        "vm:transparent_hugepage_defrag",
        "vm:khugepaged_defrag",
    ):
        assert planned[key] == "set", key
    proc = mcpnode("apply", *where)
    assert proc.returncode == 2
    assert "read-only: the root is a tarball" in one_line(proc)
    assert hashlib.sha256(tarball.read_bytes()).hexdigest() == digest
