"""The state lock (state/lock.py, Host.lock): every writer of the journal holds one flock on
`var/lib/mcpnode/mcpnode.lock` from journal load to final save; a second writer waits a
bounded time, then exits 75 naming the holder; readers never take it.

The holder in these tests is a real `mcpnode apply` subprocess held inside its locked section
by MCPNODE_FAULT_PAUSE_AFTER_LOAD (a pause between loading the journal and the first read).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from mcpnode.errors import LockBusy, Untrusted
from mcpnode.host import Host
from mcpnode.state.lock import LockNotHeld
from mcpnode.tuning.journal import Journal, JournalStore
from tests.support.tuningcli import run_cli
from tests.support.tuningroot import build, get_sysctl, write_profiles

REPO = Path(__file__).resolve().parents[2]
LOCKED = 75


class Env:
    def __init__(self, tmp: Path) -> None:
        self.root = build(tmp / "root")
        self.profiles = write_profiles(tmp / "profiles")
        self.lock = self.root / "var/lib/mcpnode/mcpnode.lock"

    def argv(self, *args: str) -> list[str]:
        return [*args, "--root", str(self.root)]

    def apply_argv(self, profile: str = "latency", *extra: str) -> list[str]:
        return self.argv(
            "apply", "--profile", profile, "--profiles-dir", str(self.profiles), *extra
        )

    def spawn(self, argv: list[str], pause: float) -> subprocess.Popen[str]:
        env = {**os.environ, "MCPNODE_FAULT_PAUSE_AFTER_LOAD": str(pause)}
        return subprocess.Popen(
            [sys.executable, "-m", "mcpnode", *argv],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def wait_held(self, proc: subprocess.Popen[str], timeout: float = 20.0) -> dict[str, object]:
        """Until `proc` has taken the lock (it records itself in the lock file)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.lock.exists() and self.lock.read_text().strip():
                holder: dict[str, object] = json.loads(self.lock.read_text())
                if holder.get("pid") == proc.pid:
                    return holder
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.01)
        raise AssertionError("the holder never took the lock")


@pytest.fixture
def env(tmp_path: Path) -> Iterator[Env]:
    yield Env(tmp_path)


def test_second_writer_waits_then_exits_75_naming_the_holder(env: Env) -> None:
    holder = env.spawn(env.apply_argv(), pause=4)
    try:
        recorded = env.wait_held(holder)
        assert recorded["command"] == "mcpnode apply --profile latency"
        started = time.monotonic()
        code, _out, err = run_cli(*env.apply_argv("base"), "--wait", "0.5")
        waited = time.monotonic() - started
        assert code == LOCKED, err
        assert 0.5 <= waited < 3.0
        assert err.count("\n") == 1, err  # one line
        assert f"pid {holder.pid} (mcpnode apply --profile latency, since " in err
        assert "waited 0.5 s" in err and "--wait SECONDS" in err
        code, _out, err = run_cli(*env.argv("rollback"), "--wait", "0")
        assert code == LOCKED and f"pid {holder.pid}" in err
    finally:
        holder.wait(timeout=60)
    assert holder.returncode == 0, holder.stderr.read() if holder.stderr else ""
    assert get_sysctl(env.root, "vm.swappiness") == "10"  # the holder's apply, not another


def test_a_longer_wait_gets_the_lock_when_the_holder_is_done(env: Env) -> None:
    holder = env.spawn(env.apply_argv("base"), pause=0.8)
    try:
        env.wait_held(holder)
        code, out, err = run_cli(*env.apply_argv("latency"), "--wait", "30")
    finally:
        holder.wait(timeout=60)
    assert holder.returncode == 0 and code == 0, err
    assert "applied: profile latency" in out
    code, _out, err = run_cli(*env.argv("rollback"))
    assert code == 0, err
    assert get_sysctl(env.root, "vm.swappiness") == "60"  # the original, before either apply
    assert get_sysctl(env.root, "net.core.somaxconn") == "4096"


def test_readers_never_take_the_lock(env: Env) -> None:
    run_cli(*env.apply_argv("base"))
    holder = env.spawn(env.apply_argv("latency"), pause=6)
    try:
        env.wait_held(holder)
        started = time.monotonic()
        for argv in (
            env.argv("verify", "--profiles-dir", str(env.profiles)),
            env.argv("profiles", "active"),
            [
                *env.argv("apply", "--profile", "latency", "--profiles-dir", str(env.profiles)),
                "--dry-run",
                "--wait",
                "0",
            ],
        ):
            code, _out, err = run_cli(*argv)
            assert code != LOCKED, (argv, err)
        assert time.monotonic() - started < 5, "a reader waited for the writer"
    finally:
        holder.wait(timeout=60)


def test_a_killed_holder_releases_the_lock_and_its_run_is_recovered(env: Env) -> None:
    holder = env.spawn(env.apply_argv("latency"), pause=30)
    env.wait_held(holder)
    holder.send_signal(signal.SIGKILL)
    holder.wait(timeout=10)
    code, _out, err = run_cli(*env.argv("rollback"), "--wait", "1")
    assert code == 0, err
    assert get_sysctl(env.root, "vm.swappiness") == "60"


def test_a_lock_anyone_can_write_is_refused(env: Env, tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    state.chmod(0o777)
    code, _out, err = run_cli(*env.apply_argv("base"), "--state-dir", str(state))
    assert code == 2 and "world-writable" in err and "mcpnode.lock" in err, err
    assert not any(state.iterdir())  # nothing written: no journal, no lock
    assert get_sysctl(env.root, "vm.swappiness") == "60"


def test_journal_writes_without_the_lock_are_refused(env: Env) -> None:
    store = JournalStore(Host(env.root))
    with pytest.raises(LockNotHeld):
        store.save(Journal("applied", "base", ()))
    with pytest.raises(LockNotHeld):
        store.remove()
    with store.lock.hold(0):
        store.save(Journal("applied", "base", ()))
        with store.lock.hold(0):  # re-entrant within one holder
            store.remove()
    assert not store.lock.held


def test_the_lock_in_process(env: Env) -> None:
    """Host.lock directly: the holder record, the bounded wait, an untrusted lock file."""
    host = Host(env.root)
    with host.lock("/var/lib/mcpnode/mcpnode.lock", wait_s=0, holder={"pid": 1, "command": "x"}):
        assert json.loads(env.lock.read_text()) == {"command": "x", "pid": 1}
        other = os.fork()
        if other == 0:  # a second process: flock is per open file description
            try:
                with Host(env.root).lock("/var/lib/mcpnode/mcpnode.lock", wait_s=0.2, holder={}):
                    os._exit(1)
            except LockBusy as err:
                os._exit(0 if err.holder == {"command": "x", "pid": 1} else 2)
            os._exit(3)
        assert os.waitstatus_to_exitcode(os.waitpid(other, 0)[1]) == 0
    assert env.lock.read_text() == ""  # emptied at release
    env.lock.chmod(0o666)
    with (
        pytest.raises(Untrusted, match="world-writable"),
        host.lock("/var/lib/mcpnode/mcpnode.lock", wait_s=0, holder={}),
    ):
        pass
