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

import errno as errno_mod
import re
from collections.abc import Sequence
from dataclasses import dataclass

from mcpnode.codec import cpus
from mcpnode.errors import AccessDenied, HostError
from mcpnode.host import Host, HostReader, read_limit
from mcpnode.tuning import paths, privilege
from mcpnode.tuning.model import Action, HostState, PlanItem, Setting
from mcpnode.tuning.outcome import Outcome
from mcpnode.tuning.partition import CpuPartition
from mcpnode.tuning.plugins.base import (
    NO_PARTITION,
    SectionInput,
    StateDraft,
    Subsystem,
    one_of,
    placement_gate,
    same_cpus,
    unusable,
)
from mcpnode.tuning.read import Reading, Unreadable, as_reading, read_value
from mcpnode.tuning.values import Exact

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
        # Only the last field: a line holds one count per CPU before it (192 on an 8-GPU host),
        # and splitting them all was most of the time this took.
        fields = line[m.end() :].rsplit(None, 1)
        out[int(m.group(1))] = fields[-1] if fields else ""
    return tuple(sorted(out.items()))


def read_irqs(host: HostReader) -> tuple[IrqReading, ...] | None:
    """Every numbered interrupt with an affinity file; None when the root has no
    /proc/interrupts (a dump without it, a kernel without SMP)."""
    raw = read_value(host, paths.PROC_INTERRUPTS)
    if not isinstance(raw, str):
        return None
    # Listed once, /proc/irq says which interrupts have a directory, and (Host.scandir) leaves
    # each one known resolved for the rest of the read pass.
    try:
        listed: frozenset[str] | None = frozenset(e.name for e in host.scandir(paths.PROC_IRQ))
    except HostError:
        listed = None  # each interrupt's files then answer for themselves
    out = []
    for irq, name in parse_interrupts(raw):
        if listed is not None and str(irq) not in listed:
            continue  # no directory, so no affinity file: a per-CPU or chained interrupt
        affinity, node_text = _irq_files(host, irq)
        if not isinstance(affinity, (str, Unreadable)):
            continue  # listed but no affinity file: a per-CPU or chained interrupt
        node: int | None = None
        if isinstance(node_text, str) and node_text.strip().isdigit():
            node = int(node_text.strip())
        out.append(IrqReading(irq, node, affinity, name))
    return tuple(out)


_IRQ_FILES = frozenset({"smp_affinity_list", "node"})


def _irq_files(host: HostReader, irq: int) -> tuple[Reading, Reading]:
    """An interrupt's affinity and node, read with one listing of its directory (two files of
    a directory: Host.read_directory opens them by name, without a path walk or stat each)."""
    affinity, node = paths.irq_affinity_path(irq), paths.irq_node_path(irq)
    try:
        found, _, _ = host.read_directory(
            f"{paths.PROC_IRQ}/{int(irq)}", _IRQ_FILES, limit=read_limit(affinity)
        )
    except HostError:
        # The directory cannot be listed: each file says why on its own (absent, denied...).
        return read_value(host, affinity), read_value(host, node)
    return (
        as_reading(host, affinity, found.get("smp_affinity_list")),
        as_reading(host, node, found.get("node")),
    )


def affinity_ok(current: str, allowed: frozenset[int]) -> bool | None:
    """Whether an interrupt allowed on `current` stays inside `allowed`: None when `current` is
    not a cpulist (never a match)."""
    try:
        ids = cpus.parse_list(current, groups=False)
    except ValueError:
        return None
    return bool(ids) and ids <= allowed


# -- irqbalance's environment file -----------------------------------------------------------


def irqbalance_file(host: HostReader) -> tuple[str, str, Reading] | None:
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


# -- the subsystem ---------------------------------------------------------------------------

IRQ_POLICIES = ("housekeeping", "off")
_NO_INTERRUPTS = f"no {paths.PROC_INTERRUPTS} here"
_NOWHERE = "no housekeeping CPUs are reserved (housekeeping policy none): nowhere to move them"
IRQBALANCE_MODES = ("ban-slices", "leave")


