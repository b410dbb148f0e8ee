"""The agent's metrics and their HTTP endpoint, over real sockets on loopback.

The endpoint runs on a real `Loop` pumped from the test thread; each client runs in a thread
of its own, as a scraper would be another process."""

from __future__ import annotations

import errno
import os
import platform
import resource
import socket
import struct
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from mcpnode import __version__
from mcpnode.agent.http import MAX_HEAD_BYTES, MetricsBindError, MetricsServer
from mcpnode.agent.loop import Loop
from mcpnode.agent.metrics import (
    CONTENT_TYPE,
    EVENT_SOURCES,
    MAX_DEVICES_UNKNOWN,
    MAX_ERROR_NUMBERS,
    AgentMetrics,
)
from mcpnode.audit.model import Finding, Status
from mcpnode.audit.xid import CATALOG
from mcpnode.errors import McpnodeError
from tests.support.exportcase import topology


class Log:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, dict[str, Any]]] = []

    def _rec(self, level: str) -> Callable[..., None]:
        return lambda event, **kw: self.events.append((level, event, kw))

    def __getattr__(self, level: str) -> Callable[..., None]:
        return self._rec(level)


def samples(text: bytes | str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of an exposition: (name, sorted labels) -> value."""
    if isinstance(text, bytes):
        text = text.decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def families(text: bytes) -> set[str]:
    return {f.name for f in text_string_to_metric_families(text.decode())}


# -- a server on a loop, and clients in threads -------------------------------------------------


class Bg:
    """Runs `fn` in a thread; `pump` drives the loop until it returns."""

    def __init__(self, fn: Callable[[], Any]) -> None:
        self.result: Any = None
        self.error: BaseException | None = None

        def run() -> None:
            try:
                self.result = fn()
            except BaseException as err:
                self.error = err

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()

    def done(self) -> bool:
        return not self.thread.is_alive()


class RecordingLoop(Loop):
    """A Loop that remembers the name of every timer set: proof a code path ran."""

    def __init__(self) -> None:
        super().__init__(Log())
        self.timer_names: list[str] = []

    def call_later(self, delay: float, callback: Callable[[], None], name: str) -> Any:
        self.timer_names.append(name)
        return super().call_later(delay, callback, name)


def pump(loop: Loop, until: Callable[[], bool], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not until():
        assert time.monotonic() < deadline, "timed out pumping the loop"
        loop.run_once(max_wait=0.01)


def run_client(loop: Loop, fn: Callable[[], Any]) -> Any:
    bg = Bg(fn)
    pump(loop, bg.done)
    if bg.error is not None:
        raise bg.error
    return bg.result


def connect(port: int, host: str = "127.0.0.1") -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.settimeout(10)
    sock.connect((host, port))
    return sock


def read_all(sock: socket.socket) -> bytes:
    out = bytearray()
    while chunk := sock.recv(65536):
        out += chunk
    return bytes(out)


def exchange(port: int, request: bytes, host: str = "127.0.0.1") -> bytes:
    with connect(port, host) as sock:
        sock.sendall(request)
        return read_all(sock)


def parse(raw: bytes) -> tuple[int, dict[str, str], bytes]:
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    version, code, _reason = lines[0].split(" ", 2)
    assert version == "HTTP/1.1"
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return int(code), headers, body


def get(loop: Loop, port: int, path: str = "/metrics", method: str = "GET") -> Any:
    request = f"{method} {path} HTTP/1.1\r\nHost: x\r\nUser-Agent: test\r\n\r\n".encode()
    return parse(run_client(loop, lambda: exchange(port, request)))


@pytest.fixture
def loop() -> Any:
    lp = Loop(Log())
    yield lp
    lp.close()


@pytest.fixture
def metrics() -> AgentMetrics:
    return AgentMetrics()


@pytest.fixture
def server(loop: Loop, metrics: AgentMetrics) -> Any:
    srv = MetricsServer(loop, metrics, "127.0.0.1", 0, Log())
    yield srv
    srv.close()


def fd_count() -> int:
    return len(os.listdir("/proc/self/fd"))


# -- the metrics --------------------------------------------------------------------------------


def feed(m: AgentMetrics) -> None:
    m.set_inventory(gpus=8, nics=4)
    m.count_rediscovery()
    m.count_rediscovery()
    m.count_drift_detected("vm.swappiness")
    m.count_drift_detected("vm.swappiness")
    m.count_drift_detected("kernel.numa_balancing")
    m.count_drift_remediated("vm.swappiness")
    m.set_drift_state(drifted=["kernel.numa_balancing"], given_up=["kernel.numa_balancing"])
    m.set_compliance("base", False)
    m.record_apply("ok", writes=12, at_s=1_700_000_000.5)
    m.set_pinned_processes(3)
    m.count_pin("vllm")
    m.count_pin("vllm")
    m.count_pin("sglang")
    m.set_audit_findings(
        [
            Finding("gpu.persistence", Status.PASS, "on"),
            Finding("gpu.clocks", Status.PASS, "ok"),
            Finding("kernel.thp", Status.WARN, "always"),
            Finding("nic.mtu", Status.FAIL, "1500"),
        ]
    )
    m.count_event("udev")
    m.count_event("timer")
    m.count_event("timer")
    m.observe_loop_latency("drift", 0.0002)
    m.observe_loop_latency("drift", 0.3)
    m.observe_reconcile(0.0007)
    m.set_ready(True)
    m.count_config_reload("ok")
    m.count_config_reload("rejected")
    m.count_config_reload("rejected")
    m.count_xid("0000:3a:00.0", 79)
    m.count_xid("0000:3a:00.0", 79)
    m.count_xid("0000:18:00.0", 13)
    m.count_sxid("0000:07:00.0", 24007)
    m.set_ib_link_downed("mlx5_0/1", 3)
    m.count_ib_flap("mlx5_0/1", 2)
    m.record_publish("ok")
    m.set_gpu_state(topology("hgx-h100-8gpu-8nic").gpus, ["0000:3a:00.0"])
    m.set_nfd_expiry(1_700_000_000.0, 1_700_000_300.0)
    m.set_gpu_process_cpus({"0000:3a:00.0": {"slice": 2, "node": 1, "off-node": 0, "unknown": 0}})


ALL_FAMILIES = {
    "mcpnode_build_info",
    "mcpnode_gpus",
    "mcpnode_nics",
    "mcpnode_rediscoveries",
    "mcpnode_drift_detected",
    "mcpnode_drift_remediated",
    "mcpnode_tuning_drift_keys",
    "mcpnode_drift_given_up",
    "mcpnode_tuning_compliance_known",
    "mcpnode_tuning_compliant",
    "mcpnode_apply_last_result",
    "mcpnode_apply_last_timestamp_seconds",
    "mcpnode_apply_writes",
    "mcpnode_pinned_processes",
    "mcpnode_pins",
    "mcpnode_audit_findings",
    "mcpnode_events",
    "mcpnode_loop_latency_seconds",
    "mcpnode_reconcile_seconds",
    "mcpnode_ready",
    "mcpnode_config_reload",
    "mcpnode_scrapes",
    "mcpnode_http_connections_dropped",
    "mcpnode_gpu_xid",
    "mcpnode_nvswitch_sxid",
    "mcpnode_label_values_dropped",
    "mcpnode_ib_link_flaps",
    "mcpnode_ib_link_downed",
    "mcpnode_publish_last_result",
    "mcpnode_gpu_unhealthy",
    "mcpnode_gpu_pcie_replays",
    "mcpnode_gpu_nvlink_errors",
    "mcpnode_nfd_expiry_timestamp_seconds",
    "mcpnode_nfd_written_timestamp_seconds",
    "mcpnode_gpu_processes",
}


def test_scrape_serves_every_family_with_its_values(
    loop: Loop, metrics: AgentMetrics, server: MetricsServer
) -> None:
    feed(metrics)
    code, headers, body = get(loop, server.port)
    assert code == 200
    assert headers["content-type"] == CONTENT_TYPE
    assert headers["connection"] == "close"
    assert int(headers["content-length"]) == len(body)
    assert families(body) == ALL_FAMILIES
    s = samples(body)
    assert (
        s[("mcpnode_build_info", (("python", platform.python_version()), ("version", __version__)))]
        == 1
    )
    assert s[("mcpnode_gpus", ())] == 8
    assert s[("mcpnode_nics", ())] == 4
    assert s[("mcpnode_rediscoveries_total", ())] == 2
    assert s[("mcpnode_drift_detected_total", (("key", "vm.swappiness"),))] == 2
    assert s[("mcpnode_drift_detected_total", (("key", "kernel.numa_balancing"),))] == 1
    assert s[("mcpnode_drift_remediated_total", (("key", "vm.swappiness"),))] == 1
    assert ("mcpnode_drift_remediated_total", (("key", "kernel.numa_balancing"),)) not in s
    assert s[("mcpnode_tuning_drift_keys", ())] == 1
    assert s[("mcpnode_drift_given_up", (("key", "kernel.numa_balancing"),))] == 1
    assert s[("mcpnode_apply_last_result", (("result", "ok"),))] == 1
    assert s[("mcpnode_apply_last_result", (("result", "failed"),))] == 0
    assert s[("mcpnode_apply_last_timestamp_seconds", ())] == 1_700_000_000.5
    assert s[("mcpnode_apply_writes_total", ())] == 12
    assert s[("mcpnode_pinned_processes", ())] == 3
    assert s[("mcpnode_pins_total", (("rule", "vllm"),))] == 2
    assert s[("mcpnode_pins_total", (("rule", "sglang"),))] == 1
    audit = {st.value: s[("mcpnode_audit_findings", (("status", st.value),))] for st in Status}
    assert audit == {"PASS": 2, "WARN": 1, "FAIL": 1, "SKIP": 0, "INFO": 0}
    events = {src: s[("mcpnode_events_total", (("source", src),))] for src in EVENT_SOURCES}
    assert events == {"udev": 1, "netlink": 0, "signal": 0, "timer": 2, "inject": 0}
    assert s[("mcpnode_loop_latency_seconds_count", ())] == 2
    assert s[("mcpnode_loop_latency_seconds_bucket", (("le", "0.00025"),))] == 1
    assert s[("mcpnode_loop_latency_seconds_bucket", (("le", "0.25"),))] == 1
    assert s[("mcpnode_loop_latency_seconds_bucket", (("le", "0.5"),))] == 2
    assert s[("mcpnode_loop_latency_seconds_sum", ())] == pytest.approx(0.3002)
    assert s[("mcpnode_reconcile_seconds_count", ())] == 1
    assert s[("mcpnode_reconcile_seconds_bucket", (("le", "0.0005"),))] == 0
    assert s[("mcpnode_reconcile_seconds_bucket", (("le", "0.001"),))] == 1
    assert s[("mcpnode_ready", ())] == 1
    assert s[("mcpnode_config_reload_total", (("result", "ok"),))] == 1
    assert s[("mcpnode_config_reload_total", (("result", "rejected"),))] == 2
    assert s[("mcpnode_scrapes_total", ())] == 1  # this scrape counts itself
    assert s[("mcpnode_gpu_xid_total", (("gpu", "0000:3a:00.0"), ("xid", "79")))] == 2
    assert s[("mcpnode_gpu_xid_total", (("gpu", "0000:18:00.0"), ("xid", "13")))] == 1
    assert s[("mcpnode_nvswitch_sxid_total", (("switch", "0000:07:00.0"), ("sxid", "24007")))] == 1
    dropped = "mcpnode_label_values_dropped_total"
    assert s[(dropped, (("metric", "mcpnode_gpu_xid_total"),))] == 0
    assert s[(dropped, (("metric", "mcpnode_nvswitch_sxid_total"),))] == 0
    assert s[("mcpnode_ib_link_flaps_total", (("port", "mlx5_0/1"),))] == 2
    assert s[("mcpnode_ib_link_downed", (("port", "mlx5_0/1"),))] == 3
    assert not [name for name, _ in s if name.endswith("_created")]


def test_histogram_buckets_span_their_range(metrics: AgentMetrics) -> None:
    s = samples(metrics.render())
    latency = sorted(
        float(dict(labels)["le"])
        for name, labels in s
        if name == "mcpnode_loop_latency_seconds_bucket"
    )
    reconcile = sorted(
        float(dict(labels)["le"])
        for name, labels in s
        if name == "mcpnode_reconcile_seconds_bucket"
    )
    assert latency[0] == 0.0001 and latency[-2:] == [1.0, float("inf")]
    assert reconcile[0] == 0.0005 and reconcile[-2:] == [1.0, float("inf")]


def test_measured_gauges_are_absent_until_measured(metrics: AgentMetrics) -> None:
    got = families(metrics.render())
    assert not got & {
        "mcpnode_gpus",
        "mcpnode_nics",
        "mcpnode_tuning_drift_keys",
        "mcpnode_apply_last_result",
        "mcpnode_apply_last_timestamp_seconds",
        "mcpnode_pinned_processes",
        "mcpnode_audit_findings",
        "mcpnode_ib_link_downed",
    }
    s = samples(metrics.render())
    # Fixed label sets are there from the start, at 0, so rate() sees the first event.
    assert s[("mcpnode_events_total", (("source", "signal"),))] == 0
    assert s[("mcpnode_config_reload_total", (("result", "rejected"),))] == 0
    assert s[("mcpnode_http_connections_dropped_total", (("reason", "busy"),))] == 0
    assert s[("mcpnode_ready", ())] == 0


def test_record_apply_is_one_hot_and_defaults_to_now(metrics: AgentMetrics) -> None:
    before = time.time()
    metrics.record_apply("failed", writes=0)
    s = samples(metrics.render())
    assert s[("mcpnode_apply_last_result", (("result", "failed"),))] == 1
    assert s[("mcpnode_apply_last_result", (("result", "ok"),))] == 0
    assert before <= s[("mcpnode_apply_last_timestamp_seconds", ())] <= time.time()
    metrics.record_apply("ok", writes=2)
    s = samples(metrics.render())
    assert s[("mcpnode_apply_last_result", (("result", "failed"),))] == 0
    assert s[("mcpnode_apply_last_result", (("result", "ok"),))] == 1
    assert s[("mcpnode_apply_writes_total", ())] == 2


def test_given_up_key_returns_to_zero_and_drift_keys_counts_distinct(
    metrics: AgentMetrics,
) -> None:
    metrics.set_drift_state(drifted=["a", "b", "a"], given_up=["a"])
    metrics.set_drift_state(drifted=["b"], given_up=["b"])
    s = samples(metrics.render())
    assert s[("mcpnode_tuning_drift_keys", ())] == 1
    assert s[("mcpnode_drift_given_up", (("key", "a"),))] == 0
    assert s[("mcpnode_drift_given_up", (("key", "b"),))] == 1
    metrics.set_drift_state(drifted=[], given_up=[])
    s = samples(metrics.render())
    assert s[("mcpnode_tuning_drift_keys", ())] == 0
    assert s[("mcpnode_drift_given_up", (("key", "b"),))] == 0


def test_audit_findings_reset_every_status(metrics: AgentMetrics) -> None:
    metrics.set_audit_findings([Finding("a", Status.FAIL, "x"), Finding("b", Status.SKIP, "y")])
    metrics.set_audit_findings([Finding("a", Status.PASS, "x")])
    s = samples(metrics.render())
    got = {st.value: s[("mcpnode_audit_findings", (("status", st.value),))] for st in Status}
    assert got == {"PASS": 1, "WARN": 0, "FAIL": 0, "SKIP": 0, "INFO": 0}


@pytest.mark.parametrize(
    "call",
    [
        lambda m: m.count_event("bogus"),
        lambda m: m.record_apply("partial", writes=1),
        lambda m: m.record_apply("ok", writes=-1),
        lambda m: m.count_config_reload("maybe"),
        lambda m: m.count_dropped_connection("whatever"),
    ],
    ids=["event-source", "apply-result", "apply-writes", "reload-result", "drop-reason"],
)
def test_unbounded_or_bad_labels_are_refused(
    metrics: AgentMetrics, call: Callable[[AgentMetrics], None]
) -> None:
    with pytest.raises(ValueError):
        call(metrics)


HOST_GPUS = tuple(
    f"0000:{bus:02x}:00.0" for bus in (0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB)
)
HOST_SWITCHES = tuple(f"0000:{bus:02x}:00.0" for bus in (0x05, 0x06, 0x07, 0x08))


def _series(body: bytes, name: str) -> list[tuple[tuple[str, str], ...]]:
    return [labels for (n, labels) in samples(body) if n == name]


def test_xid_labels_are_held_to_the_hosts_devices() -> None:
    """A kernel log naming 20,000 distinct addresses (and 200,000 distinct XID numbers) makes
    one series per GPU or NVSwitch of this host and one `other`, and counts what went there."""
    m = AgentMetrics()
    m.set_devices(HOST_GPUS, HOST_SWITCHES)
    quiet = len(m.render())
    for i in range(20_000):
        m.count_xid(f"{i >> 13:04x}:{(i >> 5) & 0xFF:02x}:{i & 0x1F:02x}.0", 79)
        m.count_sxid(f"{i >> 13:04x}:{(i >> 5) & 0xFF:02x}:{i & 0x1F:02x}.0", 12028)
    for gpu in HOST_GPUS:
        m.count_xid(gpu, 79)
    for switch in HOST_SWITCHES:
        m.count_sxid(switch, 12028)
    body = m.render()
    xid = _series(body, "mcpnode_gpu_xid_total")
    sxid = _series(body, "mcpnode_nvswitch_sxid_total")
    assert len(xid) + len(sxid) <= len(HOST_GPUS) + len(HOST_SWITCHES) + 2
    assert {dict(x)["gpu"] for x in xid} == {*HOST_GPUS, "other"}
    assert {dict(x)["switch"] for x in sxid} == {*HOST_SWITCHES, "other"}
    assert len(body) - quiet < 4096, len(body) - quiet
    s = samples(body)
    dropped = "mcpnode_label_values_dropped_total"
    # the 20,000 addresses include the host's own devices: those are counted as theirs
    assert s[(dropped, (("metric", "mcpnode_gpu_xid_total"),))] == 20_000 - len(HOST_GPUS)
    assert s[(dropped, (("metric", "mcpnode_nvswitch_sxid_total"),))] == 20_000 - 4
    assert s[("mcpnode_gpu_xid_total", (("gpu", "other"), ("xid", "79")))] == 20_000 - 8
    assert s[("mcpnode_gpu_xid_total", (("gpu", HOST_GPUS[0]), ("xid", "79")))] == 2

    for number in range(200_000):
        m.count_xid(HOST_GPUS[2], 1000 + number)
    body = m.render()
    numbers = {dict(x)["xid"] for x in _series(body, "mcpnode_gpu_xid_total")}
    assert len(numbers) <= len(CATALOG) + MAX_ERROR_NUMBERS + 1 and "other" in numbers
    assert len(body) - quiet < 16384, len(body) - quiet
    # the exposition stays valid OpenMetrics (its parser is strict)
    text, _ctype = m.exposition("application/openmetrics-text; version=1.0.0")
    assert "mcpnode_label_values_dropped" in om_families(text)


def test_labels_before_the_devices_are_known_are_capped_too() -> None:
    m = AgentMetrics()
    for i in range(1000):
        m.count_xid(f"0000:{i >> 5:02x}:{i & 0x1F:02x}.0", 13)
    gpus = {dict(x)["gpu"] for x in _series(m.render(), "mcpnode_gpu_xid_total")}
    assert len(gpus) == MAX_DEVICES_UNKNOWN + 1 and "other" in gpus


def test_registries_are_isolated() -> None:
    a, b = AgentMetrics(), AgentMetrics()
    a.count_rediscovery()
    a.set_inventory(gpus=8, nics=2)
    sa, sb = samples(a.render()), samples(b.render())
    assert sa[("mcpnode_rediscoveries_total", ())] == 1
    assert sb[("mcpnode_rediscoveries_total", ())] == 0
    assert ("mcpnode_gpus", ()) not in sb


def test_loop_latency_hook_feeds_the_histogram(metrics: AgentMetrics) -> None:
    lp = Loop(Log(), on_latency=metrics.observe_loop_latency)
    try:
        fired: list[int] = []
        lp.call_later(0.0, lambda: fired.append(1), "t")
        pump(lp, lambda: bool(fired))
    finally:
        lp.close()
    assert samples(metrics.render())[("mcpnode_loop_latency_seconds_count", ())] == 1


# -- the endpoint -------------------------------------------------------------------------------


def test_head_has_the_headers_and_no_body(
    loop: Loop, metrics: AgentMetrics, server: MetricsServer
) -> None:
    code, headers, body = get(loop, server.port, method="HEAD")
    assert code == 200
    assert headers["content-type"] == CONTENT_TYPE
    assert int(headers["content-length"]) > 1000
    assert body == b""
    assert samples(metrics.render())[("mcpnode_scrapes_total", ())] == 1


def test_root_points_at_metrics(loop: Loop, server: MetricsServer) -> None:
    code, headers, body = get(loop, server.port, "/")
    assert code == 200
    assert headers["content-type"].startswith("text/html")
    assert b'href="/metrics"' in body


def test_query_string_is_ignored(loop: Loop, server: MetricsServer) -> None:
    code, _headers, body = get(loop, server.port, "/metrics?x=1")
    assert code == 200
    assert "mcpnode_ready" in families(body)


def test_unknown_path_is_404(loop: Loop, metrics: AgentMetrics, server: MetricsServer) -> None:
    code, headers, body = get(loop, server.port, "/metricsx")
    assert (code, headers["connection"]) == (404, "close")
    assert int(headers["content-length"]) == len(body)
    code, _headers, body = get(loop, server.port, "/nope", method="HEAD")
    assert (code, body) == (404, b"")
    assert samples(metrics.render())[("mcpnode_scrapes_total", ())] == 0


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "OPTIONS"])
def test_other_methods_are_405(loop: Loop, server: MetricsServer, method: str) -> None:
    code, headers, _body = get(loop, server.port, method=method)
    assert code == 405
    assert headers["allow"] == "GET, HEAD"


@pytest.mark.parametrize(
    "request_",
    [b"GARBAGE\r\n\r\n", b"GET /metrics\r\n\r\n", b"GET /metrics SPDY/3\r\n\r\n", b"\r\n\r\n"],
)
def test_malformed_request_line_is_400(loop: Loop, server: MetricsServer, request_: bytes) -> None:
    code, _headers, _body = parse(run_client(loop, lambda: exchange(server.port, request_)))
    assert code == 400


def test_http10_and_bare_lf_heads_are_answered(loop: Loop, server: MetricsServer) -> None:
    raw = run_client(loop, lambda: exchange(server.port, b"GET /metrics HTTP/1.0\n\n"))
    code, _headers, body = parse(raw)
    assert code == 200 and "mcpnode_ready" in families(body)


def test_head_split_over_many_packets(loop: Loop, server: MetricsServer) -> None:
    def client() -> bytes:
        with connect(server.port) as sock:
            for piece in (b"GET /met", b"rics HTTP/1.1\r\n", b"Host: x\r\n", b"\r\n"):
                sock.sendall(piece)
                time.sleep(0.02)
            return read_all(sock)

    assert parse(run_client(loop, client))[0] == 200


def test_oversized_head_is_431_and_closed(loop: Loop, server: MetricsServer) -> None:
    # No blank line at all: the server stops reading past the cap.
    request = b"GET /metrics HTTP/1.1\r\nX-Pad: " + b"a" * MAX_HEAD_BYTES
    code, _headers, _body = parse(run_client(loop, lambda: exchange(server.port, request)))
    assert code == 431
    pump(loop, lambda: server.connections == 0)


def test_complete_head_just_over_the_cap_is_431(loop: Loop, server: MetricsServer) -> None:
    pad = b"a" * (MAX_HEAD_BYTES - 30)
    request = b"GET /metrics HTTP/1.1\r\nX-Pad: " + pad + b"\r\n\r\n"
    assert len(request) > MAX_HEAD_BYTES
    assert parse(run_client(loop, lambda: exchange(server.port, request)))[0] == 431


def test_head_at_the_cap_is_answered(loop: Loop, server: MetricsServer) -> None:
    start = b"GET /metrics HTTP/1.1\r\nX-Pad: "
    request = start + b"a" * (MAX_HEAD_BYTES - len(start) - 4) + b"\r\n\r\n"
    assert len(request) == MAX_HEAD_BYTES
    assert parse(run_client(loop, lambda: exchange(server.port, request)))[0] == 200


def test_silent_client_is_closed_after_the_deadline(loop: Loop, metrics: AgentMetrics) -> None:
    srv = MetricsServer(loop, metrics, "127.0.0.1", 0, Log(), deadline_s=0.2)
    try:

        def client() -> tuple[bytes, float]:
            with connect(srv.port) as sock:
                t0 = time.monotonic()
                return read_all(sock), time.monotonic() - t0

        data, waited = run_client(loop, client)
        assert data == b""  # closed silently
        assert 0.15 < waited < 3.0
        assert srv.connections == 0
        s = samples(metrics.render())
        assert s[("mcpnode_http_connections_dropped_total", (("reason", "timeout"),))] == 1
    finally:
        srv.close()


def test_slow_head_is_closed_after_the_deadline(loop: Loop, metrics: AgentMetrics) -> None:
    srv = MetricsServer(loop, metrics, "127.0.0.1", 0, Log(), deadline_s=0.2)
    try:

        def client() -> bytes:
            with connect(srv.port) as sock:
                for ch in b"GET /metrics HTTP/1.1\r\n":
                    try:
                        sock.sendall(bytes([ch]))
                    except OSError:
                        break
                    time.sleep(0.05)
                try:
                    return read_all(sock)
                except ConnectionResetError:
                    return b""

        assert run_client(loop, client) == b""
        assert srv.connections == 0
    finally:
        srv.close()


def test_over_the_cap_the_oldest_idle_connection_is_evicted(
    loop: Loop, metrics: AgentMetrics
) -> None:
    """At the cap, a new connection takes the slot of the oldest one still silent: idle
    clients cannot keep a scraper out (test_agent_abuse.py: 500 of them)."""
    srv = MetricsServer(loop, metrics, "127.0.0.1", 0, Log(), max_connections=4)
    idle = [connect(srv.port) for _ in range(4)]
    try:
        pump(loop, lambda: srv.connections == 4)
        raw = run_client(loop, lambda: exchange(srv.port, b"GET /metrics HTTP/1.1\r\n\r\n"))
        assert parse(raw)[0] == 200
        assert srv.connections <= 4
        s = samples(metrics.render())
        assert s[("mcpnode_http_connections_dropped_total", (("reason", "evicted"),))] == 1
        assert s[("mcpnode_http_connections_dropped_total", (("reason", "busy"),))] == 0
        idle[0].settimeout(5)
        assert idle[0].recv(1) == b""  # the oldest was closed; the others are still open
        pump(loop, lambda: srv.connections == 3)
    finally:
        for sock in idle:
            sock.close()
        srv.close()


def test_many_concurrent_scrapes_all_answered(loop: Loop, server: MetricsServer) -> None:
    def client() -> list[int]:
        socks = [connect(server.port) for _ in range(20)]
        for sock in socks:
            sock.sendall(b"GET /metrics HTTP/1.1\r\n\r\n")
        codes = [parse(read_all(sock))[0] for sock in socks]
        for sock in socks:
            sock.close()
        return codes

    assert run_client(loop, client) == [200] * 20
    pump(loop, lambda: server.connections == 0)


def test_client_leaving_mid_request_is_forgotten(loop: Loop, server: MetricsServer) -> None:
    def leave() -> None:
        with connect(server.port) as sock:
            sock.sendall(b"GET /metr")

    def reset() -> None:
        sock = connect(server.port)
        sock.sendall(b"GET /metr")
        # SO_LINGER 0: close() sends RST, so the server's recv fails with ECONNRESET.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.close()

    run_client(loop, leave)
    run_client(loop, reset)
    pump(loop, lambda: server.connections == 0)
    assert get(loop, server.port)[0] == 200


def test_big_response_to_a_slow_reader_is_sent_whole(metrics: AgentMetrics) -> None:
    # ~4 MB: past the 1 MiB send buffer the server asks for and the client's small receive
    # window, so the server must finish it over several retries.
    for i in range(4000):
        metrics.count_drift_detected(f"k{i:04d}." + "x" * 1000)
    loop = RecordingLoop()
    srv = MetricsServer(loop, metrics, "127.0.0.1", 0, Log())
    try:

        def client() -> bytes:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.settimeout(10)
            with sock:
                sock.connect(("127.0.0.1", srv.port))
                sock.sendall(b"GET /metrics HTTP/1.1\r\n\r\n")
                time.sleep(0.3)  # let the server's socket buffer fill
                return read_all(sock)

        code, headers, body = parse(run_client(loop, client))
        assert code == 200
        assert int(headers["content-length"]) == len(body) > 4_000_000
        assert len([k for (n, k) in samples(body) if n == "mcpnode_drift_detected_total"]) == 4000
        pump(loop, lambda: srv.connections == 0)
        assert "metrics.send" in loop.timer_names
    finally:
        srv.close()
        loop.close()


def test_reader_that_never_reads_is_cut_at_the_deadline(loop: Loop, metrics: AgentMetrics) -> None:
    for i in range(4000):
        metrics.count_drift_detected(f"k{i:04d}." + "x" * 1000)
    srv = MetricsServer(loop, metrics, "127.0.0.1", 0, Log(), deadline_s=0.3)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    try:
        sock.connect(("127.0.0.1", srv.port))
        sock.sendall(b"GET /metrics HTTP/1.1\r\n\r\n")
        pump(loop, lambda: srv.connections == 1)
        pump(loop, lambda: srv.connections == 0, timeout_s=5)
        s = samples(metrics.render())
        assert s[("mcpnode_http_connections_dropped_total", (("reason", "timeout"),))] == 1
    finally:
        sock.close()
        srv.close()


def test_ipv6_loopback(loop: Loop, metrics: AgentMetrics) -> None:
    if not socket.has_ipv6:
        pytest.skip("no IPv6 in this Python")
    try:
        srv = MetricsServer(loop, metrics, "::1", 0, Log())
    except MetricsBindError as err:
        pytest.skip(f"no IPv6 loopback here: {err}")
    try:
        assert srv.address == f"[::1]:{srv.port}"
        raw = run_client(loop, lambda: exchange(srv.port, b"GET /metrics HTTP/1.1\r\n\r\n", "::1"))
        assert parse(raw)[0] == 200
    finally:
        srv.close()


def test_address_in_use_is_a_bind_error(loop: Loop, metrics: AgentMetrics) -> None:
    first = MetricsServer(loop, metrics, "127.0.0.1", 0, Log())
    try:
        with pytest.raises(MetricsBindError) as info:
            MetricsServer(loop, metrics, "127.0.0.1", first.port, Log())
        assert isinstance(info.value, McpnodeError)
        assert info.value.errno == errno.EADDRINUSE
        assert f"127.0.0.1:{first.port}" in str(info.value)
    finally:
        first.close()


@pytest.mark.parametrize("host", ["localhost", "256.1.1.1", "[::1]"])
def test_not_an_address_is_a_bind_error(loop: Loop, metrics: AgentMetrics, host: str) -> None:
    with pytest.raises(MetricsBindError, match="not an IP address"):
        MetricsServer(loop, metrics, host, 0, Log())


def test_address_not_on_this_host_is_a_bind_error(loop: Loop, metrics: AgentMetrics) -> None:
    before = fd_count()
    with pytest.raises(MetricsBindError) as info:
        MetricsServer(loop, metrics, "192.0.2.1", 0, Log())  # TEST-NET-1: never ours
    assert info.value.errno == errno.EADDRNOTAVAIL
    assert fd_count() == before


def test_out_of_fds_pauses_accepting_then_resumes(loop: Loop, metrics: AgentMetrics) -> None:
    log = Log()
    srv = MetricsServer(loop, metrics, "127.0.0.1", 0, log)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    client = connect(srv.port)  # queued in the backlog, not yet accepted
    try:
        # A limit at the lowest free fd number leaves none for accept(): EMFILE.
        lowest_free = os.dup(0)
        os.close(lowest_free)
        resource.setrlimit(resource.RLIMIT_NOFILE, (lowest_free, hard))
        loop.run_once(max_wait=0.5)
        assert [e for _lvl, e, _kw in log.events] == ["metrics.listening", "metrics.accept-paused"]
        assert "metrics.listen" not in loop.readers()
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    try:
        client.sendall(b"GET /metrics HTTP/1.1\r\n\r\n")
        bg = Bg(lambda: read_all(client))
        pump(loop, bg.done)
        assert parse(bg.result)[0] == 200
    finally:
        client.close()
        srv.close()


def test_close_frees_the_port_and_every_fd(loop: Loop, metrics: AgentMetrics) -> None:
    before = fd_count()
    srv = MetricsServer(loop, metrics, "127.0.0.1", 0, Log())
    port = srv.port
    assert get(loop, port)[0] == 200
    pending = connect(port)  # still open, unanswered, when the server closes
    pump(loop, lambda: srv.connections == 1)
    srv.close()
    srv.close()  # idempotent
    pending.close()
    assert fd_count() == before
    assert "metrics.listen" not in loop.readers()
    assert not [r for r in loop.readers() if r.startswith("metrics.")]
    again = MetricsServer(loop, metrics, "127.0.0.1", port, Log())
    try:
        assert again.port == port
        assert get(loop, port)[0] == 200
    finally:
        again.close()


def test_compliance_is_three_valued(metrics: AgentMetrics) -> None:
    metrics.set_compliance("base", True)
    s = samples(metrics.render())
    assert s[("mcpnode_tuning_compliance_known", ())] == 1
    assert s[("mcpnode_tuning_compliant", (("profile", "base"),))] == 1
    metrics.set_compliance("base", None)  # a key unreadable: no compliant series at all
    s = samples(metrics.render())
    assert s[("mcpnode_tuning_compliance_known", ())] == 0
    assert not any(name == "mcpnode_tuning_compliant" for name, _ in s)
    metrics.set_compliance("latency", False)
    s = samples(metrics.render())
    assert s[("mcpnode_tuning_compliant", (("profile", "latency"),))] == 0
    assert ("mcpnode_tuning_compliant", (("profile", "base"),)) not in s


# -- content negotiation and compression (codec/promtext.py's negotiate, gzip_accepted) ---------

# What Prometheus 2.x/3.x sends by default (scrape_protocols: OpenMetrics first).
PROMETHEUS_ACCEPT = (
    "application/openmetrics-text;version=1.0.0;q=0.5,application/openmetrics-text;"
    "version=0.0.1;q=0.4,text/plain;version=1.0.0;escaping=allow-utf-8;q=0.3,"
    "text/plain;version=0.0.4;q=0.2,*/*;q=0.1"
)


def get_with(loop: Loop, port: int, *headers: str, method: str = "GET") -> Any:
    lines = [f"{method} /metrics HTTP/1.1", "Host: x", *headers, "", ""]
    request = "\r\n".join(lines).encode("latin-1")
    return parse(run_client(loop, lambda: exchange(port, request)))


def om_families(body: bytes) -> set[str]:
    from prometheus_client.openmetrics.parser import (
        text_string_to_metric_families as om_text_to_families,
    )

    return {f.name for f in om_text_to_families(body.decode())}  # type: ignore[no-untyped-call]


@pytest.mark.parametrize(
    "accept", ["application/openmetrics-text; version=1.0.0", PROMETHEUS_ACCEPT]
)
def test_openmetrics_when_asked(
    loop: Loop, metrics: AgentMetrics, server: MetricsServer, accept: str
) -> None:
    feed(metrics)
    code, headers, body = get_with(loop, server.port, f"Accept: {accept}")
    assert code == 200
    assert headers["content-type"].startswith("application/openmetrics-text; version=1.0.0")
    assert headers["vary"] == "Accept, Accept-Encoding"
    assert body.endswith(b"# EOF\n")
    # OpenMetrics' own parser is strict (EOF, counter _total, no duplicate families).
    assert om_families(body) == ALL_FAMILIES
    assert b"_created" not in body


def test_text_format_versions(loop: Loop, metrics: AgentMetrics, server: MetricsServer) -> None:
    feed(metrics)
    _, plain, body = get_with(loop, server.port)
    assert plain["content-type"] == CONTENT_TYPE and families(body) == ALL_FAMILIES
    _, old, _ = get_with(loop, server.port, "Accept: text/plain;version=0.0.4")
    assert old["content-type"] == CONTENT_TYPE
    _, new, body = get_with(
        loop, server.port, "Accept: text/plain;version=1.0.0;escaping=allow-utf-8"
    )
    assert new["content-type"].startswith("text/plain; version=1.0.0")
    assert families(body) == ALL_FAMILIES
    # An Accept split over two fields is one list (RFC 9110 5.3): the second one is seen.
    _, split, _ = get_with(
        loop, server.port, "Accept: text/html", "Accept: application/openmetrics-text"
    )
    assert split["content-type"].startswith("application/openmetrics-text")


def test_gzip_when_accepted(loop: Loop, metrics: AgentMetrics, server: MetricsServer) -> None:
    import gzip

    feed(metrics)
    _, headers, body = get_with(loop, server.port, "Accept-Encoding: gzip, deflate")
    assert headers["content-encoding"] == "gzip"
    assert int(headers["content-length"]) == len(body)
    plain = gzip.decompress(body)
    assert families(plain) == ALL_FAMILIES
    assert len(body) * 3 < len(plain)  # the point of it
    _, identity, raw = get_with(loop, server.port, "Accept-Encoding: identity")
    assert "content-encoding" not in identity and families(raw) == ALL_FAMILIES
    # Both at once: gzipped OpenMetrics.
    _, both, body = get_with(
        loop,
        server.port,
        "Accept: application/openmetrics-text",
        "accept-encoding: GZIP",  # field names and codings are case-insensitive
    )
    assert both["content-encoding"] == "gzip"
    assert both["content-type"].startswith("application/openmetrics-text")
    assert om_families(gzip.decompress(body)) == ALL_FAMILIES


def test_head_with_gzip_has_the_compressed_length(
    loop: Loop, metrics: AgentMetrics, server: MetricsServer
) -> None:
    _, _, body = get_with(loop, server.port, "Accept-Encoding: gzip")
    _, headers, empty = get_with(loop, server.port, "Accept-Encoding: gzip", method="HEAD")
    assert empty == b"" and headers["content-encoding"] == "gzip"
    # The scrape counter moved in between: the lengths agree within a few bytes.
    assert abs(int(headers["content-length"]) - len(body)) < 16


def test_header_fields_are_parsed_strictly() -> None:
    from mcpnode.agent.http import _headers

    head = (
        b"GET /metrics HTTP/1.1\r\nAccept: a\r\nAccept : ignored\r\n no-colon\r\n"
        b"ACCEPT-Encoding:gzip \r\naccept: b\r\n\r\n"
    )
    assert _headers(head) == {"accept": "a, b", "accept-encoding": "gzip"}
