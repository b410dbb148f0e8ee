"""GPU memory exposed as NUMA nodes: which CPU-less node holds which GPU's memory.

On cache-coherent CPU-GPU systems (POWER9 with NVLink 2.0, Grace Hopper GH200, Grace Blackwell
GB200) the NVIDIA driver onlines each GPU's memory as a NUMA node without CPUs, and says which
in `/proc/driver/nvidia/gpus/<bus id>/numa_status` (open-gpu-kernel-modules, nv-procfs.c
`numa_status_describe`): `Node: <id>` (-1 when the GPU's memory is not a node) and
`Status: <state>` (`online` once the memory is usable; `offline`, `online_in_progress`,
`offline_in_progress`, `offline_failed`, `online_failed` otherwise). hwloc shows these nodes
with `HWLOC_KEEP_NVIDIA_GPU_NUMA_NODES=1` as `NUMANode(GPUMemory)` with the GPU's `PCIBusID`.

NVML's `nvmlDeviceGetNumaNodeId` says the same on a live host (discover.merge_nvml); this is
the driver's view for roots without NVML answers (hwloc's dumps) and a cross-check with them.
"""

from __future__ import annotations

from mcpnode.errors import HostError
from mcpnode.topology import parse
from mcpnode.topology.model import PciAddress
from mcpnode.topology.sysfs import MAX_NUMNODES, PROC_NVIDIA_GPUS, Problems

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (codec/typenames.py)
if TYPE_CHECKING:
    from mcpnode.host import HostReader

_LIMIT = 4096  # the file is five short lines
_FIELDS = ("Node", "Status")
# What `\S` does not match with re.ASCII, besides the newline that ends a line.
_NOT_VALUE = " \t\r\x0b\x0c"


def _fields(text: str) -> list[tuple[str, str]]:
    """(field, value) of every line that is `Node:` or `Status:`, spaces and tabs, one value
    without ASCII whitespace (or none), spaces and tabs: the former pattern
    `^(Node|Status):[ \\t]*(\\S*)[ \\t]*$` with re.ASCII and re.MULTILINE, whose lines end at
    "\\n" only."""
    out = []
    for line in text.split("\n"):
        field, colon, rest = line.partition(":")
        if not colon or field not in _FIELDS:
            continue
        value = rest.strip(" \t")
        if not any(c in value for c in _NOT_VALUE):
            out.append((field, value))
    return out


def parse_numa_status(text: str) -> tuple[int | None, str]:
    """(node, status) from `numa_status`: the node None when it is -1 (not a NUMA node).
    Raises ParseError when `Node` or `Status` is missing, repeated or out of range."""
    found: dict[str, list[str]] = {}
    for field, value in _fields(text):
        found.setdefault(field, []).append(value)
    if len(found.get("Node", ())) != 1 or len(found.get("Status", ())) != 1:
        raise parse.ParseError(f"not a numa_status file: {text.strip()[:60]!r}")
    node_text, status = found["Node"][0], found["Status"][0]
    if node_text == "-1":
        return None, status
    node = parse.parse_int(node_text, max_digits=4)
    if not 0 <= node < MAX_NUMNODES:
        raise parse.ParseError(f"numa_status node out of range: {node_text[:20]!r}")
    return node, status


def read_gpu_memory_nodes(
    host: HostReader, gpus: set[PciAddress], problems: Problems
) -> dict[PciAddress, int]:
    """The NUMA node of each GPU in `gpus` (the driver's listing) whose memory is an online
    node. A file that cannot be read or parsed is a Problem; a GPU without one (a discrete
    GPU: the driver writes it only where memory can be onlined) is left out silently."""
    out: dict[PciAddress, int] = {}
    for addr in sorted(gpus):
        path = f"{PROC_NVIDIA_GPUS}/{addr}/numa_status"
        try:
            text = host.read_optional(path, limit=_LIMIT)
        except HostError as err:
            problems.add("read.error", path, f"{type(err).__name__}: {err.detail}")
            continue
        if text is None:
            continue
        try:
            node, status = parse_numa_status(text)
        except parse.ParseError as err:
            problems.add("read.garbage", path, str(err))
            continue
        if node is None:
            continue
        if status != "online":
            problems.add(
                "gpu.memory-node.not-online",
                str(addr),
                f"the driver says GPU memory node {node} is {status[:40]!r}, not online",
            )
            continue
        out[addr] = node
    return out
