"""The agent's health watchers (mcpnode/agent/health.py) and what an XID becomes.

- HealthWatch on a copy of the HGX H100 fixture: the kernel log as the root's `dev/kmsg` file
  (backlog at start, new records on the timer), NVML's XID event set replayed from recordings
  the watcher itself made against tools/fixturegen/nvmlgen.py's simulation
  (tests/fixtures/nvml-events/), IB `link_downed` counters;
- LiveNvml's event-set and field-value calls decoded from pynvml's own ctypes structures;
- end to end, a real agent process: an Xid 79 appended to the root's kernel log becomes
  `mcpnode_gpu_xid_total{gpu,xid}`, a `gpu.xid` log event, a republished manifest marking GPU 2
  unhealthy and NFD labels saying so; a rising `link_downed` becomes `ib.link-flap` and
  `mcpnode_ib_link_flaps_total`.
"""

from __future__ import annotations

import ctypes
import itertools
import json
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mcpnode.agent.health import HealthWatch, NvmlXidEvents, parse_records
from mcpnode.audit.xid import SxidEvent, XidEvent
from mcpnode.host import Host
from mcpnode.topology.discover import discover_host
from mcpnode.topology.model import Topology
from mcpnode.topology.nvml import RecordedNvml
from tests.agent.test_agent_metrics import Log, samples
from tests.support import auditroot
from tests.support.agentproc import AgentProc
from tests.support.fixtures import RootFactory
from tools.fixturegen import fixturegen, nvmlgen

SICK = auditroot.SICK
XID_79 = auditroot.XID_79[1]


def event_calls(case: str) -> list[dict[str, Any]]:
    calls: list[dict[str, Any]] = json.loads((nvmlgen.EVENTS_DIR / f"{case}.json").read_text())[
        "calls"
    ]
    return calls


def test_event_recordings_are_current(tmp_path: Path) -> None:
    for path in nvmlgen.write_event_cases(tmp_path):
        committed = nvmlgen.EVENTS_DIR / path.name
        assert path.read_bytes() == committed.read_bytes(), (
            f"{committed} differs from the generator; regenerate: "
            "python3 tools/fixturegen/fixturegen.py --nvml-cases tests/fixtures/nvml"
        )


class Seen:
    def __init__(self) -> None:
        self.xids: list[tuple[list[XidEvent], bool]] = []
        self.sxids: list[tuple[list[SxidEvent], bool]] = []
        self.flaps: list[tuple[str, int, int]] = []

    def watch(self, host: Host, topo: Topology, backend: Any, log: Log) -> HealthWatch:
        return HealthWatch(
            host,
            backend,
            topo,
            log,
            on_xids=lambda e, b: self.xids.append((e, b)),
            on_sxids=lambda e, b: self.sxids.append((e, b)),
            on_flap=lambda p, a, b: self.flaps.append((p, a, b)),
        )


@pytest.fixture
def hgx(audit_root: RootFactory) -> Iterator[tuple[Path, Host, Topology]]:
    root = audit_root(
        auditroot.HGX, files={"dev/kmsg": auditroot.kmsg(auditroot.HGX, auditroot.XID_13)}
    )
    with Host(root) as host:
        yield root, host, discover_host(host)


def test_kernel_log_backlog_then_new_records(hgx: tuple[Path, Host, Topology]) -> None:
    root, host, topo = hgx
    seen, log = Seen(), Log()
    w = seen.watch(host, topo, RecordedNvml(event_calls("xid-79-then-13")), log)
    try:
        assert w.start() is None  # a regular file: polled on the health timer
        ((backlog, is_backlog),) = seen.xids
        assert is_backlog and [(str(e.address), e.xid) for e in backlog] == [(SICK, 13)]
        with (root / "dev/kmsg").open("a") as fh:
            fh.write(fixturegen.kmsg_record(9000, 210_000_000_000, XID_79, 4))
            fh.write(
                fixturegen.kmsg_record(
                    9001,
                    210_000_000_500,
                    "nvidia-nvswitch2: SXid "
                    "(PCI:0000:07:00.0): 24007, Fatal, Link 28 crumbstore ECC DBE Error",
                    3,
                )
            )
        w.poll()
        (new, is_backlog) = seen.xids[-1]
        assert not is_backlog and [(e.xid, e.usec) for e in new] == [(79, 210_000_000_000)]
        assert [(str(e.switch), e.severity) for e in seen.sxids[-1][0]] == [
            ("0000:07:00.0", "fatal")
        ]
        # NVML delivered Xid 79 and 13 too: the kernel log carries them, they count once
        for _ in range(3):
            w.poll()
        assert len(seen.xids) == 2
        assert [e for e in log.events if e[1] == "nvml.xid"], "logged at debug"
    finally:
        w.close()


