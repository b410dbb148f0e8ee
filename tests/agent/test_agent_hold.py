"""apply_profile(hold=...): the keys the agent gave up remediating are left exactly as they are.

A held key is neither written (the profile's value would fight the other owner) nor restored
(the original would fight it too), and its journal entry is kept unchanged, so a rollback
still puts the true original back. Everything runs on tests/support/tuningroot.py's fake host."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from mcpnode.host import Host
from mcpnode.state.places import JOURNAL_PATH
from mcpnode.tuning.apply import apply_profile, rollback
from mcpnode.tuning.journal import JournalStore
from mcpnode.tuning.profile import Profile, load_profile
from tests.support.tuningroot import build, get_sysctl, set_sysctl, write_profiles

OLD = """\
[profile]
name = "old"
summary = "three keys"

[sysctl]
"vm.swappiness" = 10
"net.core.somaxconn" = 65535
"kernel.numa_balancing" = 0
"""

NEW = """\
[profile]
name = "new"
summary = "one key of old's"

[sysctl]
"vm.swappiness" = 10
"""

ORIGINALS = {"vm.swappiness": "60", "net.core.somaxconn": "4096", "kernel.numa_balancing": "1"}


class Env:
    def __init__(self, tmp: Path) -> None:
        self.root = build(tmp / "root")
        self.profiles = write_profiles(tmp / "profiles", {"old": OLD, "new": NEW})
        self.host = Host(self.root)
        self.store = JournalStore(self.host)

    def profile(self, name: str) -> Profile:
        return load_profile(name, self.host, self.profiles)

    def values(self) -> dict[str, str]:
        return {k: get_sysctl(self.root, k) for k in ORIGINALS}

    def journal(self) -> dict[str, Any]:
        data = json.loads((self.root / JOURNAL_PATH.lstrip("/")).read_text())
        assert isinstance(data, dict)
        return data

    def entries(self) -> dict[str, dict[str, str]]:
        return {e["key"]: e for e in self.journal()["entries"]}


@pytest.fixture
def env(tmp_path: Path) -> Env:
    return Env(tmp_path)


def test_held_key_keeps_the_foreign_value(env: Env) -> None:
    apply_profile(env.host, env.profile("old"), env.store)
    assert env.values() == {
        "vm.swappiness": "10",
        "net.core.somaxconn": "65535",
        "kernel.numa_balancing": "0",
    }
    journaled = env.entries()
    assert {k: e["original"] for k, e in journaled.items()} == ORIGINALS

    # Another owner changes two keys behind the profile's back.
    set_sysctl(env.root, "vm.swappiness", "30")
    set_sysctl(env.root, "net.core.somaxconn", "1024")

    result = apply_profile(
        env.host, env.profile("old"), env.store, hold=frozenset({"vm.swappiness"})
    )
    assert [o.key for o in result.writes] == ["net.core.somaxconn"]
    assert result.restores == ()
    assert "vm.swappiness" not in {i.key for i in result.plan.items}
    assert env.values() == {
        "vm.swappiness": "30",  # the other owner's value, untouched
        "net.core.somaxconn": "65535",  # remediated
        "kernel.numa_balancing": "0",
    }
    assert env.journal()["state"] == "applied"
    assert env.journal()["profile"] == "old"
    # the held key's entry is exactly what it was: the true original, not the foreign value
    assert env.entries() == journaled

    rolled = rollback(env.host, env.store)
    assert rolled.profile == "old"
    assert env.values() == ORIGINALS  # the held key included
    assert not (env.root / JOURNAL_PATH.lstrip("/")).exists()


def test_profile_switch_does_not_restore_a_held_key(env: Env) -> None:
    apply_profile(env.host, env.profile("old"), env.store)
    set_sysctl(env.root, "kernel.numa_balancing", "1")  # the other owner wants it on
    journaled = env.entries()

    result = apply_profile(
        env.host, env.profile("new"), env.store, hold=frozenset({"kernel.numa_balancing"})
    )
    # somaxconn: old's key not in new, not held: restored. numa_balancing: held, left alone.
    restored = {r.key for r in result.restores if r.action == "set"}
    assert restored == {"net.core.somaxconn"}
    assert env.values() == {
        "vm.swappiness": "10",
        "net.core.somaxconn": "4096",
        "kernel.numa_balancing": "1",
    }
    entries = env.entries()
    assert env.journal()["profile"] == "new"
    assert set(entries) == {"vm.swappiness", "kernel.numa_balancing"}
    assert entries["kernel.numa_balancing"] == journaled["kernel.numa_balancing"]

    set_sysctl(env.root, "kernel.numa_balancing", "0")  # whatever it is at rollback time
    rollback(env.host, env.store)
    assert env.values() == ORIGINALS


def test_profile_switch_with_the_held_key_at_the_old_profiles_value(env: Env) -> None:
    """The key is still at the value the old profile wrote: held, it stays there (writing the
    original back would be one more move in the fight)."""
    apply_profile(env.host, env.profile("old"), env.store)
    apply_profile(
        env.host, env.profile("new"), env.store, hold=frozenset({"kernel.numa_balancing"})
    )
    assert get_sysctl(env.root, "kernel.numa_balancing") == "0"
    assert env.entries()["kernel.numa_balancing"]["original"] == "1"


def test_release_after_reload_remediates_with_the_first_original(env: Env) -> None:
    apply_profile(env.host, env.profile("old"), env.store)
    set_sysctl(env.root, "vm.swappiness", "30")
    apply_profile(env.host, env.profile("old"), env.store, hold=frozenset({"vm.swappiness"}))
    assert get_sysctl(env.root, "vm.swappiness") == "30"

    # Reload: the operator fixed the other owner; nothing is held any more.
    result = apply_profile(env.host, env.profile("old"), env.store)
    assert [o.key for o in result.writes] == ["vm.swappiness"]
    assert get_sysctl(env.root, "vm.swappiness") == "10"
    assert env.entries()["vm.swappiness"]["original"] == "60"  # not the foreign 30


def test_holding_a_key_never_applied_is_not_journaled(env: Env) -> None:
    result = apply_profile(
        env.host, env.profile("old"), env.store, hold=frozenset({"vm.swappiness"})
    )
    assert {o.key for o in result.writes} == {"net.core.somaxconn", "kernel.numa_balancing"}
    assert get_sysctl(env.root, "vm.swappiness") == "60"
    assert set(env.entries()) == {"net.core.somaxconn", "kernel.numa_balancing"}


def test_holding_a_key_outside_profile_and_journal_changes_nothing(env: Env) -> None:
    apply_profile(env.host, env.profile("old"), env.store)
    journal = env.journal()
    result = apply_profile(
        env.host, env.profile("old"), env.store, hold=frozenset({"vm.max_map_count"})
    )
    assert result.writes == () and result.restores == ()
    assert env.journal() == journal


def test_dry_run_with_hold_plans_nothing_for_the_held_key(env: Env) -> None:
    apply_profile(env.host, env.profile("old"), env.store)
    set_sysctl(env.root, "vm.swappiness", "30")
    set_sysctl(env.root, "net.core.somaxconn", "1024")
    before = env.journal()
    result = apply_profile(
        env.host,
        env.profile("old"),
        env.store,
        dry_run=True,
        hold=frozenset({"vm.swappiness"}),
    )
    assert [i.key for i in result.plan.writes] == ["net.core.somaxconn"]
    assert env.values()["net.core.somaxconn"] == "1024"  # dry run
    assert env.journal() == before
