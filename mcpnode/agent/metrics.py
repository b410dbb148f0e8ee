"""Prometheus metrics for `mcpnode agent`, and the HTTP endpoint that serves them from the
agent's one event loop (`loop.py`).

`AgentMetrics` owns a private `CollectorRegistry`: never prometheus_client's global REGISTRY,
so tests (and a reloaded agent) can hold several without sharing values. The agent calls its
methods as things happen; each method's docstring names the metric it moves. The exposition
is prometheus_client's own: `choose_encoder` picks the format the scraper's `Accept` asks for
(OpenMetrics 1.0 for `application/openmetrics-text`, the text format 1.0.0 when asked for it,
0.0.4 otherwise) and `gzip_accepted` reads `Accept-Encoding`, as the library's own server does
(`prometheus_client.exposition._bake_output`); nothing is formatted by hand.

Names are shared with the node_exporter textfile (placement/exporters/prom.py) wherever the
concept is the same — `mcpnode_tuning_drift_keys`, `mcpnode_tuning_compliance_known`,
`mcpnode_tuning_compliant`, `mcpnode_audit_findings` — so one alert or dashboard works on
either (docs/exporters.md lists both).

A gauge that reports something measured (GPUs discovered, keys drifted, the last apply) has
no series until it is first measured, as in the textfile exporter: nothing is reported as 0
for "don't know yet". Counters start at 0 when the agent starts, and the label values of a
fixed set (event sources, results, audit statuses) are all present from the start, so
`rate()` and `increase()` see the first event.

Label values are bounded by the caller: `key` is a sysctl or sysfs key of the tuning profile,
`rule` a pin rule name from the configuration, `port` an RDMA device and port (`mlx5_0/1`);
sources and results are fixed sets checked here (an unknown one is a ValueError, a bug in the
caller). The kernel log is not bounded by anyone: an XID's address and number are whatever a
line says, so `gpu`/`switch` are held here to this host's GPUs and NVSwitches (`set_devices`),
`xid` to NVIDIA's catalogue and `xid`/`sxid` to MAX_ERROR_NUMBERS more; the rest is counted
under `other`, and each such event in `mcpnode_label_values_dropped_total{metric}`.

`MetricsServer` is a minimal HTTP/1.x responder on the `Loop`: no thread (prometheus_client's
`start_http_server` starts one, and the agent's state has no locks), one request per
connection, `Connection: close` always. It answers `GET`/`HEAD` of `/metrics` and `/`, with
`Vary: Accept, Accept-Encoding` (the body depends on both).
Every connection has a deadline (a client that connects and sends nothing is closed without
an answer), request heads are capped at 8 KiB, and at most `max_connections` are open at
once; beyond that a new connection is closed at once. None of this may stall the loop that
keeps the node tuned.

prometheus_client is imported here at module level: the agent imports this module lazily,
so `mcpnode --help` never pays for it.
"""

from __future__ import annotations

import errno
import gzip
import http
import ipaddress
import platform
import socket
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Literal

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import choose_encoder, gzip_accepted
from prometheus_client.metrics_core import Metric

from mcpnode import __version__
from mcpnode.agent.loop import Loop, Timer
from mcpnode.audit.model import Finding, Status
from mcpnode.audit.xid import CATALOG
from mcpnode.errors import McpnodeError

# What a scrape without an `Accept` the library recognises gets (`choose_encoder`'s default):
# the text format 0.0.4, which every Prometheus version and scraper reads. prometheus_client
# >= 0.22 sets CONTENT_TYPE_LATEST to `version=1.0.0` but answers 0.0.4 unless the scraper
# negotiated 1.0.0; every name here is a legacy name, so both carry the same bytes.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

