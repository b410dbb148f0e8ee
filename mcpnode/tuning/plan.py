"""The plan: for each key of a profile, what is there, what is wanted, and what to do. Pure.

Actions:
    set              write `desired` (or load the module)
    ok               already satisfied, nothing to write
    unsupported      the key is not on this kernel (or nothing acceptable is available)
    needs-privilege  this process lacks the uid/capability to write it (or to read it)
    skipped          left alone on purpose (module loading on a recorded root, THP set on the
                     kernel command line, a value that cannot be read for another reason)

`apply --dry-run` renders this; `apply` executes the `set` items in order; `verify` re-plans and
reports every item that is not satisfied as drift. Apply and verify cannot disagree: both call
`plan()` and through it `values.compare()`.
"""

from __future__ import annotations

from dataclasses import dataclass

from mcpnode.tuning import plugins, privilege
from mcpnode.tuning.model import ACTIONS, Action, HostState, PlanItem
from mcpnode.tuning.profile import Profile
from mcpnode.tuning.values import Exact, compare


@dataclass(frozen=True)
class Plan:
    profile: str
    items: tuple[PlanItem, ...]

    @property
    def loads(self) -> tuple[PlanItem, ...]:
        """Modules to load, first (apply re-plans after loading them)."""
        return tuple(i for i in self.items if i.is_module and i.action == "set")

    @property
    def writes(self) -> tuple[PlanItem, ...]:
        """File writes, in plan order."""
        return tuple(i for i in self.items if not i.is_module and i.action == "set")

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = dict.fromkeys(ACTIONS, 0)
        for item in self.items:
            out[item.action] += 1
        return out


def _module_item(module: str, why: str, state: HostState) -> PlanItem:
    key = f"module:{module}"
    loaded = state.modules is not None and module in state.modules
    current = "loaded" if loaded else "not loaded"
    if loaded:
        return PlanItem(key, "", "loaded", current, "loaded", "ok", "already loaded", "")
    if not state.live:
        reason = "loading modules needs the live host (--root /)"
        return PlanItem(key, "", "loaded", current, "loaded", "skipped", reason, "")
    if state.modules is None:
        reason = "no /proc/modules: this kernel cannot load modules (built in or absent)"
        return PlanItem(key, "", "loaded", None, "loaded", "unsupported", reason, "")
    lacking = privilege.missing(key, state.privileges)
    if lacking is not None:
        return PlanItem(key, "", "loaded", current, "loaded", "needs-privilege", lacking, "")
    return PlanItem(key, "", "loaded", current, "loaded", "set", why, "")


def plan(profile: Profile, state: HostState) -> Plan:
    """Decide, for every setting of `profile`, what to do on a host in `state`.

    Module loads come first (explicit `[modules] load`, then modules a preference list needs
    because no preferred value is available yet); settings follow in profile order."""
    settings: list[PlanItem] = []
    needed: dict[str, str] = {m: "[modules] load" for m in profile.modules}
    for setting in profile.settings:
        subsystem = plugins.subsystem_of(setting.key)
        items = subsystem.plan(setting, state)
        settings.extend(items)
        for module, why in subsystem.modules_for(setting, items, state):
            needed.setdefault(module, why)
    modules = [_module_item(m, why, state) for m, why in needed.items()]
    return Plan(profile.name, (*modules, *settings))


def plan_restores(
    entries: tuple[tuple[str, str, str], ...], current: Plan, state: HostState
) -> tuple[PlanItem, ...]:
    """Journal entries (key, path, original) the profile in `current` no longer sets: write the
    original back (a profile switch must not leave the old profile's values behind)."""
    planned = {i.path for i in current.items if i.path}
    out = []
    for key, path, original in entries:
        if path in planned:
            continue
        reading = state.readings.get(path)
        if not isinstance(reading, str):
            continue  # gone: nothing to restore; the entry is dropped from the journal
        verdict = compare(reading, Exact(original))
        action: Action = "ok" if verdict.ok else "set"
        why = "no longer in the profile: " + (
            "original already" if verdict.ok else "restore original"
        )
        out.append(PlanItem(key, path, "original", reading, original, action, why, ""))
    return tuple(out)
