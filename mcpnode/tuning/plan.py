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

import re
from dataclasses import dataclass
from typing import Literal

from mcpnode.tuning import paths, privilege
from mcpnode.tuning.profile import Profile, Setting
from mcpnode.tuning.read import Absent, Reading, Unreadable
from mcpnode.tuning.state import HostState
from mcpnode.tuning.values import (
    Choice,
    Exact,
    Prefer,
    compare,
    describe,
    resolve,
    target,
)

Action = Literal["set", "ok", "unsupported", "needs-privilege", "skipped"]
ACTIONS: tuple[Action, ...] = ("set", "ok", "unsupported", "needs-privilege", "skipped")

_THP_ON_CMDLINE = re.compile(r"(?:^|\s)transparent_hugepage=(\S+)")


@dataclass(frozen=True)
class PlanItem:
    """One key. `current` is the kernel's text (None when absent or unreadable); `desired` the
    exact text that is (or would be) written; `rule` the profile's rule (`>= 1048576`)."""

    key: str
    path: str  # logical path; "" for a module
    rule: str
    current: str | None
    desired: str | None
    action: Action
    reason: str
    source: str  # profile file that set it ("" for journal restores)
    unread: bool = False  # the current value could not be read (EACCES, EIO, a bad link)

    @property
    def is_module(self) -> bool:
        return self.key.startswith("module:")

    @property
    def satisfied(self) -> bool:
        return self.action == "ok"


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


def _current(reading: Reading | None) -> str | None:
    return reading if isinstance(reading, str) else None


def _unusable(
    key: str, path: str, rule: str, reading: Reading | None, source: str
) -> PlanItem | None:
    """The item for a key whose current value cannot be compared, or None when it can."""
    if reading is None or isinstance(reading, Absent):
        why = reading.reason if reading is not None else f"{path} was not read"
        return PlanItem(key, path, rule, None, None, "unsupported", why, source)
    if isinstance(reading, Unreadable):
        # Never write a value whose original could not be saved (tuned skips these too).
        action: Action = "needs-privilege" if reading.denied else "skipped"
        return PlanItem(key, path, rule, None, None, action, reading.reason, source, unread=True)
    return None


def _can_load(module: str, state: HostState) -> bool:
    return (
        state.live
        and state.modules is not None
        and module not in state.modules
        and privilege.missing(f"module:{module}", state.privileges) is None
    )


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


def _setting_item(key: str, path: str, setting: Setting, state: HostState) -> PlanItem:
    rule = describe(setting.desired)
    reading = state.readings.get(path)
    unusable = _unusable(key, path, rule, reading, setting.source)
    if unusable is not None:
        return unusable
    assert isinstance(reading, str)
    desired = setting.desired
    available = state.available.get(path)
    if isinstance(desired, Prefer):
        loadable = any(_can_load(m, state) for m in desired.load)
        choice: Choice = resolve(desired, available, can_load=loadable)
        if choice.value is None:
            return PlanItem(
                key, path, rule, reading, None, "unsupported", choice.reason, setting.source
            )
        verdict = compare(reading, Exact(choice.value))
        write = choice.value
        reason = f"{verdict.reason} ({choice.reason})"
    else:
        verdict = compare(reading, desired)
        write = target(reading, desired)
        reason = verdict.reason
    if verdict.ok:
        return PlanItem(key, path, rule, reading, write, "ok", reason, setting.source)
    if key == paths.THP_KEY:
        skip = _thp_problem(write, available, state.cmdline)
        if skip is not None:
            action, why = skip
            return PlanItem(key, path, rule, reading, write, action, why, setting.source)
    lacking = privilege.missing(key, state.privileges)
    if lacking is not None:
        return PlanItem(key, path, rule, reading, write, "needs-privilege", lacking, setting.source)
    return PlanItem(key, path, rule, reading, write, "set", reason, setting.source)


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