EventSource = Literal["udev", "netlink", "signal", "timer", "inject"]
EVENT_SOURCES: tuple[EventSource, ...] = ("udev", "netlink", "signal", "timer", "inject")
ApplyResult = Literal["ok", "failed"]
APPLY_RESULTS: tuple[ApplyResult, ...] = ("ok", "failed")
ReloadResult = Literal["ok", "rejected"]
RELOAD_RESULTS: tuple[ReloadResult, ...] = ("ok", "rejected")
DropReason = Literal["busy", "timeout", "evicted"]
DROP_REASONS: tuple[DropReason, ...] = ("busy", "timeout", "evicted")
# The label value that stands for every value past a cap (_LabelCap).
OTHER = "other"
CAPPED_METRICS = ("mcpnode_gpu_xid_total", "mcpnode_nvswitch_sxid_total")
# Distinct XID (beyond NVIDIA's catalogue) and SXID numbers that get a series of their own; the
# drivers raise a few dozen of each, so a count past this is a log that is not the driver's.
MAX_ERROR_NUMBERS = 64
# Distinct GPU or NVSwitch addresses labelled before the host's devices are known
# (AgentMetrics.set_devices); an HGX host has 8 GPUs and 4 NVSwitches.
MAX_DEVICES_UNKNOWN = 64

# How late a timer ran: an idle loop fires within ~0.1 ms; a second means a callback blocked.
LOOP_LATENCY_BUCKETS_S = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
)  # fmt: skip
# One drift verify cycle: a few dozen sysfs/procfs reads, ~1 ms; a slow sysfs attribute
# (a GPU falling off the bus) shows up in the top buckets.
RECONCILE_BUCKETS_S = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
)  # fmt: skip


class _LabelCap:
    """The values one label may take: `known` ones, then the first `spare` others seen; the
    rest are OTHER. A value once given a series keeps it (its counter already counts)."""

    def __init__(self, spare: int, known: Iterable[str] = ()) -> None:
        self.allowed: set[str] = set(known)
        self.spare = spare

    def value(self, value: str) -> str:
        if value in self.allowed:
            return value
        if self.spare > 0:
            self.spare -= 1
            self.allowed.add(value)
            return value
        return OTHER

    def settle(self, known: Iterable[str]) -> None:
        """The values are now known: these, and those that have a series already."""
        self.allowed.update(known)
        self.spare = 0


