"""The ports of each NIC's RDMA devices: state, rate and link layer, for the tree and the JSON.

`/sys/class/infiniband/<dev>/ports/<n>/` (Documentation/ABI/stable/sysfs-class-infiniband):
`state` is `<number>: <NAME>` (`4: ACTIVE`), `rate` `<Gb/s> Gb/sec (<width><speed>)` (`400
Gb/sec (4X NDR)`), `link_layer` `InfiniBand` or `Ethernet` (RoCE). Each value is checked
against that shape and bounded; anything else is None with a problem naming the file. At most
MAX_PORTS ports per device are read (a ConnectX function has one, a switch ASIC up to 129).
"""

from __future__ import annotations

import re

from mcpnode.codec.record import replace
from mcpnode.errors import HostError, PathNotFound
from mcpnode.host import HostReader
from mcpnode.topology.model import Nic, RdmaPort
from mcpnode.topology.sysfs import SYS_CLASS_IB, Problems

MAX_PORTS = 256
_ATTRS = frozenset({"state", "rate", "link_layer"})
_PORT_DIR = re.compile(r"[1-9][0-9]{0,2}", re.ASCII)
_STATE = re.compile(r"[0-9]{1,2}: ([A-Z_]{1,24})", re.ASCII)
_RATE = re.compile(r"[0-9]{1,5}(?:\.[0-9]{1,3})? Gb/sec(?: \([0-9A-Za-z .]{1,24}\))?", re.ASCII)
_LAYERS = frozenset({"InfiniBand", "Ethernet", "Unknown"})


def read_rdma_ports(host: HostReader, nics: tuple[Nic, ...], problems: Problems) -> tuple[Nic, ...]:
    """`nics` with the ports of their RDMA devices. Never raises for content."""
    out = []
    for nic in nics:
        ports = [p for dev in nic.rdma_devices for p in _ports(host, dev, problems)]
        out.append(replace(nic, rdma_ports=tuple(ports)) if ports else nic)
    return tuple(out)


def _ports(host: HostReader, device: str, problems: Problems) -> list[RdmaPort]:
    base = f"{SYS_CLASS_IB}/{device}/ports"
    try:
        names = host.listdir(base)
    except PathNotFound:
        return []
    except HostError as err:
        problems.add("rdma.port.unreadable", base, f"{type(err).__name__}: {err.detail}")
        return []
    numbers = sorted(int(n) for n in names if _PORT_DIR.fullmatch(n))
    if len(numbers) > MAX_PORTS:
        problems.add(
            "rdma.port.too-many", base, f"{len(numbers)} ports; read the first {MAX_PORTS}"
        )
        numbers = numbers[:MAX_PORTS]
    out = []
    for n in numbers:
        path = f"{base}/{n}"
        try:
            attrs = host.read_directory(path, _ATTRS)[0]
        except HostError as err:
            problems.add("rdma.port.unreadable", path, f"{type(err).__name__}: {err.detail}")
            continue
        state = _value(path, attrs, "state", problems, _STATE)
        rate = _value(path, attrs, "rate", problems, _RATE)
        layer = _value(path, attrs, "link_layer", problems, None)
        if layer is not None and layer not in _LAYERS:
            problems.add("read.garbage", f"{path}/link_layer", f"not a link layer: {layer[:40]!r}")
            layer = None
        out.append(RdmaPort(device, n, state, rate, layer))
    return out


def _value(
    path: str,
    attrs: dict[str, str | HostError],
    name: str,
    problems: Problems,
    shape: re.Pattern[str] | None,
) -> str | None:
    got = attrs.get(name)
    if got is None:
        return None
    if isinstance(got, HostError):
        problems.add("read.error", f"{path}/{name}", f"{type(got).__name__}: {got.detail}")
        return None
    text = got.split("\x00", 1)[0].strip()
    if shape is None:
        return text if len(text) <= 40 else text[:40]
    m = shape.fullmatch(text)
    if m is None:
        problems.add("read.garbage", f"{path}/{name}", f"not a port {name}: {text[:40]!r}")
        return None
    return m.group(1) if m.groups() else text
