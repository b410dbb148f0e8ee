"""The cpufreq governor (`[cpu] governor`): the first of the profile's list that each cpufreq
policy offers (scaling_available_governors), one item per policy. A CPU-power subsystem
(EPP, C-states) is planned beside it."""

from __future__ import annotations

from mcpnode.host import Host
from mcpnode.tuning import paths
from mcpnode.tuning.model import HostState, PlanItem, Setting
from mcpnode.tuning.plugins.base import SectionInput, StateDraft, Subsystem, token_list, value_item
from mcpnode.tuning.read import optional, read_value, tokens
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
        # One setting for every policy: explained as the setting, with no single file to show.
        return (paths.GOVERNOR_KEY, None) if self.owns(key) else None

    def parse(self, section: SectionInput) -> list[Setting]:
        if "governor" not in section.table:
            return []
        gov = section.table["governor"]
        wanted = token_list(
            section.file, "cpu", "governor", "governor", [gov] if isinstance(gov, str) else gov
        )
        note = section.comment("cpu", "governor")
        return [Setting(paths.GOVERNOR_KEY, Prefer(wanted), section.file, note)]

    def read(self, host: Host, setting: Setting, draft: StateDraft) -> None:
        names = host.listdir_optional(paths.CPUFREQ_DIR)
        policies = tuple(n for n in names or () if paths.is_policy(n)) if names else None
        draft.policies = policies
        for policy in policies or ():
            gov = paths.governor_path(policy)
            draft.readings[gov] = read_value(host, gov)
            draft.available[gov] = tokens(optional(host, paths.governors_available_path(policy)))

    def plan(self, setting: Setting, state: HostState) -> list[PlanItem]:
        if not state.policies:
            rule = describe(setting.desired)
            why = (
                f"no cpufreq policies under {paths.CPUFREQ_DIR} (no cpufreq driver; common in VMs)"
            )
            return [PlanItem(setting.key, "", rule, None, None, "unsupported", why, setting.source)]
        return [
            value_item(
                f"{setting.key}:{policy}",
                paths.governor_path(policy),
                setting,
                state,
                requirement=self.requirement(f"{setting.key}:{policy}"),
            )
            for policy in state.policies
        ]
