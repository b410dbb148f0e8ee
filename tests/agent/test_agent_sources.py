"""The agent's event sources against the real things: pipes, signals, kernel netlink.

- InjectSource runs in this process, over an os.pipe.
- SignalSource runs in a child python: signal handlers and the wakeup fd are process-global,
  and pytest's own must stay as they are.
- LinkSource and UdevSource run in a child started by `unshare --net`: the veth pair it makes
  and deletes exists only in that fresh network namespace (since Linux 4.18 a netdev's uevents
  go to the netns that owns it, so the "kernel" uevent group sees them there too). This
  machine's own links are never touched.

Each child prints one JSON object on its last stdout line.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mcpnode.agent.loop import Loop
from mcpnode.agent.sources import DeviceEvent, InjectSource
from tests.support.nschild import run_child

REPO = Path(__file__).resolve().parents[2]


# -- InjectSource ------------------------------------------------------------------------------


class Inject:
    def __init__(self) -> None:
        self.r, self.w = os.pipe()
        self.events: list[DeviceEvent] = []
        self.bad: list[str] = []
        self.source = InjectSource(self.r, self.events.append, self.bad.append)

    def send(self, data: bytes) -> None:
        os.write(self.w, data)
        self.source.on_readable()

    def close_writer(self) -> None:
        os.close(self.w)
        self.w = -1


@pytest.fixture
def inject() -> Iterator[Inject]:
    i = Inject()
    yield i
    i.source.close()
    if i.w >= 0:
        os.close(i.w)


ADD_GPU = b'{"action": "add", "subsystem": "pci", "name": "0000:3a:00.0"}'
LINK_UP = (
    b'{"source": "netlink", "action": "newlink", "subsystem": "net", "name": "ib0", "detail": "UP"}'
)


def test_inject_lines(inject: Inject) -> None:
    inject.send(ADD_GPU + b"\n" + LINK_UP + b"\n")
    assert inject.events == [
        DeviceEvent("inject", "add", "pci", "0000:3a:00.0", ""),
        DeviceEvent("netlink", "newlink", "net", "ib0", "UP"),
    ]
    assert inject.bad == []
    assert not inject.source.closed


def test_inject_partial_line_completed_later(inject: Inject) -> None:
    inject.send(ADD_GPU[:20])
    assert inject.events == []
    inject.send(ADD_GPU[20:] + b"\n" + LINK_UP[:7])
    assert [e.name for e in inject.events] == ["0000:3a:00.0"]
    inject.send(LINK_UP[7:] + b"\n\n   \n")  # blank lines are nothing, not bad
    assert [e.name for e in inject.events] == ["0000:3a:00.0", "ib0"]
    assert inject.bad == []


def test_inject_split_across_many_reads(inject: Inject) -> None:
    data = (ADD_GPU + b"\n") * 3
    for b in data:
        inject.send(bytes([b]))
    assert len(inject.events) == 3 and inject.bad == []


def test_inject_more_than_one_read(inject: Inject) -> None:
    line = b'{"action": "change", "subsystem": "net", "name": "eth0", "detail": "' + b"x" * 500
    line += b'"}\n'
    fcntl.fcntl(inject.w, fcntl.F_SETPIPE_SZ, 1 << 18)  # room for it all before the read
    inject.send(line * 200)  # 100 KB: more than one os.read of 64 KiB
    assert len(inject.events) == 200
    assert inject.events[0].detail == "x" * 500


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        (b"not json", "JSONDecodeError"),
        (b'{"subsystem": "pci"}', "KeyError: 'action'"),
        (b'{"action": "add"}', "KeyError: 'subsystem'"),
        (b'["add", "pci"]', "AttributeError"),
        (b'"add"', "AttributeError"),
        (b"42", "AttributeError"),
        (b"\xff\xfe{", "UnicodeDecodeError"),
    ],
)
def test_inject_bad_lines_are_reported_not_delivered(
    inject: Inject, line: bytes, reason: str
) -> None:
    inject.send(line + b"\n" + ADD_GPU + b"\n")
    assert [e.name for e in inject.events] == ["0000:3a:00.0"]  # the good one after it still goes
    (bad,) = inject.bad
    assert reason in bad
    assert repr(line)[:20] in bad  # names the line


def test_inject_bad_line_is_truncated_in_the_report(inject: Inject) -> None:
    inject.send(b"x" * 5000 + b"\n")
    (bad,) = inject.bad
    assert len(bad) < 400


def test_inject_eof_sets_closed(inject: Inject) -> None:
    inject.send(ADD_GPU + b"\n")
    before = inject.source.closed
    inject.close_writer()
    inject.source.on_readable()
    assert (before, inject.source.closed) == (False, True)
    assert len(inject.events) == 1


def test_inject_last_line_without_newline_at_eof(inject: Inject) -> None:
    """`printf '%s' '{...}' > fifo`: the writer closes without a final newline; the event
    still counts (it was lost)."""
    os.write(inject.w, ADD_GPU)
    inject.close_writer()
    inject.source.on_readable()
    assert inject.source.closed
    assert [e.name for e in inject.events] == ["0000:3a:00.0"]


def test_inject_on_a_loop(inject: Inject) -> None:
    class Log:
        def error(self, event: str, **kw: Any) -> None:
            raise AssertionError(f"{event} {kw}")

        warning = info = debug = error

    loop = Loop(Log())
    try:
        loop.add_reader(inject.source, inject.source.on_readable, inject.source.name)
        os.write(inject.w, ADD_GPU + b"\n")
        loop.run_once(max_wait=1.0)
        assert [e.action for e in inject.events] == ["add"]
        assert loop.readers() == ["inject"]
    finally:
        loop.close()


def test_inject_close_twice(inject: Inject) -> None:
    inject.source.close()
    reused = os.open(os.devnull, os.O_RDONLY)  # likely the number the source just closed
    try:
        inject.source.close()  # must not close `reused`
        os.fstat(reused)
    finally:
        os.close(reused)


# -- SignalSource ------------------------------------------------------------------------------

SIGNAL_CHILD = r"""
import json, os, signal, socket, sys
from mcpnode.agent.loop import Loop
from mcpnode.agent.sources import SignalSource

