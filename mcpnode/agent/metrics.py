"""Prometheus metrics for `mcpnode agent`: the registry and the metric families. The HTTP
endpoint that serves them from the agent's one event loop is `http.py`.

`AgentMetrics` owns a `Registry` of its own (series.py), never a process-global one, so tests
(and a reloaded agent) can hold several without sharing values. The agent calls its
methods as things happen; each method's docstring names the metric it moves. The exposition
is prometheus_client's, written in-project (codec/promtext.py, byte for byte the same):
`negotiate` picks the format the scraper's `Accept` asks for (OpenMetrics 1.0 for
`application/openmetrics-text`, the text format 1.0.0 when asked for it, 0.0.4 otherwise) as
the library's `choose_encoder` does, and `gzip_accepted` reads `Accept-Encoding`. The counters,
gauges and histograms are `series.py`'s, which behave as the library's: importing any part of
prometheus_client imports its HTTP servers, push-gateway client and `ssl`, memory the agent
would hold for code it never runs.

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
"""

from __future__ import annotations

import platform
import time
from collections.abc import Iterable, Mapping
from typing import Literal

from mcpnode import __version__
from mcpnode.agent.series import Counter, Gauge, Histogram, Registry
from mcpnode.audit.model import Finding, Status
from mcpnode.audit.xid import CATALOG
from mcpnode.codec.promtext import CONTENT_TYPE_TEXT, negotiate
from mcpnode.placement.ps import CpuVerdict
from mcpnode.topology.model import Gpu

# What a scrape without an `Accept` the negotiation recognises gets: the text format 0.0.4,
# which every Prometheus version and scraper reads. prometheus_client >= 0.22 sets
# CONTENT_TYPE_LATEST to `version=1.0.0` but answers 0.0.4 unless the scraper negotiated 1.0.0;
# every name here is a legacy name, so both carry the same bytes (unless `escaping=dots`).
CONTENT_TYPE = CONTENT_TYPE_TEXT

