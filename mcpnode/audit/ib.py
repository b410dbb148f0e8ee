"""InfiniBand and RoCE ports, from /sys/class/infiniband/<dev>/ports/<n>/ (the kernel's
ib_core sysfs, Documentation/ABI/stable/sysfs-class-infiniband):

- `state` `4: ACTIVE` and `phys_state` `5: LinkUp`, else FAIL (NHC's check_hw_ib fails a port
  that is not ACTIVE and LinkUp);
- `rate` (`400 Gb/sec (4X NDR)`) at the expected rate: the [expect] nic_rate_gbps when given
  (NHC's check_hw_ib takes the rate per port), else the fastest port of the same HCA model on
  this host; slower FAILs (a cable or switch port trained down);
- `counters/link_downed` > 0: WARN: the link went down and came back since the counter was
  cleared (NHC's check_ib_link_flapping; the agent turns a rising count into a metric);
- `counters/link_error_recovery`, `symbol_error`, `port_rcv_errors` > 0: WARN (a marginal
  cable or transceiver: the physical layer retrains or drops packets).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from mcpnode.audit import paths
from mcpnode.audit.context import AuditContext
from mcpnode.audit.facts import FileRead, file_evidence, list_dir, read_file
from mcpnode.audit.model import Evidence, Finding, Status, skipped
from mcpnode.host import HostReader

COUNTERS = ("link_downed", "link_error_recovery", "symbol_error", "port_rcv_errors")
_RATE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*Gb/sec")


@dataclass(frozen=True)
class Port:
    device: str  # mlx5_0
    port: str  # 1
    hca_type: str | None
    state: FileRead
    phys_state: FileRead
    rate: FileRead
    link_layer: FileRead
    counters: tuple[tuple[str, FileRead], ...]

    @property
    def name(self) -> str:
        return f"{self.device}/{self.port}"

    @property
    def base(self) -> str:
        return f"{paths.INFINIBAND_CLASS}/{self.device}/ports/{self.port}"


@dataclass(frozen=True)
class IbFacts:
    ports: tuple[Port, ...]
    listed: bool  # the class directory exists


def rate_gbps(text: str | None) -> float | None:
    """`400 Gb/sec (4X NDR)` -> 400.0; None for anything else."""
    m = _RATE.match(text or "")
    return float(m.group(1)) if m else None


def read_ports(host: HostReader) -> IbFacts:
    """Every port of every RDMA device, read through `host`; never raises."""
    devices = list_dir(host, paths.INFINIBAND_CLASS)
    ports = []
    for dev in devices or ():
        base = f"{paths.INFINIBAND_CLASS}/{dev}"
        hca = read_file(host, f"{base}/hca_type").text
        for port in list_dir(host, f"{base}/ports") or ():
            p = f"{base}/ports/{port}"
            ports.append(
                Port(
                    dev,
                    port,
                    hca.strip() if hca else None,
                    read_file(host, f"{p}/state"),
                    read_file(host, f"{p}/phys_state"),
                    read_file(host, f"{p}/rate"),
                    read_file(host, f"{p}/link_layer"),
                    tuple((c, read_file(host, f"{p}/counters/{c}")) for c in COUNTERS),
                )
            )
    return IbFacts(tuple(ports), devices is not None)


def read_port_counter(host: HostReader, name: str) -> list[tuple[str, FileRead]]:
    """One counter (`link_downed`) of every port of every RDMA device, as (`mlx5_0/1`, its
    read): what the agent's health timer watches, without the state, rate and other counters
    read_ports takes for the audit. Never raises."""
    out = []
    for dev in list_dir(host, paths.INFINIBAND_CLASS) or ():
        base = f"{paths.INFINIBAND_CLASS}/{dev}/ports"
        for port in list_dir(host, base) or ():
            out.append((f"{dev}/{port}", read_file(host, f"{base}/{port}/counters/{name}")))
    return out


def collect(host: HostReader, ctx: AuditContext) -> IbFacts:
    del ctx
    return read_ports(host)


def counter(read: FileRead) -> int | None:
    text = (read.text or "").strip()
    # A counter is a u64 (20 digits); ASCII only: str.isdigit() is also true of `²`.
    return int(text) if text.isascii() and text.isdigit() and len(text) <= 20 else None


def check(facts: IbFacts, ctx: AuditContext) -> list[Finding]:
    if not facts.ports:
        return skipped(
            "ib.port.state",
            "InfiniBand/RoCE ports not checked: no RDMA device on this host",
            Evidence(paths.INFINIBAND_CLASS, "absent" if not facts.listed else "empty"),
        )
    want = ctx.expect.nic_rate_gbps if ctx.expect is not None else None
    fastest: dict[str | None, float] = {}
    for p in facts.ports:
        r = rate_gbps(p.rate.text)
        if r is not None:
            fastest[p.hca_type] = max(fastest.get(p.hca_type, 0.0), r)
    out: list[Finding] = []
    for p in facts.ports:
        out.append(_state(p))
        out.append(_rate(p, want, fastest.get(p.hca_type)))
        out.extend(_counters(p))
    return out


def _first(read: FileRead) -> str:
    return (read.text or "").strip()


def _state(p: Port) -> Finding:
    fid = "ib.port.state"
    if p.state.text is None or p.phys_state.text is None:
        bad = p.state if p.state.text is None else p.phys_state
        return Finding(
            fid,
            Status.FAIL,
            f"{p.name}: port state not readable ({bad.path}: "
            f"{'absent' if bad.missing else bad.error})",
            (file_evidence(bad),),
            f"Check `ibstat {p.device} {p.port}`",
            p.name,
        )
    state, phys = _first(p.state), _first(p.phys_state)
    layer = _first(p.link_layer) or "link layer unknown"
    ev = (
        Evidence(f"{p.base}/state", state),
        Evidence(f"{p.base}/phys_state", phys),
        Evidence(f"{p.base}/link_layer", layer),
    )
    if state.endswith("ACTIVE") and phys.endswith("LinkUp"):
        return Finding(fid, Status.PASS, f"{p.name}: ACTIVE, LinkUp ({layer})", ev, None, p.name)
    return Finding(
        fid,
        Status.FAIL,
        f"{p.name}: port is {state or 'state unknown'} / {phys or 'phys_state unknown'}, not "
        f"ACTIVE / LinkUp ({layer}): "
        "no RDMA traffic through it",
        ev,
        f"`ibstat {p.device} {p.port}`; check the cable and the switch port; INIT or ARMED "
        "means no subnet manager configured the port (opensm, the fabric's UFM)",
        p.name,
    )


def _rate(p: Port, want: float | None, fastest: float | None) -> Finding:
    fid = "ib.port.rate"
    got = rate_gbps(p.rate.text)
    ev = [file_evidence(p.rate)]
    if got is None:
        return Finding(
            fid,
            Status.FAIL,
            f"{p.name}: port rate not readable or not understood",
            tuple(ev),
            f"`ibstat {p.device} {p.port}` (Rate)",
            p.name,
        )
    if want is not None:
        ev.append(Evidence("[expect] nic_rate_gbps", f"{want:g}"))
        expected, source = want, "expected"
    else:
        expected, source = fastest or got, f"the fastest {p.hca_type or 'port'} here"
        ev.append(Evidence("compared with", f"{source}: {expected:g} Gb/sec"))
    if got < expected:
        return Finding(
            fid,
            Status.FAIL,
            f"{p.name}: {got:g} Gb/sec, below {source} {expected:g} Gb/sec: the link trained "
            "down (cable, transceiver or switch port)",
            tuple(ev),
            f"`mlxlink -d {p.device} -p {p.port}` shows the negotiated speed and width; reseat "
            "or replace the cable or transceiver",
            p.name,
        )
    return Finding(fid, Status.PASS, f"{p.name}: {_first(p.rate)}", tuple(ev), None, p.name)


def _counters(p: Port) -> list[Finding]:
    values = {name: counter(read) for name, read in p.counters}
    ev = tuple(
        Evidence(f"{p.base}/counters/{name}", str(v) if v is not None else "absent")
        for name, v in values.items()
    )
    out = []
    downed = values.get("link_downed")
    if downed is None:
        out.append(
            Finding(
                "ib.port.link_downed",
                Status.SKIP,
                f"{p.name}: link flaps not checked: counters/link_downed not readable",
                ev[:1],
                None,
                p.name,
            )
        )
    elif downed > 0:
        out.append(
            Finding(
                "ib.port.link_downed",
                Status.WARN,
                f"{p.name}: the link went down {downed} time(s) since its counters were "
                "cleared (flapping)",
                ev[:1],
                f"`journalctl -k | grep -i '{p.device}'` for when; check the cable and the "
                f"switch port; `perfquery -x` (or mlxlink -d {p.device} -c) for the error "
                "counters",
                p.name,
            )
        )
    else:
        out.append(
            Finding(
                "ib.port.link_downed", Status.PASS, f"{p.name}: no link flap", ev[:1], None, p.name
            )
        )
    errors = {k: v for k, v in values.items() if k != "link_downed" and v}
    if errors:
        listed = ", ".join(f"{k}={v}" for k, v in errors.items())
        out.append(
            Finding(
                "ib.port.errors",
                Status.WARN,
                f"{p.name}: physical-layer errors since the counters were cleared ({listed})",
                ev[1:],
                f"Check the cable/transceiver: `mlxlink -d {p.device} -p {p.port} -c -e` "
                "(BER, FEC); replace it if the counters keep rising",
                p.name,
            )
        )
    else:
        out.append(
            Finding(
                "ib.port.errors",
                Status.PASS,
                f"{p.name}: no physical-layer errors",
                ev[1:],
                None,
                p.name,
            )
        )
    return out