def test_nvml_events_count_when_the_log_cannot_be_read(audit_root: RootFactory) -> None:
    root = audit_root(auditroot.HGX, files={"dev/kmsg": None})
    seen, log = Seen(), Log()
    with Host(root) as host:
        w = seen.watch(host, discover_host(host), RecordedNvml(event_calls("xid-79-then-13")), log)
        try:
            w.start()
            assert w.kmsg is None and any(e[1] == "kmsg.unavailable" for e in log.events)
            assert w.events is not None and w.events.registered == list(range(8))
            got = []
            for _ in range(4):  # quiet, Xid 79 on GPU 2, Xid 13 on GPU 5, quiet
                w.poll()
                got.append([(str(e.address), e.xid, e.source) for x in seen.xids for e in x[0]])
            assert got[0] == []
            assert got[1] == [(SICK, 79, "nvml")]
            assert got[3] == [(SICK, 79, "nvml"), ("0000:ab:00.0", 13, "nvml")]
            assert [(str(e.address), e.xid) for e in w.nvml_xids] == [
                (SICK, 79),
                ("0000:ab:00.0", 13),
            ]
        finally:
            w.close()


@pytest.mark.parametrize(
    ("case", "reason", "warning"),
    [
        ("register-not-supported", "no GPU accepted the XID event: GPU 0: NotSupported", None),
        ("wait-function-not-found", None, "nvml-events.wait-failed"),
    ],
)
def test_nvml_event_set_refused(case: str, reason: str | None, warning: str | None) -> None:
    topo_root = auditroot.HOSTS / auditroot.HGX
    with Host(topo_root) as host:
        topo = discover_host(host)
    addresses = {g.nvml.index: g.address for g in topo.gpus if g.nvml is not None}
    log = Log()
    events = NvmlXidEvents(RecordedNvml(event_calls(case)), addresses, log)
    events.register()
    if reason is not None:
        assert events.reason is not None and events.reason.startswith(reason)
        assert events.registered == []
    assert events.poll() == []
    if warning is not None:
        assert [e for e in log.events if e[1] == warning] == [
            ("warning", warning, {"error": "FunctionNotFound"})
        ]
    events.close()


def test_ib_link_flap_is_a_rise_of_link_downed(hgx: tuple[Path, Host, Topology]) -> None:
    root, host, topo = hgx
    seen, log = Seen(), Log()
    w = seen.watch(host, topo, None, log)
    counter = auditroot.device_dir(root, "0000:19:00.0") / "infiniband/mlx5_0/ports/1/counters"
    try:
        w.start()
        assert w.link_downed["mlx5_0/1"] == 0 and seen.flaps == []
        (counter / "link_downed").write_text("2\n")
        w.poll()
        assert seen.flaps == [("mlx5_0/1", 0, 2)]
        w.poll()
        assert len(seen.flaps) == 1  # no rise, no flap
    finally:
        w.close()


# -- LiveNvml's decoding of events and field values, from pynvml's own structures ------------


