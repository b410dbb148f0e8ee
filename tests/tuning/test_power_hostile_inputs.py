"""Hostile values for every new key: in a profile (refused in one line naming file and key,
before anything on the host is read, exit 2, nothing changed) and in the sysfs files the
plugins read (a 5,000-digit count, a garbage latency, a 64 KiB cpulist: reported per key, never
a traceback, never written over)."""

from __future__ import annotations

from pathlib import Path

import pytest

from mcpnode.tuning.errors import ProfileError
from mcpnode.tuning.profile import parse_profile
from tests.cli.test_cli_errors import mcpnode, one_line
from tests.support.powerroot import CPU, NODE, planned, power_root
from tests.support.tuningroot import tree

DIGITS = "1" * 5000
HUGE_LIST = ",".join(["0-65535"] * 9362)[: 64 << 10]


@pytest.mark.parametrize(
    ("section", "line", "why"),
    [
        ("cpu", "cpus = 3", "must be all, gpu-slices, housekeeping or a cpulist"),
        ("cpu", 'cpus = "slices"', "not a cpulist"),
        ("cpu", 'cpus = "0-70000"', "past the last possible cpu"),
        ("cpu", 'cpus = "8192"', "past the last possible cpu 8191"),
        ("cpu", 'cpus = ""', "names no CPU"),
        ("cpu", 'energy_performance_preference = "perf ormance"', "is not a name"),
        ("cpu", "energy_performance_preference = []", "non-empty list"),
        ("cpu", "energy_perf_bias = 16", "must be 0 to 15"),
        ("cpu", "energy_perf_bias = -1", "must be 0 to 15"),
        ("cpu", "energy_perf_bias = true", "must be 0 to 15"),
        ("cpu", 'energy_perf_bias = "turbo"', "must be 0 to 15"),
        ("cpu", f"energy_perf_bias = {DIGITS[:18]}", "must be 0 to 15"),
        ("cpu", "min_perf_pct = 101", "percentage"),
        ("cpu", "min_perf_pct = 1.5", "percentage"),
        ("cpu", "no_turbo = 1", "true or false"),
        ("cpu", 'boost = "yes"', "true or false"),
        ("cpu", "max_latency_us = -1", "microseconds"),
        ("cpu", "max_latency_us = 1000001", "microseconds"),
        ("cpu", "max_latency_us = false", "microseconds"),
        ("vm", "hugepages_2048kB = -5", "page count"),
        ("vm", "hugepages_2048kB = 16777217", "page count"),
        ("vm", "hugepages_2048kB = { min = true }", "page count"),
        ("vm", "hugepages_2048kB = { max = 3 }", "page count"),
        ("vm", 'hugepages_2048kB = "512"', "page count"),
        ("vm", 'hugepages_nodes = "gpu"', "not a node list"),
        ("vm", 'hugepages_nodes = "0-2000"', "past the last possible cpu"),
        ("vm", "hugepages_nodes = [0]", "must be gpu-nodes, all or a node list"),
        ("vm", 'transparent_hugepage_defrag = "sometimes"', "must be one of"),
        ("vm", 'khugepaged_defrag = "0"', "true or false"),
    ],
)
def test_a_hostile_profile_value_names_file_and_key(section: str, line: str, why: str) -> None:
    text = f'[profile]\nsummary = "x"\n[{section}]\n{line}\n'
    with pytest.raises(ProfileError) as raised:
        parse_profile(text, "/etc/mcpnode/profiles/bad.toml", "bad")
    message = str(raised.value)
    assert "/etc/mcpnode/profiles/bad.toml" in message
    assert f"[{section}] '{line.split(' =')[0]}'" in message
    assert why in message


def test_the_cli_refuses_it_in_one_line_and_changes_nothing(tmp_path: Path) -> None:
    root = power_root(tmp_path / "root")
    profiles = tmp_path / "profiles"
    profiles.mkdir()
    (profiles / "bad.toml").write_text('[profile]\nsummary = "x"\n[cpu]\nenergy_perf_bias = 99\n')
    before = tree(root)
    where = ("--root", str(root), "--profiles-dir", str(profiles))
    proc = mcpnode("apply", "--profile", "bad", *where)
    assert proc.returncode == 2
    line = one_line(proc)
    assert "bad.toml" in line and "energy_perf_bias" in line and "0 to 15" in line
    assert tree(root) == before


PROFILE = """\
[profile]
summary = "x"
[cpu]
cpus = "all"
governor = "performance"
max_latency_us = 10
energy_perf_bias = 0
[vm]
hugepages_2048kB = { min = 64 }
"""


@pytest.mark.parametrize(
    ("rel", "text", "key", "action", "why"),
    [
        (f"{CPU}/cpu0/cpuidle/state2/latency", DIGITS, "cpu:max_latency_us", "skipped", "latency"),
        (f"{CPU}/cpu0/cpuidle/state2/latency", "ten", "cpu:max_latency_us", "skipped", "'ten'"),
        (f"{CPU}/online", DIGITS, "cpu:max_latency_us", "skipped", "not a cpu list"),
        (f"{CPU}/online", HUGE_LIST, "cpu:energy_perf_bias", "skipped", "past the last possible"),
        (
            f"{NODE}/node1/hugepages/hugepages-2048kB/nr_hugepages",
            DIGITS,
            "vm:hugepages_2048kB:node1",
            "set",
            "not a number",
        ),
        (
            f"{NODE}/node1/hugepages/hugepages-2048kB/nr_hugepages",
            "many",
            "vm:hugepages_2048kB:node1",
            "set",
            "not a number",
        ),
    ],
)
def test_a_hostile_sysfs_value_is_reported_for_its_key(
    tmp_path: Path, rel: str, text: str, key: str, action: str, why: str
) -> None:
    root = power_root(tmp_path / "root")
    (root / rel).write_text(text)
    items = {i.key: i for i in planned(tmp_path, root, PROFILE)}
    assert items[key].action == action, items[key]
    assert why in items[key].reason


def test_a_huge_related_cpus_list_takes_the_policy_rather_than_guessing(tmp_path: Path) -> None:
    root = power_root(tmp_path / "root")
    (root / f"{CPU}/cpufreq/policy3/related_cpus").write_text(HUGE_LIST)
    text = '[profile]\nsummary = "x"\n[cpu]\ncpus = "5"\ngovernor = "performance"\n'
    keys = [i.key for i in planned(tmp_path, root, text)]
    # policy3's CPUs are unknown: it is planned (and shown) rather than silently left out.
    assert keys == ["cpu:governor:policy3", "cpu:governor:policy5"]
