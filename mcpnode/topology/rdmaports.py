"""The ports of each NIC's RDMA devices: state, rate and link layer, for the tree and the JSON.

`/sys/class/infiniband/<dev>/ports/<n>/` (Documentation/ABI/stable/sysfs-class-infiniband):
`state` is `<number>: <NAME>` (`4: ACTIVE`), `rate` `<Gb/s> Gb/sec (<width><speed>)` (`400
Gb/sec (4X NDR)`), `link_layer` `InfiniBand` or `Ethernet` (RoCE). Each value is checked
against that shape and bounded; anything else is None with a problem naming the file. At most
MAX_PORTS ports per device are read (a ConnectX function has one, a switch ASIC up to 129).
"""

from __future__ import annotations

import re
from collections.abc import Callable

from mcpnode.codec.record import replace
from mcpnode.errors import HostError, PathNotFound
from mcpnode.host import HostReader
from mcpnode.topology import parse
from mcpnode.topology.attrs import attr_parsed, read_attrs
from mcpnode.topology.model import Nic, RdmaPort
from mcpnode.topology.sysfs import SYS_CLASS_IB, Problems

MAX_PORTS = 256
_ATTRS = frozenset({"state", "rate", "link_layer"})
_PORT_DIR = re.compile(r"[1-9][0-9]{0,2}", re.ASCII)
_STATE = re.compile(r"[0-9]{1,2}: ([A-Z_]{1,24})", re.ASCII)
_RATE = re.compile(r"[0-9]{1,5}(?:\.[0-9]{1,3})? Gb/sec(?: \([0-9A-Za-z .]{1,24}\))?", re.ASCII)
_LAYER = re.compile(r"InfiniBand|Ethernet|Unknown", re.ASCII)


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
        attrs = read_attrs(host, path, _ATTRS, problems, "rdma.port.unreadable")
        if attrs is None:
            continue
        state = attr_parsed(path, attrs, "state", _PARSE_STATE, problems)
        rate = attr_parsed(path, attrs, "rate", _PARSE_RATE, problems)
        layer = attr_parsed(path, attrs, "link_layer", _PARSE_LAYER, problems)
        out.append(RdmaPort(device, n, state, rate, layer))
    return out


def _shaped(shape: re.Pattern[str], what: str) -> Callable[[str], str]:
    """A parser: the stripped text when it has `shape` (its first group when it has one)."""

    def parse_value(text: str) -> str:
        m = shape.fullmatch(text.strip())
        if m is None:
            raise parse.ParseError(f"not a port {what}: {text.strip()[:40]!r}")
        return m.group(1) if m.groups() else m.group(0)

    return parse_value


_PARSE_STATE = _shaped(_STATE, "state")
_PARSE_RATE = _shaped(_RATE, "rate")
_PARSE_LAYER = _shaped(_LAYER, "link layer")
