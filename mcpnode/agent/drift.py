"""Drift: verify the profile on a timer; remediate (or only report) what moved; never fight.

A key another agent owns (tuned, a Kubernetes node-tuning operator, a cron job, an operator's
`sysctl -w` loop) gets changed back every time mcpnode restores it. Remediating it forever
turns two agents into a write storm and hides the conflict. `FlapGuard` allows at most
`limit` remediations of one key within `window` seconds; the next drift of that key is not
remediated: the key is *contested*, held (apply_profile's `hold`: neither the profile's value
nor the original is written), reported in the audit through the agent's state file, and
still counted as drift on every check. It stays contested until the configuration is reloaded
(SIGHUP) or the agent restarts: the operator fixes the other owner, then reloads.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from datetime import datetime, timezone

from mcpnode.state.agentstate import ContestedKey


@dataclass
class FlapGuard:
    limit: int
    window: float  # seconds
    _history: dict[str, deque[float]] = field(default_factory=dict)
    _contested: dict[str, ContestedKey] = field(default_factory=dict)

    def contested(self) -> tuple[ContestedKey, ...]:
        return tuple(self._contested[k] for k in sorted(self._contested))

    def is_contested(self, key: str) -> bool:
        return key in self._contested

    def held(self) -> frozenset[str]:
        return frozenset(self._contested)

    def _recent(self, key: str, now: float) -> deque[float]:
        times = self._history.setdefault(key, deque())
        while times and now - times[0] > self.window:
            times.popleft()
        return times

    def may_remediate(self, key: str, now: float) -> bool:
        """False when `key` is contested, or has been remediated `limit` times within the
        window (then it becomes contested now, with `value` the other owner's value)."""
        if key in self._contested:
            return False
        return len(self._recent(key, now)) < self.limit

    def give_up(
        self, key: str, now: float, value: str | None, wall: datetime | None = None
    ) -> ContestedKey:
        when = (wall or datetime.now(timezone.utc)).isoformat(timespec="seconds")
        c = ContestedKey(key, len(self._recent(key, now)), self.window, when, value)
        self._contested[key] = c
        return c

    def remediated(self, key: str, now: float) -> None:
        self._recent(key, now).append(now)

    def reset(self) -> None:
        """Forget everything (a reload: the operator says the conflict is resolved)."""
        self._history.clear()
        self._contested.clear()