report = {"errors": []}

class Log:
    def error(self, event, **kw):
        report["errors"].append(f"{event} {kw}")
    info = warning = error

def mine(signum, frame):
    pass

# What was there before, to be restored by close(): a Python handler for SIGHUP, the default
# for SIGTERM, Python's KeyboardInterrupt handler for SIGINT, and a wakeup fd of our own.
signal.signal(signal.SIGHUP, mine)
signal.signal(signal.SIGTERM, signal.SIG_DFL)
prev_r, prev_w = socket.socketpair()
prev_w.setblocking(False)
signal.set_wakeup_fd(prev_w.fileno())

got = []
loop = Loop(Log())

def on_signal(signum):
    got.append(signum)
    if signum == signal.SIGTERM:
        loop.stop()

source = SignalSource(on_signal)
loop.add_reader(source, source.on_readable, source.name)
report["installed"] = {
    int(s): signal.getsignal(s) not in (mine, signal.SIG_DFL, signal.default_int_handler)
    for s in SignalSource.SIGNALS
}

def send():
    os.kill(os.getpid(), signal.SIGHUP)
    os.kill(os.getpid(), signal.SIGTERM)

loop.call_later(0.01, send, "send")
loop.call_later(10.0, loop.stop, "timeout")
loop.run()
report["got"] = got
loop.remove_reader(source)
source.close()
report["restored"] = {
    "SIGHUP": signal.getsignal(signal.SIGHUP) is mine,
    "SIGTERM": signal.getsignal(signal.SIGTERM) is signal.SIG_DFL,
    "SIGINT": signal.getsignal(signal.SIGINT) is signal.default_int_handler,
    "wakeup_fd": signal.set_wakeup_fd(-1) == prev_w.fileno(),
}
print(json.dumps(report))
"""


def test_signals_arrive_on_the_loop_in_order() -> None:
    report = run_child([], SIGNAL_CHILD, {})
    assert report["got"] == [signal.SIGHUP, signal.SIGTERM]
    assert report["installed"] == {str(int(s)): True for s in (1, 15, 2)}


def test_close_restores_the_previous_handlers() -> None:
    report = run_child([], SIGNAL_CHILD, {})
    assert report["restored"] == {
        "SIGHUP": True,
        "SIGTERM": True,
        "SIGINT": True,
        "wakeup_fd": True,
    }


# -- LinkSource and UdevSource: real kernel events in a fresh network namespace ------------------

NETNS_CHILD = r"""
import json, socket, subprocess, sys, time
from mcpnode.agent.loop import Loop
from mcpnode.agent.sources import LinkSource, UdevSource

params = json.loads(sys.argv[1])
ip = params["ip"]
report = {"errors": [], "events": []}

class Log:
    def error(self, event, **kw):
        report["errors"].append(f"{event} {kw}")
    info = warning = error

def pump_until_quiet(loop, quiet=0.5, limit=10.0):
    # until no event arrived for `quiet` seconds (kernel netlink delivery is immediate, but
    # the uevents of a veth pair come in bursts)
    end = time.monotonic() + limit
    seen, last = len(report["events"]), time.monotonic()
    while time.monotonic() < end and time.monotonic() - last < quiet:
        loop.run_once(max_wait=0.05)
        if len(report["events"]) != seen:
            seen, last = len(report["events"]), time.monotonic()

def record(event):
    report["events"].append([event.source, event.action, event.subsystem, event.name,
                             event.detail])

