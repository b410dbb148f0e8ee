"""The agent's event sources. Each owns one file descriptor the loop waits on, drains it
completely when it is readable, and turns what it read into `DeviceEvent`s or signal numbers.

- `UdevSource`: pyudev's netlink monitor, subsystems pci/net/infiniband. The "udev" group
  carries events after udevd ran its rules (names settled); the "kernel" group is what a
  container or a minimal VM without udevd has (and what a fresh network namespace sees: since
  Linux 4.18 the kernel delivers a netdev's uevents to the netns that owns it).
- `LinkSource`: an rtnetlink socket bound to RTMGRP_LINK, RTM_NEWLINK/RTM_DELLINK parsed by
  rtnl.py (two attributes, bounded; pyroute2 costs ~25 MB to import and is the tests' oracle
  instead). The socket is ours, not a library's: pyroute2's `IPRoute` (0.9) buffers messages
  internally after a read, so the fd can be quiet while events wait, which a selector-driven
  loop cannot see.
- `SignalSource`: `signal.set_wakeup_fd` on a non-blocking socketpair; Python's C handler
  writes the signal number there, the loop reads it: signals are handled on the loop thread,
  between callbacks, never in the middle of an apply.
- `InjectSource`: JSON lines on an inherited file descriptor (`mcpnode agent --inject-fd N`),
  for tests and drills to feed device events without root-owned udev: the agent then reacts
  exactly as to the real ones.
"""

from __future__ import annotations

import contextlib
import errno as errno_mod
import json
import os
import signal
import socket
from collections.abc import Callable
from dataclasses import dataclass
from types import FrameType
from typing import Protocol

from mcpnode.agent.rtnl import parse_links

SUBSYSTEMS = ("pci", "net", "infiniband")
ACTIONS = frozenset({"add", "remove", "change", "bind", "unbind"})
UDEV_CONTROL = "/run/udev/control"  # present while systemd-udevd runs
RTMGRP_LINK = 1  # include/uapi/linux/rtnetlink.h
RCVBUF = 1 << 20  # a hot-plug of an 8-NIC tray emits hundreds of messages at once


@dataclass(frozen=True)
class DeviceEvent:
    source: str  # udev | netlink | inject
    action: str  # add/remove/change/bind/unbind; newlink/dellink; overrun
    subsystem: str  # pci, net, infiniband
    name: str  # PCI address, interface name, RDMA device
    detail: str = ""  # operstate for links, devpath for udev


OnEvent = Callable[[DeviceEvent], None]


class Source(Protocol):
    """What the agent needs of an event source: the fd the loop waits on, a drain when it is
    readable, a name for the loop's logs, and close."""

    name: str

    def fileno(self) -> int: ...
    def on_readable(self) -> None: ...
    def close(self) -> None: ...


class _UdevDevice(Protocol):
    """What UdevSource reads of a pyudev.Device (pyudev ships no type information)."""

    @property
    def action(self) -> str | None: ...
    @property
    def sys_name(self) -> str | None: ...
    @property
    def subsystem(self) -> str | None: ...
    @property
    def device_path(self) -> str: ...


class _UdevMonitor(Protocol):
    """The part of pyudev.Monitor that UdevSource uses."""

    def filter_by(self, subsystem: str) -> None: ...
    def set_receive_buffer_size(self, size: int) -> None: ...
    def start(self) -> None: ...
    def fileno(self) -> int: ...
    def poll(self, timeout: float | None = None) -> _UdevDevice | None: ...


class UdevSource:
    name = "udev"

    def __init__(self, on_event: OnEvent, group: str) -> None:
        import pyudev  # heavy (ctypes libudev): only the agent loads it

        self.group = group
        self._on_event = on_event
        monitor: _UdevMonitor = pyudev.Monitor.from_netlink(pyudev.Context(), source=group)
        for subsystem in SUBSYSTEMS:
            monitor.filter_by(subsystem)
        monitor.set_receive_buffer_size(RCVBUF)
        monitor.start()
        self._monitor: _UdevMonitor | None = monitor

    def fileno(self) -> int:
        if self._monitor is None:
            raise ValueError("udev monitor closed")
        return int(self._monitor.fileno())

    def on_readable(self) -> None:
        while self._monitor is not None:
            device = self._monitor.poll(timeout=0)
            if device is None:
                return
            action = device.action or ""
            if action not in ACTIONS:
                continue
            name = device.sys_name or ""
            self._on_event(
                DeviceEvent("udev", action, device.subsystem or "", name, device.device_path)
            )

    def close(self) -> None:
        # pyudev has no close(); its socket goes with the monitor object.
        self._monitor = None


