"""Runtime huge pages per NUMA node (`[vm] hugepages_2048kB`, `hugepages_nodes`): the 2 MiB pages
reserved on each selected node, `node/nodeN/hugepages/hugepages-2048kB/nr_hugepages`
(Documentation/admin-guide/mm/hugetlbpage.rst, "Interaction of Task Memory Policy with Huge Page
Allocation/Freeing"). 1 GiB pages are a boot-time reservation: `[bootloader]` (hugepagesz=1G
hugepages=N).

    hugepages_2048kB = 4096                  # pages per selected node, exact
    hugepages_2048kB = { min = 4096 }        # at least: a larger reservation is kept
    hugepages_nodes = "gpu-nodes"            # the NUMA nodes of the GPU slices (the CPU
                                             # partition: manifest or discovery); "all"; "0,2"

The kernel reserves what it can find contiguous and free: it may give fewer pages than asked
and the write still succeeds. So each write is read back (Subsystem.granted): fewer is a
"partial" outcome naming what was reserved, and verify keeps reporting the key as drift until
the node has them.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from mcpnode.codec import cpus
from mcpnode.codec.bounded import BoundError
from mcpnode.host import Host, HostReader
from mcpnode.tuning import paths
from mcpnode.tuning.facts import KeyFacts
from mcpnode.tuning.model import HostState, PlanItem, Setting
from mcpnode.tuning.outcome import Outcome
from mcpnode.tuning.plugins.base import (
    NO_PARTITION,
    SectionInput,
    StateDraft,
    Subsystem,
    err,
    value_item,
)
from mcpnode.tuning.read import read_value
from mcpnode.tuning.values import AtLeast, Desired, Exact, describe

NODE_DIR = "/sys/devices/system/node"
HUGEPAGES_KEY = "vm:hugepages_2048kB"
MAX_PAGES = 1 << 24  # 32 TiB of 2 MiB pages: far above any node, far below an overflow
_ITEM = re.compile(r"vm:hugepages_2048kB:node([0-9]{1,4})\Z", re.ASCII)
_NODE = re.compile(r"node([0-9]{1,4})\Z", re.ASCII)
_FOUND = "hugepages.nodes"  # found[...]: the nodes with 2 MiB pages
_SCOPE = "hugepages.scope"

FACTS = {
    HUGEPAGES_KEY: KeyFacts(
        "0 (none reserved)",
        "pinned staging buffers and DPDK/RDMA registrations on the GPUs' nodes; the kernel "
        "may reserve fewer than asked (reported as partial)",
    ),
    paths.HUGEPAGES_NODES_KEY: KeyFacts("all", "which NUMA nodes [vm] hugepages_2048kB fills"),
}


def nr_path(node: int) -> str:
    return f"{NODE_DIR}/node{int(node)}/hugepages/hugepages-2048kB/nr_hugepages"


def key_path(key: str) -> str | None:
    m = _ITEM.match(key)
    return nr_path(int(m.group(1))) if m is not None else None


def _count(file: str, value: object) -> Desired:
    inner = value.get("min") if isinstance(value, dict) and set(value) == {"min"} else value
    if isinstance(inner, bool) or not isinstance(inner, int) or not 0 <= inner <= MAX_PAGES:
        raise err(
            file,
            "hugepages_2048kB",
            f"must be a page count 0 to {MAX_PAGES}, or {{ min = COUNT }}",
            "vm",
        )
    return AtLeast((inner,)) if isinstance(value, dict) else Exact.of(inner)


class Hugepages(Subsystem):
    name = "hugepages"
    section = "vm"
    options = ("hugepages_2048kB", "hugepages_nodes")
    key_facts = FACTS
    setting_keys = frozenset((HUGEPAGES_KEY, paths.HUGEPAGES_NODES_KEY))
    item_keys = _ITEM

    def path_of(self, key: str) -> str | None:
        return key_path(key)

    def parse(self, section: SectionInput) -> list[Setting]:
        table, file = section.table, section.file
        out = []
        if "hugepages_nodes" in table:
            spec = table["hugepages_nodes"]
            if not isinstance(spec, str):
                raise err(file, "hugepages_nodes", "must be gpu-nodes, all or a node list", "vm")
            if spec not in ("gpu-nodes", "all"):
                try:
                    nodes = cpus.parse_list(spec, limit=1 << 10, groups=False)
                except BoundError as error:
                    raise err(file, "hugepages_nodes", f"not a node list: {error}", "vm") from None
                if not nodes:
                    raise err(file, "hugepages_nodes", "names no node", "vm")
                spec = cpus.format_list(nodes)
            note = section.comment("vm", "hugepages_nodes")
            out.append(Setting(paths.HUGEPAGES_NODES_KEY, Exact(spec), file, note))
        if "hugepages_2048kB" in table:
            desired = _count(file, table["hugepages_2048kB"])
            note = section.comment("vm", "hugepages_2048kB")
            out.append(Setting(HUGEPAGES_KEY, desired, file, note))
        return out

    def read(self, host: HostReader, setting: Setting, draft: StateDraft) -> None:
        if setting.key == paths.HUGEPAGES_NODES_KEY:
            assert isinstance(setting.desired, Exact)
            draft.found[_SCOPE] = setting.desired.text
            return
        found = []
        for name in host.listdir_optional(NODE_DIR) or ():
            m = _NODE.match(name)
            if m is None:
                continue
            reading = read_value(host, nr_path(int(m.group(1))))
            draft.readings[nr_path(int(m.group(1)))] = reading
            found.append(int(m.group(1)))
        draft.found[_FOUND] = tuple(sorted(found))

    def plan(self, setting: Setting, state: HostState) -> list[PlanItem]:
        if setting.key == paths.HUGEPAGES_NODES_KEY:
            return []  # a scope: the page items say which nodes it selected
        key, src, rule = setting.key, setting.source, describe(setting.desired)
        nodes = state.found.get(_FOUND)
        if not isinstance(nodes, tuple) or not nodes:
            why = f"no NUMA nodes under {NODE_DIR} (a kernel without CONFIG_NUMA?)"
            return [PlanItem(key, "", rule, None, None, "unsupported", why, src)]
        spec = state.found.get(_SCOPE, "all")
        chosen: frozenset[int]
        if spec == "all":
            chosen = frozenset(nodes)
        elif spec == "gpu-nodes":
            part = state.partition
            if part is None:
                return [PlanItem(key, "", rule, None, None, "skipped", NO_PARTITION, src)]
            # The GPU slices are carved from each GPU's local node: those nodes.
            chosen = frozenset(n for n, c in part.node_cpus.items() if c & part.slices)
            if not chosen:
                why = "no GPU slices on this host: no GPU node to reserve on"
                return [PlanItem(key, "", rule, None, None, "unsupported", why, src)]
        else:
            assert isinstance(spec, str)
            chosen = cpus.parse_list(spec, limit=1 << 10, groups=False)
        return [
            value_item(f"{key}:node{n}", nr_path(n), setting, state)
            for n in sorted(chosen)
            if n in nodes
        ] or [PlanItem(key, "", rule, None, None, "unsupported", f"no node {spec} here", src)]

    def notes(self, host: Host, items: Sequence[PlanItem], done: Sequence[Outcome]) -> list[str]:
        return [
            f"PARTIAL: {o.key}: asked {o.new} pages, {o.error}: memory on that node is "
            "fragmented or in use; verify reports it until the pages are there (or reserve them "
            "on the kernel command line: hugepagesz=2M hugepages=N)"
            for o in done
            if o.result == "partial" and self.owns(o.key)
        ]

    def granted(self, host: Host, key: str, path: str, new: str) -> str | None:
        """The count the kernel reserved when it is fewer than `new`."""
        text = host.read_optional(path)
        got = (text or "").strip()
        if got.isdigit() and len(got) <= 12 and new.isdigit() and int(got) < int(new):
            return got
        if not got.isdigit():
            return f"unreadable ({got[:20]!r})"
        return None