def _governor_items(setting: Setting, state: HostState) -> list[PlanItem]:
    if not state.policies:
        rule = describe(setting.desired)
        why = f"no cpufreq policies under {paths.CPUFREQ_DIR} (no cpufreq driver; common in VMs)"
        return [PlanItem(setting.key, "", rule, None, None, "unsupported", why, setting.source)]
    return [
        _setting_item(f"{setting.key}:{policy}", paths.governor_path(policy), setting, state)
        for policy in state.policies
    ]


# A host without GPU slices (no GPUs, or none with a NUMA node) has nothing to keep work off:
# moving every interrupt onto one housekeeping core there would only hurt.
_NO_SLICES = "no GPU slices on this host: nothing to keep off, left as it is"


def _irq_items(setting: Setting, state: HostState) -> list[PlanItem]:
    """One item per numbered interrupt: allowed on the housekeeping CPUs of its device's node
    (tuning/irq.py). An interrupt already inside them is left as it is (never widened)."""
    from mcpnode.tuning.cpulist import format_list
    from mcpnode.tuning.irq import affinity_ok

    key, src = setting.key, setting.source
    if not isinstance(setting.desired, Exact) or setting.desired.text == "off":
        return []
    if state.irqs is None:
        why = f"no {paths.PROC_INTERRUPTS} here"
        return [PlanItem(key, "", "housekeeping", None, None, "unsupported", why, src)]
    part = state.partition
    if part is None:
        why = "the GPU slices are not known to this run (no current manifest, no discovery)"
        return [PlanItem(key, "", "housekeeping", None, None, "skipped", why, src)]
    if not part.housekeeping:
        why = "no housekeeping CPUs are reserved (housekeeping policy none): nowhere to move them"
        return [PlanItem(key, "", "housekeeping", None, None, "unsupported", why, src)]
    if not part.slices:
        return [PlanItem(key, "", "housekeeping", None, None, "unsupported", _NO_SLICES, src)]
    out = []
    for reading in state.irqs:
        k, path = f"irq:{reading.irq}", paths.irq_affinity_path(reading.irq)
        allowed = part.housekeeping_of(reading.node)
        want = format_list(allowed)
        where = f"node {reading.node}" if reading.node is not None else "no node"
        rule = f"within {want} (housekeeping, {where}; {reading.name})"
        unusable = _unusable(k, path, rule, reading.affinity, src)
        if unusable is not None:
            out.append(unusable)
            continue
        current = reading.affinity
        assert isinstance(current, str)
        if reading.irq in state.managed:
            why = (
                "kernel-managed: the kernel refused to move it (EIO); its affinity is the kernel's"
            )
            out.append(PlanItem(k, path, rule, current, None, "skipped", why, src))
            continue
        if affinity_ok(current, allowed):
            out.append(PlanItem(k, path, rule, current, want, "ok", f"already {current}", src))
            continue
        lacking = privilege.missing(k, state.privileges)
        action: Action = "needs-privilege" if lacking is not None else "set"
        out.append(
            PlanItem(k, path, rule, current, want, action, lacking or f"{current} -> {want}", src)
        )
    return out


