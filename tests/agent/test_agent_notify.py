"""sd_notify(3) to a real datagram listener: what systemd would receive, byte for byte.

The listener is an AF_UNIX SOCK_DGRAM socket bound under tmp_path (or a per-pid abstract name);
it lives and dies with the test.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from mcpnode.agent.notify import Notifier


class Listener:
    def __init__(self, address: str | bytes) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
        self.sock.bind(address)
        self.sock.settimeout(2.0)

    def recv(self) -> str:
        return self.sock.recv(1 << 16).decode()

    def fields(self) -> list[str]:
        return self.recv().split("\n")


@pytest.fixture
def listener(tmp_path: Path) -> Iterator[tuple[Listener, str]]:
    path = str(tmp_path / "notify.sock")
    lis = Listener(path)
    yield lis, path
    lis.sock.close()


@pytest.fixture
def notifier(listener: tuple[Listener, str]) -> Iterator[Notifier]:
    n = Notifier({"NOTIFY_SOCKET": listener[1]})
    yield n
    n.close()


def test_ready_with_status(listener: tuple[Listener, str], notifier: Notifier) -> None:
    lis, _ = listener
    assert notifier.enabled
    assert notifier.ready("tuned: profile base, 0 drift")
    assert lis.recv() == "READY=1\nSTATUS=tuned: profile base, 0 drift"
    assert notifier.errors == 0


def test_reloading_carries_monotonic_usec(
    listener: tuple[Listener, str], notifier: Notifier
) -> None:
    lis, _ = listener
    before = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
    assert notifier.reloading()
    after = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
    first, second = lis.fields()
    assert first == "RELOADING=1"
    key, _, value = second.partition("=")
    assert key == "MONOTONIC_USEC"
    assert before <= int(value) <= after


def test_stopping_watchdog_and_status(listener: tuple[Listener, str], notifier: Notifier) -> None:
    lis, _ = listener
    assert notifier.stopping("stopping (SIGTERM)")
    assert lis.recv() == "STOPPING=1\nSTATUS=stopping (SIGTERM)"
    assert notifier.watchdog()
    assert lis.recv() == "WATCHDOG=1"
    assert notifier.status("drift: 2 key(s)")
    assert lis.recv() == "STATUS=drift: 2 key(s)"
    assert notifier.notify("EXTEND_TIMEOUT_USEC=5000000", "STATUS=slow start")
    assert lis.recv() == "EXTEND_TIMEOUT_USEC=5000000\nSTATUS=slow start"


def test_status_with_newlines_is_one_line(
    listener: tuple[Listener, str], notifier: Notifier
) -> None:
    lis, _ = listener
    # A newline inside STATUS= would start a new assignment: systemd would read "READY=1" here.
    assert notifier.status("apply failed:\nREADY=1\n\t  next  try in 30 s  ")
    assert lis.recv() == "STATUS=apply failed: READY=1 next try in 30 s"
    assert notifier.ready("line one\r\nline two")
    assert lis.fields() == ["READY=1", "STATUS=line one line two"]


def test_abstract_socket() -> None:
    name = f"mcpnode-test-notify-{os.getpid()}"
    lis = Listener("\0" + name)
    try:
        n = Notifier({"NOTIFY_SOCKET": "@" + name})
        assert n.enabled and n.address == b"\0" + name.encode()
        assert n.ready("up")
        assert lis.recv() == "READY=1\nSTATUS=up"
        n.close()
    finally:
        lis.sock.close()


def test_without_notify_socket_is_a_no_op() -> None:
    n = Notifier({})
    assert not n.enabled
    assert n.address is None
    assert not n.ready("up")
    assert not n.watchdog()
    assert n.errors == 0  # not an error: not started by systemd
    n.close()


def test_empty_notify_socket_is_disabled() -> None:
    assert not Notifier({"NOTIFY_SOCKET": ""}).enabled


@pytest.mark.parametrize(
    "address",
    [
        "vsock:2:1234",  # systemd v253+ VM-to-host notification: not for a host service
        "vsock-stream:2:1234",
        "run/systemd/notify",  # relative: depends on the cwd, never what systemd passes
        "./notify.sock",
    ],
)
def test_unusable_addresses_disable(address: str) -> None:
    n = Notifier({"NOTIFY_SOCKET": address})
    assert not n.enabled
    assert not n.ready("up")
    assert n.errors == 0


def test_socket_gone_counts_errors_and_never_raises(tmp_path: Path) -> None:
    path = tmp_path / "gone.sock"
    lis = Listener(str(path))
    n = Notifier({"NOTIFY_SOCKET": str(path)})
    assert n.ready("up")
    assert lis.recv() == "READY=1\nSTATUS=up"
    lis.sock.close()
    path.unlink()  # systemd restarted, or the service outlived its manager
    assert not n.watchdog()
    assert not n.status("still here")
    assert n.errors == 2
    n.close()


def test_socket_path_never_existed(tmp_path: Path) -> None:
    n = Notifier({"NOTIFY_SOCKET": str(tmp_path / "nothing.sock")})
    assert n.enabled
    assert not n.ready("up")
    assert n.errors == 1


def test_socket_recreated_after_failure(tmp_path: Path) -> None:
    """After a failed send the next one goes to whatever listens at the path now."""
    path = str(tmp_path / "again.sock")
    n = Notifier({"NOTIFY_SOCKET": path})
    assert not n.watchdog()
    lis = Listener(path)
    try:
        assert n.watchdog()
        assert lis.recv() == "WATCHDOG=1"
        assert n.errors == 1
    finally:
        lis.sock.close()
        n.close()


def test_close_is_idempotent(listener: tuple[Listener, str], notifier: Notifier) -> None:
    lis, _ = listener
    notifier.close()
    notifier.close()
    assert notifier.watchdog()  # a send after close opens a new socket
    assert lis.recv() == "WATCHDOG=1"


def test_sent_keeps_a_bounded_history(listener: tuple[Listener, str]) -> None:
    """The agent pings the watchdog forever: the record of sent messages must not grow with
    uptime (it did: a list appended on every send)."""
    lis, path = listener
    n = Notifier({"NOTIFY_SOCKET": path})
    n.ready("up")
    lis.recv()
    for _ in range(1000):
        n.notify("WATCHDOG=1")
        lis.recv()  # as systemd would: the queue holds net.unix.max_dgram_qlen (10) datagrams
    assert len(n.sent) < 1000
    assert n.sent[-1] == "WATCHDOG=1"
    n.close()


@pytest.mark.parametrize(
    ("env", "usec", "interval"),
    [
        ({"WATCHDOG_USEC": "30000000"}, 30_000_000, 15.0),
        ({"WATCHDOG_USEC": "1000000", "WATCHDOG_PID": "self"}, 1_000_000, 0.5),
        ({"WATCHDOG_USEC": "3"}, 3, 1.5e-6),
        ({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "1"}, None, None),  # another pid
        ({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "other"}, None, None),  # ours + 1
        ({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": ""}, 30_000_000, 15.0),  # unset
        ({"WATCHDOG_USEC": "thirty"}, None, None),
        ({"WATCHDOG_USEC": "30s"}, None, None),
        ({"WATCHDOG_USEC": "1.5e7"}, None, None),
        ({"WATCHDOG_USEC": "0"}, None, None),
        ({"WATCHDOG_USEC": "-5"}, None, None),
        ({"WATCHDOG_USEC": ""}, None, None),
        ({}, None, None),
        ({"WATCHDOG_PID": "self"}, None, None),
    ],
)
def test_watchdog_usec(env: dict[str, str], usec: int | None, interval: float | None) -> None:
    pid = os.getpid()
    subst = {"self": str(pid), "other": str(pid + 1)}
    env = {k: subst.get(v, v) for k, v in env.items()}
    n = Notifier(env)
    assert n.watchdog_usec == usec
    assert n.watchdog_interval == (None if interval is None else pytest.approx(interval))


def test_default_env_is_the_process_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
    monkeypatch.setenv("WATCHDOG_USEC", "4000000")
    monkeypatch.setenv("WATCHDOG_PID", str(os.getpid()))
    n = Notifier()
    assert not n.enabled
    assert n.watchdog_interval == 2.0


def test_keepalive_pings_once_the_interval_has_passed() -> None:
    """Long work on the loop's thread calls keepalive() between its steps: a ping only when half
    of WatchdogSec passed since the last one, whoever sent it (the loop's timer or keepalive)."""
    now = [100.0]
    n = Notifier({"WATCHDOG_USEC": "2000000"}, clock=lambda: now[0])
    n.keepalive()  # no ping yet: due
    assert list(n.sent) == ["WATCHDOG=1"]
    now[0] += 0.9
    n.keepalive()
    assert len(n.sent) == 1
    now[0] += 0.1
    n.keepalive()
    assert len(n.sent) == 2
    now[0] += 0.5
    n.watchdog()  # the loop's timer
    now[0] += 0.9
    n.keepalive()
    assert len(n.sent) == 3


def test_keepalive_without_a_watchdog_sends_nothing() -> None:
    n = Notifier({})
    n.keepalive()
    assert list(n.sent) == []
