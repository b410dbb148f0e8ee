"""SIGHUP in the agent: the signals coalesced into reloads, and the new configuration and
profile read within a time bound.

One reload at once, the next no sooner than RELOAD_MIN_INTERVAL_S after it, however many
signals arrive (a `systemctl reload` loop, or a storm, costs a reload a second, never one per
signal); reading the configuration and profile is bounded by RELOAD_TIMEOUT_S, so a bomb is
rejected and never stalls the loop (and its watchdog) for longer.
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from pathlib import Path
from types import FrameType

from mcpnode.agent.config import AgentConfig, load_config
from mcpnode.agent.loop import Loop, Timer
from mcpnode.errors import McpnodeError
from mcpnode.host import Host
from mcpnode.logs import EventLog
from mcpnode.tuning.profile import Profile, load_profile

RELOAD_MIN_INTERVAL_S = 1.0
RELOAD_TIMEOUT_S = 5.0


class ReloadTimeout(McpnodeError):
    """Reading the configuration and profile took longer than RELOAD_TIMEOUT_S."""


class ReloadCoalescer:
    """Turns SIGHUPs into calls of `reload`: at most one pending, each no sooner than
    RELOAD_MIN_INTERVAL_S after the last one started."""

    def __init__(
        self, loop: Loop, clock: Callable[[], float], log: EventLog, reload: Callable[[], object]
    ) -> None:
        self.loop = loop
        self.clock = clock
        self.log = log
        self.reload = reload
        self._timer: Timer | None = None
        self._last = float("-inf")
        self._coalesced = 0

    def request(self) -> None:
        if self._timer is not None and not self._timer.cancelled:
            self._coalesced += 1
            return
        delay = max(0.0, self._last + RELOAD_MIN_INTERVAL_S - self.clock())
        self._timer = self.loop.call_later(delay, self._due, "reload")

    def _due(self) -> None:
        self._timer = None
        self._last = self.clock()
        coalesced, self._coalesced = self._coalesced, 0
        if coalesced:
            self.log.info("config.reload-coalesced", signals=coalesced + 1)
        self.reload()


def read_config_bounded(
    host: Host, config_path: str, profiles_dir: Path | None
) -> tuple[AgentConfig, Profile]:
    """The config and its profile, in at most RELOAD_TIMEOUT_S of wall time (SIGALRM on this,
    the main thread: parsing is pure Python, interruptible between bytecodes). Raises what
    reading them raises, and ReloadTimeout."""

    def expired(_signum: int, _frame: FrameType | None) -> None:
        raise ReloadTimeout(f"reading the configuration took over {RELOAD_TIMEOUT_S:g} s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, RELOAD_TIMEOUT_S)
    try:
        config = load_config(host, config_path)
        return config, load_profile(config.profile, host, profiles_dir)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
