"""The agent under abuse, and beside an operator: a SIGHUP storm (coalesced, no watchdog gap),
a config bomb at reload (rejected, the old config kept), an operator's apply and rollback while
it runs (adopted, never fought), idle connections against the metrics endpoint (evicted, real
scrapes answered), and bad or huge lines on --inject-fd (dropped, the next line kept).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import signal
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mcpnode.agent.http import MetricsServer
from mcpnode.agent.loop import Loop
from mcpnode.agent.metrics import AgentMetrics
from mcpnode.agent.sources import DeviceEvent, InjectSource
from tests.agent.test_agent_metrics import Bg, Log, pump, samples
from tests.support import auditroot
from tests.support.agentproc import AgentProc
from tests.support.fixtures import RootFactory
from tests.support.tuningcli import run_cli

INTERVAL = 0.3
CONFIG = f"""
[tuning]
profile = "base"
[drift]
interval = {INTERVAL}
[metrics]
listen = ""
[log]
level = "debug"
"""


def sysctl(root: Path, key: str) -> Path:
    return root / "proc/sys" / key.replace(".", "/")


@pytest.fixture
def root(audit_root: RootFactory) -> Path:
    r = audit_root(auditroot.HGX, files={"etc/mcpnode/mcpnode.toml": CONFIG})
    return r


@pytest.fixture
def agent(root: Path, tmp_path: Path) -> Iterator[AgentProc]:
    proc = AgentProc(["--root", str(root)], tmp_path, watchdog_usec=1_000_000)
    proc.wait_message("READY=1")
    yield proc
    proc.close()


def events(agent: AgentProc, name: str, after: float = 0.0) -> list[dict[str, Any]]:
    return [e for e in agent.events if e.get("event") == name and e["_t"] >= after]


def test_a_sighup_storm_is_coalesced_without_a_watchdog_gap(agent: AgentProc) -> None:
    start = agent.now()
    for _ in range(100):  # 100 in one second
        agent.signal(signal.SIGHUP)
        time.sleep(0.01)
    end = agent.now()
    time.sleep(2.5)
    reloaded = events(agent, "config.reloaded", start)
    assert 1 <= len(reloaded) <= 3, [e["_t"] for e in reloaded]
    coalesced = events(agent, "config.reload-coalesced", start)
    assert sum(e["signals"] for e in coalesced) + len(reloaded) - len(coalesced) <= 101
    pings = [t for t, m in agent.messages if m == "WATCHDOG=1" and t >= start - 1]
    gaps = [b - a for a, b in itertools.pairwise(pings)]
    assert len(pings) >= 4 and max(gaps) < 1.0, gaps  # WatchdogSec = 1 s: never missed
    assert agent.message("READY=1", end) is not None  # READY came back after the last one
    assert agent.proc.poll() is None


@pytest.mark.parametrize(
    "bomb",
    [
        "x = " + "[" * 5000 + "]" * 5000 + "\n",
        ".".join(["a"] * 16000) + " = 1\n",
        '[tuning]\nprofile = "bomb"\n',  # a profile that cannot load (below)
    ],
    ids=["nested", "dotted-key", "profile-recursion"],
)
def test_a_bomb_at_reload_is_rejected_and_the_old_config_kept(
    root: Path, agent: AgentProc, bomb: str
) -> None:
    profiles = root / "etc/mcpnode/profiles"
    profiles.mkdir(parents=True, exist_ok=True)
    (profiles / "bomb.toml").write_text("x = " + "{a = " * 3000 + "1" + "}" * 3000 + "\n")
    (root / "etc/mcpnode/mcpnode.toml").write_text(bomb)
    t = agent.now()
    agent.signal(signal.SIGHUP)
    rejected = agent.wait_event("config.rejected", t)
    assert "not valid TOML" in rejected["error"] and rejected["profile"] == "base"
    agent.wait_message("READY=1", t)
    # The old config is in force: drift is still remediated against base.
    t = agent.now()
    sysctl(root, "vm.swappiness").write_text("60\n")
    agent.wait_event("drift.remediated", t, key="vm.swappiness")
    assert sysctl(root, "vm.swappiness").read_text().strip() == "10"


def test_an_operators_apply_is_adopted_and_a_rollback_pauses(root: Path, agent: AgentProc) -> None:
    """The agent holds the lock only while it writes, so the operator's commands run between
    its cycles; it then takes their result as the new state instead of fighting it."""
    t = agent.now()
    code, _out, err = run_cli("apply", "--profile", "inference-latency", "--root", str(root))
    assert code == 0, err
    adopted = agent.wait_event("journal.adopted", t)
    assert (adopted["profile"], adopted["previous"], adopted["by"]) == (
        "inference-latency",
        "base",
        "cli",
    )
    time.sleep(3 * INTERVAL)
    assert not events(agent, "drift", t), "the agent fought the operator's profile"
    code, out, _ = run_cli("profiles", "active", "--root", str(root), "--format", "json")
    active = json.loads(out)
    assert (active["name"], active["source"]) == ("inference-latency", "agent")
    assert "adopted" in active["detail"]
    assert run_cli("verify", "--root", str(root))[0] == 0

    t = agent.now()
    assert run_cli("rollback", "--root", str(root))[0] == 0
    agent.wait_event("journal.rolled-back", t)
    swappiness = sysctl(root, "vm.swappiness").read_text()
    time.sleep(3 * INTERVAL)
    assert sysctl(root, "vm.swappiness").read_text() == swappiness  # not re-applied
    assert not events(agent, "apply", t)
    status = agent.message("STATUS=", t)
    assert any("PAUSED" in m for _t, m in agent.messages if _t >= t), status
    active = json.loads(run_cli("profiles", "active", "--root", str(root), "--format", "json")[1])
    assert active["source"] != "agent"  # the agent enforces nothing now

    t = agent.now()
    agent.signal(signal.SIGHUP)  # the operator hands tuning back to the agent
    agent.wait_event("config.reloaded", t)
    agent.wait_event("apply", t, reason="reload", profile="base")
    assert sysctl(root, "vm.swappiness").read_text().strip() == "10"


def test_an_operator_waiting_for_the_lock_gets_it_between_cycles(
    root: Path, agent: AgentProc
) -> None:
    for _ in range(5):
        code, _out, err = run_cli("apply", "--profile", "base", "--root", str(root), "--wait", "5")
        assert code == 0, err


# -- metrics under idle connections -------------------------------------------------------------


def scrape(port: int, timeout: float) -> int | None:
    """One GET /metrics; the status code, None when nothing came back in time."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
            sock.settimeout(timeout)
            sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            data = bytearray()
            while chunk := sock.recv(65536):
                data += chunk
    except OSError:
        return None
    head = bytes(data).split(b"\r\n", 1)[0].split(b" ")
    return int(head[1]) if len(head) > 1 and head[1].isdigit() else None