class Irq(Subsystem):
    """`[irq] policy` (interrupts onto their node's housekeeping CPUs, one `irq:N` item each)
    and `[irq] irqbalance` (its banned CPUs = the GPU slices, in its environment file)."""

    name = "irq"
    section = "irq"
    options = ("policy", "irqbalance")
    empty_file_removes = False  # irqbalance's file is the package's: written, never removed
    file_keys = frozenset(paths.IRQBALANCE_FILES)
    atomic_files = tuple(paths.IRQBALANCE_FILES.values())

    def owns(self, key: str) -> bool:
        return (
            key in (paths.IRQ_POLICY_KEY, paths.IRQBALANCE_KEY)
            or key in paths.IRQBALANCE_FILES
            or paths.irq_number(key) is not None
        )

    def path_of(self, key: str) -> str | None:
        """`irq:N` -> its smp_affinity_list; `irqbalance:*` -> irqbalance's environment file."""
        irq = paths.irq_number(key)
        if irq is not None:
            return paths.irq_affinity_path(irq)
        return paths.IRQBALANCE_FILES.get(key)

    def parse(self, section: SectionInput) -> list[Setting]:
        return [
            *one_of(section, "irq", "policy", IRQ_POLICIES, paths.IRQ_POLICY_KEY),
            *one_of(section, "irq", "irqbalance", IRQBALANCE_MODES, paths.IRQBALANCE_KEY),
        ]

    def read(self, host: HostReader, setting: Setting, draft: StateDraft) -> None:
        if setting.key == paths.IRQ_POLICY_KEY:
            irqs = read_irqs(host)
            draft.found[paths.IRQ_POLICY_KEY] = irqs
            for reading in irqs or ():
                draft.readings[paths.irq_affinity_path(reading.irq)] = reading.affinity
            return
        irqbalance = irqbalance_file(host)
        draft.found[paths.IRQBALANCE_KEY] = irqbalance
        if irqbalance is not None:
            draft.readings[irqbalance[1]] = irqbalance[2]

    def plan(self, setting: Setting, state: HostState) -> list[PlanItem]:
        if setting.key == paths.IRQ_POLICY_KEY:
            return _irq_items(setting, state)
        return _irqbalance_item(setting, state)

    def file_text(self, key: str, before: str, new: str) -> str:
        return with_banned(before, new)

    def refused_as_managed(self, key: str, outcome: Outcome) -> bool:
        """The kernel refuses with EIO when the interrupt's affinity is not the user's to set
        (kernel/irq/proc.c write_irq_affinity: module docstring)."""
        return paths.irq_number(key) is not None and outcome.errno == errno_mod.EIO

    def notes(self, host: Host, items: Sequence[PlanItem], done: Sequence[Outcome]) -> list[str]:
        if not any(o.key in paths.IRQBALANCE_FILES and not o.failed for o in done):
            return []
        pids = running_irqbalance(host)
        if pids:
            return [
                f"irqbalance is running (pid {', '.join(map(str, pids))}) with its old banned "
                "CPUs and will move interrupts back onto the GPU slices: `systemctl restart "
                "irqbalance` makes it read the new ones"
            ]
        return ["irqbalance reads its banned CPUs at start: `systemctl restart irqbalance`"]


def _irq_items(setting: Setting, state: HostState) -> list[PlanItem]:
    """One item per numbered interrupt: allowed on the housekeeping CPUs of its device's node.
    An interrupt already inside them is left as it is (never widened)."""
    irqs = state.found.get(paths.IRQ_POLICY_KEY)
    part = placement_gate(setting, irqs, _NO_INTERRUPTS, _NOWHERE, state)
    if not isinstance(part, CpuPartition):
        return part
    assert isinstance(irqs, tuple)
    src = setting.source
    out = []
    # Interrupts share a handful of nodes and affinities: each is turned into a set, or a
    # cpulist, once per plan rather than once per interrupt (hundreds on a GPU host).
    targets: dict[int | None, tuple[frozenset[int], str]] = {}
    inside: dict[tuple[str, int | None], bool | None] = {}
    for reading in irqs:
        assert isinstance(reading, IrqReading)
        k, path = f"irq:{reading.irq}", paths.irq_affinity_path(reading.irq)
        if reading.node not in targets:
            local = part.housekeeping_of(reading.node)
            targets[reading.node] = local, cpus.format_list(local)
        allowed, want = targets[reading.node]
        where = f"node {reading.node}" if reading.node is not None else "no node"
        rule = f"within {want} (housekeeping, {where}; {reading.name})"
        found = unusable(k, path, rule, reading.affinity, src)
        if found is not None:
            out.append(found)
            continue
        current = reading.affinity
        assert isinstance(current, str)
        if reading.irq in state.managed:
            why = (
                "kernel-managed: the kernel refused to move it (EIO); its affinity is the kernel's"
            )
            out.append(PlanItem(k, path, rule, current, None, "skipped", why, src))
            continue
        if (current, reading.node) not in inside:
            inside[current, reading.node] = affinity_ok(current, allowed)
        if inside[current, reading.node]:
            out.append(PlanItem(k, path, rule, current, want, "ok", f"already {current}", src))
            continue
        lacking = privilege.missing(k, state.privileges)
        action: Action = "needs-privilege" if lacking is not None else "set"
        out.append(
            PlanItem(k, path, rule, current, want, action, lacking or f"{current} -> {want}", src)
        )
    return out


def _irqbalance_item(setting: Setting, state: HostState) -> list[PlanItem]:
    """irqbalance's banned CPUs = the GPU slices, in its environment file."""
    key, src = setting.key, setting.source
    if not isinstance(setting.desired, Exact) or setting.desired.text == "leave":
        return []
    rule = "IRQBALANCE_BANNED_CPULIST = GPU slices"
    irqbalance = state.found.get(paths.IRQBALANCE_KEY)
    if not isinstance(irqbalance, tuple):
        names = " or ".join(paths.IRQBALANCE_FILES.values())
        why = f"irqbalance is not installed here (no {names})"
        return [PlanItem(key, "", rule, None, None, "unsupported", why, src)]
    file_key, path, content = irqbalance
    found = unusable(file_key, path, rule, content, src)
    if found is not None:
        return [found]
    assert isinstance(content, str)
    if state.partition is None:
        return [PlanItem(file_key, path, rule, None, None, "skipped", NO_PARTITION, src)]
    want = cpus.format_list(state.partition.slices)
    if not want:
        return [PlanItem(file_key, path, rule, None, None, "unsupported", "no GPU slices", src)]
    current = banned_of(content)
    shown = current if current is not None else "(unset)"
    if current is not None and same_cpus(current, want):
        return [PlanItem(file_key, path, rule, current, want, "ok", f"already {current}", src)]
    lacking = privilege.missing(file_key, state.privileges)
    action: Action = "needs-privilege" if lacking is not None else "set"
    why = lacking or f"{shown} -> {want}; restart irqbalance to apply it"
    return [PlanItem(file_key, path, rule, current, want, action, why, src)]
