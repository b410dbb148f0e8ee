"""Temporary roots laid out like the sysfs of the CPU power, C-state, huge page and THP files, as
Linux 6.x prints them, over tests/support/tuningroot.py's base (proc/sys, /proc/self/status,
modules):

* `intel_pstate`: an Intel host in active mode: one cpufreq policy per CPU (related_cpus = the
  CPU), governors `performance powersave`, EPP `balance_performance` with the five preferences
  intel_pstate offers, `intel_pstate/{status,min_perf_pct,no_turbo}`, and `cpuN/power/
  energy_perf_bias` = 6 (intel_epb's default);
* `acpi-cpufreq`: an AMD host without amd-pstate: the six generic governors, `cpufreq/boost`,
  no EPP, no intel_pstate, no EPB;
* `vm`: a guest: no cpufreq at all, cpuidle driver `none` with no states.

Every host but the VM has intel_idle's four states on every CPU (POLL 0 us, C1 2 us, C1E 10 us,
C6 170 us: a Sapphire Rapids part), two NUMA nodes (CPUs split in halves) with 2 MiB huge page
counters at 0, and THP's three files.
"""

from __future__ import annotations

import json
from pathlib import Path

from mcpnode.host import Host
from mcpnode.tuning.model import PlanItem
from mcpnode.tuning.partition import CpuPartition
from mcpnode.tuning.plan import plan
from mcpnode.tuning.profile import load_profile
from mcpnode.tuning.state import read_state
from tests.support.tuningroot import build, put

CPU = "sys/devices/system/cpu"
NODE = "sys/devices/system/node"
THP = "sys/kernel/mm/transparent_hugepage"
CSTATES = (("POLL", 0), ("C1", 2), ("C1E", 10), ("C6", 170))
EPP_OFFERED = "default performance balance_performance balance_power power"


def power_root(root: Path, driver: str = "intel_pstate", ncpus: int = 8) -> Path:
    build(root, sysctls={}, policies=0)
    put(root, f"{CPU}/online", f"0-{ncpus - 1}\n")
    put(root, f"{CPU}/possible", f"0-{ncpus - 1}\n")
    half = ncpus // 2
    for node, cpus in ((0, f"0-{half - 1}"), (1, f"{half}-{ncpus - 1}")):
        put(root, f"{NODE}/node{node}/cpulist", cpus + "\n")
        pages = f"{NODE}/node{node}/hugepages/hugepages-2048kB"
        put(root, f"{pages}/nr_hugepages", "0\n")
        put(root, f"{pages}/free_hugepages", "0\n")
    put(root, f"{NODE}/online", "0-1\n")
    put(root, f"{THP}/defrag", "always defer defer+madvise [madvise] never\n")
    put(root, f"{THP}/khugepaged/defrag", "1\n")
    if driver == "vm":
        put(root, f"{CPU}/cpuidle/current_driver", "none\n")
        return root
    put(root, f"{CPU}/cpuidle/current_driver", "intel_idle\n")
    for cpu in range(ncpus):
        for n, (name, latency) in enumerate(CSTATES):
            d = f"{CPU}/cpu{cpu}/cpuidle/state{n}"
            put(root, f"{d}/name", name + "\n")
            put(root, f"{d}/latency", f"{latency}\n")
            put(root, f"{d}/disable", "0\n")
        policy = f"{CPU}/cpufreq/policy{cpu}"
        put(root, f"{policy}/related_cpus", f"{cpu}\n")
        put(root, f"{policy}/affected_cpus", f"{cpu}\n")
        put(root, f"{policy}/scaling_driver", driver + "\n")
        if driver == "intel_pstate":
            put(root, f"{policy}/scaling_available_governors", "performance powersave\n")
            put(root, f"{policy}/scaling_governor", "powersave\n")
            put(root, f"{policy}/energy_performance_preference", "balance_performance\n")
            put(root, f"{policy}/energy_performance_available_preferences", EPP_OFFERED + "\n")
            put(root, f"{CPU}/cpu{cpu}/power/energy_perf_bias", "6\n")
        else:
            put(
                root,
                f"{policy}/scaling_available_governors",
                "conservative ondemand userspace powersave performance schedutil\n",
            )
            put(root, f"{policy}/scaling_governor", "schedutil\n")
    if driver == "intel_pstate":
        put(root, f"{CPU}/intel_pstate/status", "active\n")
        put(root, f"{CPU}/intel_pstate/min_perf_pct", "8\n")
        put(root, f"{CPU}/intel_pstate/no_turbo", "0\n")
    else:
        put(root, f"{CPU}/cpufreq/boost", "1\n")
    return root


def partition(ncpus: int = 8) -> CpuPartition:
    """CPU 0 of each node for housekeeping, the rest GPU slices, on both nodes."""
    half = ncpus // 2
    nodes = {0: frozenset(range(half)), 1: frozenset(range(half, ncpus))}
    return CpuPartition(frozenset({0, half}), frozenset(range(ncpus)) - {0, half}, nodes, "test")


def read(root: Path, rel: str) -> str:
    return (root / rel).read_text().strip()


def planned(tmp: Path, root: Path, text: str) -> list[PlanItem]:
    """The plan of profile `text` (saved as p.toml in a directory under `tmp`) on `root`, with
    no CPU partition."""
    profiles = tmp / "profiles"
    profiles.mkdir(exist_ok=True)
    (profiles / "p.toml").write_text(text)
    host = Host(root)
    profile = load_profile("p", host, profiles)
    return list(plan(profile, read_state(host, profile)).items)


def agent_profile(root: Path, name: str, text: str) -> None:
    """Install profile `text` as /etc/mcpnode/profiles/NAME.toml under `root` and configure the
    agent to enforce it, checking drift every 0.3 s, without a metrics listener."""
    (root / "etc/mcpnode/profiles").mkdir(parents=True)
    (root / f"etc/mcpnode/profiles/{name}.toml").write_text(text)
    (root / "etc/mcpnode/mcpnode.toml").write_text(
        f'[tuning]\nprofile = "{name}"\n[drift]\ninterval = 0.3\n[metrics]\nlisten = ""\n'
    )


def journal_text(key: str, path: str, original: str = "0") -> str:
    """A journal holding one entry, as `tuning/journal.py` writes it."""
    entry = {"key": key, "path": path, "original": original}
    doc = {"schema": "mcpnode.tuning-journal/v1", "state": "applied", "profile": "p"}
    return json.dumps({**doc, "entries": [entry]})
