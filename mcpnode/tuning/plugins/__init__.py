"""The tuning subsystems, one module each, behind one registry.

Every subsystem is a `Subsystem` (base.py): the profile section and keys it owns, `parse` its
section, `read` the host, `plan` pure, `write` (and the hooks apply needs for a whole file).
Verify re-plans with the same `plan`, so apply and verify share one code path. profile.py,
state.py, plan.py and apply.py iterate `SUBSYSTEMS` and ask `subsystem_of(key)`; none of them
names a subsystem.

    sysctl.py        [sysctl]        /proc/sys values (exact, at-least, preference lists)
    bootloader.py    [bootloader]    the kernel command line: GRUB drop-in or grubby
    thp.py           [vm]            transparent huge pages: enabled, defrag, khugepaged defrag
    hugepages.py     [vm]            2 MiB pages reserved per NUMA node (the GPUs' nodes)
    pmqos.py         [cpu]           force_latency: the PM QoS request the agent holds
    governor.py      [cpu]           the cpufreq governor, per policy of the selected CPUs
    cpupower.py      [cpu]           `cpus`, EPP, EPB, intel_pstate limits, boost
    cstates.py       [cpu]           idle states deeper than max_latency_us disabled
    irq.py           [irq]           interrupt affinity and irqbalance's banned CPUs
    rps.py           [irq]           NIC rx queues' packet steering
    housekeeping.py  [housekeeping]  AllowedCPUs= drop-ins for system.slice, user.slice, init.scope
    readahead.py     [storage]       read_ahead_kb of the disks under the named mounts
    nicqueues.py     [nic]           ring sizes and channel counts, through ethtool

The order of SUBSYSTEMS is the order a profile file's settings are parsed in, so the order of
the plan, of `apply --dry-run` and of `verify`.

Adding a subsystem is one new file and one line here (cpupower.py, cstates.py, hugepages.py and
readahead.py were added so):

1. `plugins/NAME.py`: a `Subsystem` subclass with `name`, `section` and `options` (the keys of
   the section it takes; they join the section's other subsystems'), `owns()` true for its
   setting keys (`cpu:energy_perf_bias`) and item keys (`cpu:energy_perf_bias:cpu3`),
   `path_of()` naming the one file of each item key (the journal accepts no other path),
   `key_facts` (the kernel default and a note) for `profiles explain`, `parse` (validate
   with base.err and friends), `read` (into the draft's `readings` for one-file values,
   `found[...]` for anything else), `plan` (base.value_item compares and decides for a one-file
   value; `unusable` answers an absent or unreadable one). `write` defaults to writing the
   value with a newline, which sysfs values need; `granted` says when the kernel took less
   than was written (a partial result).
2. Add it to SUBSYSTEMS below, where its settings should come in the plan.
3. What writing its item keys needs is `requirement` (the default, root or CAP_DAC_OVERRIDE
   for a `section:option` key, fits sysfs values); `file_keys`, `raw_keys`, `atomic_files` and
   `explained` are for subsystems that write whole files or whose keys need explaining
   (base.py lists them).
"""

from __future__ import annotations

from mcpnode.tuning import privilege
from mcpnode.tuning.plugins import (
    bootloader,
    cpupower,
    cstates,
    governor,
    housekeeping,
    hugepages,
    irq,
    nicqueues,
    pmqos,
    readahead,
    rps,
    sysctl,
    thp,
)
from mcpnode.tuning.plugins.base import Subsystem

SUBSYSTEMS: tuple[Subsystem, ...] = (
    sysctl.Sysctl(),
    bootloader.Bootloader(),
    thp.TransparentHugepages(),
    hugepages.Hugepages(),
    pmqos.PmQos(),
    governor.Governor(),
    cpupower.CpuPower(),
    cstates.CStates(),
    irq.Irq(),
    rps.Rps(),
    housekeeping.Housekeeping(),
    readahead.Readahead(),
    nicqueues.NicQueues(),
)


def owner(key: str) -> Subsystem | None:
    """The subsystem that owns `key` (a setting's, a plan item's or a journal entry's); the
    sysctl one for a dotted name; None for a key no subsystem owns (`module:NAME`)."""
    for subsystem in SUBSYSTEMS:
        if subsystem.owns(key):
            return subsystem
    return None


def subsystem_of(key: str) -> Subsystem:
    """owner(), for a key that has one. Raises KeyError for one that has none."""
    subsystem = owner(key)
    if subsystem is None:
        raise KeyError(key)
    return subsystem


def path_of(key: str) -> str | None:
    """The one file `key` writes, as its owner says; None for a key that writes no file
    (modules, profile settings expanded into items) or that no subsystem owns. The journal
    checks every entry against this, so a tampered journal cannot aim a restore elsewhere."""
    subsystem = owner(key)
    return subsystem.path_of(key) if subsystem is not None else None


def is_file_key(key: str) -> bool:
    """Whether `key`'s journal original is a whole file (restored byte for byte)."""
    subsystem = owner(key)
    return subsystem is not None and key in subsystem.file_keys


def is_raw_key(key: str) -> bool:
    """Whether `key`'s journal original is kept exactly as read: the whole files, and the
    values a subsystem keeps unnormalised (grubby's argument string)."""
    subsystem = owner(key)
    return subsystem is not None and (key in subsystem.file_keys or key in subsystem.raw_keys)


def atomic_files() -> tuple[str, ...]:
    """Every file a subsystem replaces with Host.write_file_atomic, in registry order."""
    return tuple(path for subsystem in SUBSYSTEMS for path in subsystem.atomic_files)


def requirement(key: str) -> privilege.Requirement:
    """What writing `key` needs: its owner's answer, else the rule by the key's shape
    (`module:NAME`, `persist:...`)."""
    subsystem = owner(key)
    return subsystem.requirement(key) if subsystem is not None else privilege.requirement(key)


def sections() -> tuple[str, ...]:
    """The profile sections the subsystems own, in the order they are parsed."""
    return tuple(dict.fromkeys(s.section for s in SUBSYSTEMS))


def options_of(section: str) -> tuple[str, ...]:
    """The keys a section takes, across its subsystems; () when any key (`[sysctl]`)."""
    out: list[str] = []
    for subsystem in SUBSYSTEMS:
        if subsystem.section == section:
            if not subsystem.options:
                return ()
            out.extend(subsystem.options)
    return tuple(out)
