"""The agent puts back one changed key of each new subsystem (governor, CPU power, C-states,
huge pages, THP defrag) at its next drift check: a real `mcpnode agent` on a temporary root."""

from __future__ import annotations

from pathlib import Path

from tests.support.agentproc import AgentProc
from tests.support.powerroot import CPU, NODE, THP, agent_profile, power_root, read

PROFILE = """\
[profile]
summary = "cpu power and pages"

[cpu]
governor = "performance"
energy_performance_preference = "performance"
energy_perf_bias = "performance"
min_perf_pct = 100
max_latency_us = 10

[vm]
transparent_hugepage_defrag = "defer+madvise"
hugepages_2048kB = 64
"""

# key -> (file, the value another party writes, the profile's value)
CHANGES = {
    "cpu:governor:policy3": (f"{CPU}/cpufreq/policy3/scaling_governor", "powersave", "performance"),
    "cpu:energy_performance_preference:policy1": (
        f"{CPU}/cpufreq/policy1/energy_performance_preference",
        "power",
        "performance",
    ),
    "cpu:energy_perf_bias:cpu2": (f"{CPU}/cpu2/power/energy_perf_bias", "15", "0"),
    "cpu:min_perf_pct": (f"{CPU}/intel_pstate/min_perf_pct", "20", "100"),
    "cpu:cstate:cpu5:state3": (f"{CPU}/cpu5/cpuidle/state3/disable", "0", "1"),
    "vm:hugepages_2048kB:node1": (
        f"{NODE}/node1/hugepages/hugepages-2048kB/nr_hugepages",
        "0",
        "64",
    ),
    # an enum file reads as the kernel prints it: every choice, the selected one in brackets
    "vm:transparent_hugepage_defrag": (
        f"{THP}/defrag",
        "[always] defer defer+madvise madvise never",
        "defer+madvise",
    ),
}


def test_the_agent_remediates_one_key_of_each_subsystem(tmp_path: Path) -> None:
    root = power_root(tmp_path / "root")
    agent_profile(root, "power", PROFILE)
    agent = AgentProc(["--root", str(root)], tmp_path, watchdog_usec=None)
    events = {}
    try:
        agent.wait_message("READY=1")
        for rel, _, want in CHANGES.values():
            assert read(root, rel) == want, rel  # applied at start
        t = agent.now()
        for rel, other, _ in CHANGES.values():
            (root / rel).write_text(other + "\n")
        for key in CHANGES:
            events[key] = agent.wait_event("drift.remediated", t, key=key)
        after = {key: read(root, rel) for key, (rel, _, _) in CHANGES.items()}
        rc = agent.stop()
    finally:
        agent.close()
    assert rc == 0
    for key, (_, other, want) in CHANGES.items():
        assert events[key]["old"] == other and events[key]["new"] == want
        assert after[key] == want
