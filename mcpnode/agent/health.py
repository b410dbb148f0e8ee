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

A log is whatever its writers make it, so the watcher is bounded in each direction: the kernel
log is read KMSG_BATCH_BYTES at a time, and the loop runs its other sources (the watchdog's
timer among them) before the next batch; a record whose numbers no kernel writes is skipped and
counted, never a traceback; no event is kept once counted (NVML's stand-ins for the audit: the
newest MAX_NVML_XIDS_KEPT); per batch at most LOG_XIDS_PER_BATCH XIDs are logged one by one and
the rest in one summary of at most LOG_KINDS distinct GPU x XID pairs; and republishing for
new XIDs happens at most once per PUBLISH_SPACING_S.
"""

from __future__ import annotations

import collections
import contextlib
from collections.abc import Callable, Iterable
from dataclasses import KW_ONLY, InitVar, dataclass, field

from mcpnode.agent.part import AgentPart
from mcpnode.audit.ib import counter, read_port_counter
from mcpnode.audit.xid import (
    LogRecord,
    SxidEvent,
    XidEvent,
    parse_kmsg_record,
    parse_sxid,
    parse_xid,
)
from mcpnode.errors import HostError
from mcpnode.host import KMSG_MAX_BYTES, Host, KmsgStream
from mcpnode.logs import EventLog
from mcpnode.topology.model import NVIDIA_VENDOR_ID, PciAddress, Topology
from mcpnode.topology.nvml import GpuBackend, NvmlError

EVENT_XID_CRITICAL = 0x8  # nvmlEventTypeXidCriticalError
NVSWITCH_CLASS = 0x0680  # "bridge, other": NVSwitch (as audit/gpu_xid.py counts them)
MAX_EVENTS_PER_POLL = 1000  # a storm of events is read over several intervals, not forever
# What one turn of the loop reads of the kernel log: a few thousand records, tens of ms of
# parsing, well inside any watchdog interval.
KMSG_BATCH_BYTES = 128 << 10
# The driver's XID is a 32-bit number (NvU32 in nvRmXidRecord; the Xid catalog's run to ~160).
XID_MAX = (1 << 32) - 1
MAX_NVML_XIDS_KEPT = 4096
LOG_XIDS_PER_BATCH = 20
LOG_KINDS = 32
PUBLISH_SPACING_S = 1.0

OnXids = Callable[[list[XidEvent], bool], None]  # events, whether they are the backlog
OnSxids = Callable[[list[SxidEvent], bool], None]
OnFlap = Callable[[str, int, int], None]  # port (mlx5_0/1), link_downed before, after


def parse_records(records: Iterable[str]) -> tuple[list[XidEvent], list[SxidEvent], int]:
    """The XIDs and SXIDs of kernel log records, and how many records were skipped: a number
    past Python's int() bound (4,300 digits, a ValueError) or an XID past 32 bits."""
    xids: list[XidEvent] = []
    sxids: list[SxidEvent] = []
    skipped = 0
    for text in records:
        try:
            record: LogRecord | None = parse_kmsg_record(text)
            if record is None:
                continue
            xid = parse_xid(record)
            sxid = parse_sxid(record)
        except ValueError:
            skipped += 1
            continue
        if xid is not None:
            if not 0 <= xid.xid <= XID_MAX:
                skipped += 1
                continue
            xids.append(xid)
        if sxid is not None:
            if not 0 <= sxid.sxid <= XID_MAX:
                skipped += 1
                continue
            sxids.append(sxid)
    return xids, sxids, skipped


@dataclass
class NvmlXidEvents:
    """An NVML event set registered for XIDs on every GPU that allows it."""

    backend: GpuBackend
    addresses: dict[int, PciAddress]  # NVML index -> the GPU's PCI address
    log: EventLog
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


