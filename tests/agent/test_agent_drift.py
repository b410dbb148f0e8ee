"""FlapGuard: at most `limit` remediations of a key within `window` seconds, then hold it.

Every case drives the guard with explicit monotonic `now` values, as the agent's drift timer
would: a drift seen at `now` is remediated when may_remediate says so (and then recorded with
remediated), else the key is given up."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from mcpnode.agent.drift import FlapGuard
from mcpnode.state.agentstate import ContestedKey

WALL = datetime(2025, 3, 1, 12, 0, 5, 123456, tzinfo=timezone.utc)


def drive(guard: FlapGuard, key: str, times: list[float]) -> list[str]:
    """The agent's decision at each drift of `key`: remediate, give-up, or held."""
    out = []
    for now in times:
        if guard.is_contested(key):
            out.append("held")
        elif guard.may_remediate(key, now):
            guard.remediated(key, now)
            out.append("remediate")
        else:
            guard.give_up(key, now, "other", wall=WALL)
            out.append("give-up")
    return out


@pytest.mark.parametrize(
    ("limit", "window", "times", "decisions"),
    [
        # three allowed within ten minutes, the fourth drift gives up, later ones are held
        (
            3,
            600.0,
            [0, 60, 120, 180, 240],
            ["remediate", "remediate", "remediate", "give-up", "held"],
        ),
        # limit 1: the second drift within the window is already contested
        (1, 10.0, [0, 5], ["remediate", "give-up"]),
        # spread wider than the window: old remediations fall out, it never trips
        (2, 10.0, [0, 11, 22, 33, 44, 55], ["remediate"] * 6),
        (3, 600.0, [0, 301, 602, 903, 1204, 1505, 1806], ["remediate"] * 7),
        # two quick ones, a pause longer than the window, two quick ones again: no trip
        (2, 10.0, [0, 1, 12, 13], ["remediate"] * 4),
        # ...but a third within the window of the second pair trips
        (2, 10.0, [0, 1, 12, 13, 14], ["remediate"] * 4 + ["give-up"]),
        # a remediation exactly `window` seconds old still counts (the window is closed)
        (1, 10.0, [0, 10], ["remediate", "give-up"]),
        (1, 10.0, [0, 10.001], ["remediate", "remediate"]),
        # limit 0: never remediate (report-only by another name)
        (0, 10.0, [0], ["give-up"]),
    ],
)
def test_decisions(limit: int, window: float, times: list[float], decisions: list[str]) -> None:
    assert drive(FlapGuard(limit, window), "vm.swappiness", times) == decisions


def test_give_up_records_the_conflict() -> None:
    guard = FlapGuard(3, 600.0)
    assert drive(guard, "vm.swappiness", [100, 200, 300]) == ["remediate"] * 3
    assert not guard.may_remediate("vm.swappiness", 400)
    c = guard.give_up("vm.swappiness", 400, "60", wall=WALL)
    assert c == ContestedKey("vm.swappiness", 3, 600.0, "2025-03-01T12:00:05+00:00", "60")
    assert guard.contested() == (c,)
    assert guard.is_contested("vm.swappiness")
    assert guard.held() == frozenset({"vm.swappiness"})
    # held until reset, even long after the window
    assert not guard.may_remediate("vm.swappiness", 1_000_000)


def test_give_up_counts_only_remediations_in_the_window() -> None:
    guard = FlapGuard(2, 10.0)
    for now in (0, 1, 20, 21):
        guard.remediated("k", now)
    c = guard.give_up("k", 25, None, wall=WALL)
    assert (c.remediations, c.window_s, c.value) == (2, 10.0, None)


def test_give_up_default_wall_clock_is_utc_now() -> None:
    before = datetime.now(timezone.utc).replace(microsecond=0)
    c = FlapGuard(1, 1.0).give_up("k", 0, "x")
    after = datetime.now(timezone.utc)
    since = datetime.fromisoformat(c.since)
    assert since.tzinfo is not None and since.utcoffset() == timezone.utc.utcoffset(None)
    assert before <= since <= after


def test_keys_are_independent() -> None:
    guard = FlapGuard(1, 60.0)
    assert drive(guard, "a", [0, 1]) == ["remediate", "give-up"]
    assert drive(guard, "b", [2]) == ["remediate"]
    assert guard.held() == frozenset({"a"})
    assert not guard.is_contested("b")
    assert guard.may_remediate("c", 3)


def test_contested_is_sorted_by_key() -> None:
    guard = FlapGuard(0, 60.0)
    for key in ("vm.swappiness", "kernel.numa_balancing", "net.core.somaxconn"):
        guard.give_up(key, 0, "x", wall=WALL)
    assert [c.key for c in guard.contested()] == [
        "kernel.numa_balancing",
        "net.core.somaxconn",
        "vm.swappiness",
    ]


def test_reset_forgets_everything() -> None:
    guard = FlapGuard(2, 600.0)
    assert drive(guard, "a", [0, 1, 2]) == ["remediate", "remediate", "give-up"]
    guard.remediated("b", 3)
    guard.remediated("b", 4)
    guard.reset()
    assert guard.contested() == ()
    assert guard.held() == frozenset()
    assert not guard.is_contested("a")
    # the history went too: two more remediations of each are allowed at once
    assert drive(guard, "a", [5, 6, 7]) == ["remediate", "remediate", "give-up"]
    assert drive(guard, "b", [8, 9]) == ["remediate", "remediate"]


def test_may_remediate_does_not_record() -> None:
    guard = FlapGuard(1, 60.0)
    for now in range(10):
        assert guard.may_remediate("k", now)  # asking is free: only remediated() counts
    assert not guard.is_contested("k")
