"""sd_notify(3) without libsystemd: one SOCK_DGRAM send per message to `$NOTIFY_SOCKET`.

A leading `@` in `$NOTIFY_SOCKET` names a Linux abstract socket (systemd passes those to
services in containers; sd_notify(3) "If the first character of $NOTIFY_SOCKET is '@', the
string is understood as Linux abstract namespace socket"). `vsock:` addresses (systemd v253+,
VMs notifying their host) are not used for services and are refused.

The watchdog interval comes from `WATCHDOG_USEC`, honoured only when `WATCHDOG_PID` is unset
or names this process (sd_watchdog_enabled(3)): a child that inherited the environment must
not ping on its parent's behalf. The agent pings at half the interval, the usual advice, from
its loop's timer; work that runs longer than that on the loop's one thread (the audit of a
republish reading a flooded kernel log) calls `keepalive()` between its steps, which pings when
the interval has passed since the last ping.
"""

from __future__ import annotations

import os
import socket
import time
from collections import deque
from collections.abc import Callable, Mapping

SENT_KEPT = 64  # the last messages, for logs and tests; the watchdog pings for the uptime


class Notifier:
    """Sends sd_notify messages; a no-op when not started by systemd (no `$NOTIFY_SOCKET`)."""

    def __init__(
        self,
        env: Mapping[str, str] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        env = os.environ if env is None else env
        self._clock = clock
        self._last_ping: float | None = None
        self.address = _address(env.get("NOTIFY_SOCKET", ""))
        self.watchdog_usec = _watchdog_usec(env)
        self._sock: socket.socket | None = None
        self.sent: deque[str] = deque(maxlen=SENT_KEPT)  # the latest messages, newest last
        self.errors = 0

    @property
    def enabled(self) -> bool:
        return self.address is not None

    @property
    def watchdog_interval(self) -> float | None:
        """Seconds between WATCHDOG=1 pings (half of WatchdogSec=), None without a watchdog."""
        return None if self.watchdog_usec is None else self.watchdog_usec / 2e6

    def notify(self, *fields: str) -> bool:
        """Send `fields` as one datagram (newline-separated `KEY=VALUE`). False when it could not
        be sent (no socket, or the send failed: systemd restarted or the socket vanished)."""
        message = "\n".join(fields)
        self.sent.append(message)
        if self.address is None:
            return False
        try:
            if self._sock is None:
                # Non-blocking: the receiver's queue holds net.unix.max_dgram_qlen datagrams (10
                # by default); a manager that stops reading must not stall the loop. A dropped
                # message is counted; systemd's watchdog decides what a stall means.
                self._sock = socket.socket(
                    socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC | socket.SOCK_NONBLOCK
                )
            self._sock.sendto(message.encode("utf-8", "replace"), self.address)
        except OSError:
            self.errors += 1
            return False
        return True

    def ready(self, status: str) -> bool:
        return self.notify("READY=1", f"STATUS={_one_line(status)}")

    def status(self, status: str) -> bool:
        return self.notify(f"STATUS={_one_line(status)}")

    def reloading(self) -> bool:
        # MONOTONIC_USEC lets systemd (v253+, Type=notify-reload) tell this reload from an older
        # one; harmless for Type=notify.
        usec = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
        return self.notify("RELOADING=1", f"MONOTONIC_USEC={usec}")

    def stopping(self, status: str) -> bool:
        return self.notify("STOPPING=1", f"STATUS={_one_line(status)}")

    def watchdog(self) -> bool:
        self._last_ping = self._clock()
        return self.notify("WATCHDOG=1")

    def keepalive(self) -> None:
        """WATCHDOG=1 when the watchdog is on and its ping interval has passed since the last
        ping: for long work on the loop's thread, called between its steps (so between two
        steps at most the interval and one step pass). Cheap when not due: one clock read."""
        interval = self.watchdog_interval
        if interval is None:
            return
        if self._last_ping is None or self._clock() - self._last_ping >= interval:
            self.watchdog()

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None


def _address(raw: str) -> str | bytes | None:
    if not raw:
        return None
    if raw.startswith("@"):
        return b"\0" + raw[1:].encode()
    if raw.startswith("/"):
        return raw
    return None  # vsock: and relative paths: not for a service on the host


def _watchdog_usec(env: Mapping[str, str]) -> int | None:
    raw = env.get("WATCHDOG_USEC")
    if not raw:
        return None
    pid = env.get("WATCHDOG_PID")
    if pid and pid != str(os.getpid()):
        return None
    try:
        usec = int(raw)
    except ValueError:
        return None
    return usec if usec > 0 else None


def _one_line(text: str) -> str:
    return " ".join(text.split())
