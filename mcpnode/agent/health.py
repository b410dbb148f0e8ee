"""What the agent watches for broken hardware between audits: XIDs and SXIDs from the kernel
log, XIDs from NVML's event set, and InfiniBand links that flap (docs/service.md, "Health").

- Kernel log: Host.open_kmsg(). Live, /dev/kmsg is a readable fd in the agent's selectors loop:
  a record wakes the loop, nothing polls. Under a recorded root the log is a regular file,
  always "readable", so it is read on the health timer from where the last read stopped. At
  start the records already in the buffer are read as the backlog (counted, logged once).
- NVML events: nvmlEventSetCreate, nvmlDeviceRegisterEvents(nvmlEventTypeXidCriticalError) per
  GPU. NVML's event set has no file descriptor to select on, so the health timer polls it with
  nvmlEventSetWait_v2(set, 0): a call that returns at once, Timeout when nothing happened, so
  an idle agent costs one NVML call per GPU set per interval and no thread. The driver logs
  every XID it raises an event for, so while the kernel log is readable the NVML events are
  only logged at debug (counting both would count each XID twice); they count when it is not.
- InfiniBand: `counters/link_downed` of every port, read on the health timer; a rise is a flap
  (Azure NHC's check_ib_link_flapping works from the same signal in the syslog).

The agent reacts to each new XID with a metric, a log event and a republish of the manifest
and exporters: the audit inside the publish reads the same log and marks the GPU unhealthy.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from mcpnode.audit.ib import counter, read_ports
from mcpnode.audit.xid import (
    LogRecord,
    SxidEvent,
    XidEvent,
    parse_kmsg_record,
    parse_sxid,
    parse_xid,
)
from mcpnode.errors import HostError
from mcpnode.host import Host, KmsgStream
from mcpnode.topology.model import Topology
from mcpnode.topology.nvml import GpuBackend, NvmlError

EVENT_XID_CRITICAL = 0x8  # nvmlEventTypeXidCriticalError
MAX_EVENTS_PER_POLL = 1000  # a storm of events is read over several intervals, not forever

OnXids = Callable[[list[XidEvent], bool], None]  # events, whether they are the backlog
OnSxids = Callable[[list[SxidEvent], bool], None]
OnFlap = Callable[[str, int, int], None]  # port (mlx5_0/1), link_downed before, after


@dataclass
class NvmlXidEvents:
    """An NVML event set registered for XIDs on every GPU that allows it."""

    backend: GpuBackend
    addresses: dict[int, Any]  # NVML index -> PciAddress
    log: Any
    number: int | None = None
    registered: list[int] = field(default_factory=list)
    reason: str | None = None  # why there is no event set

    def register(self) -> None:
        try:
            self.number = int(self.backend.call("nvmlEventSetCreate"))
        except NvmlError as err:
            self.reason = f"nvmlEventSetCreate: {err.name}"
            return
        refused = []
        for index in sorted(self.addresses):
            try:
                self.backend.call(
                    "nvmlDeviceRegisterEvents", index, EVENT_XID_CRITICAL, self.number
                )
            except NvmlError as err:  # NotSupported (vGPU), NoPermission, GpuIsLost
                refused.append(f"GPU {index}: {err.name}")
                continue
            self.registered.append(index)
        if not self.registered:
            self.reason = "no GPU accepted the XID event: " + ", ".join(refused)
        elif refused:
            self.log.warning("nvml-events.partial", refused=refused)

    def poll(self) -> list[XidEvent]:
        """Every event waiting now (wait with timeout 0: never blocks the loop)."""
        if self.number is None or not self.registered:
            return []
        out = []
        for _ in range(MAX_EVENTS_PER_POLL):
            try:
                got = self.backend.call("nvmlEventSetWait_v2", self.number, 0)
            except NvmlError as err:
                if err.name != "Timeout":
                    self.log.warning("nvml-events.wait-failed", error=err.name)
                break
            try:
                device, kind, data = (
                    int(got["device"]),
                    int(got["eventType"]),
                    int(got["eventData"]),
                )
            except (TypeError, KeyError, ValueError) as err:
                self.log.warning("nvml-events.malformed", error=str(err))
                continue
            address = self.addresses.get(device)
            if kind != EVENT_XID_CRITICAL or address is None:
                continue
            out.append(XidEvent(data, address, None, None, "NVML XID event", "nvml"))
        return out

    def close(self) -> None:
        if self.number is not None:
            with contextlib.suppress(NvmlError):
                self.backend.call("nvmlEventSetFree", self.number)
            self.number = None


class HealthWatch:
    """The agent's watchers; callbacks run on the loop thread."""

    def __init__(
        self,
        host: Host,
        backend: GpuBackend | None,
        topology: Topology,
        log: Any,
        *,
        on_xids: OnXids,
        on_sxids: OnSxids,
        on_flap: OnFlap,
        nvml_events: bool = True,
    ) -> None:
        self.host = host
        self.log = log
        self.on_xids = on_xids
        self.on_sxids = on_sxids
        self.on_flap = on_flap
        self.kmsg: KmsgStream | None = None
        self.kmsg_error: str | None = None
        self.xids: list[XidEvent] = []  # every XID seen, backlog included (for the audit)
        self.nvml_xids: list[XidEvent] = []
        self.link_downed: dict[str, int] = {}
        addresses = {g.nvml.index: g.address for g in topology.gpus if g.nvml is not None}
        self.events: NvmlXidEvents | None = None
        if backend is not None and nvml_events and addresses:
            self.events = NvmlXidEvents(backend, addresses, log)

    # -- start --------------------------------------------------------------------------------

    def start(self) -> int | None:
        """Open the sources and read the backlog. Returns the kernel log's fd for the loop to
        wait on (None: polled on the timer, or unavailable)."""
        try:
            self.kmsg = self.host.open_kmsg()
        except HostError as err:
            self.kmsg_error = f"{type(err).__name__}: {err.detail}"
            self.log.warning("kmsg.unavailable", path=err.path, error=self.kmsg_error)
        else:
            self._read_kmsg(backlog=True)
        if self.events is not None:
            self.events.register()
            if self.events.reason is not None:
                self.log.info("nvml-events.unavailable", reason=self.events.reason)
        self.poll_ib(initial=True)
        return self.kmsg.fileno() if self.kmsg is not None else None

    # -- reading ------------------------------------------------------------------------------

    def on_kmsg_readable(self) -> None:
        self._read_kmsg(backlog=False)

    def poll(self) -> None:
        """The health timer: a kernel log file, the NVML event set, the IB counters."""
        if self.kmsg is not None and self.kmsg.fileno() is None:
            self._read_kmsg(backlog=False)
        self.poll_nvml()
        self.poll_ib()

    def _read_kmsg(self, backlog: bool) -> None:
        assert self.kmsg is not None
        try:
            got = self.kmsg.read_new()
        except HostError as err:
            self.log.error("kmsg.read-failed", error=f"{type(err).__name__}: {err.detail}")
            return
        if got.overwritten:
            self.log.warning("kmsg.overwritten", times=got.overwritten)
        records: list[LogRecord] = [r for r in map(parse_kmsg_record, got.records) if r is not None]
        xids = [x for x in (parse_xid(r) for r in records) if x is not None]
        sxids = [x for x in map(parse_sxid, records) if x is not None]
        if xids:
            self.xids.extend(xids)
            self.on_xids(xids, backlog)
        if sxids:
            self.on_sxids(sxids, backlog)

    def poll_nvml(self) -> None:
        if self.events is None:
            return
        got = self.events.poll()
        if not got:
            return
        if self.kmsg is not None:
            for e in got:  # the kernel log carries the same XID: counted from there
                self.log.debug("nvml.xid", gpu=str(e.address), xid=e.xid)
            return
        self.nvml_xids.extend(got)
        self.on_xids(got, False)

    def poll_ib(self, initial: bool = False) -> None:
        for port in read_ports(self.host).ports:
            value = counter(dict(port.counters)["link_downed"])
            if value is None:
                continue
            before = self.link_downed.get(port.name)
            self.link_downed[port.name] = value
            if not initial and before is not None and value > before:
                self.on_flap(port.name, before, value)

    def close(self) -> None:
        if self.kmsg is not None:
            self.kmsg.close()
            self.kmsg = None
        if self.events is not None:
            self.events.close()


