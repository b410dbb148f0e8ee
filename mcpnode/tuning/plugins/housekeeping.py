"""Housekeeping confinement (`[housekeeping] confine`): systemd drop-ins that give
`system.slice`, `user.slice` and `init.scope` `AllowedCPUs=` the housekeeping CPUs, so system
services, login sessions and PID 1 stay off the GPU slices.

Why AllowedCPUs= on the slices rather than tuned's way. tuned's cpu-partitioning profile sets
`CPUAffinity=` in /etc/systemd/system.conf (its systemd plugin), which becomes PID 1's CPU
affinity at the next boot (or `systemctl daemon-reexec`) and is inherited by everything it
forks: a soft mask any process may widen with sched_setaffinity(2), it covers every slice
(kubepods.slice and the inference services too, which must then set their own CPUAffinity=),
and nothing of it applies before a reboot. `AllowedCPUs=` (systemd.resource-control(5),
systemd >= 244, cgroup v2 `cpuset.cpus`) is enforced by the kernel for every process in the
slice, applies at runtime, is scoped to the three units named (kubepods.slice and any
`Slice=` of the inference units are left alone), and is undone by removing the drop-in: what
Red Hat documents for cgroup v2 CPU isolation (`systemctl set-property system.slice
AllowedCPUs=...`, same for user.slice and init.scope).

The cost of enforcement: cpusets are hierarchical, so a service *inside* system.slice cannot
be given CPUs outside the slice's. Inference services must run in a slice of their own
(`mcpnode systemd-dropin --slice mcpnode-gpu.slice`), which the placement drop-in sets.
systemd reads the drop-ins at `systemctl daemon-reload`; `systemctl set-property --runtime`
is the immediate equivalent. `systemctl set-property` (without --runtime) writes its own
drop-ins to /etc/systemd/system.control/, which win over these.
"""

from __future__ import annotations

from mcpnode.codec import cpus
from mcpnode.host import HostReader
from mcpnode.tuning import paths, privilege
from mcpnode.tuning.model import Action, HostState, PlanItem, Setting
from mcpnode.tuning.plugins.base import (
    NO_SLICES,
    SectionInput,
    StateDraft,
    Subsystem,
    err,
    same_cpus,
    unusable,
)
from mcpnode.tuning.read import Reading, file_reading
from mcpnode.tuning.values import Exact

SECTION = {"system.slice": "Slice", "user.slice": "Slice", "init.scope": "Scope"}


def dropin_text(unit: str, cpus: str) -> str:
    """The drop-in for `unit` (one of paths.CONFINABLE) confining it to cpulist `cpus`."""
    return (
        f"# Written by mcpnode ([housekeeping] confine): {unit} on the housekeeping CPUs, off\n"
        "# the GPU slices. `mcpnode rollback` removes it; `systemctl daemon-reload` applies it.\n"
        f"[{SECTION[unit]}]\n"
        f"AllowedCPUs={cpus}\n"
    )


def unit_of(key: str) -> str:
    """`system.slice` of `systemd:system.slice`."""
    assert key in paths.SYSTEMD_DROPINS
    return key.split(":", 1)[1]


class Housekeeping(Subsystem):
    name = "housekeeping"
    section = "housekeeping"
    options = ("confine",)

    file_keys = frozenset(paths.SYSTEMD_DROPINS)
    atomic_files = tuple(paths.SYSTEMD_DROPINS.values())

    def owns(self, key: str) -> bool:
        return key == paths.CONFINE_KEY or key in paths.SYSTEMD_DROPINS

    def path_of(self, key: str) -> str | None:
        """`systemd:UNIT` -> its AllowedCPUs= drop-in."""
        return paths.SYSTEMD_DROPINS.get(key)

    def parse(self, section: SectionInput) -> list[Setting]:
        if "confine" not in section.table:
            return []
        units = section.table["confine"]
        if not isinstance(units, list) or not all(u in paths.CONFINABLE for u in units):
            raise err(
                section.file,
                "confine",
                f"must be a list of {', '.join(paths.CONFINABLE)}",
                "housekeeping",
            )
        note = section.comment("housekeeping", "confine")
        text = " ".join(sorted(set(units), key=paths.CONFINABLE.index))
        return [Setting(paths.CONFINE_KEY, Exact(text or "none"), section.file, note)]

    def read(self, host: HostReader, setting: Setting, draft: StateDraft) -> None:
        for dropin in paths.SYSTEMD_DROPINS.values():
            draft.readings[dropin] = file_reading(host, dropin)
        for unit in paths.CONFINABLE:
            control = paths.SET_PROPERTY_DROPIN.format(unit=unit)
            draft.readings[control] = file_reading(host, control)

    def read_restore(self, host: HostReader, path: str) -> Reading | None:
        return file_reading(host, path) if path in paths.SYSTEMD_DROPINS.values() else None

    def plan(self, setting: Setting, state: HostState) -> list[PlanItem]:
        """One drop-in per confined unit, AllowedCPUs= the housekeeping CPUs. The item's
        current and desired are the files' whole texts ("" for absent)."""
        assert isinstance(setting.desired, Exact)
        units = [u for u in setting.desired.text.split() if u in paths.CONFINABLE]
        return [_unit_item(unit, setting.source, state) for unit in units]


def _unit_item(unit: str, src: str, state: HostState) -> PlanItem:
    key = f"systemd:{unit}"
    path = paths.SYSTEMD_DROPINS[key]
    rule = f"{unit} AllowedCPUs= housekeeping"
    reading = state.readings.get(path)
    found = unusable(key, path, rule, reading, src)
    if found is not None:
        return found
    assert isinstance(reading, str)
    part = state.partition
    if part is None:
        why = "the housekeeping CPUs are not known to this run (no current manifest)"
        return PlanItem(key, path, rule, reading, None, "skipped", why, src)
    if not part.housekeeping or not part.slices:
        why = (
            NO_SLICES
            if part.housekeeping
            else "no housekeeping CPUs are reserved (housekeeping policy none)"
        )
        return PlanItem(key, path, rule, reading, None, "unsupported", why, src)
    hk = cpus.format_list(part.housekeeping)
    want = dropin_text(unit, hk)
    control = state.readings.get(paths.SET_PROPERTY_DROPIN.format(unit=unit))
    other = allowed_cpus_of(control) if isinstance(control, str) else None
    if other is not None and not same_cpus(other, hk):
        # `systemctl set-property` drop-ins load after /etc/systemd/system: theirs holds.
        where = paths.SET_PROPERTY_DROPIN.format(unit=unit)
        why = f"{where} sets AllowedCPUs={other}, which wins over this drop-in: remove it"
        return PlanItem(key, path, rule, reading, want, "skipped", why, src)
    if reading == want:
        return PlanItem(key, path, rule, reading, want, "ok", f"already {cpus}", src)
    lacking = privilege.missing(key, state.privileges)
    action: Action = "needs-privilege" if lacking is not None else "set"
    was = "absent" if reading == "" else "different"
    why = lacking or f"drop-in {was} -> AllowedCPUs={cpus}; `systemctl daemon-reload`"
    return PlanItem(key, path, rule, reading, want, action, why, src)


def allowed_cpus_of(text: str) -> str | None:
    """The last `AllowedCPUs=` value of a unit file's text (an empty one resets: None)."""
    value = None
    for line in text.splitlines():
        name, eq, rest = line.strip().partition("=")
        if eq and name.strip() == "AllowedCPUs":
            value = rest.strip() or None
    return value
