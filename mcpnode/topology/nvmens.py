"""The block devices below each NVMe controller, with their sizes, for the tree and the JSON.

A namespace's block device is a directory of the controller's (`<pci function>/nvme/nvme0/
nvme0n1`) or, with native NVMe multipath (CONFIG_NVME_MULTIPATH, the default on most
distributions), a hidden path device `nvme0c0n1` there beside the visible `nvme0n1` in
`/sys/devices/virtual/nvme-subsystem/`; the path device is reported under the visible name.
`size` is in 512-byte sectors whatever the LBA format (Documentation/ABI/stable/sysfs-block).
At most MAX_NAMESPACES per controller; a size that is not a bounded decimal is None with a
problem naming the file.
"""

from __future__ import annotations

import re

from mcpnode.codec.record import replace
from mcpnode.errors import HostError, PathNotFound
from mcpnode.host import HostReader
from mcpnode.topology import parse
from mcpnode.topology.model import Nvme, NvmeNamespace, PciAddress, PciDevice
from mcpnode.topology.sysfs import Problems, read_parsed

MAX_NAMESPACES = 256
_NS_DIR = re.compile(r"(nvme[0-9]{1,5})(?:c[0-9]{1,5})?(n[0-9]{1,5})", re.ASCII)


def read_namespaces(
    host: HostReader,
    nvmes: tuple[Nvme, ...],
    devices: dict[PciAddress, PciDevice],
    problems: Problems,
) -> tuple[Nvme, ...]:
    """`nvmes` with their block devices. Never raises for content."""
    out = []
    for nv in nvmes:
        dev = devices.get(nv.address)
        if dev is None:
            out.append(nv)
            continue
        base = f"{dev.sysfs_path}/nvme/{nv.controller}"
        try:
            names = host.listdir(base)
        except PathNotFound:
            out.append(nv)
            continue
        except HostError as err:
            problems.add("nvme.unreadable", base, f"{type(err).__name__}: {err.detail}")
            out.append(nv)
            continue
        found: dict[str, NvmeNamespace] = {}
        for name in sorted(names):
            m = _NS_DIR.fullmatch(name)
            if m is None or len(found) >= MAX_NAMESPACES:
                continue
            sectors = read_parsed(host, f"{base}/{name}/size", parse.parse_int, problems)
            if sectors is not None and sectors < 0:
                problems.add("read.garbage", f"{base}/{name}/size", "a negative size")
                sectors = None
            shown = m.group(1) + m.group(2)
            found.setdefault(
                shown, NvmeNamespace(shown, None if sectors is None else sectors * 512)
            )
        namespaces = tuple(sorted(found.values(), key=lambda n: _key(n.name)))
        out.append(replace(nv, namespaces=namespaces) if namespaces else nv)
    return tuple(out)


def _key(name: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"[0-9]+", name))