class StandInNvml:
    """pynvml's functions LiveNvml calls for events, field values and P2P, answering with the
    binding's own ctypes types (device handles are real `c_nvmlDevice_t` pointers): the only
    stand-in is the driver."""

    BASE = 0x1000

    def __init__(self) -> None:
        import pynvml

        self.p = pynvml
        self.NVMLError = pynvml.NVMLError
        self.freed: list[Any] = []

    def _index(self, handle: Any) -> int:
        return int(ctypes.cast(handle, ctypes.c_void_p).value or 0) - self.BASE

    def nvmlDeviceGetHandleByIndex(self, i: int) -> Any:
        return ctypes.cast(ctypes.c_void_p(self.BASE + i), self.p.c_nvmlDevice_t)

    def nvmlDeviceGetIndex(self, handle: Any) -> int:
        return self._index(handle)

    def nvmlEventSetCreate(self) -> str:
        return "set"

    def nvmlDeviceRegisterEvents(self, h: Any, mask: int, s: str) -> None:
        assert (self._index(h), mask, s) == (2, 8, "set")

    def nvmlEventSetWait_v2(self, s: str, timeout: int) -> Any:
        assert timeout == 0
        data = self.p.c_nvmlEventData_t()
        data.device = self.nvmlDeviceGetHandleByIndex(2)
        data.eventType = 8
        data.eventData = 79
        return data

    def nvmlEventSetFree(self, s: str) -> None:
        self.freed.append(s)

    def nvmlDeviceGetFieldValues(self, h: Any, ids: list[tuple[int, int]]) -> Any:
        ((field, scope),) = ids
        values = (self.p.c_nvmlFieldValue_t * 1)()
        values[0].fieldId, values[0].scopeId = field, scope
        if scope == 17:
            values[0].nvmlReturn = 3  # NotSupported for this link only
            return values
        values[0].valueType = 1  # unsigned int
        values[0].value.uiVal = 26562
        return values

    def nvmlDeviceGetP2PStatus(self, a: Any, b: Any, caps: int) -> int:
        return 0 if (self._index(a), self._index(b), caps) == (0, 1, 0) else 1


def test_live_nvml_decodes_events_fields_and_p2p() -> None:
    from mcpnode.topology.nvml import LiveNvml, NvmlNotSupported

    live = LiveNvml()
    stand_in = StandInNvml()
    live._nvml = stand_in  # what _load() keeps after nvmlInit
    assert live.call("nvmlEventSetCreate") == 1
    assert live.call("nvmlDeviceRegisterEvents", 2, 8, 1) is None
    assert live.call("nvmlEventSetWait_v2", 1, 0) == {
        "device": 2,
        "eventType": 8,
        "eventData": 79,
    }
    assert live.call("nvmlDeviceGetFieldValues", 0, 164, 3) == 26562
    with pytest.raises(NvmlNotSupported):
        live.call("nvmlDeviceGetFieldValues", 0, 164, 17)
    assert live.call("nvmlDeviceGetP2PStatus", 0, 1, 0) == 0
    assert live.call("nvmlDeviceGetP2PStatus", 1, 0, 0) == 1
    live.call("nvmlEventSetFree", 1)
    assert stand_in.freed == ["set"]
    live._nvml = None  # nothing to shut down


# -- end to end: the agent process -------------------------------------------------------------

CONFIG = """
[tuning]
profile = "base"
[drift]
interval = 30
[metrics]
listen = "127.0.0.1:0"
[export]
kinds = ["nfd"]
[health]
interval = 0.2
[log]
level = "debug"
"""
NFD = "etc/kubernetes/node-feature-discovery/features.d/mcpnode"


def _labels(root: Path) -> dict[str, str]:
    lines = (root / NFD).read_text().splitlines()
    return dict(x.split("=", 1) for x in lines if x and not x.startswith("#"))


