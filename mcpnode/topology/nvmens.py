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

from mcpnode.codec.bounded import is_digits
from mcpnode.codec.record import replace
from mcpnode.errors import HostError, PathNotFound
from mcpnode.topology import parse
from mcpnode.topology.model import Nvme, NvmeNamespace, PciAddress, PciDevice
from mcpnode.topology.sysfs import Problems, read_parsed

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (codec/typenames.py)
if TYPE_CHECKING:
    from mcpnode.host import HostReader

MAX_NAMESPACES = 256


def _shown(name: str) -> str | None:
    """The visible name `nvme<C>n<N>` of a block device directory: itself, or that of the
    multipath path device `nvme<C>c<P>n<N>` (each number 1 to 5 ASCII digits, as written);
    None for anything else. The former pattern `(nvme[0-9]{1,5})(?:c[0-9]{1,5})?(n[0-9]{1,5})`,
    fullmatched, its two groups joined."""
    if not name.startswith("nvme"):
        return None
    head, n, namespace = name[4:].partition("n")
    controller, c, path = head.partition("c")
    if (
        n
        and is_digits(controller, 1, 5)
        and (not c or is_digits(path, 1, 5))
        and is_digits(namespace, 1, 5)
    ):
        return f"nvme{controller}n{namespace}"
    return None


def _key(shown: str) -> tuple[int, int]:
    """A visible name's (controller, namespace) numbers, for their order."""
    controller, _, namespace = shown[4:].partition("n")
    return int(controller), int(namespace)


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
            shown = _shown(name)
            if shown is None or len(found) >= MAX_NAMESPACES:
                continue
            sectors = read_parsed(host, f"{base}/{name}/size", parse.parse_int, problems)
            if sectors is not None and sectors < 0:
                problems.add("read.garbage", f"{base}/{name}/size", "a negative size")
                sectors = None
            found.setdefault(
                shown, NvmeNamespace(shown, None if sectors is None else sectors * 512)
            )
        namespaces = tuple(sorted(found.values(), key=lambda n: _key(n.name)))
        out.append(replace(nv, namespaces=namespaces) if namespaces else nv)
    return tuple(out)
