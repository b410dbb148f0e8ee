"""Read, through Host, everything a plan is decided on. The only I/O before a tuning decision.

Each value is a `Reading` (tuning/read.py, the primitives shared with the subsystems): the
kernel's text, `Absent` or `Unreadable`, never an empty string or a zero.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from mcpnode.errors import HostError
from mcpnode.host import Host
from mcpnode.tuning import paths
from mcpnode.tuning.errors import ProfileError
from mcpnode.tuning.privilege import Privileges
from mcpnode.tuning.profile import Profile
from mcpnode.tuning.read import Absent, Reading, file_reading, optional, read_value, tokens
from mcpnode.tuning.values import Prefer

if TYPE_CHECKING:
    from mcpnode.tuning.bootloader import Boot
    from mcpnode.tuning.irq import IrqReading, RpsReading
    from mcpnode.tuning.partition import CpuPartition


@dataclass(frozen=True)
class HostState:
    """What the plan needs to know about the host.

    readings:  logical path -> Reading, for every path a setting (or a journal entry) names
    available: logical path -> values the kernel offers for it (tcp congestion controls, THP
               modes, cpufreq governors); None where the kernel gives no list
    modules:   loaded modules (/proc/modules) plus requested ones present in /sys/module
               (built-in); None when /proc/modules is absent (no loadable module support)
    policies:  cpufreq policy directory names; None when there is no cpufreq at all (VMs)
    live:      the root is this machine, so modules can be loaded
    irqs:      numbered interrupts with their affinity (`[irq]` only); None without
               /proc/interrupts
    irqbalance: (key, path, content) of irqbalance's environment file (`[irq]` only), None
               when irqbalance is not installed
    partition: the housekeeping CPUs and GPU slices `[irq]` places against; None when the
               caller could not tell (no manifest and no discovery in this run)
    managed:   interrupts the kernel refused to move (EIO) in an earlier apply (the journal)
    boot:      how the kernel command line is configured (`[bootloader]` only)
    rps:       NIC rx queues with their rps_cpus (`[irq] rps` only); None without
               /sys/class/net
    cpu_latency: the PM QoS CPU latency in force now, µs (`force_latency` only): an int, or why
               it could not be read
    """

    readings: Mapping[str, Reading]
    available: Mapping[str, frozenset[str] | None]
    modules: frozenset[str] | None
    privileges: Privileges
    cmdline: str | None
    policies: tuple[str, ...] | None
    live: bool
    irqs: tuple[IrqReading, ...] | None = None
    irqbalance: tuple[str, str, Reading] | None = None
    partition: CpuPartition | None = None
    managed: frozenset[int] = frozenset()
    boot: Boot | None = None
    cpu_latency: int | str | None = None
    rps: tuple[RpsReading, ...] | None = None


def parse_status(text: str | None) -> Privileges:
    """Effective uid and CapEff from /proc/self/status text (pure)."""
    euid: int | None = None
    cap: int | None = None
    for line in (text or "").splitlines():
        name, _, rest = line.partition(":")
        fields = rest.split()
        try:
            if name == "Uid" and len(fields) >= 2:
                euid = int(fields[1])
            elif name == "CapEff" and fields:
                cap = int(fields[0], 16)
        except ValueError:
            continue
    return Privileges(euid, cap)


def parse_modules(text: str) -> frozenset[str]:
    """Module names from /proc/modules (`tcp_bbr 20480 2 - Live 0x...`)."""
    return frozenset(line.split(maxsplit=1)[0] for line in text.splitlines() if line.strip())


def refuse_directory_keys(host: Host, profile: Profile) -> None:
    """Raise ProfileError for the first sysctl key that names a directory under /proc/sys
    (`net.core`): it passes the name rules, but there is nothing to write, and it is a typo for
    one of the files in it. apply refuses it in one line rather than planning it as "skipped"
    and exiting 0; verify and the audit report it as unreadable (unknown), as any other."""
    for setting in profile.settings:
        path = paths.path_of(setting.key)
        if path is not None and paths.is_sysctl_path(path) and host.is_dir(path):
            raise ProfileError(
                setting.source,
                setting.key,
                f"names the directory {path}, not a sysctl: name one of the files in it",
                "sysctl",
            )


def read_state(
    host: Host,
    profile: Profile,
    extra_paths: Iterable[str] = (),
    *,
    partition: CpuPartition | None = None,
    managed: frozenset[int] = frozenset(),
) -> HostState:
    """Read what planning `profile` needs, plus `extra_paths` (journal entries to restore).
    `partition` and `managed` are passed through for `[irq]` (HostState)."""
    readings: dict[str, Reading] = {}
    available: dict[str, frozenset[str] | None] = {}
    wanted_modules = set(profile.modules)
    policies: tuple[str, ...] | None = None
    cmdline: str | None = None

    irqs = None
    irqbalance = None
    boot = None
    cpu_latency: int | str | None = None
    rps = None
    for setting in profile.settings:
        if setting.key == paths.IRQ_RPS_KEY:
            from mcpnode.tuning.irq import read_rps

            rps = read_rps(host)
            for q in rps or ():
                readings[paths.rps_path(q.dev, q.queue)] = q.mask
            continue
        if setting.key == paths.FORCE_LATENCY_KEY:
            try:
                cpu_latency = host.read_cpu_latency()
            except HostError as err:
                cpu_latency = f"cannot read {paths.CPU_DMA_LATENCY}: {err.detail}"
            continue
        if setting.key == paths.BOOTLOADER_KEY:
            from mcpnode.tuning.bootloader import detect

            boot = detect(host)
            if boot.content is not None:
                readings[boot.path] = boot.content
            cmdline = optional(host, paths.PROC_CMDLINE)
            continue
        if setting.key == paths.IRQ_POLICY_KEY:
            from mcpnode.tuning.irq import read_irqs

            irqs = read_irqs(host)
            for reading in irqs or ():
                readings[paths.irq_affinity_path(reading.irq)] = reading.affinity
            continue
        if setting.key == paths.IRQBALANCE_KEY:
            from mcpnode.tuning.irq import irqbalance_file

            irqbalance = irqbalance_file(host)
            if irqbalance is not None:
                readings[irqbalance[1]] = irqbalance[2]
            continue
        if setting.key == paths.CONFINE_KEY:
            for dropin in paths.SYSTEMD_DROPINS.values():
                readings[dropin] = file_reading(host, dropin)
            for unit in paths.CONFINABLE:
                control = paths.SET_PROPERTY_DROPIN.format(unit=unit)
                readings[control] = file_reading(host, control)
            continue
        if setting.key == paths.GOVERNOR_KEY:
            names = host.listdir_optional(paths.CPUFREQ_DIR)
            policies = tuple(n for n in names or () if paths.is_policy(n)) if names else None
            for policy in policies or ():
                gov = paths.governor_path(policy)
                readings[gov] = read_value(host, gov)
                available[gov] = tokens(optional(host, paths.governors_available_path(policy)))
            continue
        path = paths.path_of(setting.key)
        assert path is not None  # profile.py only builds settings with valid keys
        readings[path] = read_value(host, path)
        if setting.key == paths.THP_KEY:
            cmdline = optional(host, paths.PROC_CMDLINE)
            current = readings[path]
            available[path] = tokens(current) if isinstance(current, str) else None
        elif isinstance(setting.desired, Prefer):
            listed = paths.sysctl_path(paths.AVAILABLE_FROM[setting.key])
            available[path] = tokens(optional(host, listed))
            wanted_modules.update(setting.desired.load)

    for path in extra_paths:
        if path in readings:
            continue
        if path == paths.BOOT_PATHS[paths.GRUBBY_KEY]:
            from mcpnode.tuning.bootloader import grubby_args

            args = grubby_args(host)
            readings[path] = args if args is not None else Absent("grubby does not answer")
        elif path in paths.SYSTEMD_DROPINS.values() or path == paths.BOOT_PATHS["bootloader:grub"]:
            readings[path] = file_reading(host, path)
        else:
            readings[path] = read_value(host, path)

    modules: frozenset[str] | None = None
    proc_modules = optional(host, paths.PROC_MODULES)
    if proc_modules is not None:
        builtin = {m for m in wanted_modules if host.exists(f"{paths.SYS_MODULE}/{m}")}
        modules = parse_modules(proc_modules) | builtin

    return HostState(
        readings=readings,
        available=available,
        modules=modules,
        privileges=parse_status(optional(host, paths.PROC_STATUS)),
        cmdline=cmdline,
        policies=policies,
        live=host.is_live,
        irqs=irqs,
        irqbalance=irqbalance,
        partition=partition,
        managed=managed,
        boot=boot,
        cpu_latency=cpu_latency,
        rps=rps,
    )
