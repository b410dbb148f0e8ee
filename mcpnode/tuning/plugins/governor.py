"""The cpufreq governor (`[cpu] governor`): the first of the profile's list that the cpufreq
driver offers (scaling_available_governors, read once from the first policy: one driver serves
every policy, with one list), one item per policy driving a CPU of `[cpu] cpus`
(plugins/cpupower.py, which plans EPP, EPB and the P-state limits beside it)."""

from __future__ import annotations

from mcpnode.host import HostReader
from mcpnode.tuning import paths
from mcpnode.tuning.model import HostState, PlanItem, Setting
from mcpnode.tuning.plugins import cpupower
from mcpnode.tuning.plugins.base import SectionInput, StateDraft, Subsystem, token_list, value_item
from mcpnode.tuning.read import read_values
from mcpnode.tuning.values import Prefer, describe


class Governor(Subsystem):
    name = "governor"
    section = "cpu"
    options = ("governor",)

    def owns(self, key: str) -> bool:
        return key == paths.GOVERNOR_KEY or key.startswith(paths.GOVERNOR_KEY + ":")

    def path_of(self, key: str) -> str | None:
        """`cpu:governor:policyN` -> that policy's scaling_governor."""
        policy = key[len(paths.GOVERNOR_KEY) + 1 :] if key.startswith(paths.GOVERNOR_KEY) else ""
        return paths.governor_path(policy) if paths.is_policy(policy) else None

    def explained(self, key: str) -> tuple[str, str | None] | None:
        # One setting for every policy: a policy's item is explained as the setting, with its
        # policy's file; the setting itself has no single file to show.
        return (paths.GOVERNOR_KEY, self.path_of(key)) if self.owns(key) else None

    def parse(self, section: SectionInput) -> list[Setting]:
        if "governor" not in section.table:
            return []
        gov = section.table["governor"]
        wanted = token_list(
            section.file, "cpu", "governor", "governor", [gov] if isinstance(gov, str) else gov
        )
        note = section.comment("cpu", "governor")
        return [Setting(paths.GOVERNOR_KEY, Prefer(wanted), section.file, note)]

    def read(self, host: HostReader, setting: Setting, draft: StateDraft) -> None:
        cpupower.read_cpus(host, draft)
        cpupower.read_policies(host, draft)
        policies = draft.policies or ()
        govs = [paths.governor_path(policy) for policy in policies]
        draft.readings.update(read_values(host, (g for g in govs if g not in draft.readings)))
        if policies:
            offered = cpupower.offered(host, draft, "scaling_available_governors", policies[0])
            draft.available.update(dict.fromkeys(govs, offered))

    def plan(self, setting: Setting, state: HostState) -> list[PlanItem]:
        if not state.policies:
            rule = describe(setting.desired)
            why = (
                f"no cpufreq policies under {paths.CPUFREQ_DIR} (no cpufreq driver; common in VMs)"
            )
            return [PlanItem(setting.key, "", rule, None, None, "unsupported", why, setting.source)]
        chosen = cpupower.selected(state)
        if isinstance(chosen, tuple):
            return [cpupower.scope_item(setting, chosen)]
        return [
            value_item(
                f"{setting.key}:{policy}",
                paths.governor_path(policy),
                setting,
                state,
                requirement=self.requirement(f"{setting.key}:{policy}"),
            )
            for policy in cpupower.selected_policies(state, chosen)
        ]
