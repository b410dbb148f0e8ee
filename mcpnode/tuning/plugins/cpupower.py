"""CPU power (`[cpu]`): the energy/performance hints and frequency limits of the CPUs a profile
selects, as tuned's plugin_cpu sets them (tuned/plugins/plugin_cpu.py), each checked first for
the capability, so that a key the driver or the machine lacks is "not applicable here", never a
failure:

    cpus = "gpu-slices"       which CPUs the per-CPU keys below (and governor, max_latency_us)
                              touch: "all" (online CPUs; the default), "gpu-slices",
                              "housekeeping" (the CPU partition), or a cpulist "0-15,32"
    energy_performance_preference = ["performance", "balance_performance"]
                              per cpufreq policy: policyN/energy_performance_preference, the
                              first the policy lists in energy_performance_available_preferences.
                              intel_pstate and amd-pstate in active mode only (absent under
                              acpi-cpufreq, intel_cpufreq, and in VMs).
    energy_perf_bias = "performance"   per CPU: cpuN/power/energy_perf_bias, 0..15 or its name
                              (Documentation/admin-guide/pm/intel_epb.rst); Intel only
    min_perf_pct = 100        intel_pstate/min_perf_pct, % of the max (non-turbo) performance
    no_turbo = false          intel_pstate/no_turbo
    boost = true              cpufreq/boost (acpi-cpufreq, amd-pstate passive) or, where that is
                              absent, policyN/boost (per policy, Linux 6.11+)

Values are kept exactly as the kernel prints them; each item is one file, journaled and
restored like a sysctl. Which CPUs a policy drives comes from its related_cpus.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Mapping

from mcpnode.codec import cpus
from mcpnode.codec.bounded import BoundError
from mcpnode.errors import HostError, PathNotFound
from mcpnode.host import HostReader
from mcpnode.tuning import paths
from mcpnode.tuning.facts import KeyFacts
from mcpnode.tuning.model import HostState, PlanItem, Setting
from mcpnode.tuning.plugins.base import (
    NO_PARTITION,
    SectionInput,
    StateDraft,
    Subsystem,
    err,
    token_list,
    value_item,
)
from mcpnode.tuning.read import Absent, optional, read_value, read_values, tokens
from mcpnode.tuning.values import Exact, Prefer, describe

CPU_DIR = "/sys/devices/system/cpu"
ONLINE = f"{CPU_DIR}/online"
INTEL_PSTATE = f"{CPU_DIR}/intel_pstate"
GLOBAL_BOOST = f"{paths.CPUFREQ_DIR}/boost"

EPP_KEY = "cpu:energy_performance_preference"
EPB_KEY = "cpu:energy_perf_bias"
MIN_PERF_KEY = "cpu:min_perf_pct"
NO_TURBO_KEY = "cpu:no_turbo"
BOOST_KEY = "cpu:boost"
SCOPES = ("all", "gpu-slices", "housekeeping")
# The most CPUs a Linux kernel supports (x86 CONFIG_MAXSMP: NR_CPUS 8192): a list read from a
# root that names more is refused rather than read file by file.
MAX_CPUS = 8192

# The names the kernel accepts for energy_perf_bias since 5.x and the values it stores
# (arch/x86/kernel/cpu/intel_epb.c, energy_perf_strings); it always reads back the number.
EPB_NAMES = {
    "performance": 0,
    "balance-performance": 4,
    "normal": 6,
    "balance-power": 8,
    "power": 15,
}
_CPU = re.compile(r"cpu([0-9]{1,5})\Z", re.ASCII)
_POLICY_ITEM = re.compile(
    r"cpu:(energy_performance_preference|boost):(policy[0-9]{1,5})\Z", re.ASCII
)
_EPB_ITEM = re.compile(r"cpu:energy_perf_bias:cpu([0-9]{1,5})\Z", re.ASCII)
_GLOBAL = {
    MIN_PERF_KEY: f"{INTEL_PSTATE}/min_perf_pct",
    NO_TURBO_KEY: f"{INTEL_PSTATE}/no_turbo",
    BOOST_KEY: GLOBAL_BOOST,
}
FOUND_CPUS = "cpus"  # found[...]: the `cpus` scope of this profile
FOUND_ONLINE = "cpus.online"  # found[...]: the online CPUs, or why they are unknown
FOUND_POLICY_CPUS = "cpus.policies"  # found[...]: policy -> its related CPUs

FACTS = {
    paths.CPUS_KEY: KeyFacts("all", "which CPUs the per-CPU [cpu] keys touch"),
    EPP_KEY: KeyFacts(
        "balance_performance (intel_pstate), performance under the performance governor",
        "tuned:throughput-performance and accelerator-performance set performance; only "
        "intel_pstate/amd-pstate in active mode have it",
    ),
    EPB_KEY: KeyFacts(
        "6 (normal), set by the kernel at boot when the firmware left 0",
        "tuned:throughput-performance sets performance; x86 with EPB only",
    ),
    MIN_PERF_KEY: KeyFacts(
        "the lowest P-state in %", "tuned:latency-performance sets 100 (no downclocking)"
    ),
    NO_TURBO_KEY: KeyFacts("0", "1 trades peak clocks for steadier latency; tuned leaves it 0"),
    BOOST_KEY: KeyFacts("1", "0 disables turbo/boost under acpi-cpufreq and amd-pstate"),
}


def policy_path(policy: str, name: str) -> str:
    return f"{paths.CPUFREQ_DIR}/{policy}/{name}"


def epb_path(cpu: int) -> str:
    return f"{CPU_DIR}/cpu{int(cpu)}/power/energy_perf_bias"


def key_path(key: str) -> str | None:
    """The one file of a cpupower item key; None for any other key."""
    if key in _GLOBAL:
        return _GLOBAL[key]
    m = _POLICY_ITEM.match(key)
    if m is not None:
        return policy_path(m.group(2), m.group(1))
    m = _EPB_ITEM.match(key)
    if m is not None:
        return epb_path(int(m.group(1)))
    return None


# -- the CPU scope, shared by every per-CPU [cpu] key (governor, cstates) ----------------------


def parse_scope(section: SectionInput) -> list[Setting]:
    """`cpus` as a setting of its own (later profiles override it as any key). Raises
    ProfileError."""
    if "cpus" not in section.table:
        return []
    value = section.table["cpus"]
    if not isinstance(value, str):
        raise err(section.file, "cpus", "must be all, gpu-slices, housekeeping or a cpulist", "cpu")
    if value not in SCOPES:
        try:
            chosen = cpus.parse_list(value, limit=MAX_CPUS, groups=False)
        except BoundError as error:
            raise err(section.file, "cpus", f"not a cpulist: {error}", "cpu") from None
        if not chosen:
            raise err(section.file, "cpus", "names no CPU", "cpu")
        value = cpus.format_list(chosen)
    return [Setting(paths.CPUS_KEY, Exact(value), section.file, section.comment("cpu", "cpus"))]


def read_cpus(host: HostReader, draft: StateDraft) -> None:
    """The online CPUs, once per read (found[FOUND_ONLINE]: a set, or why it is unknown)."""
    if FOUND_ONLINE in draft.found:
        return
    text = optional(host, ONLINE)
    if text is None:
        draft.found[FOUND_ONLINE] = f"{ONLINE} cannot be read"
        return
    try:
        draft.found[FOUND_ONLINE] = cpus.parse_list(text, limit=MAX_CPUS, groups=False)
    except BoundError as error:
        draft.found[FOUND_ONLINE] = f"{ONLINE}: {error}"
        return
    if not host.is_live:
        # Under a recorded root every cpuN directory is resolved (lstat) before its files are
        # opened; one listing inside the read pass (Host.oneshot) leaves them all known
        # resolved. The live root lets the kernel resolve paths, so it skips the listing.
        with contextlib.suppress(HostError):
            host.scandir(CPU_DIR)


def read_policies(host: HostReader, draft: StateDraft) -> None:
    """The cpufreq policies (draft.policies), once per read."""
    if draft.policies is not None or "cpus.listed" in draft.found:
        return
    draft.found["cpus.listed"] = True
    # scandir, not listdir: inside the read pass (Host.oneshot) the policy directories it lists
    # are then known resolved, so each policy's files are opened without a walk of their path.
    try:
        names: list[str] | None = [e.name for e in host.scandir(paths.CPUFREQ_DIR)]
    except PathNotFound:
        names = None
    policies = tuple(sorted((n for n in names or () if paths.is_policy(n)), key=_policy_no))
    draft.policies = policies if names else None


def read_related(host: HostReader, draft: StateDraft) -> None:
    """The CPUs each policy drives (related_cpus), read by the `cpus` scope only when it is
    narrower than all: the per-CPU readers need not know the scope, and "all" costs no read."""
    read_policies(host, draft)
    related: dict[str, frozenset[int] | None] = {}
    for policy in draft.policies or ():
        text = optional(host, policy_path(policy, "related_cpus"))
        try:
            if text is None:
                related[policy] = None
                continue
            related[policy] = cpus.parse_list(text, limit=MAX_CPUS, groups=False)
        except BoundError:
            related[policy] = None
    draft.found[FOUND_POLICY_CPUS] = related


def offered(host: HostReader, draft: StateDraft, name: str, first: str) -> frozenset[str] | None:
    """What the driver offers for a per-policy file (`scaling_available_governors`...), read
    once from the first policy: one cpufreq driver serves every policy, with one list."""
    key = f"cpus.offered.{name}"
    if key not in draft.found:
        draft.found[key] = tokens(optional(host, policy_path(first, name)))
    value = draft.found[key]
    return value if isinstance(value, frozenset) else None


def _policy_no(name: str) -> int:
    return int(name[len("policy") :])


def selected(state: HostState) -> frozenset[int] | tuple[str, str] | None:
    """The CPUs the profile's `cpus` names on this host; None for every CPU when it names all
    and the online CPUs are not known (the per-policy keys then take every policy); or
    (action, why) when it cannot be told: the partition unknown to this run, or the online
    CPUs unreadable for a narrower scope."""
    spec = state.found.get(FOUND_CPUS, "all")
    online = state.found.get(FOUND_ONLINE)
    if spec == "all":
        return online if isinstance(online, frozenset) else None
    if not isinstance(online, frozenset):
        return "skipped", str(online) if online else f"{ONLINE} was not read"
    if spec in ("gpu-slices", "housekeeping"):
        part = state.partition
        if part is None:
            return "skipped", NO_PARTITION
        chosen = part.slices if spec == "gpu-slices" else part.housekeeping
        if not chosen:
            return "unsupported", f"no {spec} CPUs on this host"
        return chosen & online
    assert isinstance(spec, str)
    return cpus.parse_list(spec, limit=MAX_CPUS, groups=False) & online


def selected_policies(state: HostState, chosen: frozenset[int] | None) -> tuple[str, ...]:
    """The policies driving any chosen CPU (None: every CPU); a policy whose CPUs are not
    known is taken."""
    related = state.found.get(FOUND_POLICY_CPUS)
    out = []
    for policy in state.policies or ():
        drives = related.get(policy) if isinstance(related, Mapping) else None
        if chosen is None or drives is None or drives & chosen:
            out.append(policy)
    return tuple(out)


def scope_item(setting: Setting, why: tuple[str, str], path: str = "") -> PlanItem:
    action, reason = why
    rule = describe(setting.desired)
    if action == "skipped":
        return PlanItem(setting.key, path, rule, None, None, "skipped", reason, setting.source)
    return PlanItem(setting.key, path, rule, None, None, "unsupported", reason, setting.source)


# -- the subsystem ------------------------------------------------------------------------------


class CpuPower(Subsystem):
    name = "cpupower"
    section = "cpu"
    options = (
        "cpus",
        "energy_performance_preference",
        "energy_perf_bias",
        "min_perf_pct",
        "no_turbo",
        "boost",
    )
    key_facts = FACTS

    def owns(self, key: str) -> bool:
        return key == paths.CPUS_KEY or key in (EPP_KEY, EPB_KEY) or key_path(key) is not None

    def path_of(self, key: str) -> str | None:
        return key_path(key)

    def parse(self, section: SectionInput) -> list[Setting]:
        table, file = section.table, section.file
        out = parse_scope(section)

        def setting(key: str, desired: Exact | Prefer, option: str) -> None:
            out.append(Setting(key, desired, file, section.comment("cpu", option)))

        if "energy_performance_preference" in table:
            value = table["energy_performance_preference"]
            wanted = token_list(
                file,
                "cpu",
                "energy_performance_preference",
                "energy_performance_preference",
                [value] if isinstance(value, str) else value,
            )
            setting(EPP_KEY, Prefer(wanted), "energy_performance_preference")
        if "energy_perf_bias" in table:
            value = table["energy_perf_bias"]
            if isinstance(value, str) and value in EPB_NAMES:
                value = EPB_NAMES[value]
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 15:
                names = ", ".join(EPB_NAMES)
                raise err(file, "energy_perf_bias", f"must be 0 to 15 or one of {names}", "cpu")
            setting(EPB_KEY, Exact.of(value), "energy_perf_bias")
        if "min_perf_pct" in table:
            value = table["min_perf_pct"]
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 100:
                raise err(file, "min_perf_pct", "must be a percentage, 0 to 100", "cpu")
            setting(MIN_PERF_KEY, Exact.of(value), "min_perf_pct")
        for option, key in (("no_turbo", NO_TURBO_KEY), ("boost", BOOST_KEY)):
            if option in table:
                value = table[option]
                if not isinstance(value, bool):
                    raise err(file, option, "must be true or false", "cpu")
                setting(key, Exact("1" if value else "0"), option)
        return out

    def read(self, host: HostReader, setting: Setting, draft: StateDraft) -> None:
        key = setting.key
        if key == paths.CPUS_KEY:
            assert isinstance(setting.desired, Exact)
            draft.found[FOUND_CPUS] = setting.desired.text
            if setting.desired.text != "all":
                read_related(host, draft)
            return
        if key in (MIN_PERF_KEY, NO_TURBO_KEY):
            draft.readings[_GLOBAL[key]] = read_value(host, _GLOBAL[key])
            return
        read_cpus(host, draft)
        if key == EPB_KEY:
            online = draft.found.get(FOUND_ONLINE)
            chosen = sorted(online) if isinstance(online, frozenset) else ()
            draft.readings.update(read_values(host, (epb_path(cpu) for cpu in chosen)))
            return
        if key == BOOST_KEY:
            draft.readings[GLOBAL_BOOST] = read_value(host, GLOBAL_BOOST)
        read_policies(host, draft)
        name = "energy_performance_preference" if key == EPP_KEY else "boost"
        policies = draft.policies or ()
        files = [policy_path(policy, name) for policy in policies]
        wanted = list(files)
        if key == EPP_KEY and policies:
            prefs = offered(host, draft, "energy_performance_available_preferences", policies[0])
            draft.available.update(dict.fromkeys(files, prefs))
            # The governor too: intel_pstate refuses EPP changes under "performance" (plan).
            govs = (policy_path(policy, "scaling_governor") for policy in policies)
            wanted += [g for g in govs if g not in draft.readings]
        draft.readings.update(read_values(host, wanted))
        if draft.policies:
            driver = policy_path(draft.policies[0], "scaling_driver")
            draft.readings[driver] = read_value(host, driver)

    def plan(self, setting: Setting, state: HostState) -> list[PlanItem]:
        key = setting.key
        if key == paths.CPUS_KEY:
            return []  # a scope: the per-CPU keys' items say what it selected
        if key in (MIN_PERF_KEY, NO_TURBO_KEY):
            reading = state.readings.get(_GLOBAL[key])
            if isinstance(reading, Absent):
                why = f"no {_GLOBAL[key]}: the CPU frequency driver is not intel_pstate"
                return [scope_item(setting, ("unsupported", why), _GLOBAL[key])]
            return [value_item(key, _GLOBAL[key], setting, state)]
        if key == BOOST_KEY and isinstance(state.readings.get(GLOBAL_BOOST), str):
            return [value_item(key, GLOBAL_BOOST, setting, state)]
        chosen = selected(state)
        if isinstance(chosen, tuple):
            return [scope_item(setting, chosen)]
        if key == EPB_KEY:
            if chosen is None:
                online = state.found.get(FOUND_ONLINE)
                return [scope_item(setting, ("skipped", str(online or f"{ONLINE} not read")))]
            there = state.readings
            cpus_there = sorted(c for c in chosen if isinstance(there.get(epb_path(c)), str))
            if not cpus_there:
                why = f"no {CPU_DIR}/cpuN/power/energy_perf_bias (not an x86 CPU with EPB, or a VM)"
                return [scope_item(setting, ("unsupported", why))]
            return [value_item(f"{key}:cpu{c}", epb_path(c), setting, state) for c in cpus_there]
        if not state.policies:
            why = f"no cpufreq policies under {paths.CPUFREQ_DIR} (no cpufreq driver; a VM?)"
            return [scope_item(setting, ("unsupported", why))]
        name = "energy_performance_preference" if key == EPP_KEY else "boost"
        policies = [
            p
            for p in selected_policies(state, chosen)
            if isinstance(state.readings.get(policy_path(p, name)), str)
        ]
        if not policies:
            driver = state.readings.get(policy_path(state.policies[0], "scaling_driver"))
            shown = driver if isinstance(driver, str) else "unknown"
            why = f"the cpufreq driver {shown} has no {name}" + (
                " (intel_pstate and amd-pstate in active mode have it)"
                if key == EPP_KEY
                else " (cpufreq/boost: acpi-cpufreq, amd-pstate; policyN/boost: 6.11+)"
            )
            return [scope_item(setting, ("unsupported", why))]
        return [self._policy_item(setting, p, name, state) for p in policies]

    def _policy_item(self, setting: Setting, policy: str, name: str, state: HostState) -> PlanItem:
        key, path = f"{setting.key}:{policy}", policy_path(policy, name)
        item = value_item(key, path, setting, state)
        if setting.key != EPP_KEY or item.action != "set":
            return item
        # intel_pstate refuses (EBUSY) any EPP but "performance" while the policy's governor is
        # performance (Documentation/admin-guide/pm/intel_pstate.rst, Energy vs Performance
        # Hints): say so instead of failing the apply.
        gov = state.readings.get(policy_path(policy, "scaling_governor"))
        driver = state.readings.get(policy_path((state.policies or (policy,))[0], "scaling_driver"))
        if gov == "performance" and driver == "intel_pstate" and item.desired != "performance":
            why = "intel_pstate keeps EPP at performance under the performance governor (EBUSY)"
            return PlanItem(
                key, path, item.rule, item.current, item.desired, "unsupported", why, item.source
            )
        return item