class AgentHealth:
    """The agent's side of the watchers: the health timer, the kernel log's fd on the loop, and
    what each event becomes (metrics, a log event, a republish). Service.py holds one."""

    def __init__(
        self,
        host: Host,
        loop: Any,
        log: Any,
        metrics: Any,
        *,
        interval: float,
        nvml_events: bool,
        publish: Callable[[str], None],
        schedule: Callable[[str, float, Callable[[], None]], None],
    ) -> None:
        self.host = host
        self.loop = loop
        self.log = log
        self.metrics = metrics
        self.interval = interval
        self.nvml_events = nvml_events
        self.publish = publish
        self.schedule = schedule
        self.watch: HealthWatch | None = None
        self._fd: int | None = None

    def start(self, backend: GpuBackend | None, topology: Topology) -> None:
        self.watch = HealthWatch(
            self.host,
            backend,
            topology,
            self.log,
            on_xids=self._on_xids,
            on_sxids=self._on_sxids,
            on_flap=self._on_flap,
            nvml_events=self.nvml_events,
        )
        self._fd = self.watch.start()
        if self._fd is not None:
            self.loop.add_reader(self._fd, self.watch.on_kmsg_readable, "kmsg")
        self._set_link_gauges()
        self.schedule("health", self.interval, self._tick)

    def restart(self, backend: GpuBackend | None, topology: Topology) -> None:
        """After a rediscovery: the NVML backend was reopened (its event set is gone) and the
        GPUs may have changed. The kernel log keeps its position: no XID is counted twice."""
        if self.watch is None:
            return
        old = self.watch
        # The old event set went with the old backend (the agent closed it before opening the
        # new one): drop it without a call, which would bring the closed NVML back up.
        addresses = {g.nvml.index: g.address for g in topology.gpus if g.nvml is not None}
        old.events = None
        if backend is not None and self.nvml_events and addresses:
            old.events = NvmlXidEvents(backend, addresses, self.log)
            old.events.register()

    def observed_xids(self) -> tuple[XidEvent, ...]:
        """XIDs only NVML's events reported (the kernel log unreadable): for the audit."""
        return tuple(self.watch.nvml_xids) if self.watch is not None else ()

    def _tick(self) -> None:
        try:
            if self.watch is not None:
                self.watch.poll()
                self._set_link_gauges()
        finally:
            self.schedule("health", self.interval, self._tick)

    def _set_link_gauges(self) -> None:
        if self.watch is not None:
            for port, value in self.watch.link_downed.items():
                self.metrics.set_ib_link_downed(port, value)

    def _on_xids(self, events: list[XidEvent], backlog: bool) -> None:
        from mcpnode.audit.xid import since_boot

        for e in events:
            self.metrics.count_xid(str(e.address), e.xid)
        if backlog:
            seen = sorted({(str(e.address), e.xid) for e in events})
            self.log.warning(
                "gpu.xid.backlog",
                count=len(events),
                xids=[f"{gpu} Xid {xid}" for gpu, xid in seen],
                hint="XIDs logged since boot, before the agent started: see `mcpnode audit`",
            )
            return
        for e in events:
            info = e.info
            (self.log.error if e.fatal else self.log.warning)(
                "gpu.xid",
                gpu=str(e.address),
                xid=e.xid,
                name=info.name,
                cause=info.cause,
                action=e.action,
                source=e.source,
                since_boot=since_boot(e.usec),
                detail=e.detail[:200],
            )
        self.publish("xid")

    def _on_sxids(self, events: list[SxidEvent], backlog: bool) -> None:
        for e in events:
            self.metrics.count_sxid(str(e.switch), e.sxid)
        if backlog:
            self.log.warning("gpu.sxid.backlog", count=len(events))
            return
        for e in events:
            (self.log.error if e.severity == "fatal" else self.log.warning)(
                "gpu.sxid",
                switch=str(e.switch),
                sxid=e.sxid,
                severity=e.severity,
                detail=e.detail[:200],
            )
        self.publish("sxid")

    def _on_flap(self, port: str, before: int, after: int) -> None:
        self.metrics.count_ib_flap(port, after - before)
        self.log.warning(
            "ib.link-flap",
            port=port,
            link_downed_before=before,
            link_downed=after,
            hint="the link went down and came back: check the cable and the switch port",
        )
        self.publish("ib-flap")

    def close(self) -> None:
        if self._fd is not None:
            self.loop.remove_reader(self._fd)
            self._fd = None
        if self.watch is not None:
            self.watch.close()
            self.watch = None
