"""C-states (`[cpu] max_latency_us`): every idle state whose exit latency is above the limit is
disabled (`cpuidle/stateN/disable` = 1) on the CPUs of `[cpu] cpus`, so those CPUs never sleep
deeper than the limit allows. tuned reaches the same with `force_latency=cstate.id_no_zero:1`
through the PM QoS request (tuned/plugins/plugin_cpu.py); that request holds only while a process
keeps /dev/cpu_dma_latency open (plugins/pmqos.py, held by the agent), whereas these files stay
written without it, and are journaled and rolled back like any value.

The states and their latencies (µs, `stateN/latency`) are read from the first selected CPU: the
cpuidle driver is one for the machine (intel_idle, acpi_idle; Documentation/admin-guide/pm/
cpuidle.rst). State 0 on x86 is POLL (latency 0): never disabled. States at or below the limit
are left as they are (an administrator may have disabled one on purpose).
"""

from __future__ import annotations

import re

from mcpnode.host import HostReader
from mcpnode.tuning.facts import KeyFacts
from mcpnode.tuning.model import HostState, PlanItem, Setting
from mcpnode.tuning.plugins import cpupower
from mcpnode.tuning.plugins.base import (
    SectionInput,
    StateDraft,
    Subsystem,
    microseconds,
    value_item,
)
from mcpnode.tuning.read import optional, read_values
from mcpnode.tuning.values import Exact

MAX_LATENCY_KEY = "cpu:max_latency_us"
CPUIDLE_DRIVER = f"{cpupower.CPU_DIR}/cpuidle/current_driver"
MAX_STATES = 16  # CPUIDLE_STATE_MAX (include/linux/cpuidle.h) is 10
_ITEM = re.compile(r"cpu:cstate:cpu([0-9]{1,5}):state([0-9]{1,2})\Z", re.ASCII)
_STATE = re.compile(r"state([0-9]{1,2})\Z", re.ASCII)
_FOUND = "cstates"  # found[...]: ((state, latency_us), ...) of the first selected CPU, or why not

FACTS = {
    MAX_LATENCY_KEY: KeyFacts(
        "none (every state enabled)",
        "tuned:latency-performance holds force_latency=cstate.id_no_zero:1|3 (C1 at most)",
    )
}


def state_dir(cpu: int, state: int) -> str:
    return f"{cpupower.CPU_DIR}/cpu{int(cpu)}/cpuidle/state{int(state)}"


def disable_path(cpu: int, state: int) -> str:
    return state_dir(cpu, state) + "/disable"


def key_path(key: str) -> str | None:
    m = _ITEM.match(key)
    return disable_path(int(m.group(1)), int(m.group(2))) if m is not None else None


class CStates(Subsystem):
    name = "cstates"
    section = "cpu"
    options = ("max_latency_us",)
    key_facts = FACTS
    setting_keys = frozenset((MAX_LATENCY_KEY,))
    item_keys = _ITEM

    def path_of(self, key: str) -> str | None:
        return key_path(key)

    def parse(self, section: SectionInput) -> list[Setting]:
        return microseconds(section, "cpu", "max_latency_us", MAX_LATENCY_KEY)

    def read(self, host: HostReader, setting: Setting, draft: StateDraft) -> None:
        cpupower.read_cpus(host, draft)
        online = draft.found.get(cpupower.FOUND_ONLINE)
        if not isinstance(online, frozenset) or not online:
            draft.found[_FOUND] = str(online) if online else f"no CPU in {cpupower.ONLINE}"
            return
        first = min(online)
        names = host.listdir_optional(f"{cpupower.CPU_DIR}/cpu{first}/cpuidle") or []
        states: list[tuple[int, int]] = []
        for name in names:
            m = _STATE.match(name)
            if m is None:
                continue
            text = optional(host, state_dir(first, int(m.group(1))) + "/latency")
            if text is None or not text.isdigit() or len(text) > 10:
                draft.found[_FOUND] = f"{state_dir(first, int(m.group(1)))}/latency: {text!r}"
                return
            states.append((int(m.group(1)), int(text)))
        if len(states) > MAX_STATES:
            draft.found[_FOUND] = f"{len(states)} idle states (at most {MAX_STATES})"
            return
        draft.found[_FOUND] = tuple(sorted(states))
        driver = optional(host, CPUIDLE_DRIVER)
        draft.found[_FOUND + ".driver"] = driver or "none"
        assert isinstance(setting.desired, Exact)
        limit = int(setting.desired.text)
        deep = [state for state, latency in states if latency > limit]
        draft.readings.update(
            read_values(host, (disable_path(cpu, s) for cpu in sorted(online) for s in deep))
        )

    def plan(self, setting: Setting, state: HostState) -> list[PlanItem]:
        assert isinstance(setting.desired, Exact)
        limit = int(setting.desired.text)
        states = state.found.get(_FOUND)
        if isinstance(states, str):
            return [cpupower.scope_item(setting, ("skipped", states))]
        chosen = cpupower.selected(state)
        if isinstance(chosen, tuple):
            return [cpupower.scope_item(setting, chosen)]
        if not states:
            driver = state.found.get(_FOUND + ".driver", "none")
            why = f"no cpuidle states (cpuidle driver {driver}; common in VMs)"
            return [cpupower.scope_item(setting, ("unsupported", why))]
        assert isinstance(states, tuple)
        deep = [s for s, latency in states if latency > limit]
        if not deep:
            why = f"every idle state exits within {limit} us"
            rule = f"<= {limit} us"
            return [PlanItem(setting.key, "", rule, None, None, "ok", why, setting.source)]
        want = Setting(setting.key, Exact("1"), setting.source, setting.comment)
        items = []
        for cpu in sorted(chosen) if chosen is not None else ():
            for s in deep:
                path = disable_path(cpu, s)
                if path in state.readings:
                    items.append(value_item(f"cpu:cstate:cpu{cpu}:state{s}", path, want, state))
        if not items:
            why = "the online CPUs are not known" if chosen is None else "no selected CPU"
            return [cpupower.scope_item(setting, ("skipped", why))]
        return items