def _rps_items(setting: Setting, state: HostState) -> list[PlanItem]:
    """One item per NIC rx queue: packet steering onto the housekeeping CPUs of the NIC's node
    (tuning/irq.py), so protocol processing stays off the GPU slices whichever CPU the
    interrupt lands on. The mask is compared as a set of CPUs."""
    from mcpnode.tuning.cpulist import format_list, format_mask, parse_mask

    key, src = setting.key, setting.source
    if not isinstance(setting.desired, Exact) or setting.desired.text == "off":
        return []
    if state.rps is None:
        why = f"no {paths.SYS_CLASS_NET} here"
        return [PlanItem(key, "", "housekeeping", None, None, "unsupported", why, src)]
    part = state.partition
    if part is None or not part.housekeeping:
        why = (
            "the GPU slices are not known to this run (no current manifest, no discovery)"
            if part is None
            else "no housekeeping CPUs are reserved (housekeeping policy none)"
        )
        action: Action = "skipped" if part is None else "unsupported"
        return [PlanItem(key, "", "housekeeping", None, None, action, why, src)]
    if not part.slices:
        return [PlanItem(key, "", "housekeeping", None, None, "unsupported", _NO_SLICES, src)]
    out = []
    for q in state.rps:
        k = paths.rps_key(q.dev, q.queue)
        assert k is not None
        path = paths.rps_path(q.dev, q.queue)
        allowed = part.housekeeping_of(q.node)
        rule = f"= {format_list(allowed)} (housekeeping of the NIC's node)"
        unusable = _unusable(k, path, rule, q.mask, src)
        if unusable is not None:
            out.append(unusable)
            continue
        current = q.mask
        assert isinstance(current, str)
        try:
            have = parse_mask(current)
        except ValueError:
            why = f"{path}: {current[:40]!r} is not a CPU mask"
            out.append(PlanItem(k, path, rule, current, None, "skipped", why, src, unread=True))
            continue
        want = format_mask(allowed, current.count(",") + 1)
        if have == allowed:
            out.append(PlanItem(k, path, rule, current, want, "ok", "already", src))
            continue
        lacking = privilege.missing(k, state.privileges)
        act: Action = "needs-privilege" if lacking is not None else "set"
        shown = format_list(have) or "off"
        why = lacking or f"{shown} -> {format_list(allowed)}"
        out.append(PlanItem(k, path, rule, current, want, act, why, src))
    return out


def _irqbalance_item(setting: Setting, state: HostState) -> list[PlanItem]:
    """irqbalance's banned CPUs = the GPU slices, in its environment file (tuning/irq.py)."""
    from mcpnode.tuning.cpulist import format_list
    from mcpnode.tuning.irq import banned_of

    key, src = setting.key, setting.source
    if not isinstance(setting.desired, Exact) or setting.desired.text == "leave":
        return []
    rule = "IRQBALANCE_BANNED_CPULIST = GPU slices"
    if state.irqbalance is None:
        names = " or ".join(paths.IRQBALANCE_FILES.values())
        why = f"irqbalance is not installed here (no {names})"
        return [PlanItem(key, "", rule, None, None, "unsupported", why, src)]
    file_key, path, content = state.irqbalance
    unusable = _unusable(file_key, path, rule, content, src)
    if unusable is not None:
        return [unusable]
    assert isinstance(content, str)
    if state.partition is None:
        why = "the GPU slices are not known to this run (no current manifest, no discovery)"
        return [PlanItem(file_key, path, rule, None, None, "skipped", why, src)]
    want = format_list(state.partition.slices)
    if not want:
        return [PlanItem(file_key, path, rule, None, None, "unsupported", "no GPU slices", src)]
    current = banned_of(content)
    shown = current if current is not None else "(unset)"
    if current is not None and _same_cpus(current, want):
        return [PlanItem(file_key, path, rule, current, want, "ok", f"already {current}", src)]
    lacking = privilege.missing(file_key, state.privileges)
    action: Action = "needs-privilege" if lacking is not None else "set"
    why = lacking or f"{shown} -> {want}; restart irqbalance to apply it"
    return [PlanItem(file_key, path, rule, current, want, action, why, src)]


