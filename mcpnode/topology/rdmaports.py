"""The ports of each NIC's RDMA devices: state, rate and link layer, for the tree and the JSON.

`/sys/class/infiniband/<dev>/ports/<n>/` (Documentation/ABI/stable/sysfs-class-infiniband):
`state` is `<number>: <NAME>` (`4: ACTIVE`), `rate` `<Gb/s> Gb/sec (<width><speed>)` (`400
Gb/sec (4X NDR)`), `link_layer` `InfiniBand` or `Ethernet` (RoCE). Each value is checked
against that shape and bounded; anything else is None with a problem naming the file. At most
MAX_PORTS ports per device are read (a ConnectX function has one, a switch ASIC up to 129).
"""

from __future__ import annotations

from mcpnode.codec.bounded import is_digits
from mcpnode.codec.record import replace
from mcpnode.errors import HostError, PathNotFound
from mcpnode.topology import parse
from mcpnode.topology.attrs import attr_parsed, read_attrs
from mcpnode.topology.model import Nic, RdmaPort
from mcpnode.topology.sysfs import SYS_CLASS_IB, Problems

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy reads it the same)
if TYPE_CHECKING:
    from collections.abc import Callable

    from mcpnode.host import HostReader

MAX_PORTS = 256
_ATTRS = frozenset({"state", "rate", "link_layer"})
_STATE_NAME = "ABCDEFGHIJKLMNOPQRSTUVWXYZ_"
_RATE_DETAIL = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz ."
_LAYERS = frozenset({"InfiniBand", "Ethernet", "Unknown"})


def _is_port_dir(name: str) -> bool:
    """`1` to `999`, no leading zero: the former pattern `[1-9][0-9]{0,2}`, fullmatched."""
    return is_digits(name, 1, 3) and name[0] != "0"


def _state(text: str) -> str | None:
    """`4: ACTIVE` -> `ACTIVE`: the former pattern `[0-9]{1,2}: ([A-Z_]{1,24})`, fullmatched."""
    number, sep, name = text.partition(": ")
    if sep and is_digits(number, 1, 2) and 1 <= len(name) <= 24 and not name.strip(_STATE_NAME):
        return name
    return None


def _rate(text: str) -> str | None:
    """`400 Gb/sec (4X NDR)`, itself: the former pattern
    `[0-9]{1,5}(?:\\.[0-9]{1,3})? Gb/sec(?: \\([0-9A-Za-z .]{1,24}\\))?`, fullmatched. Every
    character it takes is ASCII, so once the text is, str.isdigit() is `[0-9]`. Read once per
    RDMA port (three file reads): about twice the compiled pattern's time, a third of a µs."""
    if not text.isascii():
        return None
    number, unit, detail = text.partition(" Gb/sec")
    whole, dot, fraction = number.partition(".")
    if not (
        unit
        and whole.isdigit()
        and len(whole) <= 5
        and (not dot or (fraction.isdigit() and len(fraction) <= 3))
    ):
        return None
    inner = detail[2:-1]
    if detail and not (
        detail.startswith(" (")
        and detail.endswith(")")
        and 1 <= len(inner) <= 24
        and not inner.strip(_RATE_DETAIL)
    ):
        return None
    return text


def _layer(text: str) -> str | None:
    """`InfiniBand`, `Ethernet` or `Unknown`, itself."""
    return text if text in _LAYERS else None


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
    numbers = sorted(int(n) for n in names if _is_port_dir(n))
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


def _shaped(shape: Callable[[str], str | None], what: str) -> Callable[[str], str]:
    """A parser: what `shape` takes of the stripped text, which must have its shape."""

    def parse_value(text: str) -> str:
        value = shape(text.strip())
        if value is None:
            raise parse.ParseError(f"not a port {what}: {text.strip()[:40]!r}")
        return value

    return parse_value


_PARSE_STATE = _shaped(_state, "state")
_PARSE_RATE = _shaped(_rate, "rate")
_PARSE_LAYER = _shaped(_layer, "link layer")