def _metrics(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        return samples(resp.read())


def test_agent_turns_an_xid_into_a_metric_an_event_and_an_unhealthy_gpu(
    tmp_path: Path, audit_root: RootFactory
) -> None:
    root = audit_root(auditroot.HGX)
    (root / "etc/mcpnode").mkdir(parents=True, exist_ok=True)
    (root / "etc/mcpnode/mcpnode.toml").write_text(CONFIG)
    agent = AgentProc(["--root", str(root)], tmp_path, watchdog_usec=None)
    try:
        agent.wait_message("READY=1")
        listening = agent.wait_event("metrics.listening")
        port = int(listening["address"].rsplit(":", 1)[1])
        before = json.loads((root / "run/mcpnode/manifest.json").read_text())
        assert before["gpus"][2]["health"] == {"status": "ok", "failed": [], "warned": []}
        assert _labels(root)["mcpnode.io/gpu-unhealthy-count"] == "0"
        assert ("mcpnode_gpu_xid_total", (("gpu", SICK), ("xid", "79"))) not in _metrics(port)

        t = agent.now()
        with (root / "dev/kmsg").open("a") as fh:
            fh.write(fixturegen.kmsg_record(9000, 210_000_000_000, XID_79, 4))
        event = agent.wait_event("gpu.xid", t, gpu=SICK, xid=79)
        assert (event["level"], event["action"], event["cause"]) == (
            "error",
            "RESTART_BM",
            "CONTACT_SUPPORT",  # NVIDIA's investigatory action: the catalogue names no cause
        )
        assert event["name"] == "GPU has fallen off the bus"
        published = agent.wait_event("manifest.published", t, reason="xid")
        agent.wait_event("export.written", t, kind="nfd", reason="xid")
        after = json.loads((root / "run/mcpnode/manifest.json").read_text())
        assert after["content_hash"] == published["hash"] != before["content_hash"]
        assert after["gpus"][2]["health"] == {
            "status": "unhealthy",
            "failed": ["gpu.xid"],
            "warned": [],
        }
        assert all(g["health"]["status"] == "ok" for i, g in enumerate(after["gpus"]) if i != 2)
        assert "gpu.xid" in after["audit"]["failed"]
        labels = _labels(root)
        assert (labels["mcpnode.io/gpu-unhealthy-count"], labels["mcpnode.io/gpu-unhealthy"]) == (
            "1",
            "2",
        )
        got = _metrics(port)
        assert got[("mcpnode_gpu_xid_total", (("gpu", SICK), ("xid", "79")))] == 1.0

        # an IB link flap: link_downed rises, a metric and a log event, republished
        t = agent.now()
        counter = auditroot.device_dir(root, "0000:19:00.0") / "infiniband/mlx5_0/ports/1"
        (counter / "counters/link_downed").write_text("1\n")
        flap = agent.wait_event("ib.link-flap", t, port="mlx5_0/1")
        assert (flap["link_downed_before"], flap["link_downed"]) == (0, 1)
        agent.wait_event("manifest.published", t, reason="ib-flap")
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            got = _metrics(port)
            if got.get(("mcpnode_ib_link_downed", (("port", "mlx5_0/1"),))) == 1.0:
                break
            time.sleep(0.05)
        assert got[("mcpnode_ib_link_flaps_total", (("port", "mlx5_0/1"),))] == 1.0
        assert got[("mcpnode_ib_link_downed", (("port", "mlx5_0/1"),))] == 1.0
        assert agent.stop() == 0
    finally:
        agent.close()


# -- a hostile or flooded kernel log -------------------------------------------------------------


def test_records_with_numbers_past_their_bounds_are_skipped_and_counted() -> None:
    good = fixturegen.kmsg_record(9000, 1, XID_79, 4).rstrip("\n")
    huge = "NVRM: Xid (PCI:0000:3a:00): " + "7" * 5000 + ", pid=1, name=x, y"
    wide = "NVRM: Xid (PCI:0000:3a:00): 4294967296, pid=1, name=x, y"  # 2**32
    sxid = "nvidia-nvswitch2: SXid (PCI:0000:07:00.0): " + "1" * 4400 + ", Fatal, z"
    records = [
        fixturegen.kmsg_record(9001 + i, 2, m, 4).rstrip("\n")
        for i, m in enumerate((huge, wide, sxid))
    ]
    xids, sxids, skipped = parse_records([good, *records, "not a record"])
    assert [(str(e.address), e.xid) for e in xids] == [(SICK, 79)]
    assert sxids == [] and skipped == 3


def _vm_rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def _scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    # a long timeout: the scrape may wait behind the republish after a storm (its audit reads
    # the whole log, 16 MiB here, pinging the watchdog between batches); the watchdog's gaps
    # are what this test asserts
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=60) as resp:
        return samples(resp.read())


def _xid_total(port: int) -> float:
    return sum(v for (name, _), v in _scrape(port).items() if name == "mcpnode_gpu_xid_total")


def _wait_counted(agent: AgentProc, port: int, count: int, timeout: float = 600) -> None:
    """Until the agent has counted `count` XIDs. Not through AgentProc.wait_for: it holds the
    lock its stderr reader needs while it asks, and a scrape can wait behind a republish."""
    deadline = time.monotonic() + timeout
    while _xid_total(port) < count:
        assert agent.proc.poll() is None, agent.stderr_tail()
        assert time.monotonic() < deadline, f"{count} XIDs not counted: {agent.stderr_tail()}"
        time.sleep(0.2)


def _pings(agent: AgentProc, since: float) -> list[float]:
    """When WATCHDOG=1 came: the last one before `since`, and every one after."""
    pings = [at for at, m in agent.messages if m == "WATCHDOG=1"]
    return [at for at in pings if at < since][-1:] + [at for at in pings if at >= since]


