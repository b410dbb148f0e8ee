"""Receive packet steering (`[irq] rps`): each NIC rx queue's rps_cpus set to the housekeeping
CPUs of the NIC's node, so protocol processing stays off the GPU slices whichever CPU the
interrupt lands on (kernel Documentation/networking/scaling.rst). The mask is compared as a
set of CPUs."""

from __future__ import annotations

from dataclasses import dataclass

from mcpnode.codec import cpus
from mcpnode.host import HostReader
from mcpnode.tuning import paths, privilege
from mcpnode.tuning.model import Action, HostState, PlanItem, Setting
from mcpnode.tuning.partition import CpuPartition
from mcpnode.tuning.plugins.base import (
    SectionInput,
    StateDraft,
    Subsystem,
    one_of,
    placement_gate,
    unusable,
)
from mcpnode.tuning.plugins.irq import IRQ_POLICIES
from mcpnode.tuning.read import Reading, Unreadable, read_value

_NO_NET = f"no {paths.SYS_CLASS_NET} here"
_NO_HOUSEKEEPING = "no housekeeping CPUs are reserved (housekeeping policy none)"


@dataclass(frozen=True)
class RpsReading:
    """One receive queue of a NIC (`/sys/class/net/DEV/queues/rx-N/rps_cpus`): the CPUs that
    may process its packets after the interrupt (Documentation/networking/scaling.rst; 0: RPS
    off, processing stays on the interrupt's CPU), and the NIC's NUMA node."""

    dev: str
    queue: int
    node: int | None
    mask: Reading


def read_rps(host: HostReader) -> tuple[RpsReading, ...] | None:
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

    def path_of(self, key: str) -> str | None:
        """`rps:DEV:N` -> that rx queue's rps_cpus."""
        queue = paths.rps_queue(key)
        return paths.rps_path(*queue) if queue is not None else None

    def parse(self, section: SectionInput) -> list[Setting]:
        return one_of(section, "irq", "rps", IRQ_POLICIES, paths.IRQ_RPS_KEY)

    def read(self, host: HostReader, setting: Setting, draft: StateDraft) -> None:
        rps = read_rps(host)
        draft.found[self.name] = rps
        for q in rps or ():
            draft.readings[paths.rps_path(q.dev, q.queue)] = q.mask

    def plan(self, setting: Setting, state: HostState) -> list[PlanItem]:
        queues = state.found.get(self.name)
        part = placement_gate(setting, queues, _NO_NET, _NO_HOUSEKEEPING, state)
        if not isinstance(part, CpuPartition):
            return part
        assert isinstance(queues, tuple)
        return [_queue_item(q, part.housekeeping_of(q.node), state, setting.source) for q in queues]


def _queue_item(q: RpsReading, allowed: frozenset[int], state: HostState, src: str) -> PlanItem:
    k = paths.rps_key(q.dev, q.queue)
    assert k is not None
    path = paths.rps_path(q.dev, q.queue)
    rule = f"= {cpus.format_list(allowed)} (housekeeping of the NIC's node)"
    found = unusable(k, path, rule, q.mask, src)
    if found is not None:
        return found
    current = q.mask
    assert isinstance(current, str)
    try:
        have = cpus.parse_mask(current)
    except ValueError:
        why = f"{path}: {current[:40]!r} is not a CPU mask"
        return PlanItem(k, path, rule, current, None, "skipped", why, src, unread=True)
    want = cpus.format_mask(allowed, current.count(",") + 1)
    if have == allowed:
        return PlanItem(k, path, rule, current, want, "ok", "already", src)
    lacking = privilege.missing(k, state.privileges)
    act: Action = "needs-privilege" if lacking is not None else "set"
    shown = cpus.format_list(have) or "off"
    why = lacking or f"{shown} -> {cpus.format_list(allowed)}"
    return PlanItem(k, path, rule, current, want, act, why, src)
