"""Interrupt placement (`[irq]`): every device interrupt onto the housekeeping CPUs of its own
NUMA node, none inside a GPU slice, and irqbalance told to keep off the slices.

What is read (kernel Documentation/core-api/irq/irq-affinity.rst, filesystems/proc.rst):
- `/proc/interrupts`: one line per interrupt with an action; the first field is `N:` for a
  numbered (device) interrupt, `NMI:`/`LOC:`... for per-CPU ones, which have no affinity file;
- `/proc/irq/N/smp_affinity_list`: the CPUs the interrupt may be delivered to (written here);
- `/proc/irq/N/node`: the NUMA node of the device that requested it (-1 when none).

What is written: `smp_affinity_list` with the target cpulist, in one write(2), like tuned's irq
plugin (tuned/plugins/plugin_irq.py). The kernel refuses with EIO when the interrupt's affinity
is not the user's to set (kernel/irq/proc.c write_irq_affinity: `!irq_can_set_affinity_usr()`):
managed interrupts (multi-queue NVMe and virtio, whose per-queue vectors the kernel spreads
over all CPUs, include/linux/interrupt.h IRQ_AFFINITY_MANAGED), per-CPU and chained ones. Such
an interrupt is recorded as *managed* in the journal, never as a failure and never retried;
irqbalance does the same (irqbalance activate.c marks it unmanaged after EIO). A managed queue
interrupt fires for I/O submitted on the CPU it serves, so it costs a slice nothing unless the
slice itself does I/O.

irqbalance would move the interrupts back within seconds. Instead of fighting it, its
environment file gets IRQBALANCE_BANNED_CPULIST = the GPU slices (irqbalance >= 1.8.0; the
older IRQBALANCE_BANNED_CPUS hex mask lines are removed, as OpenShift's CRI-O hook does), so
it keeps off the slices and balances among the housekeeping CPUs. irqbalance reads the file at
start: `systemctl restart irqbalance` applies it (apply says so; tuned's irqbalance plugin
restarts it, mcpnode leaves services to their owner). The whole file is journaled and restored
byte for byte at rollback.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from mcpnode.errors import AccessDenied, HostError
from mcpnode.host import Host
from mcpnode.tuning import cpulist, paths
from mcpnode.tuning.read import Reading, Unreadable, read_value

BANNED_VAR = "IRQBALANCE_BANNED_CPULIST"
_OLD_BANNED_VAR = "IRQBALANCE_BANNED_CPUS"
_NUMBERED = re.compile(r"\s*([0-9]{1,6}):")
_ASSIGN = re.compile(r"\s*(?:export\s+)?([A-Z_][A-Z0-9_]*)=(.*)\Z")
MAX_ENV_FILE_BYTES = 1 << 16


@dataclass(frozen=True)
class IrqReading:
    """One numbered interrupt: its number, its device's node (None for -1 or unreadable), its
    affinity as read (a cpulist's text, or Unreadable), and what /proc/interrupts names it."""

    irq: int
    node: int | None
    affinity: Reading
    name: str


def parse_interrupts(text: str) -> tuple[tuple[int, str], ...]:
    """(number, name) of every numbered interrupt in /proc/interrupts text, ascending. The name
    is the last field (the action: `mlx5_comp3@pci:0000:1b:00.0`, `nvme0q5`, `nvidia`)."""
    out: dict[int, str] = {}
    for line in text.splitlines()[1:]:
        m = _NUMBERED.match(line)
        if m is None:
            continue
        fields = line[m.end() :].split()
        out[int(m.group(1))] = fields[-1] if fields else ""
    return tuple(sorted(out.items()))


def read_irqs(host: Host) -> tuple[IrqReading, ...] | None:
    """Every numbered interrupt with an affinity file; None when the root has no
    /proc/interrupts (a dump without it, a kernel without SMP)."""
    raw = read_value(host, paths.PROC_INTERRUPTS)
    if not isinstance(raw, str):
        return None
    out = []
    for irq, name in parse_interrupts(raw):
        affinity = read_value(host, paths.irq_affinity_path(irq))
        if not isinstance(affinity, (str, Unreadable)):
            continue  # listed but no affinity file: a per-CPU or chained interrupt
        node_text = read_value(host, paths.irq_node_path(irq))
        node: int | None = None
        if isinstance(node_text, str) and node_text.strip().isdigit():
            node = int(node_text.strip())
        out.append(IrqReading(irq, node, affinity, name))
    return tuple(out)


def affinity_ok(current: str, allowed: frozenset[int]) -> bool | None:
    """Whether an interrupt allowed on `current` stays inside `allowed`: None when `current` is
    not a cpulist (never a match)."""
    try:
        cpus = cpulist.parse(current)
    except ValueError:
        return None
    return bool(cpus) and cpus <= allowed


# -- irqbalance's environment file -----------------------------------------------------------


def irqbalance_file(host: Host) -> tuple[str, str, Reading] | None:
    """(key, path, content) of the irqbalance environment file this distribution uses: the
    first of IRQBALANCE_FILES that exists; None when neither does (irqbalance not installed)."""
    for key, path in paths.IRQBALANCE_FILES.items():
        try:
            text = host.read_optional(path, limit=MAX_ENV_FILE_BYTES)
        except AccessDenied as err:
            return key, path, Unreadable(f"cannot read {path}: {err.detail}", denied=True)
        except HostError as err:
            return key, path, Unreadable(f"cannot read {path}: {err.detail}", denied=False)
        if text is not None:
            return key, path, text
    return None


def banned_of(text: str) -> str | None:
    """The value of the last IRQBALANCE_BANNED_CPULIST assignment (quotes removed), as the
    unit's EnvironmentFile= reads it; None when it is not set."""
    value: str | None = None
    for line in text.splitlines():
        m = _ASSIGN.match(line)
        if m is not None and m.group(1) == BANNED_VAR:
            value = m.group(2).strip().strip("\"'")
    return value


def with_banned(text: str, banned: str) -> str:
    """`text` with IRQBALANCE_BANNED_CPULIST set to `banned`: earlier assignments of it and of
    the older IRQBALANCE_BANNED_CPUS mask removed, the new one appended with a comment."""
    keep = []
    for line in text.splitlines():
        m = _ASSIGN.match(line)
        if m is not None and m.group(1) in (BANNED_VAR, _OLD_BANNED_VAR):
            continue
        keep.append(line)
    while keep and not keep[-1].strip():
        keep.pop()
    keep += [
        "",
        '# Written by mcpnode ([irq] irqbalance = "ban-slices"): the GPU slices; `mcpnode',
        "# rollback` restores this file as it was.",
        f"{BANNED_VAR}={banned}",
    ]
    return "\n".join(keep) + "\n"


# -- RPS: receive packet steering -------------------------------------------------------------


@dataclass(frozen=True)
class RpsReading:
    """One receive queue of a NIC (`/sys/class/net/DEV/queues/rx-N/rps_cpus`): the CPUs that
    may process its packets after the interrupt (Documentation/networking/scaling.rst; 0: RPS
    off, processing stays on the interrupt's CPU), and the NIC's NUMA node."""

    dev: str
    queue: int
    node: int | None
    mask: Reading


def read_rps(host: Host) -> tuple[RpsReading, ...] | None:
    """Every rx queue of every interface backed by a device (`/sys/class/net/DEV/device`:
    virtual ones, lo, veth, bridges, have none and are left alone). None without
    /sys/class/net."""
    names = host.listdir_optional(paths.SYS_CLASS_NET)
    if names is None:
        return None
    out = []
    for dev in sorted(names):
        base = f"{paths.SYS_CLASS_NET}/{dev}"
        if paths.rps_key(dev, 0) is None or not host.exists(f"{base}/device"):
            continue
        node_text = read_value(host, f"{base}/device/numa_node")
        node = None
        if isinstance(node_text, str) and node_text.strip().isdigit():
            node = int(node_text.strip())
        for entry in sorted(host.listdir_optional(f"{base}/queues") or []):
            number = entry.removeprefix("rx-")
            if not entry.startswith("rx-") or not number.isascii() or not number.isdigit():
                continue
            mask = read_value(host, paths.rps_path(dev, int(number)))
            if isinstance(mask, (str, Unreadable)):
                out.append(RpsReading(dev, int(number), node, mask))
    return tuple(out)


def running_irqbalance(host: Host) -> tuple[int, ...]:
    """Pids of running irqbalance daemons (`/proc/PID/comm`), ascending; () when none or when
    /proc cannot be listed. Read only after apply wrote irqbalance's file, never per drift
    interval: a /proc walk is not an idle agent's work."""
    out = []
    for name in host.listdir_optional(paths.PROC_ROOT) or []:
        if not (name.isascii() and name.isdigit()):
            continue
        try:
            comm = host.read_optional(f"{paths.PROC_ROOT}/{name}/comm", limit=64)
        except HostError:
            continue  # exited, or hidden (hidepid=)
        if comm is not None and comm.strip() == "irqbalance":
            out.append(int(name))
    return tuple(sorted(out))