try:
    loop = Loop(Log())
    link = LinkSource(record)
    loop.add_reader(link, link.on_readable, link.name)
    if params["mode"] == "events":
        udev = UdevSource(record, "kernel")
        loop.add_reader(udev, udev.on_readable, udev.name)
        for args in (["link", "add", "vt0", "type", "veth", "peer", "name", "vt1"],
                     ["link", "set", "vt0", "up"],
                     ["link", "del", "vt0"]):
            subprocess.run([ip, *args], check=True, capture_output=True)
        pump_until_quiet(loop)
    else:  # overrun: a receive buffer too small for a burst, read only after the burst
        peek = socket.socket(fileno=socket.dup(link.fileno()))  # the same socket
        peek.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1)  # the kernel's minimum
        peek.detach()
        for n in range(params["pairs"]):
            subprocess.run([ip, "link", "add", f"a{n}", "type", "veth", "peer", "name", f"b{n}"],
                           check=True, capture_output=True)
        pump_until_quiet(loop)
        # after the overrun, the source still reads what comes next
        subprocess.run([ip, "link", "del", "a0"], check=True, capture_output=True)
        pump_until_quiet(loop)
    link.close()
except Exception as err:
    report["errors"].append(f"{type(err).__name__}: {err}")
print(json.dumps(report))
"""


def netns_skip_reason() -> str | None:
    if sys.platform != "linux":
        return "needs Linux network namespaces"
    if os.geteuid() != 0:
        return "needs root: unshare --net and ip link add inside the namespace"
    if shutil.which("unshare") is None:
        return "`unshare` (util-linux) is not installed"
    if ip_tool() is None:
        return "`ip` (iproute2) is not installed"
    probe = subprocess.run(
        ["unshare", "--net", "--", "true"], capture_output=True, text=True, check=False
    )
    if probe.returncode != 0:
        return f"cannot create a network namespace here: {probe.stderr.strip() or probe.returncode}"
    return None


def ip_tool() -> str | None:
    for candidate in ("/sbin/ip", "/usr/sbin/ip"):
        if os.access(candidate, os.X_OK):
            return candidate
    return shutil.which("ip")


@pytest.fixture(scope="module")
def netns_events() -> list[tuple[str, str, str, str, str]]:
    reason = netns_skip_reason()
    if reason:
        pytest.skip(reason)
    report = run_child(["unshare", "--net", "--"], NETNS_CHILD, {"ip": ip_tool(), "mode": "events"})
    return [tuple(e) for e in report["events"]]


def test_netlink_newlink_and_dellink(netns_events: list[tuple[str, str, str, str, str]]) -> None:
    links = [(a, name, detail) for src, a, sub, name, detail in netns_events if src == "netlink"]
    assert all(sub == "net" for src, _, sub, _, _ in netns_events if src == "netlink")
    new = {(name, detail) for a, name, detail in links if a == "newlink"}
    assert ("vt0", "DOWN") in new and ("vt1", "DOWN") in new
    # vt0 up with its peer down: the kernel says the lower layer is down (RFC 2863 operstate)
    assert ("vt0", "LOWERLAYERDOWN") in new
    operstates = {"UNKNOWN", "NOTPRESENT", "DOWN", "LOWERLAYERDOWN", "TESTING", "DORMANT", "UP"}
    assert {detail for _, _, detail in links} <= operstates
    deleted = [name for a, name, _ in links if a == "dellink"]
    assert sorted(deleted) == ["vt0", "vt1"]
    # the deletion comes after every newlink of the same link
    for name in ("vt0", "vt1"):
        last_new = max(i for i, (a, n, _) in enumerate(links) if n == name and a == "newlink")
        deleted_at = next(i for i, (a, n, _) in enumerate(links) if n == name and a == "dellink")
        assert deleted_at > last_new


def test_udev_kernel_group_add_and_remove(
    netns_events: list[tuple[str, str, str, str, str]],
) -> None:
    udev = [(a, sub, name, detail) for src, a, sub, name, detail in netns_events if src == "udev"]
    seen = {(a, sub, name) for a, sub, name, _ in udev}
    for name in ("vt0", "vt1"):
        assert ("add", "net", name) in seen
        assert ("remove", "net", name) in seen
    for _a, _sub, name, devpath in udev:
        assert "/virtual/" in devpath and devpath.endswith(f"/net/{name}")


def test_link_overrun_is_reported_and_reading_goes_on() -> None:
    reason = netns_skip_reason()
    if reason:
        pytest.skip(reason)
    report = run_child(
        ["unshare", "--net", "--"],
        NETNS_CHILD,
        {"ip": ip_tool(), "mode": "overrun", "pairs": 20},
    )
    events = [tuple(e) for e in report["events"]]
    assert ("netlink", "overrun", "net", "", "ENOBUFS") in events
    first_overrun = events.index(("netlink", "overrun", "net", "", "ENOBUFS"))
    after = events[first_overrun + 1 :]
    assert any(e[1] == "dellink" and e[3] == "a0" for e in after)