@dataclass(eq=False)
class HealthWatch:
    """The agent's watchers; callbacks run on the loop thread. `backend`, `topology` and
    `nvml_events` decide at construction whether NVML's XID events are watched."""

    host: Host
    backend: InitVar[GpuBackend | None]
    topology: InitVar[Topology]
    log: EventLog
    _: KW_ONLY
    on_xids: OnXids
    on_sxids: OnSxids
    on_flap: OnFlap
    nvml_events: InitVar[bool] = True

    def __post_init__(
        self, backend: GpuBackend | None, topology: Topology, nvml_events: bool
    ) -> None:
        self.kmsg: KmsgStream | None = None
        self.kmsg_error: str | None = None
        self.skipped = 0  # kernel log records skipped: numbers past their bounds
        self.kmsg_more = False  # the last batch left records waiting
        # XIDs from NVML's events, for the audit when the log cannot be read: the newest only
        self.nvml_xids: collections.deque[XidEvent] = collections.deque(maxlen=MAX_NVML_XIDS_KEPT)
        self.link_downed: dict[str, int] = {}
        addresses = {g.nvml.index: g.address for g in topology.gpus if g.nvml is not None}
        self.events: NvmlXidEvents | None = None
        if backend is not None and nvml_events and addresses:
            self.events = NvmlXidEvents(backend, addresses, self.log)

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
            # The backlog before READY (systemd's watchdog starts once start-up completed),
            # batch by batch so that memory holds one batch; bounded as read_kmsg is.
            for _ in range(KMSG_MAX_BYTES // KMSG_BATCH_BYTES + 1):
                if not self.read_kmsg_batch(backlog=True):
                    break
        if self.events is not None:
            self.events.register()
            if self.events.reason is not None:
                self.log.info("nvml-events.unavailable", reason=self.events.reason)
        self.poll_ib(initial=True)
        return self.kmsg.fileno() if self.kmsg is not None else None

    # -- reading ------------------------------------------------------------------------------

    def on_kmsg_readable(self) -> None:
        """The live log's fd is readable: one batch. With more waiting the fd stays readable
        and the selector comes back to it after the loop's other sources and due timers."""
        self.read_kmsg_batch(backlog=False)

    def poll(self) -> bool:
        """The health timer: a kernel log file, the NVML event set, the IB counters. True when
        the log file has more records waiting than one batch took (read_kmsg_batch again)."""
        more = False
        if self.kmsg is not None and self.kmsg.fileno() is None:
            more = self.read_kmsg_batch(backlog=False)
        self.poll_nvml()
        self.poll_ib()
        return more

    def read_kmsg_batch(self, backlog: bool) -> bool:
        """Read and handle one batch of the kernel log; True when more is waiting."""
        if self.kmsg is None:
            return False
        try:
            got = self.kmsg.read_new(batch_bytes=KMSG_BATCH_BYTES)
        except HostError as err:
            self.log.error("kmsg.read-failed", error=f"{type(err).__name__}: {err.detail}")
            return False
        self.kmsg_more = got.more
        if got.truncated:
            self.log.warning(
                "kmsg.truncated",
                hint=f"more than {KMSG_MAX_BYTES >> 20} MiB behind: the older records dropped",
            )
        if got.overwritten:
            self.log.warning("kmsg.overwritten", times=got.overwritten)
        xids, sxids, bad = parse_records(got.records)
        skipped = bad + got.skipped
        if skipped:
            self.skipped += skipped
            self.log.warning(
                "kmsg.skipped",
                records=skipped,
                total=self.skipped,
                hint="kernel log records with numbers no kernel writes (too many digits)",
            )
        if xids:
            self.on_xids(xids, backlog)
        if sxids:
            self.on_sxids(sxids, backlog)
        return got.more

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
        # Only `link_downed`, in one oneshot() pass: the ports sit below the class directory's
        # symlinks, which were otherwise resolved again for every file of every port, at every
        # tick (an idle agent's largest cost).
        with self.host.oneshot():
            read = read_port_counter(self.host, "link_downed")
        for name, fr in read:
            value = counter(fr)
            if value is None:
                continue
            before = self.link_downed.get(name)
            self.link_downed[name] = value
            if not initial and before is not None and value > before:
                self.on_flap(name, before, value)

    def close(self) -> None:
        if self.kmsg is not None:
            self.kmsg.close()
            self.kmsg = None
        if self.events is not None:
            self.events.close()


@dataclass(eq=False)
class AgentHealth(AgentPart):
    """The agent's side of the watchers: the health timer, the kernel log's fd on the loop, and
    what each event becomes (metrics, a log event, a republish). Service.py holds one."""

    interval: float
    nvml_events: bool
    publish: Callable[[str], None]

    def __post_init__(self) -> None:
        super().__post_init__()
        self.watch: HealthWatch | None = None
        self._fd: int | None = None
        self._backlog: collections.Counter[tuple[str, int]] = collections.Counter()
        self._backlog_other = 0  # backlog XIDs past LOG_KINDS distinct GPU x XID pairs
        self._last_publish: dict[str, float] = {}
        self._publish_pending: set[str] = set()
        self._draining = False  # the kernel log has batches waiting
        self._after_drain: set[str] = set()  # publishes asked for while draining

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
        self._set_devices(topology)
        self._fd = self.watch.start()
        self._log_backlog()
        if self._fd is not None:
            self.ctx.loop.add_reader(self._fd, self._on_kmsg_readable, "kmsg")
        self._set_link_gauges()
        self.timers.schedule("health", self.interval, self._tick)

    def restart(self, backend: GpuBackend | None, topology: Topology) -> None:
        """After a rediscovery: the NVML backend was reopened (its event set is gone) and the
        GPUs may have changed. The kernel log keeps its position: no XID is counted twice."""
        if self.watch is None:
            return
        old = self.watch
        # The old event set went with the old backend (the agent closed it before opening the
        # new one): drop it without a call, which would bring the closed NVML back up.
        self._set_devices(topology)
        addresses = {g.nvml.index: g.address for g in topology.gpus if g.nvml is not None}
        old.events = None
        if backend is not None and self.nvml_events and addresses:
            old.events = NvmlXidEvents(backend, addresses, self.log)
            old.events.register()

    def observed_xids(self) -> tuple[XidEvent, ...]:
        """XIDs only NVML's events reported (the kernel log unreadable): for the audit."""
        return tuple(self.watch.nvml_xids) if self.watch is not None else ()

    def _set_devices(self, topology: Topology) -> None:
        """The metrics' `gpu` and `switch` label values: this host's GPUs and NVSwitches."""
        switches = (
            str(d.address)
            for d in topology.pci_devices
            if d.vendor_id == NVIDIA_VENDOR_ID and d.class_code == NVSWITCH_CLASS
        )
        self.metrics.set_devices((str(g.address) for g in topology.gpus), switches)

    def _tick(self) -> None:
        try:
            if self.watch is not None:
                if self._set_draining(self.watch.poll()):
                    self.timers.schedule("kmsg", 0.0, self._drain_kmsg)
                self._set_link_gauges()
        finally:
            self.timers.schedule("health", self.interval, self._tick)

    def _drain_kmsg(self) -> None:
        """The next batch of a kernel log file, as a timer due now: the loop's other sources
        and timers run between two batches."""
        if self.watch is not None and self._set_draining(self.watch.read_kmsg_batch(False)):
            self.timers.schedule("kmsg", 0.0, self._drain_kmsg)

    def _on_kmsg_readable(self) -> None:
        """The live log: one batch; with more waiting the fd stays readable and the selector
        comes back to it after the other sources and the timers due."""
        if self.watch is not None:
            self._set_draining(self.watch.read_kmsg_batch(backlog=False))

    def _set_draining(self, more: bool) -> bool:
        """Whether the kernel log has batches waiting; once it has none, the publishes asked
        for meanwhile. Returns `more`."""
        self._draining = more
        if not more and self._after_drain:
            reasons, self._after_drain = sorted(self._after_drain), set()
            for reason in reasons:
                self._request_publish(reason)
        return more

    def _request_publish(self, reason: str) -> None:
        """Republish for `reason` now, or PUBLISH_SPACING_S after the last one: a storm of
        XIDs is read over many batches and must not rebuild the manifest after each (the
        audit inside reads the whole log): while batches wait, once they are read."""
        if self._draining or (self.watch is not None and self.watch.kmsg_more):
            self._after_drain.add(reason)
            return
        if reason in self._publish_pending:
            return
        last = self._last_publish.get(reason)
        delay = 0.0 if last is None else max(0.0, last + PUBLISH_SPACING_S - self.ctx.loop.time())
        self._publish_pending.add(reason)

        def run() -> None:
            self._publish_pending.discard(reason)
            self._last_publish[reason] = self.ctx.loop.time()
            self.publish(reason)

        self.timers.schedule(f"publish-{reason}", delay, run)

    def _log_backlog(self) -> None:
        if not self._backlog and not self._backlog_other:
            return
        count = sum(self._backlog.values()) + self._backlog_other
        self.log.warning(
            "gpu.xid.backlog",
            count=count,
            xids=[f"{gpu} Xid {xid}" for gpu, xid in sorted(self._backlog)],
            other=self._backlog_other,
            hint="XIDs logged since boot, before the agent started: see `mcpnode audit`",
        )
        self._backlog.clear()
        self._backlog_other = 0

    def _set_link_gauges(self) -> None:
        if self.watch is not None:
            for port, value in self.watch.link_downed.items():
                self.metrics.set_ib_link_downed(port, value)

    def _on_xids(self, events: list[XidEvent], backlog: bool) -> None:
        from mcpnode.audit.xid import since_boot

        for e in events:
            self.metrics.count_xid(str(e.address), e.xid)
        if backlog:  # logged once, when the backlog is read (_log_backlog)
            for e in events:
                key = (str(e.address), e.xid)
                if key in self._backlog or len(self._backlog) < LOG_KINDS:
                    self._backlog[key] += 1
                else:
                    self._backlog_other += 1
            return
        for e in events[:LOG_XIDS_PER_BATCH]:
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
        if len(events) > LOG_XIDS_PER_BATCH:
            self._log_more("gpu.xid.more", [(str(e.address), e.xid) for e in events])
        self._request_publish("xid")

    def _log_more(self, name: str, keys: list[tuple[str, int]]) -> None:
        """One event for the XIDs or SXIDs of a batch past those logged one by one."""
        rest = keys[LOG_XIDS_PER_BATCH:]
        counts = collections.Counter(rest)
        kinds = counts.most_common(LOG_KINDS)
        self.log.warning(
            name,
            count=len(rest),
            by_device=[f"{dev} {num} x{n}" for (dev, num), n in kinds],
            other=len(rest) - sum(n for _, n in kinds),
            hint="a storm: the first ones of this batch were logged one by one",
        )

    def _on_sxids(self, events: list[SxidEvent], backlog: bool) -> None:
        for e in events:
            self.metrics.count_sxid(str(e.switch), e.sxid)
        if backlog:
            self.log.warning("gpu.sxid.backlog", count=len(events))
            return
        for e in events[:LOG_XIDS_PER_BATCH]:
            (self.log.error if e.severity == "fatal" else self.log.warning)(
                "gpu.sxid",
                switch=str(e.switch),
                sxid=e.sxid,
                severity=e.severity,
                detail=e.detail[:200],
            )
        if len(events) > LOG_XIDS_PER_BATCH:
            self._log_more("gpu.sxid.more", [(str(e.switch), e.sxid) for e in events])
        self._request_publish("sxid")

    def _on_flap(self, port: str, before: int, after: int) -> None:
        self.metrics.count_ib_flap(port, after - before)
        self.log.warning(
            "ib.link-flap",
            port=port,
            link_downed_before=before,
            link_downed=after,
            hint="the link went down and came back: check the cable and the switch port",
        )
        self._request_publish("ib-flap")

    def close(self) -> None:
        if self._fd is not None:
            self.ctx.loop.remove_reader(self._fd)
            self._fd = None
        if self.watch is not None:
            self.watch.close()
            self.watch = None