def test_idle_connections_cannot_starve_scrapes() -> None:
    """500 connections opened and left silent against the cap of 32: every one of 30 real
    scrapes that follow is answered (0 of 30 were, when new connections were refused)."""
    loop = Loop(Log())
    metrics = AgentMetrics()
    server = MetricsServer(loop, metrics, "127.0.0.1", 0, Log())
    idle: list[socket.socket] = []
    try:

        def attack() -> None:
            for _ in range(500):
                s = socket.socket()
                s.setblocking(False)
                s.connect_ex(("127.0.0.1", server.port))
                idle.append(s)

        bg = Bg(attack)
        pump(loop, bg.done, timeout_s=30)
        deadline = time.monotonic() + 0.5
        pump(loop, lambda: time.monotonic() > deadline)
        answered = 0
        for _ in range(30):
            result = Bg(lambda: scrape(server.port, 3.0))
            pump(loop, result.done, timeout_s=10)
            answered += result.result == 200
        assert answered == 30
        assert server.connections <= 32
        s = samples(metrics.render())
        assert s[("mcpnode_http_connections_dropped_total", (("reason", "evicted"),))] >= 30
    finally:
        for sock in idle:
            sock.close()
        server.close()
        loop.close()


# -- --inject-fd --------------------------------------------------------------------------------


def test_inject_lines_are_bounded_and_a_bad_one_spares_the_next() -> None:
    r, w = os.pipe()
    got: list[DeviceEvent] = []
    bad: list[str] = []
    source = InjectSource(r, got.append, bad.append)
    good = json.dumps({"action": "add", "subsystem": "pci", "name": "0000:18:00.0"}).encode()
    try:
        # A 10 MB line without a newline for most of its length, in pipe-sized pieces.
        os.set_blocking(w, False)
        chunk = b"x" * 60000
        for _ in range(170):
            os.write(w, chunk)
            source.on_readable()
            assert len(source._buf) <= InjectSource.MAX_LINE_BYTES  # never the whole line
        os.write(w, b"\n" + b"{not json\n" + good + b"\n")
        source.on_readable()
    finally:
        os.close(w)
    source.on_readable()
    source.close()
    assert [e.name for e in got] == ["0000:18:00.0"]
    assert len(bad) == 2
    assert "line longer than" in bad[0] and "JSONDecodeError" in bad[1]


def test_a_reload_that_takes_too_long_is_rejected(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reading the configuration is bounded in time (SIGALRM on the loop thread): a parse that
    does not end is rejected like a bad file, the old configuration kept."""
    from mcpnode.agent import reload, service
    from mcpnode.agent.notify import Notifier
    from mcpnode.host import Host

    def endless(*_args: object, **_kwargs: object) -> object:
        while True:
            pass

    monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
    agent = service.Agent(Host(root), Host("/"), "/etc/mcpnode/mcpnode.toml", notifier=Notifier())
    old = agent.config
    monkeypatch.setattr(reload, "RELOAD_TIMEOUT_S", 0.3)
    monkeypatch.setattr(reload, "load_config", endless)
    assert agent.reload() is False
    assert agent.config is old
    s = samples(agent.metrics.render())
    assert s[("mcpnode_config_reload_total", (("result", "rejected"),))] == 1
    agent.loop.close()


def test_an_inject_storm_is_read_a_pipeful_per_wakeup() -> None:
    """100,000 events queued: each wakeup handles at most one pipe's worth and returns to the
    loop (which runs its timers, the watchdog's among them, before coming back)."""
    r, w = os.pipe()
    got: list[DeviceEvent] = []
    source = InjectSource(r, got.append, lambda why: None)
    line = json.dumps({"action": "add", "subsystem": "pci", "name": "0000:18:00.0"}).encode()
    data = (line + b"\n") * 100_000
    per_turn = InjectSource.READ_BYTES_PER_TURN // (len(line) + 1) + 1
    turns = 0
    try:
        os.set_blocking(w, False)
        sent = 0
        while sent < len(data) or not source.closed:
            if sent < len(data):
                with contextlib.suppress(BlockingIOError):  # the pipe is full: read first
                    sent += os.write(w, data[sent : sent + 4 * InjectSource.READ_BYTES_PER_TURN])
                if sent == len(data):
                    os.close(w)
            before = len(got)
            source.on_readable()
            turns += 1
            assert len(got) - before <= per_turn
    finally:
        source.close()
    assert len(got) == 100_000 and turns > 100_000 // per_turn
