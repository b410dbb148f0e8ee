"""The agent's event loop: timers in order, readers on real pipes, failures contained.

The selector waits on real time, so the timers here are a few milliseconds apart; the tests
assert order and membership, never exact timing."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from mcpnode.agent.loop import Loop


class Log:
    """A structlog stand-in recording (level, event, fields)."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, dict[str, Any]]] = []

    def error(self, event: str, **kw: Any) -> None:
        self.events.append(("error", event, kw))

    def info(self, event: str, **kw: Any) -> None:
        self.events.append(("info", event, kw))

    def warning(self, event: str, **kw: Any) -> None:
        self.events.append(("warning", event, kw))

    def debug(self, event: str, **kw: Any) -> None:
        self.events.append(("debug", event, kw))


@pytest.fixture
def log() -> Log:
    return Log()


@pytest.fixture
def loop(log: Log) -> Iterator[Loop]:
    lp = Loop(log)
    yield lp
    lp.close()


def pump(loop: Loop, until: Callable[[], bool], limit: float = 2.0) -> None:
    deadline = time.monotonic() + limit
    while not until():
        assert time.monotonic() < deadline, "the loop did not get there in time"
        loop.run_once(max_wait=0.05)


def test_timers_fire_in_due_order(loop: Loop) -> None:
    fired: list[str] = []
    loop.call_later(0.03, lambda: fired.append("c"), "c")
    loop.call_later(0.01, lambda: fired.append("a"), "a")
    loop.call_later(0.02, lambda: fired.append("b"), "b")
    loop.call_later(0.03, lambda: fired.append("c2"), "c2")  # same time: in the order added
    pump(loop, lambda: len(fired) == 4)
    assert fired == ["a", "b", "c", "c2"]


def test_a_timer_does_not_fire_early(loop: Loop) -> None:
    fired: list[float] = []
    start = time.monotonic()
    loop.call_later(0.03, lambda: fired.append(time.monotonic()), "t")
    pump(loop, lambda: bool(fired))
    assert fired[0] - start >= 0.03


def test_negative_delay_fires_at_once(loop: Loop) -> None:
    fired: list[str] = []
    loop.call_later(-5.0, lambda: fired.append("now"), "now")
    loop.run_once(max_wait=0)
    assert fired == ["now"]


def test_cancel(loop: Loop) -> None:
    fired: list[str] = []
    loop.call_later(0.01, lambda: fired.append("keep"), "keep")
    dropped = loop.call_later(0.005, lambda: fired.append("drop"), "drop")
    dropped.cancel()
    assert dropped.cancelled
    pump(loop, lambda: bool(fired))
    loop.run_once(max_wait=0.02)
    assert fired == ["keep"]


def test_cancel_from_an_earlier_timer(loop: Loop) -> None:
    fired: list[str] = []
    later = loop.call_later(0.02, lambda: fired.append("later"), "later")

    def first() -> None:
        fired.append("first")
        later.cancel()

    loop.call_later(0.005, first, "first")
    loop.call_later(0.03, lambda: fired.append("last"), "last")
    pump(loop, lambda: "last" in fired)
    assert fired == ["first", "last"]


def test_a_fired_timer_counts_as_done(loop: Loop) -> None:
    t = loop.call_later(0, lambda: None, "once")
    loop.run_once(max_wait=0)
    assert t.cancelled  # nothing left to cancel: the service checks this before re-arming
    t.cancel()  # harmless


def test_only_cancelled_timers_left_means_no_timeout(loop: Loop) -> None:
    loop.call_later(0.01, lambda: None, "x").cancel()
    start = time.monotonic()
    loop.run_once(max_wait=0.03)  # waits max_wait, not the cancelled timer's 10 ms
    assert time.monotonic() - start >= 0.025


def test_call_at(loop: Loop) -> None:
    fired: list[str] = []
    now = time.monotonic()
    loop.call_at(now + 0.02, lambda: fired.append("second"), "second")
    loop.call_at(now + 0.01, lambda: fired.append("first"), "first")
    t = loop.call_at(now - 1.0, lambda: fired.append("past"), "past")
    assert t.when >= now  # the past is clamped to now
    pump(loop, lambda: len(fired) == 3)
    assert fired == ["past", "first", "second"]


def test_call_at_uses_the_loops_clock(log: Log) -> None:
    fake = [1000.0]
    lp = Loop(log, clock=lambda: fake[0])
    try:
        fired: list[str] = []
        t = lp.call_at(1010.0, lambda: fired.append("t"), "t")
        assert t.when == 1010.0
        lp.run_once(max_wait=0)
        assert fired == []
        fake[0] = 1010.0
        lp.run_once(max_wait=0)
        assert fired == ["t"]
    finally:
        lp.close()


def test_reader_on_a_pipe(loop: Loop) -> None:
    r, w = os.pipe()
    got: list[bytes] = []
    try:
        loop.add_reader(r, lambda: got.append(os.read(r, 100)), "pipe")
        assert loop.readers() == ["pipe"]
        os.write(w, b"hello")
        pump(loop, lambda: bool(got))
        assert got == [b"hello"]
        loop.remove_reader(r)
        assert loop.readers() == []
        os.write(w, b"again")
        loop.run_once(max_wait=0.02)
        assert got == [b"hello"]  # no longer watched
        loop.remove_reader(r)  # not registered any more: harmless
    finally:
        os.close(r)
        os.close(w)


