"""`mcpnode profiles explain KEY`: what a key is, who sets it and why, and its caveats."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from mcpnode.host import Host
from mcpnode.tuning import paths, plugins, privilege
from mcpnode.tuning.errors import ProfileError, UnknownKey
from mcpnode.tuning.facts import FACTS, netns_note
from mcpnode.tuning.profile import list_profiles, load_profile
from mcpnode.tuning.read import Absent, read_value
from mcpnode.tuning.sensitive import sensitive_reason
from mcpnode.tuning.values import describe


@dataclass(frozen=True)
class SetBy:
    """One assignment of the key in a profile file, and the profiles it ends up in (a value in
    base.toml reaches every profile that includes base)."""

    file: str
    rule: str
    comment: str
    profiles: tuple[str, ...]


@dataclass(frozen=True)
class Explanation:
    key: str
    path: str | None
    current: str | None
    current_note: str | None  # why there is no current value
    default: str | None
    note: str | None
    set_by: tuple[SetBy, ...]
    netns: str | None
    privilege: str
    sensitive: str | None = None  # why a profile must name it in allow_sensitive


def explain(key: str, host: Host, system_dir: Path | None = None) -> Explanation:
    """Everything known about `key` (a sysctl name or a `vm:`/`cpu:` key). Reads the current
    value through `host` and every profile; broken profiles are skipped here (`profiles list`
    shows their errors). Raises ProfileError when `key` is not a key at all, UnknownKey when
    nothing knows it (absent under this root, no facts, no profile sets it)."""
    subsystem = plugins.owner(key)
    explained = subsystem.explained(key) if subsystem is not None else None
    if explained is None:
        problem = paths.sysctl_key_problem(key) or "not a sysctl or a vm:/cpu: key"
        raise ProfileError("(command line)", key, problem)
    lookup, path = explained
    current: str | None = None
    current_note: str | None = None
    absent: Absent | None = None
    if path is not None:
        reading = read_value(host, path)
        if isinstance(reading, str):
            current = reading
        else:
            current_note = reading.reason
            if isinstance(reading, Absent):
                absent = reading
                where = "on this kernel" if host.is_live else "in this root"
                current_note = f"not {where} ({reading.reason})"
    found: dict[tuple[str, str], tuple[str, list[str]]] = {}
    for info in list_profiles(host, system_dir):
        if info.error is not None:
            continue
        try:
            profile = load_profile(info.name, host, system_dir)
        except ProfileError:
            continue
        setting = profile.setting(lookup)
        if setting is not None:
            rule = describe(setting.desired)
            entry = found.setdefault((setting.source, rule), (setting.comment, []))
            entry[1].append(profile.name)
    set_by = [
        SetBy(file, rule, comment, tuple(names)) for (file, rule), (comment, names) in found.items()
    ]
    facts = FACTS.get(key) or (subsystem.facts(lookup) if subsystem is not None else None)
    if absent is not None and facts is None and not set_by:
        raise UnknownKey(key, absent.reason)
    req = plugins.requirement(key)
    need = "root (euid 0)" if req.root else ""
    if req.cap_instead_of_root is not None:
        need += f" or {privilege.CAP_NAMES[req.cap_instead_of_root]}"
    if req.cap is not None:
        need += (" plus " if need else "") + privilege.CAP_NAMES[req.cap]
    return Explanation(
        key=key,
        path=path,
        current=current,
        current_note=current_note,
        default=facts.default if facts else None,
        note=facts.note if facts else None,
        set_by=tuple(set_by),
        netns=netns_note(key),
        privilege=f"writing needs {need}: {req.why}",
        sensitive=sensitive_reason(key),
    )