class AgentMetrics:
    """The agent's metrics, in a registry of their own. Call from the loop thread only."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        reg = self.registry
        self._build_info = Gauge(
            "mcpnode_build_info",
            "Always 1; the labels say which mcpnode and Python run the agent",
            ["version", "python"],
            registry=reg,
        )
        self._build_info.labels(__version__, platform.python_version()).set(1)

        # Measured gauges: registered on first measurement (`_show`), absent until then.
        self._shown: set[Gauge] = set()
        self._gpus = Gauge("mcpnode_gpus", "GPUs found by the last discovery", registry=None)
        self._nics = Gauge("mcpnode_nics", "NICs found by the last discovery", registry=None)
        self._drift_keys = Gauge(
            "mcpnode_tuning_drift_keys",
            "Keys of the tuning profile whose live value drifted",
            registry=None,
        )
        # The same names as the textfile exporter (placement/exporters/prom.py): one concept,
        # one name, wherever it is scraped.
        self._compliance_known = Gauge(
            "mcpnode_tuning_compliance_known",
            "1 when tuning compliance could be told (mcpnode_tuning_compliant is then present), "
            "0 when it is unknown: a key that could not be read, or nothing enforced",
            registry=None,
        )
        self._compliant = Gauge(
            "mcpnode_tuning_compliant",
            "1 when every key of the tuning profile was read and matches, else 0",
            ["profile"],
            registry=None,
        )
        self._apply_result = Gauge(
            "mcpnode_apply_last_result",
            "1 for the result of the last apply (ok|failed), 0 for the others",
            ["result"],
            registry=None,
        )
        self._apply_time = Gauge(
            "mcpnode_apply_last_timestamp_seconds",
            "When the last apply finished, in seconds since the Unix epoch",
            registry=None,
        )
        self._pinned = Gauge(
            "mcpnode_pinned_processes",
            "Processes currently pinned by the agent's pin rules",
            registry=None,
        )
        self._audit = Gauge(
            "mcpnode_audit_findings",
            "Findings of the last audit, by status",
            ["status"],
            registry=None,
        )

        self._rediscoveries = Counter(
            "mcpnode_rediscoveries", "Rediscoveries after a hardware event", registry=reg
        )
        self._drift_detected = Counter(
            "mcpnode_drift_detected",
            "Times a profile key was found drifted from its applied value",
            ["key"],
            registry=reg,
        )
        self._drift_remediated = Counter(
            "mcpnode_drift_remediated",
            "Times a drifted profile key was written back",
            ["key"],
            registry=reg,
        )
        self._given_up = Gauge(
            "mcpnode_drift_given_up",
            "1 while the agent has stopped remediating this key (it kept drifting back)",
            ["key"],
            registry=reg,
        )
        self._given_up_keys: set[str] = set()
        self._apply_writes = Counter(
            "mcpnode_apply_writes", "Values written to the kernel by applies", registry=reg
        )
        self._pins = Counter(
            "mcpnode_pins", "Processes pinned, by pin rule", ["rule"], registry=reg
        )
        self._events = Counter(
            "mcpnode_events",
            "Events handled by the agent loop, by source",
            ["source"],
            registry=reg,
        )
        for source in EVENT_SOURCES:
            self._events.labels(source)
        self._loop_latency = Histogram(
            "mcpnode_loop_latency_seconds",
            "How late the agent loop ran a timer",
            buckets=LOOP_LATENCY_BUCKETS_S,
            registry=reg,
        )
        self._reconcile = Histogram(
            "mcpnode_reconcile_seconds",
            "Duration of one drift verify cycle",
            buckets=RECONCILE_BUCKETS_S,
            registry=reg,
        )
        self._ready = Gauge(
            "mcpnode_ready", "1 once the agent has applied its profile and serves", registry=reg
        )
        self._reloads = Counter(
            "mcpnode_config_reload",
            "Configuration reloads (SIGHUP), by result (ok|rejected)",
            ["result"],
            registry=reg,
        )
        for reload_result in RELOAD_RESULTS:
            self._reloads.labels(reload_result)
        self._scrapes = Counter(
            "mcpnode_scrapes", "GET and HEAD requests of /metrics answered", registry=reg
        )
        self._dropped = Counter(
            "mcpnode_http_connections_dropped",
            "Metrics connections closed without an answer "
            "(busy: over the connection cap, every connection being answered; timeout: past "
            "the deadline; evicted: the oldest idle one, closed to make room for a new one)",
            ["reason"],
            registry=reg,
        )
        for reason in DROP_REASONS:
            self._dropped.labels(reason)
        self._xids = Counter(
            "mcpnode_gpu_xid",
            "XID errors the kernel log (or NVML's events) reported, by GPU and XID number",
            ["gpu", "xid"],
            registry=reg,
        )
        self._sxids = Counter(
            "mcpnode_nvswitch_sxid",
            "SXID errors the NVSwitch driver reported, by switch and SXID number",
            ["switch", "sxid"],
            registry=reg,
        )
        self._labels_dropped = Counter(
            "mcpnode_label_values_dropped",
            "Events counted under label value `other`: an address that is none of this host's "
            "GPUs or NVSwitches, or an error number past the distinct ones kept",
            ["metric"],
            registry=reg,
        )
        for metric in CAPPED_METRICS:
            self._labels_dropped.labels(metric)
        self._gpu_cap = _LabelCap(MAX_DEVICES_UNKNOWN)
        self._switch_cap = _LabelCap(MAX_DEVICES_UNKNOWN)
        self._xid_cap = _LabelCap(MAX_ERROR_NUMBERS, (str(x) for x in CATALOG))
        self._sxid_cap = _LabelCap(MAX_ERROR_NUMBERS)
        self._ib_flaps = Counter(
            "mcpnode_ib_link_flaps",
            "Rises of an InfiniBand/RoCE port's link_downed counter the agent saw",
            ["port"],
            registry=reg,
        )
        self._ib_downed = Gauge(
            "mcpnode_ib_link_downed",
            "An InfiniBand/RoCE port's counters/link_downed as last read",
            ["port"],
            registry=None,
        )

    def _show(self, gauge: Gauge) -> Gauge:
        if gauge not in self._shown:
            self.registry.register(gauge)
            self._shown.add(gauge)
        return gauge

    # -- discovery ------------------------------------------------------------------------------

    def set_inventory(self, gpus: int, nics: int) -> None:
        """`mcpnode_gpus`, `mcpnode_nics`: what the last discovery found."""
        self._show(self._gpus).set(gpus)
        self._show(self._nics).set(nics)

    def count_rediscovery(self) -> None:
        """`mcpnode_rediscoveries_total`: one more rediscovery (a GPU or NIC came or went)."""
        self._rediscoveries.inc()

    # -- drift ----------------------------------------------------------------------------------

    def count_drift_detected(self, key: str) -> None:
        """`mcpnode_drift_detected_total{key}`: `key` was found drifted."""
        self._drift_detected.labels(key).inc()

    def count_drift_remediated(self, key: str) -> None:
        """`mcpnode_drift_remediated_total{key}`: `key` was written back."""
        self._drift_remediated.labels(key).inc()

    def set_drift_state(self, drifted: Iterable[str], given_up: Iterable[str]) -> None:
        """After a verify cycle: `mcpnode_tuning_drift_keys` = the number of distinct keys drifted
        now; `mcpnode_drift_given_up{key}` = 1 for each key the agent no longer remediates
        (anti-flap) and 0 for every key given up before but not any more, so a dashboard sees
        the key come back rather than its series vanish."""
        self._show(self._drift_keys).set(len(set(drifted)))
        now = set(given_up)
        for key in sorted(self._given_up_keys | now):
            self._given_up.labels(key).set(1 if key in now else 0)
        self._given_up_keys |= now

    def set_compliance(self, profile: str | None, compliant: bool | None) -> None:
        """Three-valued: `mcpnode_tuning_compliance_known` 0 and no `mcpnode_tuning_compliant`
        series while unknown (a key unreadable, enforcement paused); 1 and the 1/0 series of
        the profile enforced otherwise (a previous profile's series is removed)."""
        self._show(self._compliance_known).set(0 if compliant is None else 1)
        self._compliant.clear()
        if compliant is not None:
            self._show(self._compliant).labels(profile or "").set(1 if compliant else 0)

    def observe_reconcile(self, seconds: float) -> None:
        """`mcpnode_reconcile_seconds`: one drift verify cycle took `seconds`."""
        self._reconcile.observe(max(0.0, seconds))

    # -- apply ----------------------------------------------------------------------------------

    def record_apply(self, result: ApplyResult, writes: int, *, at_s: float | None = None) -> None:
        """An apply finished. `mcpnode_apply_last_result{result}` becomes 1 for `result` and 0
        for the other results; `mcpnode_apply_last_timestamp_seconds` = `at_s` (Unix seconds,
        default now); `mcpnode_apply_writes_total` grows by `writes`.

        Raises ValueError for a result outside APPLY_RESULTS or a negative `writes`."""
        if result not in APPLY_RESULTS:
            raise ValueError(f"apply result {result!r} is not one of {APPLY_RESULTS}")
        if writes < 0:
            raise ValueError(f"writes must be >= 0, not {writes}")
        gauge = self._show(self._apply_result)
        for each in APPLY_RESULTS:
            gauge.labels(each).set(1 if each == result else 0)
        self._show(self._apply_time).set(time.time() if at_s is None else at_s)
        self._apply_writes.inc(writes)

    # -- pinning --------------------------------------------------------------------------------

    def set_pinned_processes(self, count: int) -> None:
        """`mcpnode_pinned_processes`: processes pinned by the agent now."""
        self._show(self._pinned).set(count)

    def count_pin(self, rule: str) -> None:
        """`mcpnode_pins_total{rule}`: one process pinned by pin rule `rule`."""
        self._pins.labels(rule).inc()

    # -- audit ----------------------------------------------------------------------------------

    def set_audit_findings(self, findings: Iterable[Finding]) -> None:
        """`mcpnode_audit_findings{status}`: findings of the last audit per status, every
        status in `Status` set (0 included), so a status that empties is seen to empty."""
        counts = dict.fromkeys(Status, 0)
        for finding in findings:
            counts[finding.status] += 1
        gauge = self._show(self._audit)
        for status, count in counts.items():
            gauge.labels(status.value).set(count)

    # -- hardware health ------------------------------------------------------------------------

    def set_devices(self, gpus: Iterable[str], switches: Iterable[str]) -> None:
        """The PCI addresses of this host's GPUs and NVSwitches: from now on the only `gpu` and
        `switch` label values, besides those already counted and `other`."""
        self._gpu_cap.settle(gpus)
        self._switch_cap.settle(switches)

    def count_xid(self, gpu: str, xid: int) -> None:
        """`mcpnode_gpu_xid_total{gpu,xid}`: one XID on GPU `gpu` (its PCI address); under
        `other` past the caps, and then one more `mcpnode_label_values_dropped_total`."""
        gpu_label = self._gpu_cap.value(gpu)
        xid_label = self._xid_cap.value(str(int(xid)))
        if OTHER in (gpu_label, xid_label):
            self._labels_dropped.labels(CAPPED_METRICS[0]).inc()
        self._xids.labels(gpu_label, xid_label).inc()

    def count_sxid(self, switch: str, sxid: int) -> None:
        """`mcpnode_nvswitch_sxid_total{switch,sxid}`: one SXID on NVSwitch `switch`; capped as
        count_xid."""
        switch_label = self._switch_cap.value(switch)
        sxid_label = self._sxid_cap.value(str(int(sxid)))
        if OTHER in (switch_label, sxid_label):
            self._labels_dropped.labels(CAPPED_METRICS[1]).inc()
        self._sxids.labels(switch_label, sxid_label).inc()

    def count_ib_flap(self, port: str, times: int = 1) -> None:
        """`mcpnode_ib_link_flaps_total{port}`: `port`'s link_downed rose by `times`."""
        self._ib_flaps.labels(port).inc(max(0, times))

    def set_ib_link_downed(self, port: str, value: int) -> None:
        """`mcpnode_ib_link_downed{port}`: the counter as last read."""
        self._show(self._ib_downed).labels(port).set(value)

    # -- the loop and the agent -----------------------------------------------------------------

    def count_event(self, source: EventSource) -> None:
        """`mcpnode_events_total{source}`: one event handled from `source` (EVENT_SOURCES).

        Raises ValueError for any other source, which would grow the label set."""
        if source not in EVENT_SOURCES:
            raise ValueError(f"event source {source!r} is not one of {EVENT_SOURCES}")
        self._events.labels(source).inc()

    def observe_loop_latency(self, timer: str, seconds: float) -> None:
        """`mcpnode_loop_latency_seconds`: timer `timer` ran `seconds` late. The signature is
        `Loop(on_latency=...)`'s; the timer's name is not a label (it is not a bounded set)."""
        del timer
        self._loop_latency.observe(max(0.0, seconds))

    def set_ready(self, ready: bool) -> None:
        """`mcpnode_ready`: 1 once the agent has applied and serves, 0 while starting/stopping."""
        self._ready.set(1 if ready else 0)

    def count_config_reload(self, result: ReloadResult) -> None:
        """`mcpnode_config_reload_total{result}`: a reload was applied (ok) or refused (rejected;
        the agent goes on with the configuration it had).

        Raises ValueError for a result outside RELOAD_RESULTS."""
        if result not in RELOAD_RESULTS:
            raise ValueError(f"reload result {result!r} is not one of {RELOAD_RESULTS}")
        self._reloads.labels(result).inc()

    # -- the endpoint (MetricsServer calls these) -----------------------------------------------

    def count_scrape(self) -> None:
        """`mcpnode_scrapes_total`: one GET or HEAD of /metrics answered."""
        self._scrapes.inc()

    def count_dropped_connection(self, reason: DropReason) -> None:
        """`mcpnode_http_connections_dropped_total{reason}`: a connection closed unanswered."""
        if reason not in DROP_REASONS:
            raise ValueError(f"drop reason {reason!r} is not one of {DROP_REASONS}")
        self._dropped.labels(reason).inc()

    def render(self) -> bytes:
        """The exposition in the text format 0.0.4 (CONTENT_TYPE)."""
        return self.exposition("")[0]

    def exposition(self, accept: str) -> tuple[bytes, str]:
        """The exposition in the format an `Accept` header asks for (`choose_encoder`), and its
        Content-Type; CONTENT_TYPE (text 0.0.4) for an empty or unrecognised one."""
        encoder, content_type = choose_encoder(accept)
        return encoder(_WithoutCreated(self.registry)), content_type


class _WithoutCreated:
    """The registry's families without their `<name>_created` samples. prometheus_client adds
    one to every counter and histogram (when the series was created); the text format has no
    place for it, so Prometheus ingests it as one more gauge per series, which nothing here
    uses (OpenMetrics has a place for it, and makes it optional). The library's own switch,
    `disable_created_metrics()`, is process-global; this is local to one registry."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._registry = registry

    def collect(self) -> Iterable[Metric]:
        for family in self._registry.collect():  # fresh Metric objects on every collect
            created = family.name + "_created"
            family.samples = [s for s in family.samples if s.name != created]
            yield family


# -- the HTTP endpoint --------------------------------------------------------------------------

MAX_HEAD_BYTES = 8192
DEFAULT_DEADLINE_S = 5.0
# A scraper sends its request as soon as it is connected (Prometheus: one write); a client that
# has not finished its request head by then is idle or slow, and gives its slot up.
DEFAULT_HEAD_DEADLINE_S = 1.0
DEFAULT_MAX_CONNECTIONS = 32
_RECV_BYTES = 4096
_BACKLOG = 64
_ACCEPTS_PER_WAKEUP = 64  # then let the loop's other sources run
_SEND_RETRY_S = 0.01
_SNDBUF_MAX_BYTES = 1 << 20  # a scrape is ~30 KB; beyond this, memory for one client is waste
_ACCEPT_BACKOFF_S = 1.0
_OUT_OF_FDS = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)

_INDEX = b'<html><body><a href="/metrics">/metrics</a></body></html>\n'


class MetricsBindError(McpnodeError):
    """The metrics listener could not be set up: address in use (EADDRINUSE), a privileged
    port (EACCES), an address this host does not have (EADDRNOTAVAIL), no IPv6, or not an IP
    address at all. `address` is HOST:PORT ([V6]:PORT), `errno` the OS error or None."""

    def __init__(self, address: str, errno: int | None, detail: str) -> None:
        super().__init__(f"metrics listener {address}: {detail}")
        self.address = address
        self.errno = errno
        self.detail = detail


def format_address(host: str, port: int) -> str:
    """HOST:PORT, with an IPv6 host in brackets ([::1]:9847), as `metrics.listen` is written."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


@dataclass(eq=False)
class _Conn:
    sock: socket.socket
    head: bytearray = field(default_factory=bytearray)
    out: memoryview | None = None  # the response still to send; None while reading the request
    deadline: Timer | None = None
    retry: Timer | None = None


class MetricsServer:
    """Serves `metrics` over HTTP on `host`:`port` from `loop`. `port` 0 picks a free port;
    `.port` is the one bound. Listens from construction until `close()`.

    Writing the response: the Loop watches readers only, so the response is sent with
    non-blocking `send`, after raising the socket's send buffer to the response's size (a
    scrape is 10–30 KB; raised to 1 MiB at most, and the kernel caps it at net.core.wmem_max,
    208 KiB by default, doubled). Whatever a slow reader leaves unsent is retried every 10 ms
    until it is sent or the connection's deadline closes it: timers only while a client owes
    us a read, bounded by the deadline, and the loop is never blocked (a blocking `sendall`
    with a timeout would stall drift remediation for as long as a stuck scraper wanted).

    Raises MetricsBindError when the listener cannot be bound."""

    def __init__(
        self,
        loop: Loop,
        metrics: AgentMetrics,
        host: str,
        port: int,
        log: Any,
        *,
        deadline_s: float = DEFAULT_DEADLINE_S,
        head_deadline_s: float = DEFAULT_HEAD_DEADLINE_S,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
    ) -> None:
        self._loop = loop
        self.metrics = metrics
        self.log = log
        self.host = host
        self._deadline_s = deadline_s
        self._head_deadline_s = min(head_deadline_s, deadline_s)
        self._max_connections = max_connections
        # In accept order (dicts keep insertion order): the oldest idle one is evicted first.
        self._conns: dict[_Conn, None] = {}
        self._accept_backoff: Timer | None = None
        self._listener: socket.socket | None = _listen(host, port)
        self.port: int = self._listener.getsockname()[1]
        loop.add_reader(self._listener, self._on_acceptable, "metrics.listen")
        log.info("metrics.listening", address=self.address)

    @property
    def address(self) -> str:
        return format_address(self.host, self.port)

    @property
    def connections(self) -> int:
        """Connections open now (reading a request or sending a response)."""
        return len(self._conns)

    def close(self) -> None:
        """Stop listening and close every connection, answered or not. Idempotent."""
        if self._accept_backoff is not None:
            self._accept_backoff.cancel()
            self._accept_backoff = None
        if self._listener is not None:
            self._loop.remove_reader(self._listener)
            self._listener.close()
            self._listener = None
        for conn in list(self._conns):
            self._drop(conn)

    # -- accepting ------------------------------------------------------------------------------

    def _on_acceptable(self) -> None:
        listener = self._listener
        if listener is None:
            return
        for _ in range(_ACCEPTS_PER_WAKEUP):
            try:
                sock, _peer = listener.accept()
            except BlockingIOError:
                return
            except OSError as err:
                if err.errno in _OUT_OF_FDS:
                    # The pending connection stays queued and the listener readable: watching
                    # it now would spin the loop. Look again in a second.
                    self._pause_accepting(err)
                    return
                continue  # ECONNABORTED, EPROTO: that client gave up before we took it
            if len(self._conns) >= self._max_connections and not self._evict_idle():
                self.metrics.count_dropped_connection("busy")
                sock.close()
                continue
            self._open(sock)

    def _evict_idle(self) -> bool:
        """Make room by closing the oldest connection still waiting for its request: idle or
        slow clients (500 of them held open answered 0 of 30 real scrapes when new connections
        were refused instead) must not starve a scraper that sends its request at once. One
        being answered is never evicted. False when every connection is being answered."""
        for conn in self._conns:
            if conn.out is None:
                self.metrics.count_dropped_connection("evicted")
                self._drop(conn)
                return True
        return False

    def _pause_accepting(self, err: OSError) -> None:
        assert self._listener is not None
        self.log.warning(
            "metrics.accept-paused",
            address=self.address,
            error=f"{type(err).__name__}: {err}",
            retry_s=_ACCEPT_BACKOFF_S,
        )
        self._loop.remove_reader(self._listener)
        self._accept_backoff = self._loop.call_later(
            _ACCEPT_BACKOFF_S, self._resume_accepting, "metrics.accept-resume"
        )

    def _resume_accepting(self) -> None:
        self._accept_backoff = None
        if self._listener is not None:
            self._loop.add_reader(self._listener, self._on_acceptable, "metrics.listen")

    def _open(self, sock: socket.socket) -> None:
        sock.setblocking(False)
        conn = _Conn(sock)
        # The request head must arrive within the short deadline; the answer then gets the
        # full one (_respond re-arms it).
        conn.deadline = self._loop.call_later(
            self._head_deadline_s, partial(self._expire, conn), "metrics.deadline"
        )
        self._conns[conn] = None
        self._loop.add_reader(sock, partial(self._on_readable, conn), "metrics.conn")

    def _expire(self, conn: _Conn) -> None:
        conn.deadline = None
        self.metrics.count_dropped_connection("timeout")
        self._drop(conn)

    def _drop(self, conn: _Conn) -> None:
        # Unregister before closing: the fd number is reused by the next accept.
        self._loop.remove_reader(conn.sock)
        for timer in (conn.deadline, conn.retry):
            if timer is not None:
                timer.cancel()
        conn.deadline = conn.retry = None
        self._conns.pop(conn, None)
        conn.sock.close()

    # -- one request ----------------------------------------------------------------------------

    def _on_readable(self, conn: _Conn) -> None:
        try:
            chunk = conn.sock.recv(_RECV_BYTES)
        except BlockingIOError:
            return
        except OSError:  # ECONNRESET: the client went away mid-request
            self._drop(conn)
            return
        if not chunk:  # EOF before the end of the head: nobody to answer
            self._drop(conn)
            return
        conn.head += chunk
        end = _head_end(conn.head)
        if end is None and len(conn.head) <= MAX_HEAD_BYTES:
            return  # more to come
        if end is None or end > MAX_HEAD_BYTES:
            self._respond(conn, _error(http.HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE))
        else:
            self._respond(conn, self._answer(bytes(conn.head[:end])))

    def _answer(self, head: bytes) -> bytes:
        line = head.split(b"\n", 1)[0].rstrip(b"\r").decode("latin-1")
        parts = line.split(" ")
        if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
            return _error(http.HTTPStatus.BAD_REQUEST)
        method, target, _version = parts
        path = target.split("?", 1)[0]
        head_only = method == "HEAD"
        if path not in ("/metrics", "/"):
            return _error(http.HTTPStatus.NOT_FOUND, head_only=head_only)
        if method not in ("GET", "HEAD"):
            return _error(http.HTTPStatus.METHOD_NOT_ALLOWED, ("Allow", "GET, HEAD"))
        if path != "/metrics":
            return _response(
                http.HTTPStatus.OK, "text/html; charset=utf-8", _INDEX, head_only=head_only
            )
        self.metrics.count_scrape()
        headers = _headers(head)
        body, content_type = self.metrics.exposition(headers.get("accept", ""))
        extra = [("Vary", "Accept, Accept-Encoding")]
        if gzip_accepted(headers.get("accept-encoding", "")):
            # Measured: a 12 KB exposition (60 drifting keys) becomes 2 KB in 0.6 ms on one
            # busy core, so compressing on the loop thread costs less than one drift check.
            body = gzip.compress(body, compresslevel=6)
            extra.append(("Content-Encoding", "gzip"))
        return _response(http.HTTPStatus.OK, content_type, body, *extra, head_only=head_only)

    def _respond(self, conn: _Conn, data: bytes) -> None:
        self._loop.remove_reader(conn.sock)  # one request per connection; the rest is ignored
        conn.out = memoryview(data)
        if conn.deadline is not None:
            conn.deadline.cancel()
        conn.deadline = self._loop.call_later(
            self._deadline_s, partial(self._expire, conn), "metrics.deadline"
        )
        want = min(len(data), _SNDBUF_MAX_BYTES)
        try:
            if want > conn.sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF):
                conn.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, want)
        except OSError:
            pass  # only an optimisation: the retries below send it anyway
        self._send(conn)

    def _send(self, conn: _Conn) -> None:
        conn.retry = None
        out = conn.out
        assert out is not None
        try:
            while out:
                out = out[conn.sock.send(out) :]
        except BlockingIOError:
            conn.out = out
            conn.retry = self._loop.call_later(
                _SEND_RETRY_S, partial(self._send, conn), "metrics.send"
            )
            return
        except OSError:  # EPIPE, ECONNRESET: the client left; nothing to tell it
            pass
        self._drop(conn)


