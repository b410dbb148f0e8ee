"""Transparent huge pages (`[vm] transparent_hugepage`): the sysfs enum
/sys/kernel/mm/transparent_hugepage/enabled, left alone when the kernel command line sets it."""

from __future__ import annotations

import re

from mcpnode.host import Host
from mcpnode.tuning import paths
from mcpnode.tuning.model import Action, HostState, PlanItem, Setting
from mcpnode.tuning.plugins.base import SectionInput, StateDraft, Subsystem, one_of, value_item
from mcpnode.tuning.read import optional, read_value, tokens

THP_CHOICES = ("always", "madvise", "never")
_THP_ON_CMDLINE = re.compile(r"(?:^|\s)transparent_hugepage=(\S+)")


class TransparentHugepages(Subsystem):
    name = "thp"
    section = "vm"
    options = ("transparent_hugepage",)

    def owns(self, key: str) -> bool:
        return key == paths.THP_KEY

    def path_of(self, key: str) -> str | None:
        return paths.THP_ENABLED if key == paths.THP_KEY else None

    def parse(self, section: SectionInput) -> list[Setting]:
        return one_of(section, "vm", "transparent_hugepage", THP_CHOICES, paths.THP_KEY)

    def read(self, host: Host, setting: Setting, draft: StateDraft) -> None:
        path = paths.THP_ENABLED
        draft.readings[path] = current = read_value(host, path)
        draft.cmdline = optional(host, paths.PROC_CMDLINE)
        draft.available[path] = tokens(current) if isinstance(current, str) else None

    def plan(self, setting: Setting, state: HostState) -> list[PlanItem]:
        requirement = self.requirement(setting.key)
        return [
            value_item(setting.key, paths.THP_ENABLED, setting, state, _thp_problem, requirement)
        ]


def _thp_problem(
    want: str, available: frozenset[str] | None, cmdline: str | None
) -> tuple[Action, str] | None:
    # tuned's plugin_vm skips THP when the kernel command line sets it: the boot choice wins.
    m = _THP_ON_CMDLINE.search(cmdline or "")
    if m:
        return "skipped", f"kernel command line sets transparent_hugepage={m.group(1)}"
    if available is not None and want not in available:
        return "unsupported", f"{want} is not offered ({' '.join(sorted(available))})"
    return None