def test_reader_by_file_object_and_replaced_callback(loop: Loop) -> None:
    r, w = os.pipe()
    with os.fdopen(r, "rb", buffering=0) as rf:
        got: list[str] = []
        loop.add_reader(rf, lambda: got.append("old"), "old")
        loop.add_reader(rf, lambda: got.append(f"new:{rf.read(10)!r}"), "new")  # modify
        assert loop.readers() == ["new"]
        os.write(w, b"x")
        pump(loop, lambda: bool(got))
        assert got == ["new:b'x'"]
        loop.remove_reader(rf)
    os.close(w)
    loop.remove_reader(r)  # already closed: harmless


def test_reader_and_timer_in_one_turn(loop: Loop) -> None:
    r, w = os.pipe()
    order: list[str] = []
    try:
        loop.add_reader(r, lambda: order.append(f"read:{os.read(r, 10).decode()}"), "pipe")
        loop.call_later(0, lambda: order.append("timer"), "timer")
        os.write(w, b"1")
        loop.run_once(max_wait=0.05)
        # readers first, then due timers: a timer sees the state the events left
        assert order == ["read:1", "timer"]
    finally:
        loop.remove_reader(r)
        os.close(r)
        os.close(w)


def test_a_failing_callback_is_logged_and_the_loop_goes_on(log: Log) -> None:
    errors: list[tuple[str, str]] = []
    lp = Loop(log, on_error=lambda name, err: errors.append((name, repr(err))))
    fired: list[str] = []

    def boom() -> None:
        raise ValueError("bad value")

    r, w = os.pipe()
    try:

        def bad_reader() -> None:
            os.read(r, 10)
            raise OSError(5, "EIO on read")

        lp.add_reader(r, bad_reader, "pipe")
        lp.call_later(0.005, boom, "drift")
        lp.call_later(0.02, lambda: fired.append("after"), "after")
        os.write(w, b"x")
        pump(lp, lambda: bool(fired))
    finally:
        lp.remove_reader(r)
        lp.close()
        os.close(r)
        os.close(w)
    assert fired == ["after"]
    assert (
        "error",
        "loop.callback-failed",
        {"source": "pipe", "error": "OSError: [Errno 5] EIO on read"},
    ) in log.events
    assert (
        "error",
        "loop.callback-failed",
        {"source": "drift", "error": "ValueError: bad value"},
    ) in log.events
    assert sorted(errors) == [
        ("drift", "ValueError('bad value')"),
        ("pipe", "OSError(5, 'EIO on read')"),
    ]


def test_on_latency_names_the_timer(log: Log) -> None:
    seen: list[tuple[str, float]] = []
    lp = Loop(log, on_latency=lambda name, late: seen.append((name, late)))
    try:
        done: list[str] = []
        lp.call_later(0.005, lambda: done.append("drift"), "drift")
        lp.call_later(0.01, lambda: done.append("watchdog"), "watchdog")
        cancelled = lp.call_later(0.001, lambda: done.append("x"), "cancelled")
        cancelled.cancel()
        pump(lp, lambda: len(done) == 2)
    finally:
        lp.close()
    assert [name for name, _ in seen] == ["drift", "watchdog"]
    assert all(0 <= late < 1.0 for _, late in seen)


def test_latency_is_how_late_the_timer_ran(log: Log) -> None:
    fake = [0.0]
    seen: list[tuple[str, float]] = []
    lp = Loop(log, clock=lambda: fake[0], on_latency=lambda n, late: seen.append((n, late)))
    try:
        lp.call_later(5.0, lambda: None, "scan")
        fake[0] = 7.5  # the loop was busy for 2.5 s past the deadline
        lp.run_once(max_wait=0)
    finally:
        lp.close()
    assert seen == [("scan", 2.5)]


def test_stop_from_a_callback_ends_run(loop: Loop) -> None:
    fired: list[str] = []
    r, w = os.pipe()
    try:

        def on_read() -> None:
            os.read(r, 10)
            fired.append("read")
            loop.stop()

        def write() -> None:
            os.write(w, b"x")

        loop.add_reader(r, on_read, "pipe")
        loop.call_later(0.01, write, "writer")
        loop.call_later(30.0, lambda: fired.append("never"), "far")
        start = time.monotonic()
        loop.run()
        assert time.monotonic() - start < 5.0
        assert fired == ["read"]
    finally:
        loop.remove_reader(r)
        os.close(r)
        os.close(w)


def test_stop_from_a_timer_ends_run(loop: Loop) -> None:
    loop.call_later(0.01, loop.stop, "stop")
    loop.run()  # returns
    fired: list[str] = []
    loop.call_later(0, lambda: fired.append("again"), "again")
    loop.call_later(0.005, loop.stop, "stop")
    loop.run()  # a stopped loop can run again
    assert fired == ["again"]


def test_timers_added_by_a_timer(loop: Loop) -> None:
    fired: list[str] = []

    def tick() -> None:
        fired.append("tick")
        if len(fired) < 3:
            loop.call_later(0.002, tick, "tick")
        else:
            loop.stop()

    loop.call_later(0, tick, "tick")
    loop.run()
    assert fired == ["tick", "tick", "tick"]


def test_nothing_due_runs_after_stop() -> None:
    """SIGTERM's callback rolls back and stops; a drift timer due in the same iteration must
    not run after it (it would re-apply what the rollback restored)."""
    ran: list[str] = []
    loop = Loop(Log())
    r, w = os.pipe()
    try:

        def on_signal() -> None:
            os.read(r, 1)
            ran.append("signal")
            loop.stop()

        loop.add_reader(r, on_signal, "signal")
        loop.call_later(0.0, lambda: ran.append("drift"), "drift")
        os.write(w, b"x")
        time.sleep(0.01)  # the timer is due by the time select returns
        loop.run()
    finally:
        os.close(r)
        os.close(w)
        loop.close()
    assert ran == ["signal"]
