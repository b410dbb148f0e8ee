"""Transparent huge pages (`[vm]`): the sysfs enums under /sys/kernel/mm/transparent_hugepage/
(Documentation/admin-guide/mm/transhuge.rst):

    transparent_hugepage = "madvise"           enabled; left alone when the kernel command
                                               line sets transparent_hugepage=
    transparent_hugepage_defrag = "defer+madvise"   defrag: whether a fault stalls to compact
    khugepaged_defrag = true                   khugepaged/defrag: whether khugepaged compacts
"""

from __future__ import annotations

import re

from mcpnode.host import HostReader
from mcpnode.tuning import paths
from mcpnode.tuning.facts import KeyFacts
from mcpnode.tuning.model import Action, HostState, PlanItem, Setting
from mcpnode.tuning.plugins.base import (
    SectionInput,
    StateDraft,
    Subsystem,
    err,
    one_of,
    value_item,
)
from mcpnode.tuning.read import optional, read_value, tokens
from mcpnode.tuning.values import Exact

THP_CHOICES = ("always", "madvise", "never")
DEFRAG_CHOICES = ("always", "defer", "defer+madvise", "madvise", "never")
THP_DIR = "/sys/kernel/mm/transparent_hugepage"
DEFRAG_KEY = "vm:transparent_hugepage_defrag"
KHUGEPAGED_KEY = "vm:khugepaged_defrag"
_PATHS = {
    paths.THP_KEY: paths.THP_ENABLED,
    DEFRAG_KEY: f"{THP_DIR}/defrag",
    KHUGEPAGED_KEY: f"{THP_DIR}/khugepaged/defrag",
}
FACTS = {
    DEFRAG_KEY: KeyFacts(
        "madvise",
        "defer+madvise: only madvise()d regions stall for compaction; the rest is compacted "
        "by kcompactd in the background",
    ),
    KHUGEPAGED_KEY: KeyFacts("1", "0 stops khugepaged from compacting to collapse pages"),
}
_THP_ON_CMDLINE = re.compile(r"(?:^|\s)transparent_hugepage=(\S+)")


class TransparentHugepages(Subsystem):
    name = "thp"
    section = "vm"
    options = ("transparent_hugepage", "transparent_hugepage_defrag", "khugepaged_defrag")
    key_facts = FACTS
    setting_keys = frozenset(_PATHS)

    def path_of(self, key: str) -> str | None:
        return _PATHS.get(key)

    def parse(self, section: SectionInput) -> list[Setting]:
        out = one_of(section, "vm", "transparent_hugepage", THP_CHOICES, paths.THP_KEY)
        out += one_of(section, "vm", "transparent_hugepage_defrag", DEFRAG_CHOICES, DEFRAG_KEY)
        if "khugepaged_defrag" in section.table:
            value = section.table["khugepaged_defrag"]
            if not isinstance(value, bool):
                raise err(section.file, "khugepaged_defrag", "must be true or false", "vm")
            note = section.comment("vm", "khugepaged_defrag")
            out.append(Setting(KHUGEPAGED_KEY, Exact("1" if value else "0"), section.file, note))
        return out

    def read(self, host: HostReader, setting: Setting, draft: StateDraft) -> None:
        path = _PATHS[setting.key]
        draft.readings[path] = current = read_value(host, path)
        if setting.key == paths.THP_KEY:
            draft.cmdline = optional(host, paths.PROC_CMDLINE)
        draft.available[path] = tokens(current) if isinstance(current, str) else None

    def plan(self, setting: Setting, state: HostState) -> list[PlanItem]:
        path = _PATHS[setting.key]
        requirement = self.requirement(setting.key)
        if setting.key == KHUGEPAGED_KEY:
            return [value_item(setting.key, path, setting, state, requirement=requirement)]
        problem = _thp_problem if setting.key == paths.THP_KEY else _offered_problem
        return [value_item(setting.key, path, setting, state, problem, requirement)]


def _thp_problem(
    want: str, available: frozenset[str] | None, cmdline: str | None
) -> tuple[Action, str] | None:
    # tuned's plugin_vm skips THP when the kernel command line sets it: the boot choice wins.
    m = _THP_ON_CMDLINE.search(cmdline or "")
    if m:
        return "skipped", f"kernel command line sets transparent_hugepage={m.group(1)}"
    return _offered_problem(want, available, cmdline)


def _offered_problem(
    want: str, available: frozenset[str] | None, cmdline: str | None
) -> tuple[Action, str] | None:
    if available is not None and want not in available:
        return "unsupported", f"{want} is not offered ({' '.join(sorted(available))})"
    return None