EventSource = Literal["udev", "netlink", "signal", "timer", "inject"]
EVENT_SOURCES: tuple[EventSource, ...] = ("udev", "netlink", "signal", "timer", "inject")
ApplyResult = Literal["ok", "failed"]
APPLY_RESULTS: tuple[ApplyResult, ...] = ("ok", "failed")
ReloadResult = Literal["ok", "rejected"]
RELOAD_RESULTS: tuple[ReloadResult, ...] = ("ok", "rejected")
PublishResult = Literal["ok", "failed"]
PUBLISH_RESULTS: tuple[PublishResult, ...] = ("ok", "failed")
# nvmlNvLinkErrorCounter_t as the `counter` label of mcpnode_gpu_nvlink_errors, from the
# topology's NvLink fields (`replay_errors` -> `replay`).
NVLINK_ERROR_LABELS = ("replay", "recovery", "crc_flit", "crc_data")
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
        self.registry = Registry()
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

        self._publish_result = Gauge(
            "mcpnode_publish_last_result",
            "1 for the result of the last publish (ok|failed: the build, the manifest or an "
            "exporter file failed), 0 for the other",
            ["result"],
            registry=None,
        )
        self._gpu_unhealthy = Gauge(
            "mcpnode_gpu_unhealthy",
            "1 when a finding of the last audit about the GPU FAILed (an XID, a fatal AER, "
            "NVLink errors, hardware slowdown ...), else 0",
            ["gpu"],
            registry=None,
        )
        self._pcie_replays = Gauge(
            "mcpnode_gpu_pcie_replays",
            "NVML's PCIe replay counter of the GPU (since the driver loaded), as read by the "
            "discovery the last publish used",
            ["gpu"],
            registry=None,
        )
        self._nvlink_errors = Gauge(
            "mcpnode_gpu_nvlink_errors",
            "NVML's NVLink error counter of the GPU summed over its links (since the driver "
            "loaded), as read by the discovery the last publish used",
            ["gpu", "counter"],
            registry=None,
        )
        self._gpu_processes = Gauge(
            "mcpnode_gpu_processes",
            "Processes using the GPU at the last auto-pin scan, by where their CPUs are against "
            "its placement (cpus=slice|node|off-node|unknown, as `mcpnode ps` says)",
            ["gpu", "cpus"],
            registry=None,
        )
        self._nfd_expiry = Gauge(
            "mcpnode_nfd_expiry_timestamp_seconds",
            "When the labels of the NFD feature file last written expire (its +expiry-time), "
            "in seconds since the Unix epoch",
            registry=None,
        )
        self._nfd_written = Gauge(
            "mcpnode_nfd_written_timestamp_seconds",
            "When the NFD feature file with an expiry was last written, in seconds since the "
            "Unix epoch",
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

    # -- publication ----------------------------------------------------------------------------

    def record_publish(self, result: PublishResult) -> None:
        """`mcpnode_publish_last_result{result}`: 1 for `result`, 0 for the other.

        Raises ValueError for a result outside PUBLISH_RESULTS."""
        if result not in PUBLISH_RESULTS:
            raise ValueError(f"publish result {result!r} is not one of {PUBLISH_RESULTS}")
        gauge = self._show(self._publish_result)
        for each in PUBLISH_RESULTS:
            gauge.labels(each).set(1 if each == result else 0)

    def set_nfd_expiry(self, written_s: float, expires_s: float | None) -> None:
        """`mcpnode_nfd_written_timestamp_seconds` and `mcpnode_nfd_expiry_timestamp_seconds`
        (Unix seconds) of the feature file just written; both series go when `expires_s` is
        None (the file is written without an expiry, or no longer written)."""
        for gauge in (self._nfd_written, self._nfd_expiry):
            if expires_s is None and gauge in self._shown:
                self.registry.unregister(gauge)
                self._shown.discard(gauge)
        if expires_s is not None:
            self._show(self._nfd_written).set(written_s)
            self._show(self._nfd_expiry).set(expires_s)

    def set_gpu_state(self, gpus: Iterable[Gpu], unhealthy: Iterable[str]) -> None:
        """After a publish, per GPU (label `gpu`: its PCI address, as in mcpnode_gpu_xid_total):
        `mcpnode_gpu_unhealthy` 1 when its address is in `unhealthy`, else 0;
        `mcpnode_gpu_pcie_replays` and `mcpnode_gpu_nvlink_errors{counter}` (NVLINK_ERROR_LABELS,
        summed over the GPU's links) as NVML answered the discovery; a counter NVML did not
        answer (NotSupported, no NVML) has no series. The series of GPUs gone are removed."""
        bad = set(unhealthy)
        health = self._show(self._gpu_unhealthy)
        health.clear()
        self._pcie_replays.clear()
        self._nvlink_errors.clear()
        for gpu in gpus:
            address = str(gpu.address)
            health.labels(address).set(1 if address in bad else 0)
            n = gpu.nvml
            if n is None or n.lost:
                continue
            if n.pcie_replay_count is not None:
                self._show(self._pcie_replays).labels(address).set(n.pcie_replay_count)
            for label in NVLINK_ERROR_LABELS:
                counts = [getattr(link, f"{label}_errors") for link in n.nvlinks]
                known = [c for c in counts if c is not None]
                if known:
                    self._show(self._nvlink_errors).labels(address, label).set(sum(known))

    def set_gpu_process_cpus(self, counts: Mapping[str, Mapping[CpuVerdict, int]]) -> None:
        """`mcpnode_gpu_processes{gpu,cpus}`: per GPU (PCI address), the processes using it by
        CPU verdict (placement/ps.py's cpu_verdict_counts); the series of GPUs not in `counts`
        are removed (an empty `counts`: auto-pinning stopped, nothing is counted)."""
        gauge = self._gpu_processes
        gauge.clear()
        if not counts:
            return
        gauge = self._show(gauge)
        for gpu, by_verdict in sorted(counts.items()):
            for verdict, n in sorted(by_verdict.items()):
                gauge.labels(gpu, verdict).set(n)

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
        """The exposition in the format an `Accept` header asks for (`negotiate`), and its
        Content-Type; CONTENT_TYPE (text 0.0.4) for an empty or unrecognised one."""
        encoder, content_type = negotiate(accept)
        return encoder(self.registry.collect()), content_type
