"""Receive packet steering (`[irq] rps`): each NIC rx queue's rps_cpus set to the housekeeping
CPUs of the NIC's node, so protocol processing stays off the GPU slices whichever CPU the
interrupt lands on (kernel Documentation/networking/scaling.rst). The mask is compared as a
set of CPUs."""

from __future__ import annotations

from dataclasses import dataclass

from mcpnode.host import Host
from mcpnode.tuning import cpulist, paths, privilege
from mcpnode.tuning.model import Action, HostState, PlanItem, Setting
from mcpnode.tuning.plugins.base import (
    NO_PARTITION,
    NO_SLICES,
    SectionInput,
    StateDraft,
    Subsystem,
    err,
    unusable,
)
from mcpnode.tuning.plugins.irq import IRQ_POLICIES
from mcpnode.tuning.read import Reading, Unreadable, read_value
from mcpnode.tuning.values import Exact


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


class Rps(Subsystem):
    name = "rps"
    section = "irq"
    options = ("rps",)

    def owns(self, key: str) -> bool:
        return key == paths.IRQ_RPS_KEY or key.startswith("rps:")

    def parse(self, section: SectionInput) -> list[Setting]:
        if "rps" not in section.table:
            return []
        value = section.table["rps"]
        if value not in IRQ_POLICIES:
            raise err(section.file, "rps", f"must be one of {', '.join(IRQ_POLICIES)}", "irq")
        note = section.comment("irq", "rps")
        return [Setting(paths.IRQ_RPS_KEY, Exact(value), section.file, note)]

    def read(self, host: Host, setting: Setting, draft: StateDraft) -> None:
        rps = read_rps(host)
        draft.found[self.name] = rps
        for q in rps or ():
            draft.readings[paths.rps_path(q.dev, q.queue)] = q.mask

    def plan(self, setting: Setting, state: HostState) -> list[PlanItem]:
        key, src = setting.key, setting.source
        if not isinstance(setting.desired, Exact) or setting.desired.text == "off":
            return []
        queues = state.found.get(self.name)
        if not isinstance(queues, tuple):
            why = f"no {paths.SYS_CLASS_NET} here"
            return [PlanItem(key, "", "housekeeping", None, None, "unsupported", why, src)]
        part = state.partition
        if part is None or not part.housekeeping:
            why = (
                NO_PARTITION
                if part is None
                else "no housekeeping CPUs are reserved (housekeeping policy none)"
            )
            action: Action = "skipped" if part is None else "unsupported"
            return [PlanItem(key, "", "housekeeping", None, None, action, why, src)]
        if not part.slices:
            return [PlanItem(key, "", "housekeeping", None, None, "unsupported", NO_SLICES, src)]
        out = []
        for q in queues:
            assert isinstance(q, RpsReading)
            out.append(_queue_item(q, part.housekeeping_of(q.node), state, src))
        return out


def _queue_item(q: RpsReading, allowed: frozenset[int], state: HostState, src: str) -> PlanItem:
    k = paths.rps_key(q.dev, q.queue)
    assert k is not None
    path = paths.rps_path(q.dev, q.queue)
    rule = f"= {cpulist.format_list(allowed)} (housekeeping of the NIC's node)"
    found = unusable(k, path, rule, q.mask, src)
    if found is not None:
        return found
    current = q.mask
    assert isinstance(current, str)
    try:
        have = cpulist.parse_mask(current)
    except ValueError:
        why = f"{path}: {current[:40]!r} is not a CPU mask"
        return PlanItem(k, path, rule, current, None, "skipped", why, src, unread=True)
    want = cpulist.format_mask(allowed, current.count(",") + 1)
    if have == allowed:
        return PlanItem(k, path, rule, current, want, "ok", "already", src)
    lacking = privilege.missing(k, state.privileges)
    act: Action = "needs-privilege" if lacking is not None else "set"
    shown = cpulist.format_list(have) or "off"
    why = lacking or f"{shown} -> {cpulist.format_list(allowed)}"
    return PlanItem(k, path, rule, current, want, act, why, src)
