"""The agent's one event loop: one thread, one `selectors` selector, timers in a heap.

Everything the agent reacts to is a readable file descriptor (udev netlink, rtnetlink, the
signal wakeup pipe, the metrics listener and its connections, an injection FIFO) or a timer
(drift, process scan, debounce, watchdog). Callbacks run to completion on the loop thread, so
the agent's state needs no locks. The loop sleeps in `select()` until the next fd or timer is
due: idle means idle, with no polling tick (an agent on every GPU node must cost nothing
between events; docs/architecture.md).

A callback that raises is logged with its name and the loop goes on: one broken event source
must not take the node's tuning down with it. `loop_latency` is how late each timer ran,
what the metrics call loop latency.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import selectors
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from mcpnode.logs import EventLog

Callback = Callable[[], None]


class HasFileno(Protocol):
    def fileno(self) -> int: ...


FileLike = int | HasFileno


def _fd(f: FileLike) -> int:
    return f if isinstance(f, int) else f.fileno()


@dataclass(order=True)
class Timer:
    when: float
    seq: int
    name: str = field(compare=False)
    callback: Callback | None = field(compare=False)

    def cancel(self) -> None:
        self.callback = None

    @property
    def cancelled(self) -> bool:
        return self.callback is None


class Loop:
    def __init__(
        self,
        log: EventLog,
        clock: Callable[[], float] = time.monotonic,
        on_error: Callable[[str, BaseException], None] | None = None,
        on_latency: Callable[[str, float], None] | None = None,
    ) -> None:
        self._sel = selectors.DefaultSelector()
        self._timers: list[Timer] = []
        self._seq = itertools.count()
        self._running = False
        self._stopped = False
        self.log = log
        self.time = clock
        self._on_error = on_error
        self._on_latency = on_latency

    # -- registration ---------------------------------------------------------------------------

    def add_reader(self, f: FileLike, callback: Callback, name: str) -> None:
        fd = _fd(f)
        try:
            self._sel.modify(fd, selectors.EVENT_READ, (name, callback))
        except KeyError:
            self._sel.register(fd, selectors.EVENT_READ, (name, callback))

    def remove_reader(self, f: FileLike) -> None:
        with contextlib.suppress(KeyError, ValueError):  # not registered, or already closed
            self._sel.unregister(_fd(f))

    def readers(self) -> list[str]:
        return sorted(key.data[0] for key in self._sel.get_map().values())

    def call_later(self, delay: float, callback: Callback, name: str) -> Timer:
        timer = Timer(self.time() + max(0.0, delay), next(self._seq), name, callback)
        heapq.heappush(self._timers, timer)
        return timer

    def call_at(self, when: float, callback: Callback, name: str) -> Timer:
        return self.call_later(when - self.time(), callback, name)

    # -- running ---------------------------------------------------------------------------------

    def stop(self) -> None:
        """End run() after the callback that calls this: nothing else already due in this
        iteration runs. (The agent's SIGTERM rolls back, then stops; a drift timer due in the
        same iteration would otherwise re-apply what the rollback just restored.)"""
        self._running = False
        self._stopped = True

    def _next_timeout(self) -> float | None:
        while self._timers and self._timers[0].cancelled:
            heapq.heappop(self._timers)
        if not self._timers:
            return None
        return max(0.0, self._timers[0].when - self.time())

    def _call(self, name: str, callback: Callback) -> None:
        try:
            callback()
        except Exception as err:  # one failing source must not stop the agent
            self.log.error(
                "loop.callback-failed", source=name, error=f"{type(err).__name__}: {err}"
            )
            if self._on_error is not None:
                self._on_error(name, err)

    def run_once(self, max_wait: float | None = None) -> None:
        timeout = self._next_timeout()
        if max_wait is not None:
            timeout = max_wait if timeout is None else min(timeout, max_wait)
        for key, _mask in self._sel.select(timeout):
            if self._stopped:
                return
            name, callback = key.data
            self._call(name, callback)
        now = self.time()
        while self._timers and (self._timers[0].cancelled or self._timers[0].when <= now):
            if self._stopped:
                return
            timer = heapq.heappop(self._timers)
            callback = timer.callback
            if callback is None:
                continue
            timer.callback = None
            if self._on_latency is not None:
                self._on_latency(timer.name, now - timer.when)
            self._call(timer.name, callback)

    def run(self) -> None:
        self._running = True
        self._stopped = False
        while self._running:
            self.run_once()

    def close(self) -> None:
        self._sel.close()


class Timers:
    """Named one-shot timers on a `Loop`: scheduling a name again replaces the pending one, so
    each of the agent's periodic jobs (drift, pin, watchdog, nfd-refresh, the rediscovery
    debounce, health) has at most one timer due."""

    def __init__(self, loop: Loop) -> None:
        self._loop = loop
        self._pending: dict[str, Timer] = {}

    def schedule(self, name: str, delay: float, callback: Callback) -> None:
        old = self._pending.get(name)
        if old is not None:
            old.cancel()
        self._pending[name] = self._loop.call_later(delay, callback, name)

    def cancel(self, name: str) -> None:
        timer = self._pending.pop(name, None)
        if timer is not None:
            timer.cancel()

    def fired(self, name: str) -> None:
        """Forget `name`'s timer: its callback is running now."""
        self._pending.pop(name, None)

    def __contains__(self, name: str) -> bool:
        return name in self._pending

    def __getitem__(self, name: str) -> Timer:
        return self._pending[name]
