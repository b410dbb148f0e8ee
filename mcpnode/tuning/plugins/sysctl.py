"""Sysctls (`[sysctl]`): `/proc/sys` values by their dotted names, exact, at-least or a
preference list resolved against what the kernel lists as available (with modules to load
for it). Keys are validated by paths.sysctl_key_problem, integers by keytypes.py, and
sensitive ones need the file's `allow_sensitive` (tuning/sensitive.py)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from mcpnode.host import HostReader
from mcpnode.tuning import keytypes, paths
from mcpnode.tuning.model import HostState, PlanItem, Setting
from mcpnode.tuning.plugins.base import (
    TOKEN,
    SectionInput,
    StateDraft,
    Subsystem,
    err,
    module_list,
    text_problem,
    token_list,
    value_item,
)
from mcpnode.tuning.read import optional, read_value, tokens
from mcpnode.tuning.sensitive import sensitive_reason
from mcpnode.tuning.values import AtLeast, Desired, Exact, Prefer


class Sysctl(Subsystem):
    name = "sysctl"
    section = "sysctl"

    def owns(self, key: str) -> bool:
        return ":" not in key

    def path_of(self, key: str) -> str | None:
        return paths.sysctl_path(key) if paths.sysctl_key_problem(key) is None else None

    def parse(self, section: SectionInput) -> list[Setting]:
        file, out = section.file, []
        for key, value in section.table.items():
            problem = paths.sysctl_key_problem(key)
            if problem:
                raise err(file, key, problem, "sysctl")
            why = sensitive_reason(key)
            if why is not None and key not in section.allowed:
                raise err(
                    file,
                    key,
                    f"sensitive: {why}. Setting it needs `allow_sensitive = [{key!r}]` in this "
                    "file's [profile] table",
                    "sysctl",
                )
            note = section.comment("sysctl", key)
            out.append(Setting(key, _sysctl_value(file, key, value), file, note))
        return out

    def read(self, host: HostReader, setting: Setting, draft: StateDraft) -> None:
        path = paths.sysctl_path(setting.key)
        draft.readings[path] = read_value(host, path)
        if isinstance(setting.desired, Prefer):
            listed = paths.sysctl_path(paths.AVAILABLE_FROM[setting.key])
            draft.available[path] = tokens(optional(host, listed))
            draft.modules.update(setting.desired.load)

    def plan(self, setting: Setting, state: HostState) -> list[PlanItem]:
        path = paths.sysctl_path(setting.key)
        return [
            value_item(setting.key, path, setting, state, requirement=self.requirement(setting.key))
        ]

    def modules_for(
        self, setting: Setting, items: Sequence[PlanItem], state: HostState
    ) -> list[tuple[str, str]]:
        desired = setting.desired
        available = state.available.get(paths.sysctl_path(setting.key))
        if (
            isinstance(desired, Prefer)
            and available is not None
            and items[0].current is not None
            and not any(v in available for v in desired.prefer)
        ):
            why = f"provides {desired.prefer[0]} for {setting.key}"
            return [(module, why) for module in desired.load]
        return []


def _at_least(file: str, key: str, value: object) -> AtLeast:
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise err(file, key, "min must be an integer or a string of integers", "sysctl")
    if isinstance(value, int):
        problem = keytypes.integer_problem(key, value)
        if problem:
            raise err(file, key, f"min {problem}", "sysctl")
        return AtLeast((value,))
    problem = text_problem(value)
    if problem:
        raise err(file, key, f"min {problem}", "sysctl")
    parts = value.split()
    if not all(re.fullmatch(r"[+-]?[0-9]+", p, re.ASCII) for p in parts):
        raise err(file, key, f"min {value[:60]!r} is not made of integers", "sysctl")
    problem = keytypes.text_problem(key, value)
    if problem:
        raise err(file, key, f"min {problem}", "sysctl")
    return AtLeast(tuple(int(p) for p in parts))


def _sysctl_value(file: str, key: str, value: object) -> Desired:
    if isinstance(value, bool):
        raise err(file, key, "a boolean is not a sysctl value (write 0 or 1)", "sysctl")
    if isinstance(value, int):
        problem = keytypes.integer_problem(key, value)
        if problem:
            raise err(file, key, problem, "sysctl")
        return Exact.of(value)
    if isinstance(value, str):
        problem = text_problem(value) or keytypes.text_problem(key, value)
        if problem:
            raise err(file, key, f"value {problem}", "sysctl")
        return Exact.of(value)
    if isinstance(value, dict):
        return _sysctl_table(file, key, value)
    kind = type(value).__name__
    raise err(file, key, f"wrong value type {kind}: use an integer, a string or a table", "sysctl")


def _sysctl_table(file: str, key: str, table: dict[str, Any]) -> Desired:
    fields = set(table)
    if fields == {"min"}:
        return _at_least(file, key, table["min"])
    if "prefer" in fields and fields <= {"prefer", "fallback", "load"}:
        if key not in paths.AVAILABLE_FROM:
            known = ", ".join(sorted(paths.AVAILABLE_FROM))
            raise err(
                file,
                key,
                f"prefer needs a kernel list of available values; supported for: {known}",
                "sysctl",
            )
        prefer = token_list(file, "sysctl", key, "prefer", table["prefer"])
        fallback = table.get("fallback")
        if fallback is not None and (not isinstance(fallback, str) or not TOKEN.match(fallback)):
            raise err(file, key, "fallback must be one name", "sysctl")
        load = module_list(file, "sysctl", key, table.get("load", []))
        return Prefer(prefer, fallback, load)
    shown = ", ".join(sorted(fields)) or "nothing"
    raise err(
        file,
        key,
        f"a table value takes either min, or prefer (+ fallback, load); got {shown}",
        "sysctl",
    )