class LinkSource:
    name = "netlink"

    def __init__(self, on_event: OnEvent) -> None:
        self._on_event = on_event
        self._sock = socket.socket(
            socket.AF_NETLINK,
            socket.SOCK_RAW | socket.SOCK_NONBLOCK | socket.SOCK_CLOEXEC,
            socket.NETLINK_ROUTE,
        )
        try:
            self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RCVBUF)
            self._sock.bind((0, RTMGRP_LINK))
        except OSError:
            self._sock.close()
            raise

    def fileno(self) -> int:
        return self._sock.fileno()

    def on_readable(self) -> None:
        while True:
            try:
                data = self._sock.recv(1 << 16)
            except BlockingIOError:
                return
            except OSError as err:
                if err.errno == errno_mod.ENOBUFS:
                    # The kernel dropped messages: the state is unknown until re-read.
                    self._on_event(DeviceEvent("netlink", "overrun", "net", "", "ENOBUFS"))
                    continue
                raise
            for msg in parse_links(data):
                self._on_event(
                    DeviceEvent(
                        "netlink",
                        msg.event,
                        "net",
                        msg.name or f"if{msg.ifindex}",
                        msg.operstate or "",
                    )
                )

    def close(self) -> None:
        self._sock.close()


class SignalSource:
    name = "signal"
    SIGNALS = (signal.SIGHUP, signal.SIGTERM, signal.SIGINT)

    def __init__(self, on_signal: Callable[[int], None]) -> None:
        self._on_signal = on_signal
        self._r, self._w = socket.socketpair()
        self._r.setblocking(False)
        self._w.setblocking(False)
        self._old_fd = signal.set_wakeup_fd(self._w.fileno(), warn_on_full_buffer=False)
        self._old = {s: signal.signal(s, _noop) for s in self.SIGNALS}

    def fileno(self) -> int:
        return self._r.fileno()

    def on_readable(self) -> None:
        while True:
            try:
                data = self._r.recv(256)
            except BlockingIOError:
                return
            if not data:
                return
            for signum in data:
                self._on_signal(signum)

    def close(self) -> None:
        for s, handler in self._old.items():
            signal.signal(s, handler)
        signal.set_wakeup_fd(self._old_fd)
        self._r.close()
        self._w.close()


def _noop(_signum: int, _frame: FrameType | None) -> None:
    """The real handling happens on the loop thread, from the wakeup fd."""


class InjectSource:
    """JSON lines on a file descriptor. A line is at most MAX_LINE_BYTES: a longer one is
    dropped (reported once, with its first bytes) up to its newline, never buffered whole, and
    the next line is read as usual; a bad line never takes a good one after it along.

    One wakeup reads at most READ_BYTES_PER_TURN: a writer that keeps the pipe full would
    otherwise keep the loop here, and the watchdog's timer waiting, for as long as it writes.
    What is left keeps the fd readable, so the selector comes back after the other sources."""

    name = "inject"
    MAX_LINE_BYTES = 64 << 10
    # Four pipes' default capacity (pipe(7)): a few thousand events, a few tenths of a second.
    READ_BYTES_PER_TURN = 256 << 10

    def __init__(self, fd: int, on_event: OnEvent, on_bad: Callable[[str], None]) -> None:
        self._fd = fd
        os.set_blocking(fd, False)
        self._on_event = on_event
        self._on_bad = on_bad
        self._buf = bytearray()  # the line read so far (appending is linear; bytes += is not)
        self._skipping = False  # inside a line already reported as too long
        self.closed = False

    def fileno(self) -> int:
        return self._fd

    def on_readable(self) -> None:
        budget = self.READ_BYTES_PER_TURN
        while budget > 0:
            try:
                chunk = os.read(self._fd, min(65536, budget))
            except BlockingIOError:
                break
            if not chunk:  # the writer went away: nothing more will come
                self.closed = True
                break
            budget -= len(chunk)
            self._feed(chunk)
        if self.closed and self._buf and not self._skipping:
            line = bytes(self._buf)  # a last line without its newline is still a line
            self._buf.clear()
            if line.strip():
                self._parse(line)

    def _feed(self, chunk: bytes) -> None:
        start = 0
        while True:
            end = chunk.find(b"\n", start)
            piece = chunk[start:] if end < 0 else chunk[start:end]
            if not self._skipping:
                if len(self._buf) + len(piece) > self.MAX_LINE_BYTES:
                    head = bytes(self._buf[:200] or piece[:200])
                    self._on_bad(
                        f"{head!r}...: line longer than {self.MAX_LINE_BYTES} bytes, dropped"
                    )
                    self._buf.clear()
                    self._skipping = True
                else:
                    self._buf += piece
            if end < 0:
                return
            if not self._skipping and self._buf.strip():
                self._parse(bytes(self._buf))
            self._buf.clear()
            self._skipping = False
            start = end + 1

    def _parse(self, line: bytes) -> None:
        try:
            doc = json.loads(line)
            event = DeviceEvent(
                str(doc.get("source", "inject")),
                str(doc["action"]),
                str(doc["subsystem"]),
                str(doc.get("name", "")),
                str(doc.get("detail", "")),
            )
        except (ValueError, KeyError, TypeError, AttributeError) as err:
            self._on_bad(f"{line[:200]!r}: {type(err).__name__}: {err}")
            return
        self._on_event(event)

    def close(self) -> None:
        # Once only: a second os.close() of the number could close a file opened since.
        fd, self._fd = self._fd, -1
        if fd >= 0:
            with contextlib.suppress(OSError):
                os.close(fd)