def _confine_items(setting: Setting, state: HostState) -> list[PlanItem]:
    """One drop-in per confined unit, AllowedCPUs= the housekeeping CPUs (tuning/housekeeping.py).
    The item's current and desired are the files' whole texts ("" for absent)."""
    from mcpnode.tuning.cpulist import format_list
    from mcpnode.tuning.housekeeping import dropin_text

    assert isinstance(setting.desired, Exact)
    units = [u for u in setting.desired.text.split() if u in paths.CONFINABLE]
    src = setting.source
    out = []
    for unit in units:
        key = f"systemd:{unit}"
        path = paths.SYSTEMD_DROPINS[key]
        rule = f"{unit} AllowedCPUs= housekeeping"
        reading = state.readings.get(path)
        unusable = _unusable(key, path, rule, reading, src)
        if unusable is not None:
            out.append(unusable)
            continue
        assert isinstance(reading, str)
        part = state.partition
        if part is None:
            why = "the housekeeping CPUs are not known to this run (no current manifest)"
            out.append(PlanItem(key, path, rule, reading, None, "skipped", why, src))
            continue
        if not part.housekeeping or not part.slices:
            why = (
                _NO_SLICES
                if part.housekeeping
                else "no housekeeping CPUs are reserved (housekeeping policy none)"
            )
            out.append(PlanItem(key, path, rule, reading, None, "unsupported", why, src))
            continue
        cpus = format_list(part.housekeeping)
        want = dropin_text(unit, cpus)
        control = state.readings.get(paths.SET_PROPERTY_DROPIN.format(unit=unit))
        other = _allowed_cpus_of(control) if isinstance(control, str) else None
        if other is not None and not _same_cpus(other, cpus):
            # `systemctl set-property` drop-ins load after /etc/systemd/system: theirs holds.
            where = paths.SET_PROPERTY_DROPIN.format(unit=unit)
            why = f"{where} sets AllowedCPUs={other}, which wins over this drop-in: remove it"
            out.append(PlanItem(key, path, rule, reading, want, "skipped", why, src))
            continue
        if reading == want:
            out.append(PlanItem(key, path, rule, reading, want, "ok", f"already {cpus}", src))
            continue
        lacking = privilege.missing(key, state.privileges)
        action: Action = "needs-privilege" if lacking is not None else "set"
        was = "absent" if reading == "" else "different"
        why = lacking or f"drop-in {was} -> AllowedCPUs={cpus}; `systemctl daemon-reload`"
        out.append(PlanItem(key, path, rule, reading, want, action, why, src))
    return out


def _boot_items(setting: Setting, state: HostState) -> list[PlanItem]:
    """One item: the boot configuration holds every wanted argument (tuning/bootloader.py).
    `ok` says whether the running kernel has them too, or that a reboot is required."""
    from mcpnode.tuning import bootloader as bl
    from mcpnode.tuning.cpulist import format_list

    assert isinstance(setting.desired, Exact)
    src = setting.source
    args, isolate = bl.decode(setting.desired.text)
    slices = format_list(state.partition.slices) if state.partition is not None else None
    wanted = bl.wanted_args(args, isolate, slices)
    rule = "kernel command line: " + " ".join(args + [f"{i}=<GPU slices>" for i in isolate])
    boot = state.boot
    key = boot.key if boot is not None else setting.key
    if wanted is None:
        why = "the GPU slices are not known to this run (no current manifest)"
        return [PlanItem(key, "", rule, None, None, "skipped", why, src)]
    if boot is None or boot.method in ("kernelstub", "systemd-boot", "none"):
        why = boot.why if boot is not None else "not detected"
        return [PlanItem(key, "", rule, None, " ".join(wanted), "unsupported", why, src)]
    if boot.configured is None or boot.content is None:
        return [PlanItem(key, boot.path, rule, None, None, "skipped", boot.why, src, unread=True)]
    running = bl.split_cmdline(state.cmdline or "")
    inactive = bl.missing(wanted, running)
    todo = bl.missing(wanted, boot.configured)
    current = boot.content if boot.method == "grub" else " ".join(boot.configured)
    if boot.method == "grub":
        keep = [a for a in boot.configured if a.partition("=")[0] not in bl.last_values(wanted)]
        desired = bl.grub_dropin_text(keep + wanted)
    else:
        desired = " ".join(wanted)
    after = (
        "active now"
        if not inactive
        else (f"reboot required: {' '.join(inactive)} not in /proc/cmdline")
    )
    if not todo:
        return [PlanItem(key, boot.path, rule, current, desired, "ok", f"configured; {after}", src)]
    if boot.method == "grub" and boot.regen is None:
        return [PlanItem(key, boot.path, rule, current, desired, "unsupported", boot.why, src)]
    lacking = privilege.missing(key, state.privileges)
    action: Action = "needs-privilege" if lacking is not None else "set"
    how = "grubby --update-kernel=ALL" if boot.method == "grubby" else " ".join(boot.regen or ())
    why = lacking or f"add {' '.join(todo)} ({how}); reboot required"
    return [PlanItem(key, boot.path, rule, current, desired, action, why, src)]