def _flood(start: int, count: int) -> str:
    """`count` Xid 79 records, over 20,000 distinct addresses (the host's GPU 2 among them)."""
    return "".join(
        fixturegen.kmsg_record(
            start + i,
            210_000_000_000 + start + i,
            f"NVRM: Xid (PCI:0000:{(i % 20_000) >> 5 & 0xFF:02x}:{i & 0x1F:02x}): 79, pid=7, "
            "name=python3, GPU has fallen off the bus.",
            4,
        )
        for i in range(count)
    )


def test_agent_under_a_kernel_log_flood_keeps_its_watchdog_and_its_memory(
    tmp_path: Path,
    audit_root: RootFactory,
) -> None:
    """300,000 XIDs appended to the kernel log: the agent reads them in batches and its
    republish's audit counts them batch by batch, so the watchdog keeps being sent through a
    100,000-record burst and the republish after it (systemd kills the unit after WatchdogSec
    without one), nothing per event is kept (its RSS stays within 5 MiB of idle), the metrics'
    labels are held to its GPUs, and it says what it skipped."""
    root = audit_root(auditroot.HGX)
    bad = fixturegen.kmsg_record(1, 0, "x", 6).replace(",1,", "," + "9" * 5000 + ",", 1)
    with (root / "dev/kmsg").open("a") as fh:
        fh.write(bad)  # a 5,000-digit sequence number in the backlog: skipped, counted
    (root / "etc/mcpnode").mkdir(parents=True, exist_ok=True)
    (root / "etc/mcpnode/mcpnode.toml").write_text(
        CONFIG.replace('level = "debug"', 'level = "info"')
    )
    # WatchdogSec: the agent pings every half of it (sd_watchdog_enabled(3)); systemd kills it
    # when a whole one passes without a ping. The batches keep each callback to tens of ms; the
    # republish after the storm reads the whole log, and pings between its batches.
    watchdog_s = 2.0
    agent = AgentProc(["--root", str(root)], tmp_path, watchdog_usec=int(watchdog_s * 1e6))
    try:
        agent.wait_message("READY=1")
        skipped = agent.wait_event("kmsg.skipped")
        assert skipped["records"] == 1
        port = int(agent.wait_event("metrics.listening")["address"].rsplit(":", 1)[1])
        _metrics(port)
        time.sleep(2 * 0.2 + 1)  # a few health ticks and a scrape: the agent idle, warmed up
        idle_kib = _vm_rss_kib(agent.proc.pid)

        t = agent.now()
        with (root / "dev/kmsg").open("a") as fh:
            fh.write(_flood(10_000, 100_000))
        _wait_counted(agent, port, 100_000)
        published = agent.wait_event("manifest.published", t, reason="xid")  # GPU 2 failed
        agent.wait_for("two pings after", lambda: len(_pings(agent, published["_t"])) >= 3)
        pings = _pings(agent, t)
        gaps = [b - a for a, b in itertools.pairwise(pings)]
        assert max(gaps) < watchdog_s, gaps

        for start in (200_000, 300_000):  # 12 MB each: the watcher keeps up to 16 MiB behind
            with (root / "dev/kmsg").open("a") as fh:
                fh.write(_flood(start, 100_000))
            _wait_counted(agent, port, start)
        got = _scrape(port)
        xid_series = [labels for name, labels in got if name == "mcpnode_gpu_xid_total"]
        assert len(xid_series) <= 8 + 1  # the host's GPUs and `other`
        assert (
            got[("mcpnode_label_values_dropped_total", (("metric", "mcpnode_gpu_xid_total"),))] > 0
        )
        time.sleep(1)
        after_kib = _vm_rss_kib(agent.proc.pid)
        # Nothing per event is kept, by the watcher or by the republish's audit, which counts
        # the log batch by batch (audit/gpu_xid.py read_log); what remains is one batch's
        # allocations and the tallies the findings are made of.
        assert after_kib - idle_kib < 5 * 1024, (idle_kib, after_kib)
        gaps = [b - a for a, b in itertools.pairwise(_pings(agent, t))]
        assert max(gaps) < watchdog_s, gaps  # through all three floods and their republishes
        assert agent.event("gpu.xid.more") is not None  # a storm is summarised, not logged whole
        assert agent.stop() == 0
    finally:
        agent.close()