def _listen(host: str, port: int) -> socket.socket:
    address = format_address(host, port)
    try:
        version = ipaddress.ip_address(host).version
    except ValueError:
        raise MetricsBindError(address, None, "not an IP address") from None
    family = socket.AF_INET6 if version == 6 else socket.AF_INET
    try:
        sock = socket.socket(family, socket.SOCK_STREAM)
    except OSError as err:  # EAFNOSUPPORT: IPv6 disabled on this host
        raise MetricsBindError(address, err.errno, err.strerror or str(err)) from err
    try:
        # Rebinding right after a restart must not fail on the last scrape's TIME_WAIT.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(_BACKLOG)
        sock.setblocking(False)
    except OSError as err:
        sock.close()
        raise MetricsBindError(address, err.errno, err.strerror or str(err)) from err
    return sock


def _head_end(buf: bytearray) -> int | None:
    """Where the request head ends (after its blank line), or None if it has not yet.
    A bare LF blank line is accepted too (`printf 'GET / HTTP/1.0\\n\\n' | nc`)."""
    ends = [i + len(sep) for sep in (b"\r\n\r\n", b"\n\n") if (i := buf.find(sep)) >= 0]
    return min(ends) if ends else None


def _headers(head: bytes) -> dict[str, str]:
    """The request's header fields after the request line, names lower-cased; a repeated field
    is joined with commas (RFC 9110, 5.3). `head` is already capped at MAX_HEAD_BYTES."""
    out: dict[str, str] = {}
    for raw in head.decode("latin-1").split("\n")[1:]:
        name, sep, value = raw.rstrip("\r").partition(":")
        if not sep or not name or name != name.strip():
            continue  # the blank line, or not a field (a space before the colon is invalid)
        key = name.lower()
        value = value.strip()
        out[key] = f"{out[key]}, {value}" if key in out else value
    return out


def _response(
    status: http.HTTPStatus,
    content_type: str,
    body: bytes,
    *extra: tuple[str, str],
    head_only: bool = False,
) -> bytes:
    headers = [
        f"HTTP/1.1 {status.value} {status.phrase}",
        f"Content-Type: {content_type}",
        f"Content-Length: {len(body)}",
        "Connection: close",
        *(f"{name}: {value}" for name, value in extra),
    ]
    head = ("\r\n".join(headers) + "\r\n\r\n").encode("latin-1")
    return head if head_only else head + body


def _error(status: http.HTTPStatus, *extra: tuple[str, str], head_only: bool = False) -> bytes:
    body = f"{status.value} {status.phrase}\n".encode()
    return _response(status, "text/plain; charset=utf-8", body, *extra, head_only=head_only)