def _latency_item(setting: Setting, state: HostState) -> PlanItem:
    """PM QoS `force_latency`: satisfied when the latency in force is at most the wanted one
    (the kernel keeps the smallest request). Only a running process can hold a request, so
    when it is not held this is `skipped` for apply (the agent holds it: agent/service.py) and
    reported by verify as unverified, never written."""
    assert isinstance(setting.desired, Exact)
    want = int(setting.desired.text)
    key, path, src = setting.key, paths.CPU_DMA_LATENCY, setting.source
    rule = f"<= {want} us"
    now = state.cpu_latency
    if not isinstance(now, int):
        why = now or f"{path} was not read"
        return PlanItem(key, path, rule, None, str(want), "skipped", why, src, unread=True)
    shown = "none requested" if now >= paths.PM_QOS_NONE else f"{now} us"
    if now <= want:
        return PlanItem(key, path, rule, str(now), str(want), "ok", f"held: {shown}", src)
    why = f"{shown}: held only while `mcpnode agent` runs (it keeps {path} open)"
    return PlanItem(key, path, rule, str(now), str(want), "skipped", why, src)


def _allowed_cpus_of(text: str) -> str | None:
    """The last `AllowedCPUs=` value of a unit file's text (an empty one resets: None)."""
    value = None
    for line in text.splitlines():
        name, eq, rest = line.strip().partition("=")
        if eq and name.strip() == "AllowedCPUs":
            value = rest.strip() or None
    return value


def _same_cpus(a: str, b: str) -> bool:
    from mcpnode.tuning.cpulist import parse

    try:
        return parse(a) == parse(b)
    except ValueError:
        return False


def plan(profile: Profile, state: HostState) -> Plan:
    """Decide, for every setting of `profile`, what to do on a host in `state`.

    Module loads come first (explicit `[modules] load`, then modules a preference list needs
    because no preferred value is available yet); settings follow in profile order."""
    settings: list[PlanItem] = []
    needed: dict[str, str] = {m: "[modules] load" for m in profile.modules}
    for setting in profile.settings:
        if setting.key == paths.GOVERNOR_KEY:
            settings.extend(_governor_items(setting, state))
            continue
        if setting.key == paths.IRQ_POLICY_KEY:
            settings.extend(_irq_items(setting, state))
            continue
        if setting.key == paths.IRQBALANCE_KEY:
            settings.extend(_irqbalance_item(setting, state))
            continue
        if setting.key == paths.IRQ_RPS_KEY:
            settings.extend(_rps_items(setting, state))
            continue
        if setting.key == paths.CONFINE_KEY:
            settings.extend(_confine_items(setting, state))
            continue
        if setting.key == paths.BOOTLOADER_KEY:
            settings.extend(_boot_items(setting, state))
            continue
        if setting.key == paths.FORCE_LATENCY_KEY:
            settings.append(_latency_item(setting, state))
            continue
        path = paths.path_of(setting.key)
        assert path is not None
        item = _setting_item(setting.key, path, setting, state)
        settings.append(item)
        desired = setting.desired
        available = state.available.get(path)
        if (
            isinstance(desired, Prefer)
            and available is not None
            and item.current is not None
            and not any(v in available for v in desired.prefer)
        ):
            for module in desired.load:
                needed.setdefault(module, f"provides {desired.prefer[0]} for {setting.key}")
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
